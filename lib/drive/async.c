/* async.c -- the event-loop driver: any number of requests on one loop.
 *
 * It does what each request's machine asks (core/), like the blocking
 * driver (sync.c), but never waits: a Redis pass is appended to the nodes'
 * connections (lib/io/redis_async.c) and the request continues when the last
 * reply is in; a node's set-up runs once however many requests need it,
 * and they continue when it is done; a SQL statement waits its turn on the
 * handle's PostgreSQL connection (lib/io/pg.c, its socket watched by the loop);
 * a wake-up is a timer. The decisions are the machines': a request makes
 * the same round trips here as in a blocking call.
 *
 * Requests that become ready are run from one queue, never from inside
 * one another: a reply callback, a timer or the start of a request puts
 * work on the queue and runs it, and what that work makes ready (another
 * request's trip ended by a connection it dropped, say) joins the queue.
 * Every user callback comes from the handle's own zero-delay timer, after
 * the queue ran: never from inside the call that started the request, nor
 * from inside hiredis.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drive/async.h"

typedef struct feed_asetup {
    feed_task    task;          /* first */
    feed_async  *a;
    int          node;
    feed_setup   s;
    feed_anode  *probe;         /* a Sentinel being asked */
    int          waiting;       /* for the loop: a connect or a trip */
    feed_areq   *waiters;       /* requests whose exchange needs this node */
} feed_asetup;

static _Thread_local char open_errmsg[FEED_ERRMSG];

static void pump(feed_async *a);
static void kick(feed_async *a);

/* Something became ready from the loop (a reply, a timer, libpq's socket):
 * run the queue now, unless a frame of this file already runs it. */
static void poke(feed_async *a)
{
    if (a->depth > 0)
        return;
    a->depth++;
    pump(a);
    a->depth--;
    if (a->dead && a->depth == 0)
        feed_async_close(a);
}

/* ---- The ready queue ---------------------------------------------------- */

static void schedule(feed_async *a, feed_task *t)
{
    if (t->queued)
        return;
    t->queued = 1;
    t->next_ready = NULL;
    if (a->ready_tail)
        a->ready_tail->next_ready = t;
    else
        a->ready_head = t;
    a->ready_tail = t;
}

static void unschedule(feed_async *a, feed_task *t)
{
    feed_task **p = &a->ready_head, *prev = NULL;

    if (!t->queued)
        return;
    while (*p && *p != t) {
        prev = *p;
        p = &(*p)->next_ready;
    }
    if (*p) {
        *p = t->next_ready;
        if (a->ready_tail == t)
            a->ready_tail = prev;
    }
    t->queued = 0;
}

/* A DOWN node loses its connection (the core dropped it). */
static void close_down_nodes(feed_async *a)
{
    for (size_t i = 0; i < a->core.topo.nnodes; i++) {
        feed_node *n = a->core.topo.nodes[i];
        if (n->state == FEED_NODE_DOWN && n->io)
            feed__ra_close(n->io, FEED_IO_FAILED, "connection dropped");
    }
}

/* ---- Requests ------------------------------------------------------------ */

static void req_unlink(feed_async *a, feed_areq *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else if (a->all == r)
        a->all = r->next;
    if (r->next)
        r->next->prev = r->prev;
    r->prev = r->next = NULL;
}

/* Requests are recycled: a page request is some 4 kB, a busy loop makes
 * one per page, and malloc with the zeroing of calloc cost more than the
 * rest of the page's own work. One size fits the requests made with
 * op_space (pages, newer, hooks: the largest of them); a handle keeps up to
 * SPARE_MAX of them. Only the header is set here; each request's init sets
 * its machine, and feed__xchg_begin its exchange. */
#define SPARE_MAX 512

static feed_areq *req_alloc(feed_async *a, size_t op_size)
{
    int pooled = op_size <= a->spare_op_size && a->spare;
    feed_areq *r;

    if (pooled && a->nspare > 0)
        r = a->spare[--a->nspare];
    else if (!(r = malloc(sizeof *r + (pooled ? a->spare_op_size : op_size))))
        return NULL;
    memset(r, 0, offsetof(feed_areq, x));
    r->pooled = pooled;
    r->timer = NULL;
    memset(&r->cb, 0, sizeof r->cb);
    r->err[0] = '\0';
    memset(&r->result, 0, sizeof r->result);
    return r;
}

