/* io.h -- the sockets: every call to hiredis's I/O and to libpq is in io/.
 *
 *   redis_sync.c   blocking hiredis connections (lib/drive/sync.c)
 *   redis_async.c  hiredis async contexts on the caller's loop (lib/drive/async.c)
 *   tls.c          TLS to Redis: the handle's context, a session per connection
 *   pg.c           PostgreSQL, non-blocking: the steps of lib/core/pgstmt.c
 *                  carried out, waited for with poll() by the blocking driver
 *                  and with the loop by the async driver
 *
 * No decision is made here that core/ could make: these files carry out a
 * round trip, a connect, a statement, and report what happened. Not
 * installed.
 */
#ifndef FEED_IO_H
#define FEED_IO_H

#include <libpq-fe.h>

#include "core/core.h"

/* ---- tls.c ---- */

typedef struct feed_tls feed_tls;

/* The handle's TLS context from cfg (*out NULL: redis_tls is 0, or a build
 * without TLS). FEED_EINVAL (a CA, certificate or key that cannot be
 * loaded) or FEED_ENOMEM with why. */
int  feed__tls_open(const feed_config *cfg, feed_tls **out, char *why, size_t cap);
void feed__tls_free(feed_tls *t);
/* Begin TLS on the new connection c to host (t NULL: plaintext, nothing to
 * do). A blocking c makes the whole handshake now; a non-blocking one as
 * its first bytes go. -1 with why (the handshake's failure, named). */
int  feed__tls_begin(const feed_tls *t, redisContext *c, const char *host, char *why,
                     size_t cap);
/* Why the TLS connection c failed, into why: OpenSSL's reason when it
 * recorded one on this thread, else hiredis's errstr (with a hint where a
 * cause is likely); handshake: no reply came on c yet, so the handshake is
 * what failed. */
void feed__tls_why(const redisContext *c, int handshake, char *why, size_t cap);
/* 1 when c speaks TLS (its bytes must go through hiredis). */
int  feed__tls_on(const redisContext *c);

/* ---- redis_sync.c ---- */

/* Connect to a within timeout_ms (and set that timeout on every later
 * read and write), over TLS when tls is not NULL. NULL with why (cap
 * bytes) on failure: the cause, as the socket or the handshake gave it. */
redisContext *feed__rs_connect(const feed_addr *a, const feed_tls *tls, uint32_t timeout_ms,
                               char *why, size_t cap);
void feed__rs_close(redisContext *c);
/* Put trip t's commands on c's socket: in one send() when they are small
 * (not through hiredis's output buffer: redis_sync.c says why), else
 * through hiredis, written out before returning. On failure t->io and
 * t->why are set and c must be closed. */
void feed__rs_write(redisContext *c, feed_trip *t);
/* Read trip t's replies, each handed to t->reply, then freed; t->io says
 * how it ended (t->got replies were handed over). */
void feed__rs_read(redisContext *c, feed_trip *t);

/* ---- pg.c ---- */

/* One PostgreSQL server: its connection and last connect attempt. */
typedef struct feed_pgside {
    PGconn        *conn;        /* NULL while disconnected */
    feed_pgserver  server;      /* the last attempt: when, why it failed */
} feed_pgside;

/* A handle's PostgreSQL side: the primary and the replica, and the texts
 * of lib/core/pgstmt.c (built once). */
typedef struct feed_pg {
    feed_pgside side[2];        /* FEED_PG_PRIMARY, FEED_PG_REPLICA */
    char       *texts[FEED_PG_TEXTS];
} feed_pg;

/* What a statement task waits for. */
enum { FEED_PGW_DONE, FEED_PGW_READ, FEED_PGW_WRITE };

/* One statement on one server, within pg_timeout_ms: the steps that
 * lib/core/pgstmt.c asks for (connect, prepare, send) carried out. */
typedef struct feed_pgtask {
    feed_pgstmt  m;
    PGconn     **conn;          /* the server's connection */
    enum feed_pwant doing;      /* the step under way; FEED_P_DONE: none */
    int          want, done, rc;    /* want: FEED_PGW_* */
    PGresult    *res;           /* the result collected so far */
    feed_pgcell *cells;         /* res's values, for pgstmt */
} feed_pgtask;

void feed__pg_init(feed_pg *pg);
void feed__pg_free(feed_pg *pg);
/* Begin statement q (q->stmt -1: only connect, as feed_open does; then
 * FEED_EUNAVAILABLE means no answer, FEED_EPG refused). */
void feed__pg_task_begin(feed_pgtask *t, feed_pg *pg, feed_core *c, feed_sql *q, char *err,
                         int64_t now);
/* Advance the task: after begin, after the socket became ready for t->want
 * (ready = 1), or after t->m.deadline passed (ready = 0). Returns t->want:
 * FEED_PGW_DONE (t->rc, rows in q->rows), or what to wait for on
 * feed__pg_task_fd(t) until t->m.deadline. */
int  feed__pg_task_run(feed_pgtask *t, int ready, int64_t now);
int  feed__pg_task_fd(const feed_pgtask *t);
/* Give the task up (the handle closes): its connection is dropped. */
void feed__pg_task_abandon(feed_pgtask *t);

#endif /* FEED_IO_H */
