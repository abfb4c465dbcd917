/* sync.c -- the blocking driver: a request run to its end on the calling
 * thread.
 *
 * It does what the request's machine asks, in order: a Redis batch (the
 * exchange's passes, each node's set-up, the repairs first), a SQL
 * statement (waited for with poll(), within pg_timeout_ms), a wake-up (a
 * sleep). Every decision is the machine's; this file only carries them out,
 * so a blocking call makes exactly the round trips the async API makes for
 * the same request.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <time.h>

#include "drive/drive.h"

static void sleep_until(int64_t at)
{
    int64_t ms = at - feed__now_ms();
    struct timespec ts;

    if (ms <= 0)
        return;
    ts.tv_sec = (time_t)(ms / 1000);
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
}

/* A node the core dropped (DOWN) loses its connection here. */
static void close_if_down(feed_node *n)
{
    if (n->state == FEED_NODE_DOWN && n->io) {
        feed__rs_close(n->io);
        n->io = NULL;
    }
}

static void run_trip(redisContext *c, feed_trip *t)
{
    feed__rs_write(c, t);
    feed__rs_read(c, t);
}

/* A node's set-up, to its end. */
static int sync_setup(feed *f, int node, int kind, unsigned slot, char *why)
{
    feed_setup *s = malloc(sizeof *s);
    feed_node *n = f->core.topo.nodes[node];
    int64_t now = feed__now_ms();
    enum feed_swant w;
    int rc;

    if (!s)
        return feed__msg(why, FEED_ENOMEM, "out of memory setting a Redis connection up");
    feed__setup_begin(s, &f->core, node, kind, slot, now);
    while ((w = feed__setup_next(s, now)) != FEED_S_DONE) {
        redisContext *c;
        char msg[160];

        switch (w) {
        case FEED_S_PROBE:      /* a Sentinel: a short connection of its own */
            c = feed__rs_connect(&s->probe, f->core.tls, f->core.cfg.redis_timeout_ms,
                                 s->trip.why, sizeof s->trip.why);
            if (c) {
                run_trip(c, &s->trip);
                feed__rs_close(c);
            } else {
                s->trip.io = FEED_IO_FAILED;
            }
            feed__setup_tripped(s, feed__now_ms());
            break;
        case FEED_S_CONNECT:
            feed__rs_close(n->io);      /* NULL: nothing to close */
            n->io = feed__rs_connect(&n->addr, f->core.tls, f->core.cfg.redis_timeout_ms, msg,
                                     sizeof msg);
            feed__setup_connected(s, n->io != NULL, msg, feed__now_ms());
            break;
        case FEED_S_TRIP:
            run_trip(n->io, &s->trip);
            feed__setup_tripped(s, feed__now_ms());
            break;
        case FEED_S_DONE:       /* never: the while ends on it */
            break;
        }
        close_if_down(n);
        now = feed__now_ms();
    }
    close_if_down(n);
    rc = s->rc;
    if (rc != FEED_OK)
        feed__msg_keep(why, s->err);
    feed__setup_end(s);
    free(s);
    return rc;
}

/* One pass: every trip written out (the nodes work at once), then every
 * reply read, trip by trip. */
static void sync_pass(feed *f, feed_xtrip *trips, size_t n)
{
    for (size_t k = 0; k < n; k++)
        feed__rs_write(f->core.topo.nodes[trips[k].trip.node]->io, &trips[k].trip);
    for (size_t k = 0; k < n; k++)
        feed__rs_read(f->core.topo.nodes[trips[k].trip.node]->io, &trips[k].trip);
}

/* The batch to its end; *clock is the time it began, and then the time it
 * ended. Past op's deadline a read's batch ends at its next pass, set-up or
 * wait (FEED_EBUSY), unless it finishes work done (FEED_B_FINISH). */