static void req_release(feed_async *a, feed_areq *r)
{
    if (r->pooled && a->spare && a->nspare < SPARE_MAX && !a->dead)
        a->spare[a->nspare++] = r;
    else
        free(r);
}

static void req_free(feed_areq *r)
{
    feed_async *a = r->a;

    unschedule(a, &r->task);
    req_unlink(a, r);
    if (r->timer)
        a->loop->timer_free(r->timer);
    if (r->in_x)
        feed__xchg_end(&r->x);
    if (r->op)
        r->op->free(r->op);
    feed_result_free(&r->result);
    req_release(a, r);
}

feed_areq *feed__async_request(feed_async *a, size_t op_size, int api, void *arg)
{
    feed_areq *r = req_alloc(a, op_size);

    if (!r)
        return NULL;
    r->a = a;
    r->api = api;
    r->arg = arg;
    r->op = (feed_op *)r->op_space;
    return r;
}

void feed__async_discard(feed_areq *r)
{
    r->op = NULL;
    req_release(r->a, r);
}

static void add_wait(feed_areq **list, feed_areq *r)
{
    r->next_wait = *list;
    *list = r;
}

/* The request is done: internal ones wake their waiters, a user's goes to
 * the callbacks. */
static void finished(feed_areq *r)
{
    feed_async *a = r->a;

    if (r->api == FEED_API_QUIET) {        /* the first connects: nobody waits */
        req_free(r);
        return;
    }
    if (r->api == FEED_API_INTERNAL) {     /* the repairs */
        feed_areq *w = a->repair_waiters;
        a->repair = NULL;
        a->repair_waiters = NULL;
        for (; w; w = w->next_wait)
            schedule(a, &w->task);
        req_free(r);
        return;
    }
    req_unlink(a, r);
    r->next_wait = NULL;
    if (a->done_tail)
        a->done_tail->next_wait = r;
    else
        a->done_head = r;
    a->done_tail = r;
    kick(a);
}

static void wake(void *arg)
{
    feed_areq *r = arg;

    schedule(r->a, &r->task);
    poke(r->a);
}

static int wait_until(feed_areq *r, int64_t at, int64_t now)
{
    feed_async *a = r->a;

    if (!r->timer && !(r->timer = a->loop->timer_new(a->loop_data, wake, r)))
        return -1;
    a->loop->timer_start(r->timer, at > now ? at - now : 0);
    return 0;
}

/* ---- SQL: one statement at a time on the handle's connection ------------ */

static void sql_step(feed_async *a, int ready);

static void sql_event(void *arg, int ready)
{
    feed_async *a = arg;

    if (a->depth > 0) {         /* cannot happen: the loop calls, not this file */
        kick(a);
        return;
    }
    a->depth++;
    sql_step(a, ready != 0);
    a->depth--;
    poke(a);
}

static void sql_timeout(void *arg)
{
    sql_event(arg, 0);
}

static void sql_next(feed_async *a)
{
    feed_areq *r;

    if (a->sql_running || !(r = a->sql_head))
        return;
    a->sql_head = r->next_wait;
    if (!a->sql_head)
        a->sql_tail = NULL;
    a->sql_running = r;
    feed__pg_task_begin(&a->pgtask, &a->pg, &a->core, &r->op->sql, r->op->err, feed__now_ms());
    sql_step(a, 0);
}

/* Run the statement as far as it goes, then watch its socket until its
 * deadline. A request whose statement is done continues; the next one
 * starts. */
