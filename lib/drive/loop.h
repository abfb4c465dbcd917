/* loop.h -- what the async driver needs of an event loop: timers and a
 * socket to watch (libpq's, and hiredis's through its event hooks,
 * lib/io/redis_async.c).
 * libevent.c and libuv.c each fill one in; async.c never names either
 * loop. Not installed. */
#ifndef FEED_LOOP_H
#define FEED_LOOP_H

#include <hiredis/async.h>

enum { FEED_LOOP_READ = 1, FEED_LOOP_WRITE = 2 };

typedef struct feed_loop {
    /* The open call's message for a NULL loop. */
    const char *null_loop;
    /* A one-shot timer: start (again) to fire once after ms, stop, free.
     * free may be called from the timer's own callback. */
    void *(*timer_new)(void *loop, void (*cb)(void *arg), void *arg);
    void  (*timer_start)(void *t, int64_t ms);
    void  (*timer_stop)(void *t);
    void  (*timer_free)(void *t);
    /* fd watched for FEED_LOOP_READ/WRITE (0: none); cb gets what is ready. */
    void *(*watch_new)(void *loop, int fd, void (*cb)(void *arg, int ready), void *arg);
    void  (*watch_set)(void *w, int events);
    void  (*watch_free)(void *w);
} feed_loop;

#endif /* FEED_LOOP_H */
