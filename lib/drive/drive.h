/* drive.h -- the drivers: what runs a request's machine against the
 * servers. Not installed.
 *
 *   sync.c     a request to its end, blocking: the same round trips the
 *              machine asks for, one after another; waits are sleeps
 *   async.c    any number of requests on one event loop, continued from
 *              hiredis and libpq callbacks and the library's own timers;
 *              requests started in one loop iteration share one write per
 *              Redis node
 *   budget.c   PostgreSQL's budget for cold work, shared by the process
 *   libevent.c, libuv.c   the two loops async.c runs on
 */
#ifndef FEED_DRIVE_H
#define FEED_DRIVE_H

#include "io/io.h"

/* The blocking handle: one request at a time, from one thread. */
struct feed {
    feed_core core;             /* first: the core's handle pointer is this */
    feed_pg   pg;
    char      errmsg[FEED_ERRMSG];
};

/* budget.c: the statements of reads share a budget per process. A
 * statement's priority (feed__budget_prio): NONE, not counted (a write's
 * reload, a health check, a probe); REBUILD, a feed's top rows, may take
 * any slot; PAST, a page past the cache, only while a quarter of the budget
 * is left. take: 1 when a slot was taken (always for NONE); wait: the same,
 * waiting until one frees or until (monotonic ms); give: one back.
 * feed__budget_most: the most in flight at once so far (tests, the
 * benchmark), and with reset, from now on. */
enum { FEED_BUDGET_NONE = -1, FEED_BUDGET_REBUILD, FEED_BUDGET_PAST };
unsigned feed__budget_size(const feed_core *c);
int      feed__budget_prio(const feed_op *op);
int      feed__budget_take(const feed_core *c, int prio);
int      feed__budget_wait(const feed_core *c, int prio, int64_t until);
void     feed__budget_give(void);
unsigned feed__budget_most(int reset);

/* Run op to its end; returns op->rc. The op's free is the caller's. */
int  feed__sync_run(feed *f, feed_op *op);
void feed__sync_close(feed *f);

#endif /* FEED_DRIVE_H */