static void sql_step(feed_async *a, int ready)
{
    feed_areq *r = a->sql_running;
    int64_t now = feed__now_ms();
    int want, fd;

    if (!r)
        return;
    want = feed__pg_task_run(&a->pgtask, ready, now);
    if (want == FEED_PGW_DONE) {
        if (a->sql_watch)
            a->loop->watch_set(a->sql_watch, 0);
        if (a->sql_timer)
            a->loop->timer_stop(a->sql_timer);
        r->op->sql_rc = a->pgtask.rc;
        a->sql_running = NULL;
        schedule(a, &r->task);
        sql_next(a);
        return;
    }
    fd = feed__pg_task_fd(&a->pgtask);
    if (a->sql_watch && fd != a->sql_fd) {       /* a new connection, a new socket */
        a->loop->watch_free(a->sql_watch);
        a->sql_watch = NULL;
    }
    if (!a->sql_watch && fd >= 0) {
        a->sql_watch = a->loop->watch_new(a->loop_data, fd, sql_event, a);
        a->sql_fd = fd;
    }
    if (a->sql_watch)
        a->loop->watch_set(a->sql_watch, want == FEED_PGW_READ ? FEED_LOOP_READ : FEED_LOOP_WRITE);
    if (!a->sql_timer)
        a->sql_timer = a->loop->timer_new(a->loop_data, sql_timeout, a);
    if (a->sql_timer)
        a->loop->timer_start(a->sql_timer, a->pgtask.deadline > now ? a->pgtask.deadline - now : 0);
    if (!a->sql_watch || !a->sql_timer) {       /* no way to wait: give it up */
        feed__pg_task_abandon(&a->pgtask);
        r->op->sql_rc = feed__msg(r->op->err, FEED_ENOMEM, "out of memory watching PostgreSQL");
        a->sql_running = NULL;
        schedule(a, &r->task);
        sql_next(a);
    }
}

static void sql_enqueue(feed_async *a, feed_areq *r)
{
    r->next_wait = NULL;
    if (a->sql_tail)
        a->sql_tail->next_wait = r;
    else
        a->sql_head = r;
    a->sql_tail = r;
    sql_next(a);
}

/* ---- A node's set-up ---------------------------------------------------- */

static void setup_run(feed_asetup *su);

static void setup_ready(feed_asetup *su)
{
    su->waiting = 0;
    schedule(su->a, &su->task);
}

static void setup_trip_ended(void *arg, feed_trip *t)
{
    feed_asetup *su = arg;

    (void)t;
    feed__setup_tripped(&su->s, feed__now_ms());
    setup_ready(su);
    poke(su->a);
}

/* The Sentinel's answer is in: its connection goes (from inside its own
 * reply callback: hiredis frees it once that returns). */
static void probe_trip_ended(void *arg, feed_trip *t)
{
    feed_asetup *su = arg;

    (void)t;
    if (su->probe)
        feed__ra_close(su->probe, FEED_IO_FAILED, "done");
    feed__setup_tripped(&su->s, feed__now_ms());
    setup_ready(su);
    poke(su->a);
}

/* From hiredis's connect callback: only note it; the queue runs from the
 * kick timer (hiredis must not see its context freed under it). */
static void probe_connected(void *arg, int ok, const char *why)
{
    feed_asetup *su = arg;

    if (!ok) {
        su->s.trip.io = FEED_IO_FAILED;
        snprintf(su->s.trip.why, sizeof su->s.trip.why, "%s", why);
        feed__setup_tripped(&su->s, feed__now_ms());
        setup_ready(su);
    } else {
        su->waiting = 2;    /* connected: send the question next */
        schedule(su->a, &su->task);
    }
    kick(su->a);
}

static void node_connected(void *arg, int ok, const char *why)
{
    feed_asetup *su = arg;

    feed__setup_connected(&su->s, ok, why, feed__now_ms());
    setup_ready(su);
    kick(su->a);
}

static void setup_done(feed_asetup *su)
{
    feed_async *a = su->a;
    feed_areq *w = su->waiters;
    int64_t now = feed__now_ms();

    a->setups[su->node] = NULL;
    for (; w; w = w->next_wait) {
        /* A request that needs the fence, and found a connection-only
         * set-up under way, asks again: it starts its own. */
        if (!(w->x.setup_kind == FEED_SETUP_FULL && su->s.kind == FEED_SETUP_HELLO &&
              su->s.rc == FEED_OK))
            feed__xchg_setup_done(&w->x, su->s.rc, su->s.err, now);
        schedule(a, &w->task);
    }
    feed__setup_end(&su->s);
    unschedule(a, &su->task);
    if (su->probe)
        feed__ra_close(su->probe, FEED_IO_FAILED, "done");
    free(su);
    close_down_nodes(a);
}

