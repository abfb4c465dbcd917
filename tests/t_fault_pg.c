/* t_fault_pg.c -- the PostgreSQL half of the failure model (docs/ha.md),
 * against the real test server stopped (immediate shutdown) and started
 * again under running handles:
 *
 *   - during the outage, pages the cache holds keep coming from it, equal to
 *     SQL as it was; a page that needs SQL (past a partial cache, or a cold
 *     feed) returns FEED_EPG with a message; nothing hangs; reconnects are
 *     rate-limited (feed_stats.pg_connects); both stores down: FEED_EUNAVAILABLE;
 *   - afterwards the handle reconnects by itself and prepares its statements
 *     again: the same calls answer, equal to SQL;
 *   - PostgreSQL restarted between two calls: the next call reconnects at
 *     once and succeeds; restarted in the middle of a walk: the walk resumes
 *     from its cursor;
 *   - PostgreSQL frozen (SIGSTOP to all its processes: connects and
 *     statements get no answer) under a running walk: cached pages keep
 *     coming from the cache, on this handle and on another thread's; each
 *     page that needs SQL fails with FEED_EPG within pg_timeout_ms (plus
 *     slack); connect attempts are rate-limited; after SIGCONT every walk
 *     equals SQL;
 *   - a statement stuck on a lock: FEED_EPG within pg_timeout_ms, and the
 *     statement is cancelled on the server (its backend stops waiting). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "testutil.h"
#include "fault.h"

#define SMALL   600      /* 30 rows: cached whole (end marker) */
#define BIG     601      /* 200 rows: the cache holds the top MAX_LEN */
#define COLD    602      /* 20 rows: never read before the outage */
#define MAX_LEN 50
#define LIMIT   10
#define RETRY   400
#define PG_TIMEOUT 300   /* pg_timeout_ms */

static PGconn *pg;

typedef struct snapshot {
    feed_item *items;
    size_t     n;
} snapshot;

static snapshot snap[3];   /* SMALL, BIG, COLD as SQL has them */

static snapshot *snap_of(int64_t uid) { return &snap[uid - SMALL]; }

static void take_snapshots(void)
{
    for (int i = 0; i < 3; i++) {
        free(snap[i].items);
        snap[i].n = tu_sql_feed(pg, SMALL + i, &snap[i].items);
    }
}

/* The settings of every handle this test opens. */
static void settings(feed_config *cfg)
{
    cfg->max_len = MAX_LEN;
    cfg->retry_ms = RETRY;
    cfg->lease_ms = 600;          /* a rebuild that failed holds its lease this long */
    cfg->lease_wait_ms = 50;
    cfg->pg_timeout_ms = PG_TIMEOUT;
}

/* Is res the page of uid's snapshot starting at index at? */
static int matches(int64_t uid, const feed_result *res, size_t at)
{
    snapshot *s = snap_of(uid);
    size_t expect = s->n - at < LIMIT ? s->n - at : LIMIT;

    if (res->count != expect || res->has_more != (at + expect < s->n))
        return 0;
    for (size_t i = 0; i < expect; i++)
        if (res->items[i].score != s->items[at + i].score || res->items[i].id != s->items[at + i].id)
            return 0;
    return 1;
}

/* Walk uid page by page; stop at the first error. Returns the number of
 * pages that came back, each checked against the snapshot; *rc is the first
 * error (FEED_OK if none) and *wrong counts pages unequal to the snapshot. */
typedef struct walk {
    int    pages, rc, wrong, from_cache, from_db;
    size_t at;           /* items seen */
    int64_t score, id;   /* where to continue */
    double worst_ms;
} walk;

static void walk_on(feed *f, int64_t uid, walk *w, int max_pages)
{
    for (int n = 0; n < max_pages; n++) {
        feed_result res;
        double t0 = fault_now_ms(), ms;

        w->rc = feed_page(f, uid, w->score, w->id, LIMIT, &res);
        ms = fault_now_ms() - t0;
        if (ms > w->worst_ms)
            w->worst_ms = ms;
        if (w->rc != FEED_OK)
            return;
        w->pages++;
        if (!matches(uid, &res, w->at))
            w->wrong++;
        w->from_cache += res.source == FEED_SOURCE_CACHE;
        w->from_db += res.source == FEED_SOURCE_DB;
        w->at += res.count;
        if (!res.has_more) {
            w->score = INT64_MIN;    /* done */
            feed_result_free(&res);
            return;
        }
        w->score = res.next_score;
        w->id = res.next_id;
        feed_result_free(&res);
    }
}