static int sync_batch(feed *f, feed_op *op, int64_t *clock)
{
    const feed_batch *b = &op->batch;
    feed_xchg x;
    int64_t now = *clock;
    int rc, shed = !(b->flags & FEED_B_FINISH);

    feed__xchg_begin(&x, &f->core, b, op->err, now);
    for (;;) {
        switch (feed__xchg_next(&x, now)) {
        case FEED_X_REPAIR: {
            feed_op *r = feed__repair_op(&f->core);
            if (r) {
                feed__sync_run(f, r);
                r->free(r);
            }
            break;
        }
        case FEED_X_SETUP: {
            char why[FEED_ERRMSG];
            if (shed && feed__shed(op, now, "Redis")) {
                feed__xchg_end(&x);
                *clock = now;
                return FEED_EBUSY;
            }
            rc = sync_setup(f, x.setup_node, x.setup_kind, x.setup_slot, why);
            feed__xchg_setup_done(&x, rc, why);
            break;
        }
        case FEED_X_PASS:
            if (shed && feed__shed(op, now, "Redis")) {
                feed__xchg_end(&x);
                *clock = now;
                return FEED_EBUSY;
            }
            sync_pass(f, x.trips, x.ntrips);
            feed__xchg_pass_done(&x, feed__now_ms());
            for (size_t k = 0; k < f->core.topo.nnodes; k++)
                close_if_down(f->core.topo.nodes[k]);
            break;
        case FEED_X_WAKE:
            sleep_until(op->deadline && op->deadline < x.wake_at ? op->deadline : x.wake_at);
            break;
        case FEED_X_DONE:
            rc = x.rc;
            feed__xchg_end(&x);
            *clock = now;
            return rc;
        }
        now = feed__now_ms();
    }
}

/* A statement, waited for with poll() until its deadline. */
static int sync_sql(feed *f, feed_op *op)
{
    feed_pgtask t;
    int64_t now = feed__now_ms();
    int want;

    feed__pg_task_begin(&t, &f->pg, &f->core, &op->sql, op->err, now);
    want = feed__pg_task_run(&t, 0, now);
    while (want != FEED_PGW_DONE) {
        struct pollfd p = { feed__pg_task_fd(&t), want == FEED_PGW_READ ? POLLIN : POLLOUT, 0 };
        int64_t left = t.m.deadline - feed__now_ms();
        int ready = 0;
        if (left > 0 && p.fd >= 0) {
            int n = poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
            if (n < 0 && errno == EINTR)
                continue;
            ready = n != 0;     /* an error is for libpq to find */
        }
        want = feed__pg_task_run(&t, ready, feed__now_ms());
    }
    return t.rc;
}

/* A read's statement within the process's budget: waited for until the
 * read's deadline (then shed). */
static int sync_budgeted_sql(feed *f, feed_op *op)
{
    int prio = feed__budget_prio(op), rc;

    if (feed__shed(op, feed__now_ms(), "PostgreSQL"))
        return FEED_EBUSY;
    if (!feed__budget_wait(&f->core, prio, op->deadline ? op->deadline : INT64_MAX)) {
        feed__shed(op, op->deadline, "PostgreSQL (its budget for cold work was spent)");
        return FEED_EBUSY;
    }
    rc = sync_sql(f, op);
    if (prio != FEED_BUDGET_NONE)
        feed__budget_give();
    return rc;
}

int feed__sync_run(feed *f, feed_op *op)
{
    int64_t now = feed__now_ms();

    if (op->reads)
        op->deadline = now + f->core.cfg.request_timeout_ms;
    for (;;) {
        switch (op->step(op, now)) {
        case FEED_W_REDIS:
            op->redis_rc = sync_batch(f, op, &now);
            continue;       /* now is the batch's end */
        case FEED_W_SQL:
            op->sql_rc = sync_budgeted_sql(f, op);
            break;
        case FEED_W_WAKE:
            sleep_until(op->deadline && op->deadline < op->wake_at ? op->deadline
                                                                    : op->wake_at);
            break;
        case FEED_W_DONE:
            return op->rc;
        }
        now = feed__now_ms();
    }
}

void feed__sync_close(feed *f)
{
    for (size_t i = 0; i < f->core.topo.nnodes; i++) {
        feed_node *n = f->core.topo.nodes[i];
        feed__rs_close(n->io);
        n->io = NULL;
    }
    feed__pg_free(&f->pg);
}