static void setup_run(feed_asetup *su)
{
    feed_async *a = su->a;
    feed_node *n = a->core.topo.nodes[su->node];
    char why[160];

    if (su->waiting == 2) {         /* the Sentinel answered the connect */
        su->waiting = 1;
        if (feed__ra_send(su->probe, &su->s.trip, feed__now_ms(), probe_trip_ended, su) != 0) {
            feed__ra_close(su->probe, FEED_IO_FAILED, "done");
            feed__setup_tripped(&su->s, feed__now_ms());
        } else {
            return;
        }
    }
    if (su->waiting)
        return;
    for (;;) {
        int64_t now = feed__now_ms();
        close_down_nodes(a);
        switch (feed__setup_next(&su->s, now)) {
        case FEED_S_PROBE:
            su->waiting = 1;
            if (!feed__ra_connect(&su->s.probe, a->core.tls, a->loop, a->loop_data,
                                  a->core.cfg.redis_timeout_ms, now, probe_connected, su,
                                  (void **)&su->probe, why, sizeof why)) {
                su->waiting = 0;
                su->s.trip.io = FEED_IO_FAILED;
                snprintf(su->s.trip.why, sizeof su->s.trip.why, "%s", why);
                feed__setup_tripped(&su->s, now);
                continue;
            }
            return;
        case FEED_S_CONNECT:
            if (n->io)
                feed__ra_close(n->io, FEED_IO_FAILED, "connection dropped");
            su->waiting = 1;
            if (!feed__ra_connect(&n->addr, a->core.tls, a->loop, a->loop_data,
                                  a->core.cfg.redis_timeout_ms, now, node_connected, su,
                                  &n->io, why, sizeof why)) {
                su->waiting = 0;
                feed__setup_connected(&su->s, 0, why, now);
                continue;
            }
            return;
        case FEED_S_TRIP:
            su->waiting = 1;
            if (!n->io || feed__ra_send(n->io, &su->s.trip, now, setup_trip_ended, su) != 0) {
                su->waiting = 0;
                if (!n->io) {
                    su->s.trip.io = FEED_IO_FAILED;
                    snprintf(su->s.trip.why, sizeof su->s.trip.why, "connection lost");
                }
                feed__setup_tripped(&su->s, now);
                continue;
            }
            return;
        case FEED_S_DONE:
            setup_done(su);
            return;
        }
    }
}

/* r's exchange needs node set up: join the set-up under way, or start
 * one. */
static void need_setup(feed_areq *r)
{
    feed_async *a = r->a;
    int node = r->x.setup_node;
    feed_asetup *su;

    if ((size_t)node >= a->nsetups) {
        size_t n = a->core.topo.nnodes + 8;
        feed_asetup **bigger = realloc(a->setups, n * sizeof *bigger);
        if (!bigger) {
            feed__xchg_setup_done(&r->x, FEED_ENOMEM, "out of memory for a connection",
                                  feed__now_ms());
            schedule(a, &r->task);
            return;
        }
        memset(bigger + a->nsetups, 0, (n - a->nsetups) * sizeof *bigger);
        a->setups = bigger;
        a->nsetups = n;
    }
    if ((su = a->setups[node]) == NULL) {
        if (!(su = calloc(1, sizeof *su))) {
            feed__xchg_setup_done(&r->x, FEED_ENOMEM, "out of memory for a connection",
                                  feed__now_ms());
            schedule(a, &r->task);
            return;
        }
        su->task.is_setup = 1;
        su->a = a;
        su->node = node;
        feed__setup_begin(&su->s, &a->core, node, r->x.setup_kind, r->x.setup_slot,
                          feed__now_ms());
        a->setups[node] = su;
        schedule(a, &su->task);
    }
    add_wait(&su->waiters, r);
}

