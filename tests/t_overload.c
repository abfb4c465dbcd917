/* t_overload.c -- a cold cache under load comes back by itself
 * (docs/operations.md, "Overload"), against the real servers:
 *
 *   late      replies late on a live connection: 2000 pages in flight on
 *             one async handle while another client keeps Redis busy in
 *             200 ms bursts (a Lua script spinning) with short gaps, so
 *             the replies come, in order, but the last ones far later than
 *             redis_timeout_ms (250) after they were sent: the connection
 *             stays, every page is served from the cache, nothing is held
 *             off or counted as an error
 *   deadline  request_timeout_ms 300: pages queued behind a frozen
 *             PostgreSQL (async) and a page waiting on another's lease
 *             (blocking) fail fast with FEED_EBUSY (kind retry) at their
 *             deadline, not at pg_timeout_ms or lease_wait_ms, counted in
 *             shed and deadlines_missed; the statement running is bounded
 *             by pg_timeout_ms
 *   budget    pg_budget 3: 8 blocking handles on 8 threads, then 4 async
 *             handles with 40 pages, all reading cold feeds while the
 *             table is locked: at most 3 statements in flight at once,
 *             the budget reached, every page served once the lock goes
 *   herd      20 handles on 20 threads miss the same cold feed while its
 *             one rebuild takes 400 ms: one statement in all, every other
 *             reader served by that rebuild's copy (lease_waits_served)
 *   joined    40 pages of one async handle wait on another handle's
 *             rebuild of their feed: one of them asks Redis, the others
 *             wait for it (lease_waits_joined), and all are served by the
 *             copy; waiters past their deadline are shed, and a close
 *             cancels them
 *
 * The async parts run on libevent directly. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "internal.h"    /* feed__budget_most */
#include "tap.h"
#include "testutil.h"
#include "fault.h"
#include "feedcache_libevent.h"

static PGconn *pg;
static redisContext *rds;
static struct event_base *base;

typedef struct got {
    int done, rc, source;
    char why[160];              /* feed_async_errmsg of a failed page */
} got;

static void on_page(feed_async *a, int rc, feed_result *page, void *arg)
{
    got *g = arg;

    g->done = 1;
    g->rc = rc;
    g->source = page ? (int)page->source : 0;
    if (rc != FEED_OK)
        snprintf(g->why, sizeof g->why, "%s", feed_async_errmsg(a));
    feed_result_free(page);
}

/* Another client: Redis busy in bursts of 200 ms, 10 ms apart, six times. */
static void *busy_bursts(void *arg)
{
    redisContext *r = tu_redis();

    (void)arg;
    for (int i = 0; i < 6; i++) {
        freeReplyObject(tu_redis_cmd(r, "EVAL %s 0",
                                     "local t = redis.call('TIME') local s = t[1] * 1e6 + t[2]"
                                     " repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] - s"
                                     " > 200000 return 1"));
        fault_sleep_ms(10);
    }
    redisFree(r);
    return NULL;
}

static void run_until(const got *g, int n)
{
    for (int spins = 0; spins < 200000; spins++) {
        int left = 0;
        for (int i = 0; i < n; i++)
            left += !g[i].done;
        if (!left)
            return;
        event_base_loop(base, EVLOOP_ONCE);
    }
}

/* ---- late replies on a live connection ---- */

#define NLATE 2000