static walk walk_start(void)
{
    walk w;

    memset(&w, 0, sizeof w);
    w.score = FEED_FIRST;
    return w;
}

static int walk_done(const walk *w, int64_t uid)
{
    return w->rc == FEED_OK && w->score == INT64_MIN && w->wrong == 0 && w->at == snap_of(uid)->n;
}

/* For 6 x retry_ms, every 5 ms: the page at w's cursor, which needs SQL and
 * must fail with FEED_EPG; with cached_too, a walk of the wholly cached
 * feed in between, which must come from the cache, equal to SQL. */
typedef struct asking {
    int    calls, bad, walks, walks_bad;
    double worst_ms, elapsed_ms;
} asking;

static asking keep_asking(feed *f, const walk *w, int cached_too)
{
    asking a;
    double t0 = fault_now_ms();

    memset(&a, 0, sizeof a);
    while (fault_now_ms() - t0 < 6 * RETRY) {
        feed_result res;
        double c0 = fault_now_ms(), ms;
        int rc = feed_page(f, BIG, w->score, w->id, LIMIT, &res);
        ms = fault_now_ms() - c0;
        a.worst_ms = ms > a.worst_ms ? ms : a.worst_ms;
        a.bad += rc != FEED_EPG;
        feed_result_free(&res);
        a.calls++;
        if (cached_too) {
            walk c = walk_start();
            walk_on(f, SMALL, &c, 1000);
            a.walks++;
            a.walks_bad += !walk_done(&c, SMALL) || c.from_cache != c.pages;
        }
        fault_sleep_ms(5);
    }
    a.elapsed_ms = fault_now_ms() - t0;
    return a;
}

static void reconnect_test_pg(void)
{
    PQfinish(pg);
    pg = tu_pg();
}

