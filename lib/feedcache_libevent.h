/* feedcache_libevent.h -- the asynchronous API on a libevent event_base.
 * See "Asynchronous API" in feedcache.h. Build a program of it with
 *   cc app.c $(pkg-config --cflags --libs feedcache-libevent)
 * (the adapter's library, feedcache's and libevent_core). */
#ifndef FEEDCACHE_LIBEVENT_H
#define FEEDCACHE_LIBEVENT_H

#include "feedcache.h"

#ifdef __cplusplus
extern "C" {
#endif

struct event_base;

/* Open an asynchronous handle on base: the same configuration, checks and
 * connects as feed_open, made without blocking (feed_async_open returns
 * at once; the connections are made on the loop as requests need them).
 * The handle and every request on it are used from base's thread.
 * Returns FEED_OK with *out set, or FEED_EINVAL (out, cfg or base NULL, a
 * bad config: feed_async_errmsg(NULL) says which) or FEED_ENOMEM, *out
 * then NULL. Close it with feed_async_close before freeing base. */
FEED_API int feed_async_open_libevent(feed_async **out, const feed_config *cfg,
                                      struct event_base *base);

#ifdef __cplusplus
}
#endif

#endif /* FEEDCACHE_LIBEVENT_H */