static void late_replies(void)
{
    static got g[NLATE];
    feed_config cfg;
    feed_async *a = NULL;
    feed_stats s0, s1;
    pthread_t busy;
    int cached = 0;

    tu_insert_rows(pg, 91, 40, tu_score_by10, tu_id_seq);
    tu_config(&cfg);
    cfg.redis_timeout_ms = 250;
    if (feed_async_open_libevent(&a, &cfg, base) != FEED_OK) {
        tap_bail("feed_async_open_libevent");
        exit(255);
    }
    memset(g, 0, sizeof g);
    feed_async_page(a, 91, FEED_FIRST, 0, 30, on_page, &g[0]);    /* the copy, cached */
    run_until(g, 1);
    feed_async_stats_get(a, &s0);
    memset(g, 0, sizeof g);
    pthread_create(&busy, NULL, busy_bursts, NULL);
    fault_sleep_ms(20);                 /* the first burst is on */
    for (int i = 0; i < NLATE; i++)
        feed_async_page(a, 91, FEED_FIRST, 0, 30, on_page, &g[i]);
    run_until(g, NLATE);
    pthread_join(busy, NULL);
    feed_async_stats_get(a, &s1);
    for (int i = 0; i < NLATE; i++)
        cached += g[i].rc == FEED_OK && g[i].source == FEED_SOURCE_CACHE;
    is_int(cached, NLATE, "%d pages in flight while Redis is busy in 200 ms bursts"
           " (redis_timeout_ms 250): every one from the cache", NLATE);
    ok(s1.redis_errors == s0.redis_errors && s1.redis_connects == s0.redis_connects,
       "  the connection stayed: no Redis error, no reconnect (errors +%llu, connects +%llu)",
       (unsigned long long)(s1.redis_errors - s0.redis_errors),
       (unsigned long long)(s1.redis_connects - s0.redis_connects));
    is_int(feed_async_retry_after_ms(a), 0, "  and Redis is not held off");
    feed_async_close(a);
}

/* ---- deadlines ---- */

typedef struct timed_got {
    got    g;
    double at;
} timed_got;

static double t0_ms;

static void on_timed(feed_async *a, int rc, feed_result *page, void *arg)
{
    timed_got *t = arg;

    on_page(a, rc, page, &t->g);
    t->at = fault_now_ms() - t0_ms;
}

#define NQUEUED 50

static void deadlines(void)
{
    static timed_got q[NQUEUED];
    feed_config cfg;
    feed_async *a = NULL;
    feed_stats s0, s1;
    feed_result res;
    feed *f;
    int busy = 0, late = 0, rc;
    double took;

    tu_config(&cfg);
    cfg.request_timeout_ms = 300;
    cfg.pg_timeout_ms = 2000;
    if (feed_async_open_libevent(&a, &cfg, base) != FEED_OK) {
        tap_bail("feed_async_open_libevent");
        exit(255);
    }
    memset(q, 0, sizeof q);
    feed_async_page(a, 92, FEED_FIRST, 0, 5, on_timed, &q[0]);   /* connections made */
    for (int spins = 0; spins < 200000 && !q[0].g.done; spins++)
        event_base_loop(base, EVLOOP_ONCE);
    feed_async_stats_get(a, &s0);
    memset(q, 0, sizeof q);
    fault_inject("pg-freeze");
    t0_ms = fault_now_ms();
    for (int i = 0; i < NQUEUED; i++)   /* cold feeds: each needs a statement */
        feed_async_page(a, 9300 + i, FEED_FIRST, 0, 5, on_timed, &q[i]);
    for (int spins = 0; spins < 2000000; spins++) {
        int left = 0;
        for (int i = 0; i < NQUEUED; i++)
            left += !q[i].g.done;
        if (!left)
            break;
        event_base_loop(base, EVLOOP_ONCE);
    }
    fault_inject("pg-thaw");
    feed_async_stats_get(a, &s1);
    for (int i = 0; i < NQUEUED; i++) {
        busy += q[i].g.rc == FEED_EBUSY && feed_async_error_kind(a, q[i].g.rc) == FEED_KIND_RETRY;
        late += q[i].g.rc == FEED_EBUSY && q[i].at > 300 + 500;
    }
    ok(busy >= NQUEUED - 1, "async, PostgreSQL frozen, %d pages in line for it: %d shed with"
       " FEED_EBUSY (kind retry); at most the one whose statement ran waits pg_timeout_ms",
       NQUEUED, busy);
    is_int(late, 0, "  each shed within its deadline (300 ms) and the sweep's period");
    ok(s1.shed - s0.shed >= (uint64_t)busy && s1.deadlines_missed - s0.deadlines_missed >=
       (uint64_t)busy, "  counted in shed and deadlines_missed (+%llu, +%llu)",
       (unsigned long long)(s1.shed - s0.shed),
       (unsigned long long)(s1.deadlines_missed - s0.deadlines_missed));
    feed_async_close(a);

    /* Blocking: a wait on another's lease ends at the deadline. */
    tu_insert_rows(pg, 94, 10, tu_score_by10, tu_id_seq);
    cfg.lease_wait_ms = 3000;
    f = tu_open_settled(&cfg);
    tu_settle_feed(f, 94);
    tu_plant_lease(rds, tu_key(94, ":lease"), "another-handle");
    t0_ms = fault_now_ms();
    rc = feed_page(f, 94, FEED_FIRST, 0, 5, &res);
    took = fault_now_ms() - t0_ms;
    ok(rc == FEED_EBUSY && feed_error_kind(f, rc) == FEED_KIND_RETRY &&
       strstr(feed_errmsg(f), "deadline"),
       "blocking, a page waiting on another's lease (lease_wait_ms 3000): FEED_EBUSY, retry (%s)",
       feed_errmsg(f));
    ok(took >= 290 && took < 300 + fault_slack_ms(), "  at its deadline, 300 ms (%.0f ms)", took);
    if (rc == FEED_OK)
        feed_result_free(&res);
    feed_close(f);
}

