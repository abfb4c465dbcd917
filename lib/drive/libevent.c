/* libevent.c -- the async driver on a libevent event_base: libevent events
 * for the timers and the sockets (libpq's, and the Redis connections'
 * through lib/io/redis_async.c). */
#include <stdlib.h>

#include <event2/event.h>

#include "drive/async.h"
#include "feedcache_libevent.h"

typedef struct ev_timer_box {
    struct event *ev;
    void (*cb)(void *arg);
    void *arg;
} ev_timer_box;

static void timer_fired(evutil_socket_t fd, short what, void *arg)
{
    ev_timer_box *t = arg;

    (void)fd;
    (void)what;
    t->cb(t->arg);
}

static void *timer_new(void *loop, void (*cb)(void *arg), void *arg)
{
    ev_timer_box *t = malloc(sizeof *t);

    if (!t)
        return NULL;
    t->cb = cb;
    t->arg = arg;
    if (!(t->ev = evtimer_new(loop, timer_fired, t))) {
        free(t);
        return NULL;
    }
    return t;
}

static void timer_start(void *p, int64_t ms)
{
    ev_timer_box *t = p;
    struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000 };

    evtimer_add(t->ev, &tv);
}

static void timer_stop(void *p)
{
    evtimer_del(((ev_timer_box *)p)->ev);
}

static void timer_free(void *p)
{
    ev_timer_box *t = p;

    event_free(t->ev);
    free(t);
}

typedef struct ev_watch_box {
    struct event_base *base;
    struct event *ev;
    int fd, events;
    void (*cb)(void *arg, int ready);
    void *arg;
} ev_watch_box;

static void watch_fired(evutil_socket_t fd, short what, void *arg)
{
    ev_watch_box *w = arg;

    (void)fd;
    w->cb(w->arg, (what & EV_READ ? FEED_LOOP_READ : 0) | (what & EV_WRITE ? FEED_LOOP_WRITE : 0));
}

static void *watch_new(void *loop, int fd, void (*cb)(void *arg, int ready), void *arg)
{
    ev_watch_box *w = calloc(1, sizeof *w);

    if (!w)
        return NULL;
    w->base = loop;
    w->fd = fd;
    w->cb = cb;
    w->arg = arg;
    return w;
}

static void watch_set(void *p, int events)
{
    ev_watch_box *w = p;
    short what = (short)((events & FEED_LOOP_READ ? EV_READ : 0) |
                         (events & FEED_LOOP_WRITE ? EV_WRITE : 0));

    if (w->ev && w->events == events)
        return;
    if (w->ev) {
        event_free(w->ev);
        w->ev = NULL;
    }
    w->events = events;
    if (what && (w->ev = event_new(w->base, w->fd, what | EV_PERSIST, watch_fired, w)) != NULL)
        event_add(w->ev, NULL);
}

static void watch_free(void *p)
{
    ev_watch_box *w = p;

    if (w->ev)
        event_free(w->ev);
    free(w);
}

static const feed_loop libevent_loop = {
    "feed_async_open_libevent: base is NULL",
    timer_new, timer_start, timer_stop, timer_free, watch_new, watch_set, watch_free
};

int feed_async_open_libevent(feed_async **out, const feed_config *cfg, struct event_base *base)
{
    return feed__async_open(out, cfg, &libevent_loop, base);
}
