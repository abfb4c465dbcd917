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
 * Every task (a request, a set-up) is on one list of the handle, named by
 * its state (async.h, enum feed_at): what it waits for. task_move is the
 * one place that moves it, req_free the one place that frees a request.
 * What the loop hands in (a reply, a timer, libpq's socket, a new request)
 * only moves tasks to the ready queue; run_queue, the one function that
 * runs tasks, runs them one after another, never one inside another.
 * Every user callback comes from the handle's own zero-delay timer (kick),
 * after the queue ran: never from inside the call that started the
 * request, nor from inside hiredis.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drive/async.h"
#include "drive/drive.h"   /* the budget */

/* The handle's state bits (a->flags). As hiredis's context flags do, they
 * say which frame of this file is on the stack, so that what is done from
 * inside it is finished by that frame:
 *
 *   FEED_A_RUNNING  run_queue is on the stack. Whatever becomes ready
 *                   meanwhile (a trip ended by a connection a request
 *                   dropped) only joins the queue, and that frame runs it.
 *                   No user code runs inside it, so the handle cannot be
 *                   closed under it.
 *   FEED_A_IN_CB    a user callback is on the stack (req_end), or
 *                   feed_async_close is cancelling. A callback may start
 *                   requests (the queue runs at once) or close the handle:
 *                   then every request is cancelled before close returns,
 *                   but the handle's memory stays until the outermost such
 *                   frame ends (frame_leave frees it).
 *   FEED_A_CLOSED   feed_async_close ran: nothing runs any more.
 *   FEED_A_KICKED   the kick timer is armed.
 *   FEED_A_SWEEPING the deadlines' sweep timer is armed (Deadlines, below).
 */
enum { FEED_A_RUNNING = 1, FEED_A_IN_CB = 2, FEED_A_CLOSED = 4, FEED_A_KICKED = 8,
       FEED_A_SWEEPING = 16 };

typedef struct feed_asetup {
    feed_task    task;          /* first: FEED_AT_READY or FEED_AT_LOOP */
    feed_async  *a;
    feed_setup   s;             /* s.index, s.node: the node set up */
    feed_anode  *probe;         /* the Sentinel being asked (NULL once it went) */
} feed_asetup;

static _Thread_local char open_errmsg[FEED_ERRMSG];

static void req_run(feed_areq *r);
static void lease_unlink(feed_areq *r);
static void lease_leave(feed_areq *r);
static void arm_sweep(feed_async *a);
static void setup_run(feed_asetup *su);
static void handle_free(feed_async *a);

/* ---- Lists, the queue, frames ------------------------------------------ */

/* Move t to the end of list `to` (FEED_AT_NONE: off every list). A task
 * already there keeps its place. */
static void task_move(feed_async *a, feed_task *t, enum feed_at to)
{
    feed_tasks *l;

    if (t->at == to)
        return;
    if (t->at == FEED_AT_LEASE)
        lease_unlink((feed_areq *)t);
    if (t->at != FEED_AT_NONE) {
        l = &a->on[t->at];
        *(t->prev ? &t->prev->next : &l->head) = t->next;
        *(t->next ? &t->next->prev : &l->tail) = t->prev;
        l->n--;
    }
    t->at = to;
    t->next = NULL;
    if (to == FEED_AT_NONE)
        return;
    l = &a->on[to];
    t->prev = l->tail;
    *(l->tail ? &l->tail->next : &l->head) = t;
    l->tail = t;
    l->n++;
}

/* t, on list at, to that list's head (the SQL line's next to run). */
static void task_first(feed_async *a, feed_task *t)
{
    feed_tasks *l = &a->on[t->at];

    if (l->head == t)
        return;
    t->prev->next = t->next;
    *(t->next ? &t->next->prev : &l->tail) = t->prev;
    t->prev = NULL;
    t->next = l->head;
    l->head->prev = t;
    l->head = t;
}

static feed_task *first_task(const feed_async *a)
{
    for (int at = FEED_AT_NONE + 1; at < FEED_AT_COUNT; at++)
        if (a->on[at].head)
            return a->on[at].head;
    return NULL;
}

/* Run the ready tasks until none is left. Called after anything the loop
 * hands in; from inside itself (or once closed) it returns at once. */
static void run_queue(feed_async *a)
{
    feed_task *t;

    if (a->flags & (FEED_A_RUNNING | FEED_A_CLOSED))
        return;
    a->flags |= FEED_A_RUNNING;
    while ((t = a->on[FEED_AT_READY].head) != NULL) {
        task_move(a, t, FEED_AT_NONE);
        if (t->is_setup)
            setup_run((feed_asetup *)t);
        else
            req_run((feed_areq *)t);
    }
    a->flags &= ~FEED_A_RUNNING;
}

/* Run the queue and then the callbacks from the loop, soon: from where the
 * queue may not run (hiredis's connect callback), and for callbacks. */
static void kick(feed_async *a)
{
    if (!(a->flags & (FEED_A_KICKED | FEED_A_CLOSED))) {
        a->flags |= FEED_A_KICKED;
        a->loop->timer_start(a->kick, 0);
    }
}

/* A frame entered with flags `was` ends; 1: it was the outermost of a
 * closed handle, and freed it. */
static int frame_leave(feed_async *a, int was)
{
    a->flags = (a->flags & ~FEED_A_IN_CB) | (was & FEED_A_IN_CB);
    if ((a->flags & (FEED_A_CLOSED | FEED_A_IN_CB | FEED_A_RUNNING)) != FEED_A_CLOSED)
        return 0;
    handle_free(a);
    return 1;
}

/* A DOWN node loses its connection (the core dropped it), unless its
 * set-up is under way: that connection is the set-up's, maybe still
 * connecting, and a trip of the old one that failed late must not drop it
 * (the set-up would wait for ever). setup_done looks again. */
static void close_down_nodes(feed_async *a)
{
    for (size_t i = 0; i < a->core.topo.nnodes; i++) {
        feed_node *n = a->core.topo.nodes[i];
        if (n->state == FEED_NODE_DOWN && n->io && !(i < a->nsetups && a->setups[i]))
            feed__ra_close(n->io, FEED_IO_FAILED, "connection dropped");
    }
}

/* ---- Requests ------------------------------------------------------------ */

/* Requests are recycled: a page request is some 4 kB, a busy loop makes
 * one per page, and malloc with the zeroing of calloc cost more than the
 * rest of the page's own work. One size fits the requests made with
 * op_space (pages, newer, hooks: the largest of them); a handle keeps up to
 * SPARE_MAX of them. Only the header is set here; each request's init sets
 * its machine, and feed__xchg_begin its exchange. */
#define SPARE_MAX 512

feed_areq *feed__async_request(feed_async *a, size_t op_size, int api, void *arg)
{
    int pooled = op_size <= a->spare_op_size && a->spare;
    feed_areq *r;

    if (pooled && a->nspare > 0)
        r = a->spare[--a->nspare];
    else if (!(r = malloc(sizeof *r + (pooled ? a->spare_op_size : op_size))))
        return NULL;
    memset(r, 0, offsetof(feed_areq, err));
    r->err[0] = '\0';
    r->pooled = pooled;
    r->a = a;
    r->api = api;
    r->arg = arg;
    r->op = (feed_op *)r->op_space;
    return r;
}

/* r's exchange given up: its trips still out are forgotten (their replies
 * read and dropped by the connections). */
static void drop_exchange(feed_areq *r)
{
    feed_async *a = r->a;

    if (!r->in_x)
        return;
    for (size_t k = 0; k < r->x.ntrips; k++) {
        feed_node *n = a->core.topo.nodes[r->x.trips[k].trip.node];
        if (n->io)
            feed__ra_forget(n->io, &r->x.trips[k].trip);
    }
    feed__xchg_end(&r->x);
    r->in_x = 0;
    r->pass_over = 0;
}

/* Free r, from whatever state (its trips still out are forgotten, their
 * replies read and dropped). The one place a request is freed: by req_end,
 * or feed__async_discard for one never started. */
static void req_free(feed_areq *r)
{
    feed_async *a = r->a;

    if (r->budgeted) {          /* freed while its statement held a slot (a close) */
        r->budgeted = 0;
        feed__budget_give();
    }
    if (r->leads) {             /* freed leading (a close): its followers go on */
        lease_leave(r);
        kick(a);
    }
    task_move(a, &r->task, FEED_AT_NONE);
    if (a->repair == r)
        a->repair = NULL;
    if (r->timer)
        a->loop->timer_free(r->timer);
    drop_exchange(r);
    if (r->op)
        r->op->free(r->op);
    feed_result_free(&r->result);
    if (r->pooled && a->spare && a->nspare < SPARE_MAX && !(a->flags & FEED_A_CLOSED))
        a->spare[a->nspare++] = r;
    else
        free(r);
}

void feed__async_discard(feed_areq *r)
{
    r->op = NULL;
    req_free(r);
}

/* r's end: its callback with rc (a user's request; the page, on FEED_OK,
 * becomes the callback's), then req_free. 1: the callback closed the
 * handle and it is gone. */
static int req_end(feed_areq *r, int rc)
{
    feed_async *a = r->a;
    feed_result *page = rc == FEED_OK ? &r->result : NULL;
    const char *err = a->cur_err;
    int was = a->flags;

    task_move(a, &r->task, FEED_AT_NONE);
    a->flags |= FEED_A_IN_CB;
    a->cur_err = r->err;
    switch (r->api) {
    case FEED_API_PAGE:
        if (r->cb.page)
            r->cb.page(a, rc, page, r->arg);
        else if (r->cb.ranked)
            r->cb.ranked(a, rc, page, rc == FEED_OK && r->result.has_more
                         ? feed__page_next_rank((feed_page_op *)r->op) : -1, r->arg);
        else
            feed_result_free(page);
        break;
    case FEED_API_HEALTH:
        r->cb.health(a, rc, rc == FEED_ECANCELED ? NULL : (feed_health_info *)r->op_space,
                     r->arg);
        break;
    case FEED_API_DONE:
        if (r->cb.done)
            r->cb.done(a, rc, r->arg);
        break;
    default:                            /* FEED_API_INTERNAL: nobody waits */
        break;
    }
    if (page)
        memset(&r->result, 0, sizeof r->result);    /* the callback's now */
    a->cur_err = err;
    req_free(r);
    return frame_leave(a, was);
}

/* The request is done: the repairs wake their waiters; a user's request
 * waits for its callback. */
static void finished(feed_areq *r)
{
    feed_async *a = r->a;

    if (r == a->repair)         /* one that joined it after a newer loss asks again */
        while (a->on[FEED_AT_REPAIR].head) {
            feed_areq *w = (feed_areq *)a->on[FEED_AT_REPAIR].head;
            if (w->x.repair_gen > feed__repair_op_gen(r->op))
                feed__xchg_repair_again(&w->x);
            task_move(a, &w->task, FEED_AT_READY);
        }
    if (r->api == FEED_API_INTERNAL) {
        req_end(r, r->op->rc);
        return;
    }
    task_move(a, &r->task, FEED_AT_DONE);
    kick(a);
}

static void wake(void *arg)
{
    feed__async_start(arg);
}

/* wait_until: park r on its timer until at, or its deadline if that comes
 * first (a wait never outlives the request). 0, or -1 when no timer could
 * be made. */
static int wait_until(feed_areq *r, int64_t at, int64_t now)
{
    feed_async *a = r->a;

    if (r->op->deadline && r->op->deadline < at)
        at = r->op->deadline;
    if (!r->timer && !(r->timer = a->loop->timer_new(a->loop_data, wake, r)))
        return -1;
    a->loop->timer_start(r->timer, at > now ? at - now : 0);
    task_move(a, &r->task, FEED_AT_TIMER);
    return 0;
}

/* ---- Lease waits ---------------------------------------------------------- *
 *
 * A read whose feed another handle rebuilds asks again after a pause
 * (page.c, lease_busy). On a loop, a hot feed gone cold has many such reads
 * on one handle at once, and each asking on its own made a storm of polls
 * that kept the loop too busy to read the rebuilds' own replies. So per
 * handle and feed one read leads: it waits on its timer and asks, as
 * before; the others follow: they wait on FEED_AT_LEASE, with no timer and
 * asking nothing, until the leader stops waiting (its answer came: the
 * copy, the lease, SQL; or it was shed or freed). Then they all run again
 * in the order they came, each asking once (most of them answered by the
 * copy); one that must wait again leads anew or follows the new leader. A
 * leader's poll is its exchange: it leads until its step asks for neither
 * Redis nor another wait on the same feed. A follower's deadline is the
 * sweep's. The slots are direct-mapped by feed: a read whose slot another
 * feed's leader holds waits on its own timer, as if alone (two feeds in one
 * slot cost polls, never a page, and so would two feeds of one lease_of). */

static feed_alease *lease_slot(feed_async *a, uint64_t of)
{
    return &a->lease[(of >> 1) % FEED_LEASE_SLOTS];
}

/* r waits for its feed's rebuild (op->lease_of): 1, it follows that feed's
 * leader (FEED_AT_LEASE); 0, it leads, or waits alone: on its timer. */
static int lease_follow(feed_areq *r)
{
    feed_async *a = r->a;
    feed_alease *s = lease_slot(a, r->op->lease_of);

    if (!s->leader) {
        s->leader = r;
        s->feed = r->op->lease_of;
        r->leads = s;
        return 0;
    }
    if (s->leader == r || s->feed != r->op->lease_of)
        return 0;
    task_move(a, &r->task, FEED_AT_LEASE);
    r->follows = s;
    r->lease_next = NULL;
    r->lease_prev = s->last;
    *(s->last ? &s->last->lease_next : &s->first) = r;
    s->last = r;
    a->core.stats.lease_waits_joined++;
    return 1;
}

/* r leaves FEED_AT_LEASE (task_move): off its feed's followers. */
static void lease_unlink(feed_areq *r)
{
    feed_alease *s = r->follows;

    *(r->lease_prev ? &r->lease_prev->lease_next : &s->first) = r->lease_next;
    *(r->lease_next ? &r->lease_next->lease_prev : &s->last) = r->lease_prev;
    r->follows = NULL;
}

/* The leader r stops waiting: its followers run again, oldest first. */
static void lease_leave(feed_areq *r)
{
    feed_alease *s = r->leads;

    r->leads = NULL;
    s->leader = NULL;
    while (s->first)
        task_move(r->a, &s->first->task, FEED_AT_READY);
}

/* ---- Deadlines ------------------------------------------------------------ *
 *
 * A read's deadline (feed_op.deadline) is checked before each thing it asks
 * (req_run), and, while it waits, by the handle's sweep: a timer that runs
 * while reads wait (every twentieth of request_timeout_ms, 10 ms at least)
 * and lets go whatever a read past its deadline waits for: its trips (their
 * replies read and dropped), its place in line for PostgreSQL (not the
 * statement running: pg_timeout_ms bounds that one), a set-up, the repairs.
 * It then goes on at once, and every ask it makes is shed (FEED_EBUSY). So
 * a queue never holds a read longer than its caller waits for it. */

/* r past its deadline? Then what it waits for (or was about to ask) is let
 * go; a waiting one (from the sweep) goes back on the queue. */
static int shed_now(feed_areq *r, int64_t now, int waiting)
{
    feed_async *a = r->a;

    if (!r->op->reads || !feed__shed(r->op, now, r->task.at == FEED_AT_SQL ? "PostgreSQL"
                                                                           : "Redis"))
        return 0;
    if (r->task.at == FEED_AT_SQL) {
        r->op->sql_rc = FEED_EBUSY;
    } else if (r->in_x) {
        drop_exchange(r);
        r->op->redis_rc = FEED_EBUSY;
    }
    if (waiting)
        task_move(a, &r->task, FEED_AT_READY);
    return 1;
}

static void sweep_fired(void *arg)
{
    static const enum feed_at lists[] = { FEED_AT_REDIS, FEED_AT_SETUP, FEED_AT_REPAIR,
                                          FEED_AT_SQL, FEED_AT_LEASE };
    feed_async *a = arg;
    int64_t now = feed__now_ms();
    int waiting = 0;

    a->flags &= ~FEED_A_SWEEPING;
    for (size_t l = 0; l < sizeof lists / sizeof *lists; l++) {
        feed_task *t = a->on[lists[l]].head, *next;
        if (lists[l] == FEED_AT_SQL && t && a->sql_running)
            t = t->next;                /* its statement runs: pg_timeout_ms bounds it */
        for (; t; t = next) {
            feed_areq *r = (feed_areq *)t;
            next = t->next;
            waiting += r->op->reads && !shed_now(r, now, 1);
        }
    }
    run_queue(a);
    if (waiting)
        arm_sweep(a);
}

/* A read starts waiting: the sweep runs while any does. */
static void arm_sweep(feed_async *a)
{
    uint32_t every = a->core.cfg.request_timeout_ms / 20;

    if ((a->flags & (FEED_A_SWEEPING | FEED_A_CLOSED)) || !a->sweep)
        return;
    a->flags |= FEED_A_SWEEPING;
    a->loop->timer_start(a->sweep, every > 10 ? every : 10);
}

/* ---- SQL: one statement at a time on the handle's connection ------------ */

static void sql_event(void *arg, int ready);

static void sql_timeout(void *arg)
{
    sql_event(arg, 0);
}

/* Watch the statement's socket for want until its deadline; -1: no way to. */
static int sql_wait(feed_async *a, int want, int64_t now)
{
    int fd = feed__pg_task_fd(&a->pgtask);

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
        a->loop->timer_start(a->sql_timer,
                             a->pgtask.m.deadline > now ? a->pgtask.m.deadline - now : 0);
    return a->sql_watch && a->sql_timer ? 0 : -1;
}

/* The next statement on the connection, when none runs: the first request
 * of the line whose statement the process's budget lets go (budget.c; one
 * of the first SQL_SCAN: a rebuild behind pages past the cache goes first
 * when only rebuilds may take a slot), moved to the head. None: the line
 * waits, asking again every BUDGET_POLL_MS (the slot frees in another
 * handle, maybe on another thread). 1 when one began. */
#define SQL_SCAN 64
#define BUDGET_POLL_MS 2
static int sql_next(feed_async *a)
{
    feed_task *t = a->on[FEED_AT_SQL].head;

    if (a->sql_running || !t)
        return 0;
    for (int k = 0, refused = 0; t && k < SQL_SCAN; t = t->next, k++) {
        feed_areq *r = (feed_areq *)t;
        int prio = feed__budget_prio(r->op);
        /* A priority the budget refused once in this scan is refused
         * again: only another's give frees a slot. */
        if ((refused & (1 << (prio + 1))) || !feed__budget_take(&a->core, prio)) {
            refused |= 1 << (prio + 1);
            continue;
        }
        r->budgeted = prio != FEED_BUDGET_NONE;
        task_first(a, t);
        a->sql_running = 1;
        feed__pg_task_begin(&a->pgtask, &a->pg, &a->core, &r->op->sql, r->op->err,
                            feed__now_ms());
        return 1;
    }
    if (!a->sql_timer)
        a->sql_timer = a->loop->timer_new(a->loop_data, sql_timeout, a);
    if (a->sql_timer)
        a->loop->timer_start(a->sql_timer, BUDGET_POLL_MS);
    return 0;
}

/* r's statement is over: its slot goes back, and r goes on. */
static void sql_done(feed_async *a, feed_areq *r)
{
    a->sql_running = 0;
    if (r->budgeted) {
        r->budgeted = 0;
        feed__budget_give();
    }
    if (a->sql_timer)
        a->loop->timer_stop(a->sql_timer);
    task_move(a, &r->task, FEED_AT_READY);
}

/* Run the statement as far as it goes, then wait for its socket. A request
 * whose statement is done goes back on the queue, and gives its slot back;
 * the next one's begins. */
static void sql_step(feed_async *a, int ready)
{
    feed_areq *r;

    if (!a->sql_running && !sql_next(a))
        return;
    while ((r = (feed_areq *)a->on[FEED_AT_SQL].head) != NULL && a->sql_running) {
        int64_t now = feed__now_ms();
        int want = feed__pg_task_run(&a->pgtask, ready, now);

        if (want == FEED_PGW_DONE) {
            r->op->sql_rc = a->pgtask.rc;
        } else if (sql_wait(a, want, now) == 0) {
            return;
        } else {                                /* no way to wait: give it up */
            feed__pg_task_abandon(&a->pgtask);
            r->op->sql_rc = feed__msg(r->op->err, FEED_ENOMEM, "out of memory watching PostgreSQL");
        }
        sql_done(a, r);
        sql_next(a);
        ready = 0;
    }
    if (a->sql_watch)
        a->loop->watch_set(a->sql_watch, 0);
}

static void sql_event(void *arg, int ready)
{
    feed_async *a = arg;

    sql_step(a, ready != 0);
    run_queue(a);
}

/* The most reads a handle's line for PostgreSQL holds: past it a read is
 * shed at once (FEED_EBUSY) rather than wait for its deadline in a line that
 * cannot be served in time. */
#define SQL_LINE_MAX 256

static void sql_enqueue(feed_async *a, feed_areq *r)
{
    if (r->op->reads && a->on[FEED_AT_SQL].n >= SQL_LINE_MAX) {
        a->core.stats.shed++;
        a->core.shed_ms = feed__now_ms();
        r->op->sql_rc = feed__msg(r->op->err, FEED_EBUSY, "shed: %zu reads already wait for"
                                  " PostgreSQL on this handle", a->on[FEED_AT_SQL].n);
        task_move(a, &r->task, FEED_AT_READY);
        return;
    }
    task_move(a, &r->task, FEED_AT_SQL);
    sql_step(a, 0);
}

/* ---- A node's set-up ---------------------------------------------------- */

/* The trip on the node, or the Sentinel's question, is over. A Sentinel's
 * connection goes (from inside its own reply callback: hiredis frees it
 * once that returns). */
static void setup_trip_ended(void *arg, feed_trip *t)
{
    feed_asetup *su = arg;

    (void)t;
    if (su->probe)
        feed__ra_close(su->probe, FEED_IO_FAILED, "done");
    feed__setup_tripped(&su->s, feed__now_ms());
    task_move(su->a, &su->task, FEED_AT_READY);
    run_queue(su->a);
}

/* From hiredis's connect callback, where the queue may not run (a request
 * could free the context under hiredis): the kick runs it. */
static void node_connected(void *arg, int ok, const char *why)
{
    feed_asetup *su = arg;

    feed__setup_connected(&su->s, ok, why, feed__now_ms());
    task_move(su->a, &su->task, FEED_AT_READY);
    kick(su->a);
}

/* The one place a set-up is freed: done, or the handle closes. Its trips
 * still out are forgotten. */
static void setup_free(feed_asetup *su)
{
    feed_async *a = su->a;
    feed_node *n = su->s.node;

    a->setups[su->s.index] = NULL;
    task_move(a, &su->task, FEED_AT_NONE);
    if (n->io)
        feed__ra_forget(n->io, &su->s.trip);
    if (su->probe) {
        feed__ra_forget(su->probe, &su->s.trip);
        feed__ra_close(su->probe, FEED_IO_FAILED, "closed");
    }
    feed__setup_end(&su->s);
    free(su);
}

/* The set-up is over: its waiters go on. A request that needs the fence,
 * and found a connection-only set-up under way, asks again: it starts its
 * own. */
static void setup_done(feed_asetup *su)
{
    feed_async *a = su->a;
    feed_task *t, *next;

    for (t = a->on[FEED_AT_SETUP].head; t; t = next) {
        feed_areq *w = (feed_areq *)t;
        next = t->next;
        if (w->x.setup_node != su->s.index)
            continue;
        if (!(w->x.setup_kind == FEED_SETUP_FULL && su->s.kind == FEED_SETUP_HELLO &&
              su->s.rc == FEED_OK))
            feed__xchg_setup_done(&w->x, su->s.rc, su->s.err);
        task_move(a, t, FEED_AT_READY);
    }
    setup_free(su);
    close_down_nodes(a);
}

/* The set-up as far as it goes: it waits for one connect or one trip at a
 * time (FEED_AT_LOOP); what fails at once is answered at once. */
static void setup_run(feed_asetup *su)
{
    feed_async *a = su->a;
    feed_node *n = su->s.node;
    uint32_t ms = a->core.cfg.redis_timeout_ms;
    feed_trip *t = &su->s.trip;

    for (;;) {
        int64_t now = feed__now_ms();
        char why[160];

        close_down_nodes(a);
        switch (feed__setup_next(&su->s, now)) {
        case FEED_S_PROBE:      /* a connection of its own; the question goes once it is up */
            if (feed__ra_connect(&su->s.probe, a->core.tls, a->loop, a->loop_data, ms, now, NULL,
                                 NULL, (void **)&su->probe, t->why, sizeof t->why)) {
                if (feed__ra_send(su->probe, t, now, setup_trip_ended, su) == 0)
                    break;
                feed__ra_close(su->probe, FEED_IO_FAILED, "done");
            } else {
                t->io = FEED_IO_FAILED;
            }
            feed__setup_tripped(&su->s, now);
            continue;
        case FEED_S_CONNECT:
            if (n->io)
                feed__ra_close(n->io, FEED_IO_FAILED, "connection dropped");
            if (feed__ra_connect(&n->addr, a->core.tls, a->loop, a->loop_data, ms, now,
                                 node_connected, su, &n->io, why, sizeof why))
                break;
            feed__setup_connected(&su->s, 0, why, now);
            continue;
        case FEED_S_TRIP:
            if (feed__ra_send(n->io, t, now, setup_trip_ended, su) == 0)
                break;
            feed__setup_tripped(&su->s, now);
            continue;
        case FEED_S_DONE:
            setup_done(su);
            return;
        }
        task_move(a, &su->task, FEED_AT_LOOP);
        return;
    }
}

/* A set-up of node for r's exchange, on the queue; NULL without memory. */
static feed_asetup *setup_new(feed_async *a, feed_areq *r, int node)
{
    feed_asetup *su;

    if ((size_t)node >= a->nsetups) {
        size_t n = a->core.topo.nnodes + 8;
        feed_asetup **bigger = realloc(a->setups, n * sizeof *bigger);
        if (!bigger)
            return NULL;
        memset(bigger + a->nsetups, 0, (n - a->nsetups) * sizeof *bigger);
        a->setups = bigger;
        a->nsetups = n;
    }
    if (!(su = calloc(1, sizeof *su)))
        return NULL;
    su->task.is_setup = 1;
    su->a = a;
    feed__setup_begin(&su->s, &a->core, node, r->x.setup_kind, r->x.setup_slot, feed__now_ms());
    a->setups[node] = su;
    task_move(a, &su->task, FEED_AT_READY);
    return su;
}

/* r's exchange needs node x.setup_node set up: join the set-up under way,
 * or start one. */
static void need_setup(feed_areq *r)
{
    feed_async *a = r->a;
    int node = r->x.setup_node;

    if (((size_t)node < a->nsetups && a->setups[node]) || setup_new(a, r, node)) {
        task_move(a, &r->task, FEED_AT_SETUP);
        return;
    }
    feed__xchg_setup_done(&r->x, FEED_ENOMEM, "out of memory for a connection");
    task_move(a, &r->task, FEED_AT_READY);
}

/* r's exchange needs the repairs first: start them unless they are under
 * way, and wait for them. 0: nothing to wait for (none for this store, or
 * no memory to run them). */
static int need_repairs(feed_areq *r)
{
    feed_async *a = r->a;

    if (!a->repair) {
        feed_op *op = feed__repair_op(&a->core);
        if (!op)
            return 0;
        if (!(a->repair = feed__async_request(a, 0, FEED_API_INTERNAL, NULL))) {
            op->free(op);
            return 0;
        }
        a->repair->op = op;
        task_move(a, &a->repair->task, FEED_AT_READY);
    }
    task_move(a, &r->task, FEED_AT_REPAIR);
    return 1;
}

/* ---- A request's exchange ----------------------------------------------- */

/* One of r's trips is over; after the last, the exchange reads them. */
static void trip_over(feed_areq *r)
{
    if (--r->trips_left == 0) {
        r->pass_over = 1;
        task_move(r->a, &r->task, FEED_AT_READY);
    }
}

static void trip_ended(void *arg, feed_trip *t)
{
    feed_areq *r = arg;

    (void)t;
    trip_over(r);
    run_queue(r->a);
}

/* Put the pass's trips on their nodes' connections. A trip refused at once
 * is over at once; one more count holds r until all are sent. */
static void send_pass(feed_areq *r, int64_t now)
{
    feed_async *a = r->a;

    task_move(a, &r->task, FEED_AT_REDIS);
    r->trips_left = r->x.ntrips + 1;
    for (size_t k = 0; k < r->x.ntrips; k++) {
        feed_trip *t = &r->x.trips[k].trip;
        if (feed__ra_send(a->core.topo.nodes[t->node]->io, t, now, trip_ended, r) != 0)
            trip_over(r);
    }
    trip_over(r);
}

/* The request as far as it goes now; it ends on the list of what it waits
 * for. */
static void req_run(feed_areq *r)
{
    feed_async *a = r->a;
    int64_t now = feed__now_ms();
    int finish;
    enum feed_want want;

    if (r->pass_over) {
        r->pass_over = 0;
        feed__xchg_pass_done(&r->x, now);
        close_down_nodes(a);
    }
    for (;;) {
        if (r->in_x) {
            /* A read past its deadline asks no store: its exchange ends
             * (FEED_EBUSY), unless it finishes work done. */
            finish = (r->x.b->flags & FEED_B_FINISH) != 0;
            switch (feed__xchg_next(&r->x, now)) {
            case FEED_X_REPAIR:
                if (!finish && shed_now(r, now, 0))
                    continue;
                if (need_repairs(r))
                    goto waits;
                continue;
            case FEED_X_SETUP:
                if (!finish && shed_now(r, now, 0))
                    continue;
                need_setup(r);
                goto waits;
            case FEED_X_PASS:
                if (!finish && shed_now(r, now, 0))
                    continue;
                send_pass(r, now);
                goto waits;
            case FEED_X_WAKE:
                if (wait_until(r, r->x.wake_at, now) == 0)
                    return;
                continue;           /* no timer: try again at once */
            case FEED_X_DONE:
                r->op->redis_rc = r->x.rc;
                feed__xchg_end(&r->x);
                r->in_x = 0;
                break;
            }
        }
        want = r->op->step(r->op, now);
        if (r->leads && want != FEED_W_REDIS
            && (want != FEED_W_WAKE || r->op->lease_of != r->leads->feed))
            lease_leave(r);
        /* A step may take long (rows parsed, an install built): what it
         * asks for next starts now, or a trip's time would begin in the
         * past and run out before it was even sent. */
        now = feed__now_ms();
        switch (want) {
        case FEED_W_REDIS:
            feed__xchg_begin(&r->x, &a->core, &r->op->batch, r->op->err, now);
            r->in_x = 1;
            continue;
        case FEED_W_SQL:
            if (feed__shed(r->op, now, "PostgreSQL")) {
                r->op->sql_rc = FEED_EBUSY;
                continue;
            }
            sql_enqueue(a, r);
            goto waits;
        case FEED_W_WAKE:
            if (r->op->lease_of && lease_follow(r))
                goto waits;
            if (wait_until(r, r->op->wake_at, now) == 0)
                return;
            continue;
        case FEED_W_DONE:
            finished(r);
            return;
        }
    }
waits:
    if (r->op->reads && r->op->deadline)
        arm_sweep(a);
}

void feed__async_start(feed_areq *r)
{
    if (r->op && r->op->reads && !r->op->deadline)
        r->op->deadline = feed__now_ms() + r->a->core.cfg.request_timeout_ms;
    task_move(r->a, &r->task, FEED_AT_READY);
    run_queue(r->a);
}

/* The zero timer: the queue, then the finished requests' callbacks in the
 * order they finished (a callback may start requests, or close the
 * handle). */
static void kick_fired(void *arg)
{
    feed_async *a = arg;
    feed_areq *r;

    a->flags &= ~FEED_A_KICKED;
    run_queue(a);
    while ((r = (feed_areq *)a->on[FEED_AT_DONE].head) != NULL)
        if (req_end(r, r->op->rc))
            return;             /* closed from the callback: gone */
}

/* ---- The handle ---------------------------------------------------------- */

static int open_refused(const char *why)
{
    feed__msg_keep_n(open_errmsg, sizeof open_errmsg, why);
    return FEED_EINVAL;
}

int feed__async_open(feed_async **out, const feed_config *cfg, const feed_loop *loop,
                     void *loop_data)
{
    size_t sizes[3] = { feed__page_op_size(), feed__newer_op_size(), feed__hook_op_size() };
    const char *bad;
    char why[FEED_ERRMSG];
    feed_async *a;
    feed_areq *r;
    int rc;

    open_errmsg[0] = '\0';
    if (out)
        *out = NULL;
    if (!loop_data)
        return open_refused(loop->null_loop);
    if (!out || !cfg)
        return open_refused("feed_async_open: out or cfg is NULL");
    if ((bad = feed__config_check(cfg, why, sizeof why)) != NULL) {
        snprintf(open_errmsg, sizeof open_errmsg, "feed_async_open: %s", bad);
        return FEED_EINVAL;
    }
    rc = FEED_ENOMEM;
    snprintf(why, sizeof why, "out of memory");
    if (!(a = calloc(1, sizeof *a)) || feed__core_init(&a->core, cfg) != FEED_OK ||
        feed__topo_init(&a->core) != FEED_OK ||
        !(a->kick = loop->timer_new(loop_data, kick_fired, a)) ||
        !(a->sweep = loop->timer_new(loop_data, sweep_fired, a)) ||
        (rc = feed__tls_open(&a->core.cfg, &a->core.tls, why, sizeof why)) != FEED_OK) {
        snprintf(open_errmsg, sizeof open_errmsg, "feed_async_open: %.480s", why);
        if (a && a->kick)
            loop->timer_free(a->kick);
        if (a && a->sweep)
            loop->timer_free(a->sweep);
        if (a)
            feed__core_free(&a->core);
        free(a);
        return rc;
    }
    a->loop = loop;
    a->loop_data = loop_data;
    a->sql_fd = -1;
    for (size_t i = 0; i < 3; i++)
        if (sizes[i] > a->spare_op_size)
            a->spare_op_size = sizes[i];
    a->spare = malloc(SPARE_MAX * sizeof *a->spare);    /* none: no recycling */
    /* Connect to both stores at once, on the loop, as feed_open does: the
     * first requests then find the connections made. Its outcome is
     * nobody's: a store that failed is tried again by the requests that
     * need it. */
    if ((r = feed__async_request(a, 0, FEED_API_INTERNAL, NULL)) != NULL) {
        if ((r->op = feed__connect_op(&a->core, &a->opened, &rc)) != NULL)
            feed__async_start(r);
        else
            feed__async_discard(r);
    }
    *out = a;
    return FEED_OK;
}

int feed__async_busy(const feed_async *a)
{
    return first_task(a) != NULL;
}

const char *feed_async_errmsg(const feed_async *a)
{
    return !a ? open_errmsg : a->cur_err ? a->cur_err : a->errmsg;
}

void feed_async_stats_get(const feed_async *a, feed_stats *out)
{
    if (out)
        *out = a ? a->core.stats : (feed_stats){ 0 };
}

/* Every task ends: a finished request gets its callback with its result,
 * any other FEED_ECANCELED (a request its callback starts, too); a set-up
 * is dropped. Inside a FEED_A_IN_CB frame. */
static void cancel_all(feed_async *a)
{
    feed_task *t;

    if (a->sql_running) {
        feed__pg_task_abandon(&a->pgtask);
        a->sql_running = 0;
    }
    while ((t = first_task(a)) != NULL) {
        feed_areq *r = (feed_areq *)t;
        if (t->is_setup)
            setup_free((feed_asetup *)t);
        else if (t->at == FEED_AT_DONE)
            req_end(r, r->op->rc);
        else
            req_end(r, feed__msg(r->err, FEED_ECANCELED, "the handle was closed"));
    }
}

static void handle_free(feed_async *a)
{
    a->flags |= FEED_A_IN_CB;
    cancel_all(a);      /* any started from a callback after the close */
    for (size_t i = 0; i < a->core.topo.nnodes; i++)
        if (a->core.topo.nodes[i]->io)
            feed__ra_close(a->core.topo.nodes[i]->io, FEED_IO_FAILED, "closed");
    if (a->sql_watch)
        a->loop->watch_free(a->sql_watch);
    if (a->sql_timer)
        a->loop->timer_free(a->sql_timer);
    feed__pg_free(&a->pg);
    while (a->nspare > 0)
        free(a->spare[--a->nspare]);
    free(a->spare);
    free(a->setups);
    a->loop->timer_free(a->kick);
    a->loop->timer_free(a->sweep);
    feed__tls_free(a->core.tls);
    feed__core_free(&a->core);
    free(a);
}

void feed_async_close(feed_async *a)
{
    int was;

    if (!a || (a->flags & FEED_A_CLOSED))
        return;
    was = a->flags;
    a->flags |= FEED_A_CLOSED | FEED_A_IN_CB;
    cancel_all(a);
    frame_leave(a, was);
}