static void outage(void)
{
    feed *f = tu_open_with(settings);
    redisContext *r = tu_redis();
    feed_stats s0, s1;
    feed_result res;
    walk w;
    asking a;
    int rc;
    unsigned long long connects;

    /* Warm: SMALL wholly cached, BIG's top MAX_LEN cached. */
    for (int64_t uid = SMALL; uid <= BIG; uid++) {
        w = walk_start();
        walk_on(f, uid, &w, 1000);
        ok(walk_done(&w, uid), "warm feed %lld: the walk equals SQL", (long long)uid);
    }

    fault_inject("pg-stop");
    w = walk_start();
    walk_on(f, SMALL, &w, 1000);
    ok(walk_done(&w, SMALL) && w.from_cache == w.pages,
       "PostgreSQL down: a cached feed still walks from the cache, equal to SQL (%d pages)",
       w.pages);

    w = walk_start();
    walk_on(f, BIG, &w, 1000);
    /* The page that holds the last cached item also needs the item after it
     * (to know has_more), which the cache does not have: it needs SQL. */
    ok(w.rc == FEED_EPG && w.pages == (MAX_LEN - 1) / LIMIT && w.wrong == 0 &&
       w.from_cache == w.pages,
       "  a partly cached feed: its %d whole cached pages come from the cache, equal to SQL",
       (MAX_LEN - 1) / LIMIT);
    is_int(w.rc, FEED_EPG, "  the page past the cache needs SQL: FEED_EPG");
    ok(strstr(feed_errmsg(f), "PostgreSQL") != NULL, "  with a message: %s", feed_errmsg(f));
    ok(w.worst_ms < fault_slack_ms(), "  no call hung (slowest %.1f ms)", w.worst_ms);

    rc = feed_page(f, COLD, FEED_FIRST, 0, LIMIT, &res);
    is_int(rc, FEED_EPG, "  a cold feed (a miss, whose rebuild needs SQL): FEED_EPG");
    ok(strstr(feed_errmsg(f), "PostgreSQL") != NULL, "  with a message: %s", feed_errmsg(f));
    feed_result_free(&res);
    /* A rebuild whose read failed gives its lease back at once (lease_ms
     * is 600 here): the next reader need not wait it out. */
    is_int((int)tu_redis_int(r, "EXISTS %s", tu_key(COLD, ":lease")), 0,
           "  its lease is given back at once");
    is_int(feed_reload(f, COLD), FEED_EPG, "  a reload of it (its read needs SQL): FEED_EPG");
    ok(strstr(feed_errmsg(f), "PostgreSQL") != NULL, "  with a message: %s", feed_errmsg(f));
    is_int((int)tu_redis_int(r, "EXISTS %s", tu_key(COLD, ":lease")), 0,
           "  its lease is given back too");

    /* Keep calling: the handle must not hammer the dead server. */
    feed_stats_get(f, &s0);
    a = keep_asking(f, &w, 0);
    feed_stats_get(f, &s1);
    connects = (unsigned long long)(s1.pg_connects - s0.pg_connects);
    ok(a.bad == 0, "%d deep pages during the outage: each FEED_EPG", a.calls);
    ok(a.worst_ms < fault_slack_ms(), "  none hung (slowest %.1f ms)", a.worst_ms);
    ok(connects >= 1 && (double)connects <= a.elapsed_ms / RETRY + 2,
       "  reconnects rate-limited: %llu attempts for %d calls in %.0f ms (retry_ms %d)",
       connects, a.calls, a.elapsed_ms, RETRY);

    /* Both stores down (the single Redis: fault_inject stops no cluster node). */
    if (!tu_cluster()) {
        fault_inject("redis-stop");
        rc = feed_page(f, SMALL, FEED_FIRST, 0, LIMIT, &res);
        is_int(rc, FEED_EUNAVAILABLE, "Redis down too: FEED_EUNAVAILABLE");
        ok(strstr(feed_errmsg(f), "Redis") && strstr(feed_errmsg(f), "PostgreSQL"),
           "  the message names both: %s", feed_errmsg(f));
        feed_result_free(&res);
        fault_inject("redis-start");
    }

    /* Back: the same handle recovers with no action but calling it. */
    fault_inject("pg-start");
    fault_sleep_ms(RETRY);
    reconnect_test_pg();
    feed_stats_get(f, &s0);
    walk_on(f, BIG, &w, 1000);
    feed_stats_get(f, &s1);
    ok(walk_done(&w, BIG), "PostgreSQL back: the interrupted walk resumes from its cursor"
       " and ends equal to SQL");
    ok(s1.pg_connects - s0.pg_connects == 1,
       "  after one reconnect (%llu), statements prepared again (%llu statements sent)",
       (unsigned long long)(s1.pg_connects - s0.pg_connects),
       (unsigned long long)(s1.sql_queries - s0.sql_queries));
    for (int64_t uid = SMALL; uid <= COLD; uid++) {
        w = walk_start();
        walk_on(f, uid, &w, 1000);
        ok(walk_done(&w, uid), "  feed %lld walks equal to SQL (%d pages, %d from the cache)",
           (long long)uid, w.pages, w.from_cache);
        if (!walk_done(&w, uid))
            tap_diag("rc %d wrong %d at %zu: %s", w.rc, w.wrong, w.at, feed_errmsg(f));
    }
    redisFree(r);
    feed_close(f);
}

static void restart_between_calls(void)
{
    feed *f = tu_open_with(settings);
    feed_stats s0, s1;
    walk w = walk_start();

    walk_on(f, BIG, &w, (MAX_LEN - 1) / LIMIT + 2);   /* two pages past the cache */
    ok(w.rc == FEED_OK && w.wrong == 0 && w.from_db == 2, "a walk reaches past the cache");

    fault_inject("pg-stop");
    fault_inject("pg-start");
    reconnect_test_pg();
    feed_stats_get(f, &s0);
    walk_on(f, BIG, &w, 1);
    feed_stats_get(f, &s1);
    ok(w.rc == FEED_OK && w.wrong == 0 && w.from_db == 3,
       "PostgreSQL restarted between two calls: the next deep page just works");
    is_int(s1.pg_connects - s0.pg_connects, 1, "  one reconnect, at once (the query was resent)");

    /* Restarted in the middle of a walk: the walk picks up where it was. */
    fault_inject("pg-stop");
    walk_on(f, BIG, &w, 1);
    is_int(w.rc, FEED_EPG, "stopped mid-walk: the next deep page is FEED_EPG");
    fault_inject("pg-start");
    reconnect_test_pg();
    fault_sleep_ms(RETRY);
    walk_on(f, BIG, &w, 1000);
    ok(walk_done(&w, BIG), "started again: the walk resumes from its cursor and ends equal"
       " to SQL (%d pages)", w.pages);
    feed_close(f);
}