/* ---- the budget ---- */

#define NTHREADS 8

typedef struct reader_arg {
    feed   *f;              /* opened beforehand: its set-up is not what is counted */
    int64_t uid;
    int     rc;
} reader_arg;

static void *read_cold(void *arg)
{
    reader_arg *r = arg;
    feed_result res;

    r->rc = feed_page(r->f, r->uid, FEED_FIRST, 0, 5, &res);
    if (r->rc == FEED_OK)
        feed_result_free(&res);
    return NULL;
}

static void budget(void)
{
    static got g[40];
    feed_config cfg;
    pthread_t th[NTHREADS];
    reader_arg ra[NTHREADS];
    feed_async *a[4];
    PGconn *locker = tu_pg();
    int good = 1;
    unsigned most;

    for (int i = 0; i < NTHREADS + 40; i++)
        tu_insert_rows(pg, 9500 + i, 5, tu_score_by10, tu_id_seq);
    tu_config(&cfg);
    cfg.pg_budget = 3;
    /* Statements wait on the lock while the budget fills (20 s at most,
     * below): neither that wait nor the queue behind it is what is tested. */
    cfg.request_timeout_ms = 60000;
    cfg.pg_timeout_ms = 60000;      /* statements wait on the lock: not a dead server */
    for (int i = 0; i < NTHREADS; i++)
        ra[i] = (reader_arg){ tu_open(&cfg), 9500 + i, -99 };
    feed__budget_most(1);
    tu_sql(locker, "BEGIN");
    tu_sql(locker, "LOCK TABLE feed_entry IN ACCESS EXCLUSIVE MODE");
    for (int i = 0; i < NTHREADS; i++)
        pthread_create(&th[i], NULL, read_cold, &ra[i]);
    /* Every thread at its statement, or waiting for a slot: until the budget
     * is reached (20 s at most: a loaded machine), then a while more. */
    for (double end = fault_now_ms() + 20000; fault_now_ms() < end && feed__budget_most(0) < 3;)
        fault_sleep_ms(5);
    fault_sleep_ms(100);
    most = feed__budget_most(0);
    tu_sql(locker, "COMMIT");
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(th[i], NULL);
        good &= ra[i].rc == FEED_OK;
        feed_close(ra[i].f);
    }
    ok(most == 3 && feed__budget_most(0) == 3, "pg_budget 3, %d blocking handles on cold feeds,"
       " the table locked: at most 3 statements in flight (%u, then %u)", NTHREADS, most,
       feed__budget_most(0));
    ok(good, "  every page served once the lock went");

    feed__budget_most(1);
    for (int k = 0; k < 4; k++)
        if (feed_async_open_libevent(&a[k], &cfg, base) != FEED_OK) {
            tap_bail("feed_async_open_libevent");
            exit(255);
        }
    memset(g, 0, sizeof g);
    /* Each handle's PostgreSQL connection made and set up first, each by a
     * cold feed of its own (one feed for all would send three of them to
     * the first's rebuild, never to PostgreSQL): a set-up left for the
     * locked table's time waits on the lock outside the budget. */
    for (int k = 0; k < 4; k++) {
        feed_async_page(a[k], 9400 + k, FEED_FIRST, 0, 5, on_page, &g[k]);
        run_until(&g[k], 1);
    }
    feed__budget_most(1);
    memset(g, 0, sizeof g);
    tu_sql(locker, "BEGIN");
    tu_sql(locker, "LOCK TABLE feed_entry IN ACCESS EXCLUSIVE MODE");
    for (int i = 0; i < 40; i++)
        feed_async_page(a[i % 4], 9500 + NTHREADS + i, FEED_FIRST, 0, 5, on_page, &g[i]);
    /* The loop turns, the lock held, until the budget is reached (20 s at
     * most: a loaded machine): 4 handles could run 4 statements at once. */
    for (double end = fault_now_ms() + 20000; fault_now_ms() < end && feed__budget_most(0) < 3;)
        event_base_loop(base, EVLOOP_NONBLOCK), fault_sleep_ms(1);
    for (int spins = 0; spins < 100; spins++)  /* and a while more: it must not go past */
        event_base_loop(base, EVLOOP_NONBLOCK), fault_sleep_ms(1);
    most = feed__budget_most(0);
    tu_sql(locker, "COMMIT");
    run_until(g, 40);
    good = 1;
    for (int i = 0; i < 40; i++)
        if (g[i].rc != FEED_OK) {
            tap_diag("page %d: %s (%s)", i, feed_strerror(g[i].rc), g[i].why);
            good = 0;
        }
    ok(most <= 3 && feed__budget_most(0) <= 3 && most >= 3, "  4 async handles, 40 cold pages:"
       " at most 3 in flight (%u, then %u)", most, feed__budget_most(0));
    ok(good, "  every page served once the lock went");
    for (int k = 0; k < 4; k++)
        feed_async_close(a[k]);
    PQfinish(locker);
}

