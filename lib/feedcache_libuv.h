/* feedcache_libuv.h -- the asynchronous API on a libuv loop. See
 * "Asynchronous API" in feedcache.h. Build a program of it with
 *   cc app.c $(pkg-config --cflags --libs feedcache-libuv)
 * (the adapter's library, feedcache's and libuv). */
#ifndef FEEDCACHE_LIBUV_H
#define FEEDCACHE_LIBUV_H

#include <uv.h>

#include "feedcache.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Open an asynchronous handle on loop, as feed_async_open_libevent does on
 * an event_base. libuv frees a handle on a later turn of its loop: after
 * feed_async_close, run the loop (uv_run(loop, UV_RUN_NOWAIT) is enough)
 * before uv_loop_close. */
FEED_API int feed_async_open_libuv(feed_async **out, const feed_config *cfg, uv_loop_t *loop);

#ifdef __cplusplus
}
#endif

#endif /* FEEDCACHE_LIBUV_H */