/* ---- A request's exchange ----------------------------------------------- */

static void trip_ended(void *arg, feed_trip *t)
{
    feed_areq *r = arg;

    (void)t;
    if (--r->trips_left == 0) {
        r->pass_over = 1;
        schedule(r->a, &r->task);
        poke(r->a);
    }
}

/* Put the pass's trips on their nodes' connections. */
static void send_pass(feed_areq *r, int64_t now)
{
    feed_async *a = r->a;

    r->trips_left = r->x.ntrips;
    for (size_t k = 0; k < r->x.ntrips; k++) {
        feed_trip *t = &r->x.trips[k].trip;
        feed_node *n = a->core.topo.nodes[t->node];
        if (!n->io || feed__ra_send(n->io, t, now, trip_ended, r) != 0) {
            if (!n->io) {
                t->io = FEED_IO_FAILED;
                snprintf(t->why, sizeof t->why, "connection lost");
            }
            r->trips_left--;
        }
    }
    if (r->trips_left == 0) {
        r->pass_over = 1;
        schedule(a, &r->task);
    }
}

/* The request as far as it goes now. */
static void req_run(feed_areq *r)
{
    feed_async *a = r->a;
    int64_t now = feed__now_ms();

    for (;;) {
        if (r->pass_over) {
            r->pass_over = 0;
            feed__xchg_pass_done(&r->x, now);
            close_down_nodes(a);
        }
        if (r->in_x) {
            switch (feed__xchg_next(&r->x, now)) {
            case FEED_X_REPAIR:
                if (!a->repair) {
                    feed_op *op = feed__repair_op(&a->core);
                    feed_areq *rep;
                    if (!op)
                        continue;       /* none for this store */
                    if (!(rep = calloc(1, sizeof *rep))) {
                        op->free(op);
                        continue;
                    }
                    rep->a = a;
                    rep->api = FEED_API_INTERNAL;
                    rep->op = op;
                    rep->next = a->all;
                    if (a->all)
                        a->all->prev = rep;
                    a->all = rep;
                    a->repair = rep;
                    schedule(a, &rep->task);
                }
                add_wait(&a->repair_waiters, r);
                return;
            case FEED_X_SETUP:
                need_setup(r);
                return;
            case FEED_X_PASS:
                send_pass(r, now);
                return;
            case FEED_X_WAKE:
                if (wait_until(r, r->x.wake_at, now) != 0)
                    continue;           /* no timer: try again at once */
                return;
            case FEED_X_DONE:
                r->op->redis_rc = r->x.rc;
                feed__xchg_end(&r->x);
                r->in_x = 0;
                break;
            }
        }
        switch (r->op->step(r->op, now)) {
        case FEED_W_REDIS:
            feed__xchg_begin(&r->x, &a->core, &r->op->batch, r->op->err, now);
            r->in_x = 1;
            continue;
        case FEED_W_SQL:
            sql_enqueue(a, r);
            return;
        case FEED_W_WAKE:
            if (wait_until(r, r->op->wake_at, now) != 0)
                continue;
            return;
        case FEED_W_DONE:
            finished(r);
            return;
        }
        now = feed__now_ms();
    }
}

/* Run what is ready, until nothing is: never from inside itself. */
static void pump(feed_async *a)
{
    feed_task *t;

    if (a->dead)
        return;
    while ((t = a->ready_head) != NULL) {
        a->ready_head = t->next_ready;
        if (!a->ready_head)
            a->ready_tail = NULL;
        t->queued = 0;
        if (t->is_setup)
            setup_run((feed_asetup *)t);
        else
            req_run((feed_areq *)t);
        if (a->dead)
            return;
    }
}

/* ---- Callbacks ----------------------------------------------------------- */