/* ---- readers that wait for a rebuild under way ---- */

#define NHERD 20

static void slow_install(feed *rebuilder, int64_t uid, void *arg)
{
    (void)rebuilder;
    (void)uid;
    (void)arg;
    fault_sleep_ms(400);
}

typedef struct herd_arg {
    feed            *f;
    pthread_barrier_t *go;
    int              rc, source;
    feed_stats       d;
} herd_arg;

static void *read_herd(void *arg)
{
    herd_arg *h = arg;
    feed_stats s0, s1;
    feed_result res;

    feed_stats_get(h->f, &s0);
    pthread_barrier_wait(h->go);
    h->rc = feed_page(h->f, 9600, FEED_FIRST, 0, 5, &res);
    h->source = h->rc == FEED_OK ? (int)res.source : 0;
    if (h->rc == FEED_OK)
        feed_result_free(&res);
    feed_stats_get(h->f, &s1);
    h->d = tu_stats_since(h->f, &s0);
    (void)s1;
    return NULL;
}

static void herd(void)
{
    feed_config cfg;
    pthread_t th[NHERD];
    herd_arg ha[NHERD];
    pthread_barrier_t go;
    unsigned long long sql = 0, rebuilds = 0, served = 0;
    int good = 1, from_cache = 0;

    tu_insert_rows(pg, 9600, 30, tu_score_by10, tu_id_seq);
    tu_config(&cfg);
    pthread_barrier_init(&go, NULL, NHERD);
    for (int i = 0; i < NHERD; i++) {
        ha[i] = (herd_arg){ tu_open(&cfg), &go, -99, 0, { 0 } };
        ha[i].f->core.test_before_install = slow_install;   /* whoever rebuilds: slowly */
    }
    for (int i = 0; i < NHERD; i++)
        pthread_create(&th[i], NULL, read_herd, &ha[i]);
    for (int i = 0; i < NHERD; i++) {
        pthread_join(th[i], NULL);
        good &= ha[i].rc == FEED_OK;
        from_cache += ha[i].source == FEED_SOURCE_CACHE;
        sql += ha[i].d.sql_queries;
        rebuilds += ha[i].d.rebuilds;
        served += ha[i].d.lease_waits_served;
        feed_close(ha[i].f);
    }
    pthread_barrier_destroy(&go);
    ok(good && rebuilds == 1 && sql == 1, "%d handles miss one cold feed while its rebuild takes"
       " 400 ms: one rebuild, one statement in all (%llu, %llu)", NHERD, rebuilds, sql);
    ok(from_cache == NHERD - 1 && served == NHERD - 1, "  every other reader waited and was"
       " served by its copy (%d from the cache, lease_waits_served %llu)", from_cache, served);
}

