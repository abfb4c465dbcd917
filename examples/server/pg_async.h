/* pg_async.h -- the write transactions of an event loop, on libpq's
 * asynchronous calls: the connection's socket is watched by the loop, so a
 * slow or stuck PostgreSQL never stalls it. */
#ifndef FEED_SERVER_PG_ASYNC_H
#define FEED_SERVER_PG_ASYNC_H

#include <event2/event.h>

#include "server.h"

typedef struct pg_async pg_async;

/* A write connection for the loop base, to opt.cfg.pg_conninfo; it connects
 * on the first transaction. NULL when out of memory. */
pg_async *pg_async_new(struct event_base *base);

/* BEGIN; sql with params; COMMIT, as backend_ops.tx says. Transactions run
 * one at a time, in order; done is called from the loop, exactly once (before
 * this returns only when out of memory). sql and params must stay valid until then. */
void pg_async_tx(pg_async *p, request *rq, const char *sql, int nparams,
                 const char *const *params, tx_done *done);

/* Close the connection. A transaction still pending completes first:
 * TX_UNKNOWN when its COMMIT was sent, else TX_DOWN. NULL is fine. */
void pg_async_free(pg_async *p);

#endif /* FEED_SERVER_PG_ASYNC_H */
