/* t_replica.c -- the PostgreSQL read replica (pg_replica_conninfo) against a
 * real streaming replica of the test server (tools/servers.sh replica-start:
 * pg_basebackup -R, a hot standby on its own port):
 *
 *   - pages past the cache read the replica, rebuilds the primary: one
 *     replica statement per page from SQL, none for the rebuild;
 *   - replay paused (pg_wal_replay_pause), writes reach the primary only:
 *     a rebuild (a cold feed's miss, feed_reload) installs the primary's
 *     rows, so the cache holds every write whose hook ran; a page past the
 *     cache shows the replica's rows, exactly the staleness docs/ha.md
 *     states; replay resumed, every walk equals SQL;
 *   - pg_replica_max_lag_ms: with replay paused, pages past the cache come
 *     from the primary (the replica cannot be proven caught up) and show
 *     every write; replay resumed, the replica answers them again;
 *   - the default bound (1000 ms) against a replica behind by a known
 *     amount: proven caught up, then replay paused, a row committed, and
 *     BEHIND ms later the pages past the cache come from the primary and
 *     show it; the control, a handle whose bound (60 s) still covers the
 *     proof it took before the pause, serves the replica's rows: stale;
 *   - a proof dates from when the primary's position was read, not from
 *     the replica's answer: replay paused, the replica frozen under a
 *     probe, a row committed, the replica thawed BOUND + 400 ms later and
 *     answering that it has replayed the position: the page comes from the
 *     primary (the proof already expired), and so do the pages after it,
 *     which show the row (with the proof dated from the answer, they came
 *     from the replica, without it);
 *   - replica frozen (SIGSTOP): a page past the cache comes from the primary
 *     within 2 x pg_timeout_ms (one timeout on the replica), the next ones
 *     at once while the replica waits out retry_ms; thawed, it serves again;
 *   - replica stopped: the primary answers; a handle opens without it;
 *     started again, it serves again. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "testutil.h"
#include "fault.h"

#define A          700   /* 100 rows: the cache holds the top MAX_LEN */
#define B          701   /* written while replay is paused: only the primary has it */
#define MAX_LEN    20
#define LIMIT      10
/* Only frozen() needs a timeout to pass, and it waits one out once; every
 * other statement and connect must finish within PG_TIMEOUT, under ASan on
 * a loaded machine too. 300 ms was too tight for that: a new handle's
 * connect and prepares (stopped()) ran past it once under `make check
 * SANITIZE=1`, and its deep page failed. RETRY bounds how long a failed
 * replica is left alone, so the call after a timeout must start within it:
 * 1 s (the default) leaves a loaded machine room too. */
#define RETRY            1000
#define PG_TIMEOUT       2000
#define REDIS_TIMEOUT    2000   /* nothing here stops Redis */

static PGconn *pg, *rep;
static char replica_conninfo[256];

static int64_t id_b(size_t i) { return (int64_t)i + 1000; }

static void stop_replica(void)
{
    fault_srv("replica-thaw", 1);
    fault_srv("replica-stop", 1);
}

/* Start the replica and find its port (servers.sh writes it next to env). */
static void start_replica(void)
{
    char path[1024];
    const char *dir = getenv("FEED_SERVERS_DIR");
    FILE *in;
    int port = 0;

    fault_inject("replica-start");
    snprintf(path, sizeof path, "%s/replica.port", dir ? dir : ".");
    if (!(in = fopen(path, "r")) || fscanf(in, "%d", &port) != 1 || port <= 0)
        tap_bail("no replica.port after servers.sh replica-start");
    fclose(in);
    snprintf(replica_conninfo, sizeof replica_conninfo,
             "host=127.0.0.1 port=%d user=postgres dbname=feedcache", port);
}

static PGconn *connect_replica(void)
{
    PGconn *c = PQconnectdb(replica_conninfo);

    if (PQstatus(c) != CONNECTION_OK)
        tap_bail("cannot connect to the replica");
    return c;
}