/* r's callback, with rc; the page (on FEED_OK) becomes the callback's. */
static void deliver(feed_async *a, feed_areq *r, int rc)
{
    feed_result *page = rc == FEED_OK ? &r->result : NULL;

    a->cur_err = r->err;
    switch (r->api) {
    case FEED_API_PAGE:
        if (r->cb.page)
            r->cb.page(a, rc, page, r->arg);
        else
            feed_result_free(page);
        break;
    case FEED_API_RANKED:
        if (r->cb.ranked)
            r->cb.ranked(a, rc, page, rc == FEED_OK && r->result.has_more
                         ? feed__page_next_rank((feed_page_op *)r->op) : -1, r->arg);
        else
            feed_result_free(page);
        break;
    case FEED_API_HEALTH:
        r->cb.health(a, rc, rc == FEED_ECANCELED ? NULL : (feed_health_info *)r->op_space,
                     r->arg);
        break;
    default:
        if (r->cb.done)
            r->cb.done(a, rc, r->arg);
        break;
    }
    memset(&r->result, 0, sizeof r->result);    /* the callback's now */
    a->cur_err = NULL;
}

/* The finished requests' callbacks, in the order they finished. A
 * callback may start requests or close the handle. */
static void deliver_done(feed_async *a)
{
    feed_areq *r;

    while (!a->dead && (r = a->done_head) != NULL) {
        a->done_head = r->next_wait;
        if (!a->done_head)
            a->done_tail = NULL;
        deliver(a, r, r->op->rc);
        r->prev = r->next = NULL;
        if (r->timer)
            a->loop->timer_free(r->timer);
        r->timer = NULL;
        r->op->free(r->op);
        r->op = NULL;
        req_release(a, r);
    }
}

static void kick_fired(void *arg)
{
    feed_async *a = arg;

    a->kicked = 0;
    a->depth++;
    pump(a);
    deliver_done(a);
    a->depth--;
    if (a->dead && a->depth == 0)
        feed_async_close(a);
}

static void kick(feed_async *a)
{
    if (!a->kicked && a->kick) {
        a->kicked = 1;
        a->loop->timer_start(a->kick, 0);
    }
}

void feed__async_start(feed_areq *r)
{
    feed_async *a = r->a;

    r->next = a->all;
    if (a->all)
        a->all->prev = r;
    a->all = r;
    a->depth++;
    schedule(a, &r->task);
    pump(a);
    a->depth--;
}

/* ---- The handle ---------------------------------------------------------- */

/* Connect to both stores at once, on the loop, as feed_open does: the
 * first requests then find the connections made. Its outcome is nobody's:
 * a store that failed is tried again by the requests that need it. */
static void start_connects(feed_async *a)
{
    feed_areq *r = calloc(1, sizeof *r);
    int rc;

    if (!r)
        return;
    r->a = a;
    r->api = FEED_API_QUIET;
    if (!(r->op = feed__connect_op(&a->core, &a->opened, &rc))) {
        free(r);
        return;
    }
    feed__async_start(r);
}

int feed__async_refuse(const char *why)
{
    snprintf(open_errmsg, sizeof open_errmsg, "%s", why);
    return FEED_EINVAL;
}

int feed__async_open(feed_async **out, const feed_config *cfg, const feed_loop *loop,
                     void *loop_data)
{
    const char *bad;
    char why[128];
    feed_async *a;

    open_errmsg[0] = '\0';
    if (!out || !cfg) {
        if (out)
            *out = NULL;
        return feed__async_refuse("feed_async_open: out or cfg is NULL");
    }
    *out = NULL;
    if ((bad = feed__config_check(cfg, why, sizeof why)) != NULL) {
        snprintf(open_errmsg, sizeof open_errmsg, "feed_async_open: %s", bad);
        return FEED_EINVAL;
    }
    if (!(a = calloc(1, sizeof *a)) || feed__core_init(&a->core, cfg) != FEED_OK ||
        feed__topo_init(&a->core) != FEED_OK ||
        !(a->kick = loop->timer_new(loop_data, kick_fired, a))) {
        if (a)
            feed__core_free(&a->core);
        free(a);
        snprintf(open_errmsg, sizeof open_errmsg, "feed_async_open: out of memory");
        return FEED_ENOMEM;
    }
    {
        char tls_why[FEED_ERRMSG];
        int rc = feed__tls_open(&a->core.cfg, &a->core.tls, tls_why, sizeof tls_why);
        if (rc != FEED_OK) {
            snprintf(open_errmsg, sizeof open_errmsg, "feed_async_open: %.480s", tls_why);
            loop->timer_free(a->kick);
            feed__core_free(&a->core);
            free(a);
            return rc;
        }
    }
    a->loop = loop;
    a->loop_data = loop_data;
    a->sql_fd = -1;
    a->spare_op_size = feed__page_op_size();
    if (feed__newer_op_size() > a->spare_op_size)
        a->spare_op_size = feed__newer_op_size();
    if (feed__hook_op_size() > a->spare_op_size)
        a->spare_op_size = feed__hook_op_size();
    a->spare = malloc(SPARE_MAX * sizeof *a->spare);    /* none: no recycling */
    feed__pg_init(&a->pg);
    start_connects(a);
    *out = a;
    return FEED_OK;
}

