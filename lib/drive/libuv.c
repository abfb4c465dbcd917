/* libuv.c -- the async driver on a libuv loop: uv timers, and uv poll
 * handles for the sockets (libpq's, and the Redis connections' through
 * lib/io/redis_async.c).
 * A libuv handle is freed by its close callback, on a later turn of the
 * loop: run the loop once more after feed_async_close. */
#include <stdlib.h>

#include <uv.h>

#include "drive/async.h"
#include "feedcache_libuv.h"

typedef struct uv_timer_box {
    uv_timer_t t;
    void (*cb)(void *arg);
    void *arg;
} uv_timer_box;

static void timer_fired(uv_timer_t *h)
{
    uv_timer_box *t = h->data;

    t->cb(t->arg);
}

static void *timer_new(void *loop, void (*cb)(void *arg), void *arg)
{
    uv_timer_box *t = malloc(sizeof *t);

    if (!t)
        return NULL;
    if (uv_timer_init(loop, &t->t) != 0) {
        free(t);
        return NULL;
    }
    t->t.data = t;
    t->cb = cb;
    t->arg = arg;
    return t;
}

static void timer_start(void *p, int64_t ms)
{
    uv_timer_box *t = p;

    uv_timer_start(&t->t, timer_fired, (uint64_t)(ms > 0 ? ms : 0), 0);
}

static void timer_stop(void *p)
{
    uv_timer_stop(&((uv_timer_box *)p)->t);
}

static void closed(uv_handle_t *h)
{
    free(h->data);
}

static void timer_free(void *p)
{
    uv_timer_box *t = p;

    uv_timer_stop(&t->t);
    uv_close((uv_handle_t *)&t->t, closed);
}

typedef struct uv_watch_box {
    uv_poll_t p;
    int events;
    void (*cb)(void *arg, int ready);
    void *arg;
} uv_watch_box;

static void poll_fired(uv_poll_t *h, int status, int events)
{
    uv_watch_box *w = h->data;
    int ready = (events & UV_READABLE ? FEED_LOOP_READ : 0) |
                (events & UV_WRITABLE ? FEED_LOOP_WRITE : 0);

    /* An error (the socket broke): let libpq find out what. */
    w->cb(w->arg, status < 0 ? w->events : ready);
}

static void *watch_new(void *loop, int fd, void (*cb)(void *arg, int ready), void *arg)
{
    uv_watch_box *w = calloc(1, sizeof *w);

    if (!w)
        return NULL;
    if (uv_poll_init(loop, &w->p, fd) != 0) {
        free(w);
        return NULL;
    }
    w->p.data = w;
    w->cb = cb;
    w->arg = arg;
    return w;
}

static void watch_set(void *p, int events)
{
    uv_watch_box *w = p;
    int uv_events = (events & FEED_LOOP_READ ? UV_READABLE : 0) |
                    (events & FEED_LOOP_WRITE ? UV_WRITABLE : 0);

    w->events = events;
    if (uv_events)
        uv_poll_start(&w->p, uv_events, poll_fired);
    else
        uv_poll_stop(&w->p);
}

static void watch_free(void *p)
{
    uv_watch_box *w = p;

    uv_poll_stop(&w->p);
    uv_close((uv_handle_t *)&w->p, closed);
}

static const feed_loop libuv_loop = {
    "feed_async_open_libuv: loop is NULL",
    timer_new, timer_start, timer_stop, timer_free, watch_new, watch_set, watch_free
};

int feed_async_open_libuv(feed_async **out, const feed_config *cfg, uv_loop_t *loop)
{
    return feed__async_open(out, cfg, &libuv_loop, loop);
}