/* ---- an async handle's readers of one feed wait as one ---- */

#define NJOIN 40

static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t  hold_cond = PTHREAD_COND_INITIALIZER;
static int             hold_state;  /* 1: the rebuild waits to install; 2: let it */

static void hold_set(int state)
{
    pthread_mutex_lock(&hold_lock);
    hold_state = state;
    pthread_cond_broadcast(&hold_cond);
    pthread_mutex_unlock(&hold_lock);
}

/* Wait (30 s at most) until hold_state is state: 1 when it is. */
static int hold_until(int state)
{
    struct timespec until;
    int rc = 0;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 30;
    pthread_mutex_lock(&hold_lock);
    while (hold_state != state && rc == 0)
        rc = pthread_cond_timedwait(&hold_cond, &hold_lock, &until);
    rc = hold_state == state;
    pthread_mutex_unlock(&hold_lock);
    return rc;
}

/* The rebuilder's rows are read: it holds the lease until told. */
static void held_install(feed *rebuilder, int64_t uid, void *arg)
{
    (void)rebuilder;
    (void)uid;
    (void)arg;
    hold_set(1);
    hold_until(2);
}

static void *rebuild_held(void *arg)
{
    feed_result res;

    if (feed_page(arg, 9700, FEED_FIRST, 0, 5, &res) == FEED_OK)
        feed_result_free(&res);
    return NULL;
}

/* Run the loop until a's lease_waits passed n, 30 s at most. */
static feed_stats run_until_waits(feed_async *a, uint64_t n)
{
    feed_stats s;
    double until = fault_now_ms() + 30000;
    struct timeval tick = { 0, 10000 };

    for (;;) {
        feed_async_stats_get(a, &s);
        if (s.lease_waits >= n || fault_now_ms() > until)
            return s;
        event_base_loopexit(base, &tick);
        event_base_dispatch(base);
    }
}

static feed_async *open_async(const feed_config *cfg)
{
    feed_async *a = NULL;

    if (feed_async_open_libevent(&a, cfg, base) != FEED_OK) {
        tap_bail("feed_async_open_libevent");
        exit(255);
    }
    return a;
}