/* Until the replica has replayed everything the primary wrote so far. */
static int caught_up(void)
{
    PGresult *res = PQexec(pg, "SELECT pg_current_wal_lsn()::text");
    char lsn[64];
    int ok = 0;

    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        tap_bail("pg_current_wal_lsn failed");
    snprintf(lsn, sizeof lsn, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    for (int i = 0; i < 500 && !ok; i++) {
        ok = tu_sql_int(rep, "SELECT (pg_last_wal_replay_lsn() >= '%s'::pg_lsn)::int", lsn) == 1;
        if (!ok)
            fault_sleep_ms(20);
    }
    return ok;
}

/* with_replica: 0 the primary only, 1 with the replica and no bound on its
 * lag (pg_replica_max_lag_ms = 0), > 1 with the replica and
 * pg_replica_max_lag_ms = with_replica. */
static feed *open_handle(int with_replica)
{
    feed_config cfg;

    tu_config(&cfg);
    cfg.max_len = MAX_LEN;
    cfg.retry_ms = RETRY;
    cfg.pg_timeout_ms = PG_TIMEOUT;
    cfg.redis_timeout_ms = REDIS_TIMEOUT;
    if (with_replica)
        cfg.pg_replica_conninfo = replica_conninfo;
    /* 1: the replica unbounded (0, turned off); > 1: that bound */
    cfg.pg_replica_max_lag_ms = with_replica > 1 ? (uint32_t)with_replica : 0;
    return tu_open(&cfg);
}

/* A page at a cursor below the cache: (score, id) of A's 50th row. */
static int deep_page(feed *f, feed_result *res)
{
    return feed_page(f, A, tu_score_pairs(49), tu_id_seq(49), LIMIT, res);
}

/* After a failed check on a page: what the call returned and why, and what
 * the handle counted meanwhile (d), so that a failure names its cause. */
static void why(feed *f, int rc, const feed_result *res, const feed_stats *d)
{
    tap_diag("     rc %d (%s), source %d; %s", rc, feed_strerror(rc),
             rc == FEED_OK ? (int)res->source : -1, rc == FEED_OK ? "" : feed_errmsg(f));
    if (d)
        tap_diag("     replica_queries %llu, replica_fallbacks %llu, pg_timeouts %llu,"
                 " pg_errors %llu, redis_errors %llu",
                 (unsigned long long)d->replica_queries, (unsigned long long)d->replica_fallbacks,
                 (unsigned long long)d->pg_timeouts, (unsigned long long)d->pg_errors,
                 (unsigned long long)d->redis_errors);
}

/* A deep page on f is answered by the replica, with no fallback. */
static void replica_answers(feed *f, const char *what)
{
    feed_stats s0, d;
    feed_result res;
    int rc;

    feed_stats_get(f, &s0);
    rc = deep_page(f, &res);
    d = tu_stats_since(f, &s0);
    if (!ok(rc == FEED_OK && d.replica_queries == 1 && d.replica_fallbacks == 0, "%s", what))
        why(f, rc, &res, &d);
    feed_result_free(&res);
}

static void reads(feed *f)
{
    tu_walk_info info;
    int same;
    feed_stats s0, d;

    feed_stats_get(f, &s0);
    same = tu_walk_equals_sql(f, pg, A, LIMIT, &info);
    ok(same, "a cold walk equals SQL (%zu pages)",
       info.pages);
    d = tu_stats_since(f, &s0);
    ok(info.sources[FEED_SOURCE_DB] > 0 &&
       d.replica_queries == (uint64_t)info.sources[FEED_SOURCE_DB] && d.replica_fallbacks == 0,
       "  its %d pages past the cache came from the replica (%llu replica statements);"
       " its rebuild read the primary", info.sources[FEED_SOURCE_DB],
       (unsigned long long)d.replica_queries);
}

static void paused(feed *f)
{
    feed *g = open_handle(0);   /* the primary only: what the cache holds, and SQL */
    tu_walk_info info;
    int same;
    feed_result res;
    feed_item *items;
    size_t n_primary, n_replica, n;
    feed_stats s0, d;
    int rc;

    tu_sql(rep, "SELECT pg_wal_replay_pause()");
    is_int(tu_sql_int(rep, "SELECT (pg_get_wal_replay_pause_state() <> 'not paused')::int"), 1,
           "replica: replay paused");

    /* A deep write: below the cache, so the hook leaves the copy alone. */
    tu_insert(pg, A, -5, 9999);
    is_int(feed_on_insert(f, A, -5, 9999), FEED_OK, "a row below the cache, committed and hooked");
    n_primary = tu_sql_feed(pg, A, &items);
    free(items);
    n_replica = tu_sql_feed(rep, A, &items);
    free(items);
    is_int((long long)n_primary, (long long)n_replica + 1, "  the primary has it, the replica not yet");
    feed_stats_get(f, &s0);
    same = tu_walk_equals_sql(f, rep, A, LIMIT, &info);
    ok(same, "  a walk equals the replica's SQL: its pages"
       " past the cache are the replica's, as of its replay (the documented staleness)");
    d = tu_stats_since(f, &s0);
    ok(d.replica_queries == (uint64_t)info.sources[FEED_SOURCE_DB] && d.replica_fallbacks == 0,
       "  %llu pages from the replica", (unsigned long long)d.replica_queries);
    same = tu_walk_equals_sql(g, pg, A, LIMIT, &info);
    ok(same, "  the same walk on the primary has the row");

    /* A top write, then a reload: the rebuild must read the primary. */
    tu_insert(pg, A, 100000, 10000);
    is_int(feed_on_insert(f, A, 100000, 10000), FEED_OK, "a new top row, committed and hooked");
    feed_stats_get(f, &s0);
    is_int(feed_reload(f, A), FEED_OK, "  feed_reload while the replica lags");
    d = tu_stats_since(f, &s0);
    ok(d.rebuilds == 1 && d.replica_queries == 0, "  rebuilt from the primary (%llu rebuild,"
       " %llu replica statements)", (unsigned long long)d.rebuilds,
       (unsigned long long)d.replica_queries);
    rc = feed_page(g, A, FEED_FIRST, 0, LIMIT, &res);
    if (!ok(rc == FEED_OK && res.source == FEED_SOURCE_CACHE && res.count > 0 &&
       res.items[0].id == 10000, "  the cached copy holds the new top row"))
        why(g, rc, &res, NULL);
    feed_result_free(&res);
    same = tu_walk_equals_sql(g, pg, A, LIMIT, &info);
    ok(same, "  the cache plus the primary equals SQL");

    /* A feed that exists on the primary only: its miss rebuilds from there. */
    tu_insert_rows(pg, B, 50, tu_score_pairs, id_b);
    n = tu_sql_feed(rep, B, &items);
    free(items);
    is_int((long long)n, 0, "feed %d: 50 rows on the primary, none yet on the replica", B);
    rc = feed_page(f, B, FEED_FIRST, 0, LIMIT, &res);
    if (!ok(rc == FEED_OK && res.source == FEED_SOURCE_REBUILD && res.count == LIMIT && res.has_more,
       "  its first page is a rebuild with %zu rows, from the primary", res.count))
        why(f, rc, &res, NULL);
    feed_result_free(&res);
    same = tu_walk_equals_sql(g, pg, B, LIMIT, &info);
    ok(same, "  the installed copy equals the primary's"
       " SQL (%d pages from the cache)", info.sources[FEED_SOURCE_CACHE]);

    tu_sql(rep, "SELECT pg_wal_replay_resume()");
    ok(caught_up(), "replay resumed: the replica caught up");
    same = tu_walk_equals_sql(f, pg, A, LIMIT, &info);
    ok(same, "  feed %d walks equal to SQL", A);
    same = tu_walk_equals_sql(f, pg, B, LIMIT, &info);
    ok(same, "  feed %d walks equal to SQL", B);
    feed_close(g);
}

#define MAX_LAG 200

static void bounded(feed *f)
{
    feed *h = open_handle(MAX_LAG);
    tu_walk_info info;
    feed_stats s0, d;
    int same;

    tu_sql(rep, "SELECT pg_wal_replay_pause()");
    tu_insert(pg, A, -7, 9998);
    is_int(feed_on_insert(h, A, -7, 9998), FEED_OK, "replay paused; a row below the cache,"
           " committed and hooked");
    feed_stats_get(h, &s0);
    same = tu_walk_equals_sql(h, pg, A, LIMIT, &info);
    d = tu_stats_since(h, &s0);
    ok(same, "pg_replica_max_lag_ms %d: a walk equals the primary's SQL", MAX_LAG);
    ok(info.sources[FEED_SOURCE_DB] > 0 &&
       d.replica_lagging == (uint64_t)info.sources[FEED_SOURCE_DB],
       "  its %d pages past the cache came from the primary: the replica is not proven"
       " caught up (%llu)", info.sources[FEED_SOURCE_DB], (unsigned long long)d.replica_lagging);
    same = tu_walk_equals_sql(f, rep, A, LIMIT, &info);
    ok(same, "  (without the bound the same walk shows the replica's rows, without the row)");

    tu_sql(rep, "SELECT pg_wal_replay_resume()");
    ok(caught_up(), "replay resumed: the replica caught up");
    /* A probe fails if the primary writes WAL between its two statements
     * (a standby snapshot record, every 15 s): allow a few walks. */
    for (int i = 0; i < 5; i++) {
        fault_sleep_ms(MAX_LAG);
        feed_stats_get(h, &s0);
        same = tu_walk_equals_sql(h, pg, A, LIMIT, &info);
        d = tu_stats_since(h, &s0);
        if (!same || d.replica_lagging == 0)
            break;
    }
    ok(same, "  a walk equals SQL");
    ok(d.replica_lagging == 0 && d.replica_fallbacks == 0 &&
       d.replica_queries > (uint64_t)info.sources[FEED_SOURCE_DB],
       "  its %d pages past the cache came from the replica, proven caught up"
       " (%llu replica statements, probes included)", info.sources[FEED_SOURCE_DB],
       (unsigned long long)d.replica_queries);
    feed_close(h);
}

/* A deep page on h until one is answered by the replica with no probe
 * failing (a probe fails if the primary writes WAL between its two
 * statements): the handle then holds a proof taken now. */
static int proven(feed *h)
{
    for (int i = 0; i < 10; i++) {
        feed_stats s0, d;
        feed_result res;
        int rc = (feed_stats_get(h, &s0), deep_page(h, &res));

        d = tu_stats_since(h, &s0);
        if (rc == FEED_OK)
            feed_result_free(&res);
        if (rc == FEED_OK && d.replica_queries > 0 && d.replica_lagging == 0 &&
            d.replica_fallbacks == 0)
            return 1;
        fault_sleep_ms(100);
    }
    return 0;
}

#define BEHIND 1500     /* ms the replica is behind when the pages are read */
#define LOOSE  60000    /* the control's bound: far past BEHIND */

static void behind(void)
{
    feed *h = open_handle(1000), *loose = open_handle(LOOSE);
    tu_walk_info info;
    feed_stats s0, d;
    double committed, lag;
    int same;

    ok(caught_up() && proven(h) && proven(loose), "the replica is caught up; a handle with"
       " the default bound (1000 ms) and one with %d ms proved it", LOOSE);
    tu_sql(rep, "SELECT pg_wal_replay_pause()");
    tu_insert(pg, A, -9, 9997);
    committed = fault_now_ms();
    is_int(feed_on_insert(h, A, -9, 9997), FEED_OK, "replay paused; a row below the cache,"
           " committed and hooked");
    fault_sleep_ms(BEHIND);
    lag = fault_now_ms() - committed;

    feed_stats_get(h, &s0);
    same = tu_walk_equals_sql(h, pg, A, LIMIT, &info);
    d = tu_stats_since(h, &s0);
    ok(same, "the replica %.0f ms behind: with the default bound a walk equals the primary's"
       " SQL", lag);
    ok(info.sources[FEED_SOURCE_DB] > 0 && d.replica_lagging == (uint64_t)info.sources[FEED_SOURCE_DB],
       "  its %d pages past the cache came from the primary (%llu counted lagging)",
       info.sources[FEED_SOURCE_DB], (unsigned long long)d.replica_lagging);

    feed_stats_get(loose, &s0);
    same = tu_walk_equals_sql(loose, pg, A, LIMIT, &info);
    d = tu_stats_since(loose, &s0);
    ok(!same && d.replica_queries > 0 && d.replica_lagging == 0,
       "  control, bound %d ms: its pages past the cache came from the replica (%llu) and"
       " the walk misses the row: stale (%s)", LOOSE, (unsigned long long)d.replica_queries,
       info.why);

    tu_sql(rep, "SELECT pg_wal_replay_resume()");
    ok(caught_up(), "replay resumed: the replica caught up");
    feed_close(loose);
    feed_close(h);
}

#define SLOW_BOUND 300   /* ms: pg_replica_max_lag_ms of slow_answer's handle */
#define SLOW_WRITE 200   /* ms into the page: the row commits */
#define SLOW_THAW  900   /* ms into the page: the replica answers its probe */

static PGconn *writer;          /* slow_writer's own connection to the primary */
static double slow_committed;

/* While the page waits on the frozen replica: commit a row on the primary,
 * then thaw the replica. */
static void *slow_writer(void *arg)
{
    double t0 = *(const double *)arg;

    fault_sleep_ms(t0 + SLOW_WRITE - fault_now_ms());
    tu_insert(writer, A, -11, 9996);
    slow_committed = fault_now_ms();
    fault_sleep_ms(t0 + SLOW_THAW - fault_now_ms());
    fault_srv("replica-thaw", 0);
    return NULL;
}

static void slow_answer(void)
{
    feed *h = open_handle(SLOW_BOUND);
    pthread_t th;
    feed_result res;
    feed_stats s0, d;
    tu_walk_info info;
    double t0, answered;
    int rc, same;

    writer = tu_pg();
    ok(caught_up() && proven(h), "the replica is caught up; a handle with a bound of %d ms"
       " proved it", SLOW_BOUND);
    tu_sql(rep, "SELECT pg_wal_replay_pause()");
    fault_sleep_ms(SLOW_BOUND + 100);           /* the proof expires: the next page probes */
    fault_inject("replica-freeze");
    feed_stats_get(h, &s0);
    t0 = fault_now_ms();
    if (pthread_create(&th, NULL, slow_writer, &t0) != 0)
        tap_bail("pthread_create failed");
    rc = deep_page(h, &res);
    answered = fault_now_ms();
    pthread_join(th, NULL);
    d = tu_stats_since(h, &s0);
    if (!ok(rc == FEED_OK && res.source == FEED_SOURCE_DB && d.replica_lagging == 1 &&
            d.replica_fallbacks == 0, "replay paused, the replica frozen under the probe and"
            " thawed %.0f ms later: the page comes from the primary (%llu lagging)",
            answered - t0, (unsigned long long)d.replica_lagging))
        why(h, rc, &res, &d);
    feed_result_free(&res);
    is_int(feed_on_insert(h, A, -11, 9996), FEED_OK, "  a row committed %.0f ms into that page,"
           " below the cache, hooked", slow_committed - t0);
    feed_stats_get(h, &s0);
    same = tu_walk_equals_sql(h, pg, A, LIMIT, &info);
    d = tu_stats_since(h, &s0);
    ok(same && info.sources[FEED_SOURCE_DB] > 0,
       "  a walk begun %.0f ms after the row's commit (bound %d ms) equals the primary's SQL"
       " (%d pages past the cache, %llu replica statements)%s%s", fault_now_ms() - slow_committed,
       SLOW_BOUND, info.sources[FEED_SOURCE_DB], (unsigned long long)d.replica_queries,
       same ? "" : ": ", same ? "" : info.why);
    tu_sql(rep, "SELECT pg_wal_replay_resume()");
    ok(caught_up(), "replay resumed: the replica caught up");
    PQfinish(writer);
    feed_close(h);
}

static void frozen(feed *f)
{
    feed_result res;
    feed_stats s0, d;
    double t0, ms, bound = 2 * PG_TIMEOUT + fault_slack_ms();
    int rc;

    fault_inject("replica-freeze");
    feed_stats_get(f, &s0);
    t0 = fault_now_ms();
    rc = deep_page(f, &res);
    ms = fault_now_ms() - t0;
    d = tu_stats_since(f, &s0);
    if (!ok(rc == FEED_OK && res.source == FEED_SOURCE_DB && d.replica_fallbacks == 1 &&
       d.pg_timeouts == 1, "replica frozen: a deep page comes from the primary (rc %d, %llu"
       " fallback, %llu timeout)", rc, (unsigned long long)d.replica_fallbacks,
       (unsigned long long)d.pg_timeouts))
        why(f, rc, &res, &d);
    ok(ms <= bound, "  in %.1f ms (<= 2 x pg_timeout_ms %d + %.0f ms slack)", ms, PG_TIMEOUT,
       fault_slack_ms());
    ok(strstr(feed_errmsg(f), "replica") != NULL, "  why not from the replica: %s",
       feed_errmsg(f));
    feed_result_free(&res);

    feed_stats_get(f, &s0);
    t0 = fault_now_ms();
    rc = deep_page(f, &res);
    ms = fault_now_ms() - t0;
    d = tu_stats_since(f, &s0);
    if (!ok(rc == FEED_OK && d.replica_fallbacks == 1 && d.pg_timeouts == 0 && ms < PG_TIMEOUT,
       "  the next one at once (%.1f ms): the replica waits out retry_ms", ms))
        why(f, rc, &res, &d);
    feed_result_free(&res);

    fault_inject("replica-thaw");
    fault_sleep_ms(RETRY);
    replica_answers(f, "thawed: after retry_ms the replica answers again");
}

static void stopped(feed *f)
{
    tu_walk_info info;
    int same;
    feed_result res;
    feed_stats s0, d;
    feed *h;
    int rc;

    fault_inject("replica-stop");
    PQfinish(rep);
    feed_stats_get(f, &s0);
    rc = deep_page(f, &res);
    d = tu_stats_since(f, &s0);
    if (!ok(rc == FEED_OK && res.source == FEED_SOURCE_DB && d.replica_fallbacks == 1,
       "replica stopped: a deep page comes from the primary"))
        why(f, rc, &res, &d);
    feed_result_free(&res);
    same = tu_walk_equals_sql(f, pg, A, LIMIT, &info);
    ok(same, "  a walk equals SQL (%zu pages)", info.pages);

    h = open_handle(1);
    ok(h != NULL, "  a handle opens while the replica is down");
    feed_stats_get(h, &s0);
    rc = deep_page(h, &res);
    d = tu_stats_since(h, &s0);
    if (!ok(rc == FEED_OK && res.source == FEED_SOURCE_DB, "  and its deep pages come from the primary"))
        why(h, rc, &res, &d);
    feed_result_free(&res);
    feed_close(h);

    fault_inject("replica-start");
    rep = connect_replica();
    ok(caught_up(), "replica started again and caught up");
    fault_sleep_ms(RETRY);
    replica_answers(f, "  after retry_ms it answers deep pages again");
}

/* A lag proof is of the server it was taken on: a page whose replica
 * connection is gone does not connect one (a multi-host conninfo may reach
 * another, lagging server) but goes to the primary; the next probe
 * connects, and proves the new connection before it serves a page. */
static void reconnected(void)
{
    feed *h = open_handle(2000);
    feed_stats s0, d;
    feed_result res;
    int rc;

    ok(proven(h), "bound 2000 ms: a deep page from the replica, proven caught up");
    ok(tu_sql_int(rep, "SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity"
                       " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
                       " AND datname = current_database()") > 0,
       "  the handle's replica connection ended by the server");
    feed_stats_get(h, &s0);
    rc = deep_page(h, &res);
    d = tu_stats_since(h, &s0);
    if (!ok(rc == FEED_OK && res.source == FEED_SOURCE_DB && d.replica_fallbacks == 1 &&
            d.pg_connects == 0, "  the next deep page comes from the primary; no connect for it"
            " (%llu fallback, %llu connects)", (unsigned long long)d.replica_fallbacks,
            (unsigned long long)d.pg_connects))
        why(h, rc, &res, &d);
    if (rc == FEED_OK)
        feed_result_free(&res);
    fault_sleep_ms(600);            /* past a quarter of the bound: a probe may run */
    feed_stats_get(h, &s0);
    ok(proven(h), "  then a probe connects again and the replica serves, proven anew");
    d = tu_stats_since(h, &s0);
    ok(d.pg_connects >= 1, "  (%llu connect, by the probe)", (unsigned long long)d.pg_connects);
    feed_close(h);
}

int main(void)
{
    feed *f;

    fault_setup();
    atexit(stop_replica);
    {
        feed_config dflt;
        feed_config_init(&dflt);
        is_int(dflt.pg_replica_max_lag_ms, 1000, "feed_config_init bounds the replica's lag "
               "at 1000 ms");
    }
    pg = tu_begin(NULL);
    tu_sql(pg, "SET synchronous_commit = on");   /* flushed at once: streamed at once */
    start_replica();
    rep = connect_replica();
    is_int(tu_sql_int(rep, "SELECT pg_is_in_recovery()::int"), 1, "a streaming replica is up");
    tu_insert_rows(pg, A, 100, tu_score_pairs, tu_id_seq);
    ok(caught_up(), "  and has replayed the test rows");

    f = open_handle(1);
    reads(f);
    paused(f);
    bounded(f);
    behind();
    slow_answer();
    frozen(f);
    stopped(f);
    reconnected();
    feed_close(f);
    PQfinish(rep);

    tap_diag("faults injected: %d (replica stops and freezes)", fault_count);
    PQfinish(pg);
    return tap_done();
}
