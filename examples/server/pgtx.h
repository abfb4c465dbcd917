/* pgtx.h -- the write transaction's PostgreSQL rules, shared by the blocking
 * (backend_sync.c) and the asynchronous (pg_async.c) paths: how a failed
 * step is classified, and what a result says. */
#ifndef FEED_SERVER_PGTX_H
#define FEED_SERVER_PGTX_H

#include <libpq-fe.h>

#include "server.h"

#define PG_CONNECT_TIMEOUT "3"   /* seconds: connect_timeout of the write connection */

/* "PostgreSQL: <the result's or the connection's message>" into err. */
void pg_message(PGconn *pg, const PGresult *r, char *err, size_t errlen);
/* The connection is gone (or the server is going): a reconnect may help. */
int  pg_conn_lost(PGconn *pg, const PGresult *r);
int  pg_command_ok(const PGresult *r);
/* The outcome of the statement's failed result r: TX_CONFLICT, TX_DOWN or
 * TX_FAILED. */
enum tx_result pg_statement_error(PGconn *pg, const PGresult *r);
/* What a tx_outcome reports of the statement's result r. */
void pg_outcome_rows(const PGresult *r, tx_outcome *out);

#endif /* FEED_SERVER_PGTX_H */