/* A reader on its own handle, walking the wholly cached feed over and over
 * while the main thread's calls wait for a frozen PostgreSQL: what the
 * workers of a web service do. */
typedef struct reader {
    pthread_t   thread;
    feed       *f;
    atomic_int  stop;
    int         walks, pages, not_cache, wrong, errors;
} reader;

static void *reader_main(void *arg)
{
    reader *r = arg;

    while (!atomic_load(&r->stop)) {
        walk w = walk_start();
        walk_on(r->f, SMALL, &w, 1000);
        r->walks++;
        r->pages += w.pages;
        r->not_cache += w.pages - w.from_cache;
        r->wrong += w.wrong;
        r->errors += w.rc != FEED_OK || !walk_done(&w, SMALL);
    }
    return NULL;
}

static void frozen(void)
{
    feed *f = tu_open_with(settings);
    feed_stats s0, s1;
    feed_result res;
    reader rd;
    walk w, c;
    asking a;
    int rc;
    double t0, ms, bound = PG_TIMEOUT + fault_slack_ms();

    for (int64_t uid = SMALL; uid <= BIG; uid++) {
        w = walk_start();
        walk_on(f, uid, &w, 1000);
        ok(walk_done(&w, uid), "warm feed %lld: the walk equals SQL", (long long)uid);
    }
    is_int(feed_invalidate(f, COLD), FEED_OK, "feed %d dropped from the cache: cold", COLD);
    memset(&rd, 0, sizeof rd);
    rd.f = tu_open_with(settings);
    if (pthread_create(&rd.thread, NULL, reader_main, &rd) != 0)
        tap_bail("pthread_create");

    /* A walk is running: two pages in, PostgreSQL freezes. */
    w = walk_start();
    walk_on(f, BIG, &w, 2);
    fault_inject("pg-freeze");
    feed_stats_get(f, &s0);
    walk_on(f, BIG, &w, 1000);
    ok(w.rc == FEED_EPG && w.pages == (MAX_LEN - 1) / LIMIT && w.wrong == 0 &&
       w.from_cache == w.pages, "PostgreSQL frozen mid-walk: the rest of the cached pages come"
       " from the cache (%d in all), equal to SQL", w.pages);
    is_int(w.rc, FEED_EPG, "  the page past the cache: FEED_EPG");
    ok(w.worst_ms <= bound, "  within pg_timeout_ms %d + %.0f ms slack (slowest call %.1f ms)",
       PG_TIMEOUT, fault_slack_ms(), w.worst_ms);
    ok(strstr(feed_errmsg(f), "pg_timeout_ms") != NULL, "  the message says why: %s",
       feed_errmsg(f));

    c = walk_start();
    walk_on(f, SMALL, &c, 1000);
    ok(walk_done(&c, SMALL) && c.from_cache == c.pages,
       "  a cached feed still walks from the cache, equal to SQL (%d pages)", c.pages);
    t0 = fault_now_ms();
    rc = feed_page(f, COLD, FEED_FIRST, 0, LIMIT, &res);
    ms = fault_now_ms() - t0;
    ok(rc == FEED_EPG && ms <= bound, "  a cold feed: FEED_EPG (%d) in %.1f ms", rc, ms);
    feed_result_free(&res);

    /* Keep asking for a while: every deep page fails within the bound, a
     * reconnect is tried at most once per retry_ms (each one a timeout),
     * and the cached feed keeps coming in between. */
    a = keep_asking(f, &w, 1);
    feed_stats_get(f, &s1);
    ok(a.bad == 0 && a.worst_ms <= bound, "%d deep pages while frozen: each FEED_EPG within the"
       " bound (slowest %.1f ms)", a.calls, a.worst_ms);
    ok(a.walks_bad == 0, "  %d walks of the cached feed in between: all from the cache, equal"
       " to SQL", a.walks);
    ok(s1.pg_timeouts - s0.pg_timeouts >= 2 &&
       (double)(s1.pg_connects - s0.pg_connects) <= a.elapsed_ms / RETRY + 2,
       "  %llu timeouts, %llu connect attempts in %.0f ms (retry_ms %d)",
       (unsigned long long)(s1.pg_timeouts - s0.pg_timeouts),
       (unsigned long long)(s1.pg_connects - s0.pg_connects), a.elapsed_ms, RETRY);

    /* A handle opened now: its connect gets no answer either. */
    {
        feed_config cfg;
        feed *g = NULL;
        tu_config(&cfg);
        cfg.pg_timeout_ms = PG_TIMEOUT;
        t0 = fault_now_ms();
        rc = feed_open(&g, &cfg);
        ms = fault_now_ms() - t0;
        ok(rc == FEED_OK && ms <= bound, "feed_open while frozen: FEED_OK (Redis answers) in"
           " %.1f ms", ms);
        ok(g && strstr(feed_errmsg(g), "PostgreSQL connect: no answer"), "  %s",
           g ? feed_errmsg(g) : "");
        feed_close(g);
    }

    atomic_store(&rd.stop, 1);
    pthread_join(rd.thread, NULL);
    ok(rd.pages > 0 && rd.not_cache == 0 && rd.wrong == 0 && rd.errors == 0,
       "  another thread's handle walked the cached feed meanwhile: %d walks, %d pages, all"
       " from the cache, equal to SQL", rd.walks, rd.pages);
    feed_close(rd.f);

    fault_inject("pg-thaw");
    fault_sleep_ms(RETRY);
    walk_on(f, BIG, &w, 1000);
    ok(walk_done(&w, BIG), "thawed: the interrupted walk resumes from its cursor and ends"
       " equal to SQL");
    for (int64_t uid = SMALL; uid <= COLD; uid++) {
        c = walk_start();
        walk_on(f, uid, &c, 1000);
        ok(walk_done(&c, uid), "  feed %lld walks equal to SQL (%d pages, %d from the cache)",
           (long long)uid, c.pages, c.from_cache);
    }
    feed_close(f);
}