static void joined(void)
{
    static got g[NJOIN], late[10], closed[5];
    struct timeval wait_300ms = { 0, 300000 };
    feed_config cfg, hurried;
    feed_async *a, *b, *c;
    feed_stats s0, s1, s2, s3, b0, b1;
    pthread_t th;
    feed *f;
    int cached = 0, busy = 0, cancelled = 0;

    tu_insert_rows(pg, 9700, 30, tu_score_by10, tu_id_seq);
    tu_config(&cfg);
    cfg.lease_ms = 60000;               /* nobody takes the held lease over */
    cfg.lease_wait_ms = 60000;
    cfg.request_timeout_ms = 60000;
    hurried = cfg;
    hurried.request_timeout_ms = 300;
    f = tu_open(&cfg);
    f->core.test_before_install = held_install;
    hold_set(0);
    pthread_create(&th, NULL, rebuild_held, f);
    if (!hold_until(1))
        tap_bail("the rebuild of feed 9700 never read its rows");

    a = open_async(&cfg);
    memset(g, 0, sizeof g);
    feed_async_page(a, 9701, FEED_FIRST, 0, 5, on_page, &g[0]);   /* connections made */
    run_until(g, 1);
    feed_async_stats_get(a, &s0);
    memset(g, 0, sizeof g);
    for (int i = 0; i < NJOIN; i++)
        feed_async_page(a, 9700, FEED_FIRST, 0, 5, on_page, &g[i]);
    s1 = run_until_waits(a, s0.lease_waits + NJOIN);
    is_int((long long)(s1.lease_waits - s0.lease_waits), NJOIN,
           "%d async pages of a feed another handle rebuilds: each waits on the lease", NJOIN);
    is_int((long long)(s1.lease_waits_joined - s0.lease_waits_joined), NJOIN - 1,
           "  all but one joined the one that asks (lease_waits_joined)");
    event_base_loopexit(base, &wait_300ms);
    event_base_dispatch(base);
    feed_async_stats_get(a, &s2);
    ok(s2.redis_calls - s1.redis_calls <= NJOIN, "  while they wait 300 ms, the handle asks Redis"
       " %llu times, not once per waiter each time (at most %d)",
       (unsigned long long)(s2.redis_calls - s1.redis_calls), NJOIN);

    /* Waiters past their deadline are shed, followers too (the sweep). */
    b = open_async(&hurried);
    memset(late, 0, sizeof late);
    feed_async_page(b, 9701, FEED_FIRST, 0, 5, on_page, &late[0]);
    run_until(late, 1);
    feed_async_stats_get(b, &b0);
    memset(late, 0, sizeof late);
    for (int i = 0; i < 10; i++)
        feed_async_page(b, 9700, FEED_FIRST, 0, 5, on_page, &late[i]);
    run_until(late, 10);
    feed_async_stats_get(b, &b1);
    for (int i = 0; i < 10; i++)
        busy += late[i].done && late[i].rc == FEED_EBUSY
                && feed_async_error_kind(b, late[i].rc) == FEED_KIND_RETRY;
    ok(busy == 10 && b1.deadlines_missed - b0.deadlines_missed == 10
       && b1.lease_waits_joined - b0.lease_waits_joined == 9, "  request_timeout_ms 300: 10 more"
       " waiters (9 joined: %llu) all shed with FEED_EBUSY, kind retry (%d; deadlines_missed"
       " +%llu)", (unsigned long long)(b1.lease_waits_joined - b0.lease_waits_joined), busy,
       (unsigned long long)(b1.deadlines_missed - b0.deadlines_missed));
    feed_async_close(b);

    /* A close cancels the waiters, leader and followers alike. */
    c = open_async(&cfg);
    memset(closed, 0, sizeof closed);
    for (int i = 0; i < 5; i++)
        feed_async_page(c, 9700, FEED_FIRST, 0, 5, on_page, &closed[i]);
    run_until_waits(c, 5);
    feed_async_close(c);
    for (int i = 0; i < 5; i++)
        cancelled += closed[i].done && closed[i].rc == FEED_ECANCELED;
    is_int(cancelled, 5, "  a close while 5 wait (one asking, 4 joined): each cancelled");

    hold_set(2);                        /* the rebuild installs */
    pthread_join(th, NULL);
    run_until(g, NJOIN);
    feed_async_stats_get(a, &s3);
    for (int i = 0; i < NJOIN; i++)
        cached += g[i].done && g[i].rc == FEED_OK && g[i].source == FEED_SOURCE_CACHE;
    is_int(cached, NJOIN, "  the rebuild installed: all %d served from its copy", NJOIN);
    is_int((long long)(s3.lease_waits_served - s0.lease_waits_served), NJOIN,
           "  each counted in lease_waits_served");
    is_int((long long)(s3.sql_queries - s0.sql_queries), 0, "  and none read SQL");
    feed_async_close(a);
    feed_close(f);
}

int main(void)
{
    pg = tu_begin(&rds);
    fault_setup();
    if (!(base = event_base_new())) {
        tap_bail("event_base_new");
        return 255;
    }
    late_replies();
    deadlines();
    budget();
    herd();
    joined();
    event_base_free(base);
    PQfinish(pg);
    redisFree(rds);
    return tap_done();
}
