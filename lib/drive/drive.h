/* drive.h -- the drivers: what runs a request's machine against the
 * servers. Not installed.
 *
 *   sync.c     a request to its end, blocking: the same round trips the
 *              machine asks for, one after another; waits are sleeps
 *   async.c    any number of requests on one event loop, continued from
 *              hiredis and libpq callbacks and the library's own timers;
 *              requests started in one loop iteration share one write per
 *              Redis node
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

/* Run op to its end; returns op->rc. The op's free is the caller's. */
int  feed__sync_run(feed *f, feed_op *op);
void feed__sync_close(feed *f);

#endif /* FEED_DRIVE_H */