/* Backends of this database other than the caller's waiting on a lock. */
static long long lock_waiters(PGconn *c)
{
    return tu_sql_int(c, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                         " AND pid <> pg_backend_pid()");
}

static void stuck_statement(void)
{
    feed *f = tu_open_with(settings);
    PGconn *locker = tu_pg();
    feed_result res;
    walk w = walk_start();
    double t0, ms;
    long long waiting = -1;
    int rc;

    walk_on(f, BIG, &w, (MAX_LEN - 1) / LIMIT + 1);   /* one page past the cache */
    ok(w.rc == FEED_OK && w.from_db == 1, "a walk reaches past the cache");
    tu_sql(locker, "BEGIN");
    tu_sql(locker, "LOCK TABLE feed_entry IN ACCESS EXCLUSIVE MODE");
    t0 = fault_now_ms();
    rc = feed_page(f, BIG, w.score, w.id, LIMIT, &res);
    ms = fault_now_ms() - t0;
    feed_result_free(&res);
    ok(rc == FEED_EPG && ms <= PG_TIMEOUT + fault_slack_ms(),
       "a statement stuck on a lock: FEED_EPG (%d) in %.1f ms (pg_timeout_ms %d)", rc, ms,
       PG_TIMEOUT);
    /* The cancel runs on its own thread: give it a moment. Without it the
     * backend would wait on the lock for as long as the locker holds it. */
    for (int i = 0; i < 100 && waiting != 0; i++) {
        waiting = lock_waiters(locker);
        if (waiting)
            fault_sleep_ms(20);
    }
    is_int(waiting, 0, "  the statement was cancelled on the server: no backend waits on the lock");
    tu_sql(locker, "COMMIT");
    PQfinish(locker);
    fault_sleep_ms(RETRY);
    walk_on(f, BIG, &w, 1000);
    ok(walk_done(&w, BIG), "  lock released: the walk resumes and ends equal to SQL");
    feed_close(f);
}

int main(void)
{
    fault_setup();
    pg = tu_begin(NULL);
    /* The test cluster runs with synchronous_commit = off: an immediate
     * shutdown would lose the last commits. These rows must survive it. */
    tu_sql(pg, "SET synchronous_commit = on");
    tu_insert_rows(pg, SMALL, 30, tu_score_pairs, tu_id_seq);
    tu_insert_rows(pg, BIG, 200, tu_score_pairs, tu_id_seq);
    tu_insert_rows(pg, COLD, 20, tu_score_pairs, tu_id_seq);
    take_snapshots();

    outage();
    restart_between_calls();
    reconnect_test_pg();
    frozen();
    stuck_statement();

    tap_diag("faults injected: %d (PostgreSQL and Redis stops)", fault_count);
    for (int i = 0; i < 3; i++)
        free(snap[i].items);
    PQfinish(pg);
    return tap_done();
}
