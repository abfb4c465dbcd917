/* redis_async.h -- a Redis node's connection on an event loop
 * (redis_async.c). Not installed. */
#ifndef FEED_REDIS_ASYNC_H
#define FEED_REDIS_ASYNC_H

#include "core/core.h"
#include "drive/loop.h"

typedef struct feed_anode feed_anode;

/* Start connecting to a, over TLS when tls is not NULL (lib/io/tls.c);
 * done(arg, ok, why) (if not NULL) comes from the loop once it is
 * connected or failed (within timeout_ms), not when it is closed first.
 * *owner points at the connection while it takes trips, then is cleared.
 * NULL at once (why set) if even the start failed. */
feed_anode *feed__ra_connect(const feed_addr *a, const struct feed_tls *tls,
                             const feed_loop *loop, void *loop_data,
                             uint32_t timeout_ms, int64_t now,
                             void (*done)(void *arg, int ok, const char *why), void *arg,
                             void **owner, char *why, size_t cap);
/* Append trip t (while connecting too: it goes once connected); ended(arg,
 * t) comes once its replies are all handed over (t->io FEED_IO_OK) or the
 * connection went (t->io says how), never from inside this call. -1:
 * refused at once, n NULL included (t->io and t->why set, ended() will not
 * come). */
int  feed__ra_send(feed_anode *n, feed_trip *t, int64_t now,
                   void (*ended)(void *arg, feed_trip *t), void *arg);
/* t's request went away: its replies are read and dropped. */
void feed__ra_forget(feed_anode *n, const feed_trip *t);
/* Give the connection up: every trip on it ends (io, why), now or, from
 * inside one of its own reply callbacks, once that returns. Not from
 * inside done(). */
void feed__ra_close(feed_anode *n, int io, const char *why);
/* handle(ac) with SIGPIPE blocked on this thread, a SIGPIPE it raised taken
 * off before the mask is put back (one pending before is left): how every
 * write to Redis on the loop is made (tests/t_sigpipe.c). */
void feed__ra_nopipe(void (*handle)(redisAsyncContext *), redisAsyncContext *ac);

#endif /* FEED_REDIS_ASYNC_H */