int feed__async_busy(const feed_async *a)
{
    return a->all || a->done_head || a->ready_head;
}

const char *feed_async_errmsg(const feed_async *a)
{
    if (!a)
        return open_errmsg;
    return a->cur_err ? a->cur_err : a->errmsg;
}

void feed_async_stats_get(const feed_async *a, feed_stats *out)
{
    if (!out)
        return;
    if (a)
        *out = a->core.stats;
    else
        memset(out, 0, sizeof *out);
}

/* Forget r's trips on every connection: their replies are read and
 * dropped. */
static void forget_trips(feed_async *a, feed_areq *r)
{
    if (!r->in_x)
        return;
    for (size_t k = 0; k < r->x.ntrips; k++) {
        feed_node *n = a->core.topo.nodes[r->x.trips[k].trip.node];
        if (n->io)
            feed__ra_forget(n->io, &r->x.trips[k].trip);
    }
}

void feed_async_close(feed_async *a)
{
    feed_areq *r;

    if (!a)
        return;
    if (!a->dead) {
        a->dead = 1;
        /* Finished requests get their results; every other pending one
         * FEED_ECANCELED. Their callbacks may not start requests now. */
        while ((r = a->done_head) != NULL) {
            a->done_head = r->next_wait;
            deliver(a, r, r->op->rc);
            if (r->timer)
                a->loop->timer_free(r->timer);
            r->op->free(r->op);
            free(r);
        }
        a->done_tail = NULL;
        while (a->nspare > 0)
            free(a->spare[--a->nspare]);
        if (a->sql_running)
            feed__pg_task_abandon(&a->pgtask);
        a->sql_running = NULL;
        while ((r = a->all) != NULL) {
            forget_trips(a, r);
            if (r->api != FEED_API_INTERNAL) {
                feed__msg(r->err, FEED_ECANCELED, "the handle was closed");
                deliver(a, r, FEED_ECANCELED);
            }
            req_free(r);
        }
        for (size_t i = 0; i < a->nsetups; i++) {
            feed_asetup *su = a->setups[i];
            if (!su)
                continue;
            if (su->probe)
                feed__ra_close(su->probe, FEED_IO_FAILED, "closed");
            if (a->core.topo.nodes[su->node]->io)
                feed__ra_forget(a->core.topo.nodes[su->node]->io, &su->s.trip);
            feed__setup_end(&su->s);
            free(su);
        }
        free(a->setups);
        a->setups = NULL;
        a->nsetups = 0;
        for (size_t i = 0; i < a->core.topo.nnodes; i++)
            if (a->core.topo.nodes[i]->io)
                feed__ra_close(a->core.topo.nodes[i]->io, FEED_IO_FAILED, "closed");
        if (a->sql_watch)
            a->loop->watch_free(a->sql_watch);
        if (a->sql_timer)
            a->loop->timer_free(a->sql_timer);
        a->sql_watch = a->sql_timer = NULL;
        feed__pg_free(&a->pg);
        free(a->spare);
        a->spare = NULL;
        if (a->kick)
            a->loop->timer_free(a->kick);
        a->kick = NULL;
    }
    if (a->depth > 0)
        return;     /* a frame of this file is under way: it frees the handle */
    feed__tls_free(a->core.tls);
    feed__core_free(&a->core);
    free(a);
}
