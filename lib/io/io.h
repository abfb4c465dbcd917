/* io.h -- the sockets: every call to hiredis's I/O and to libpq is in io/.
 *
 *   redis_sync.c   blocking hiredis connections (lib/drive/sync.c)
 *   redis_async.c  hiredis async contexts on the caller's loop (lib/drive/async.c)
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

/* ---- redis_sync.c ---- */

/* Connect to a within timeout_ms (and set that timeout on every later
 * read and write). NULL with why (cap bytes) on failure. */
redisContext *feed__rs_connect(const feed_addr *a, uint32_t timeout_ms, char *why, size_t cap);
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
    PGconn  *conn;              /* NULL while disconnected */
    int64_t  attempt_ms;
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
    int64_t      deadline;
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
 * (ready = 1), or after t->deadline passed (ready = 0). Returns t->want:
 * FEED_PGW_DONE (t->rc, rows in q->rows), or what to wait for on
 * feed__pg_task_fd(t) until t->deadline. */
int  feed__pg_task_run(feed_pgtask *t, int ready, int64_t now);
int  feed__pg_task_fd(const feed_pgtask *t);
/* Give the task up (the handle closes): its connection is dropped. */
void feed__pg_task_abandon(feed_pgtask *t);

#endif /* FEED_IO_H */
