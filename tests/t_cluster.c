/* t_cluster.c -- a Redis Cluster under load through resharding, a planned
 * failover and a crashed primary (run as t_cluster:cluster; tests/run.sh
 * starts the cluster of 3 primaries + 3 replicas).
 *
 * Writers (SQL, then the hook) and readers (whole walks) run all along.
 * Half the feeds are never written: every walk of one must equal its rows
 * exactly, whatever the cluster is doing, so a wrong page anywhere shows.
 * Walks of the written feeds are checked for order and cursor continuity.
 * Between the phases the workers pause and every feed walked must equal SQL.
 * No call may block much past its timeouts.
 *
 * Replication is asynchronous, so a primary that dies may take hook writes
 * it acknowledged with it. A SIGKILL on loopback does not show it (what the
 * primary wrote to its replica's socket is still delivered), so the walks
 * after the kill must equal SQL here; a replica that lags (paused) is what
 * loses writes: the failover guarantee and its test are t_ha_cluster's.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "testutil.h"
#include "fault.h"

#define FEEDS     80            /* even: static, odd: written */
#define FIRST_UID 7000
#define WRITERS   2
#define READERS   2

static atomic_int stop, pause_req, paused;
static feed_item *expected[FEEDS];
static size_t     expected_n[FEEDS];

/* What all workers counted. */
static atomic_ulong pages, db_pages, walks, wrong_pages, read_errors;
static atomic_ulong hooks, hooks_retried, hooks_failed, hook_errors, fanouts;
#define FAN 8                   /* feeds per fan-out of the writers */
static atomic_llong max_call_ms;
static atomic_ulong redirects, retry_waits;

/* A worker's handle is done: add its cluster counters to the totals. */
static void close_handle(feed *f)
{
    feed_stats s;

    feed_stats_get(f, &s);
    atomic_fetch_add(&redirects, (unsigned long)s.redis_redirects);
    atomic_fetch_add(&retry_waits, (unsigned long)s.redis_retries);
    feed_close(f);
}

static void note_call(double t0)
{
    long long ms = (long long)(fault_now_ms() - t0);
    long long cur = atomic_load(&max_call_ms);

    while (ms > cur && !atomic_compare_exchange_weak(&max_call_ms, &cur, ms))
        ;
}

/* The settings of every handle this test opens. */
static void settings(feed_config *cfg)
{
    cfg->max_page = 100;
}

/* Between phases: the workers stop at their next step until released. */
static void pause_point(void)
{
    if (!atomic_load(&pause_req))
        return;
    atomic_fetch_add(&paused, 1);
    while (atomic_load(&pause_req) && !atomic_load(&stop))
        fault_sleep_ms(5);
    atomic_fetch_sub(&paused, 1);
}

typedef struct worker {
    pthread_t thread;
    int       n;
    uint64_t  rng;
} worker;

static void *writer_main(void *arg)
{
    worker *w = arg;
    feed *f = tu_open_with(settings);
    PGconn *pg = tu_pg();
    int64_t next_id = 1000000 * (w->n + 1);

    while (!atomic_load(&stop)) {
        int k = 1 + 2 * (int)(tu_rand(&w->rng) % (FEEDS / 2));
        int64_t uid = FIRST_UID + k, score = (int64_t)(tu_rand(&w->rng) % 5000);
        feed_stats before, d;
        double t0;
        int rc;

        pause_point();
        feed_stats_get(f, &before);
        if (tu_rand(&w->rng) % 4 == 0) {
            /* Delete the feed's newest row of this writer, if any. */
            long long id = tu_sql_int(pg, "SELECT coalesce(max(id), -1) FROM feed_entry"
                                          " WHERE uid = %lld AND id >= %lld AND id < %lld",
                                      (long long)uid, (long long)(1000000 * (w->n + 1)),
                                      (long long)(1000000 * (w->n + 2)));
            if (id < 0)
                continue;
            tu_sql(pg, "DELETE FROM feed_entry WHERE uid = %lld AND id = %lld",
                   (long long)uid, id);
            t0 = fault_now_ms();
            rc = feed_on_delete(f, uid, id);
        } else if (tu_rand(&w->rng) % 3 == 0) {
            /* A fan-out: the row to FAN written feeds, by node (hooks.c). */
            int64_t fan[FAN];
            for (int j = 0; j < FAN; j++) {
                fan[j] = FIRST_UID + 1 + 2 * (int)(tu_rand(&w->rng) % (FEEDS / 2));
                for (int i = 0; i < j; i++)
                    if (fan[i] == fan[j])
                        fan[j] = -1;    /* a feed once */
            }
            tu_sql(pg, "INSERT INTO feed_entry (uid, score, id) SELECT u, %lld, %lld FROM"
                       " unnest(ARRAY[%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld]::int8[]) u"
                       " WHERE u >= 0", (long long)score, (long long)next_id,
                   (long long)fan[0], (long long)fan[1], (long long)fan[2], (long long)fan[3],
                   (long long)fan[4], (long long)fan[5], (long long)fan[6], (long long)fan[7]);
            {
                int64_t live[FAN];
                size_t nlive = 0;
                for (int j = 0; j < FAN; j++)
                    if (fan[j] >= 0)
                        live[nlive++] = fan[j];
                t0 = fault_now_ms();
                rc = feed_fanout(f, live, nlive, score, next_id++);
            }
            atomic_fetch_add(&fanouts, 1);
        } else {
            tu_insert(pg, uid, score, next_id);
            t0 = fault_now_ms();
            rc = feed_on_insert(f, uid, score, next_id++);
        }
        note_call(t0);
        atomic_fetch_add(&hooks, 1);
        d = tu_stats_since(f, &before);
        if (d.redis_retries > 0 || d.redis_redirects > 0)
            atomic_fetch_add(&hooks_retried, 1);
        if (rc == FEED_EREDIS) {
            if (atomic_fetch_add(&hooks_failed, 1) < 3)
                tap_diag("hook uid %lld: %s", (long long)uid, feed_errmsg(f));
        }
        else if (rc != FEED_OK && atomic_fetch_add(&hook_errors, 1) < 3)
            tap_diag("hook: %s: %s", feed_strerror(rc), feed_errmsg(f));
    }
    PQfinish(pg);
    close_handle(f);
    return NULL;
}

/* A whole walk of a static feed must equal its rows; of a written one, be
 * in order with cursors that continue (tu_walk checks both). */
static void *reader_main(void *arg)
{
    worker *w = arg;
    feed *f = tu_open_with(settings);

    while (!atomic_load(&stop)) {
        int k = (int)(tu_rand(&w->rng) % FEEDS);
        size_t limit = 1 + (size_t)(tu_rand(&w->rng) % 40), n = 0;
        feed_item *items = NULL;
        tu_walk_info info;
        double t0;
        int rc;

        pause_point();
        {   /* one timed call: the first page */
            feed_result res;
            t0 = fault_now_ms();
            if (feed_page(f, FIRST_UID + k, FEED_FIRST, 0, limit, &res) == FEED_OK)
                feed_result_free(&res);
            note_call(t0);
        }
        rc = tu_walk(f, FIRST_UID + k, limit, &items, &n, &info);
        atomic_fetch_add(&walks, 1);
        atomic_fetch_add(&pages, info.pages);
        atomic_fetch_add(&db_pages, (unsigned long)info.sources[FEED_SOURCE_DB]);
        if (rc == -100) {
            atomic_fetch_add(&wrong_pages, 1);
            tap_diag("uid %d: %s", FIRST_UID + k, info.why);
        } else if (rc != FEED_OK) {
            if (atomic_fetch_add(&read_errors, 1) < 3)
                tap_diag("read uid %d: %s", FIRST_UID + k, info.why);
        } else if (k % 2 == 0) {
            int same = n == expected_n[k];
            for (size_t i = 0; same && i < n; i++)
                same = items[i].score == expected[k][i].score && items[i].id == expected[k][i].id;
            if (!same) {
                atomic_fetch_add(&wrong_pages, 1);
                tap_diag("uid %d limit %zu: a walk of a static feed differs from SQL",
                         FIRST_UID + k, limit);
            }
        }
        free(items);
    }
    close_handle(f);
    return NULL;
}

/* ---------------------------------------------------------------- phases */

/* servers.sh CMD DIR ARGS..., args = "CMD ARGS...". */
static int srv(const char *args)
{
    const char *s = getenv("FEED_SERVERS"), *dir = getenv("FEED_SERVERS_DIR");
    const char *rest = strchr(args, ' ');
    char line[4096];

    snprintf(line, sizeof line, "'%s' %.*s '%s' %s >/dev/null", s,
             (int)(rest ? (size_t)(rest - args) : strlen(args)), args, dir, rest ? rest + 1 : "");
    fflush(stdout);
    return system(line);
}

/* The ports of the live nodes with role (1 = primary). */
static int cluster_nodes(int ports[6], int primary[6])
{
    const char *s = getenv("FEED_SERVERS"), *dir = getenv("FEED_SERVERS_DIR");
    char line[4096], role[32];
    int n = 0;
    FILE *p;

    snprintf(line, sizeof line, "'%s' cluster-ports '%s'", s, dir);
    if (!(p = popen(line, "r")))
        return 0;
    while (n < 6 && fgets(line, sizeof line, p))
        if (sscanf(line, "%d %31s", &ports[n], role) == 2) {
            primary[n] = strcmp(role, "master") == 0;
            n++;
        }
    pclose(p);
    return n;
}

static int pick(int want_primary, int other_than)
{
    int ports[6], primary[6], n = cluster_nodes(ports, primary);

    for (int i = 0; i < n; i++)
        if (primary[i] == want_primary && ports[i] != other_than)
            return ports[i];
    tap_bail("no such cluster node");
    exit(255);
}

static unsigned long mismatches;

/* Workers paused: every feed walked through a fresh handle equals SQL. */
static void check_all(PGconn *pg, const char *phase)
{
    feed *f = tu_open_with(settings);
    unsigned long bad = 0, n = 0, cached = 0;
    static const size_t sizes[] = { 7, 100 };
    tu_walk_info info;

    atomic_store(&pause_req, 1);
    while (atomic_load(&paused) < WRITERS + READERS)
        fault_sleep_ms(5);
    for (int k = 0; k < FEEDS; k++) {
        for (size_t s = 0; s < 2; s++, n++) {
            bad += !tu_walk_equals_sql(f, pg, FIRST_UID + k, sizes[s], &info);
            cached += info.sources[FEED_SOURCE_CACHE] > 0 && s == 0;
        }
    }
    is_int(bad, 0, "%s: %lu walks equal SQL (%lu of %d feeds were cached)", phase, n, cached,
           FEEDS);
    mismatches += bad;
    feed_close(f);
    atomic_store(&pause_req, 0);
}

static unsigned long failed_before;

static void report(const char *phase, unsigned long p0, unsigned long d0)
{
    tap_diag("%s: %lu pages checked, %lu fell back to SQL, %lu hooks failed", phase,
             (unsigned long)atomic_load(&pages) - p0,
             (unsigned long)atomic_load(&db_pages) - d0,
             (unsigned long)atomic_load(&hooks_failed) - failed_before);
    failed_before = atomic_load(&hooks_failed);
}

static redisReply *on(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    redisReply *r;

    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!r) {
        tap_bail("a cluster node stopped answering");
        exit(255);
    }
    return r;
}

/* The restart fence of a node that imports a slot: its flush meets keys of
 * that slot (here the migrated set of uid), which the node serves only
 * after ASKING. A handle whose first call reaches the node with its fence
 * key gone (as after a restart from an empty data set) must finish the
 * flush and serve the node's other feeds, not fail until the slot
 * settles. */
static void fence_mid_import(PGconn *pg, redisContext *dst, int64_t uid)
{
    feed *g = tu_open_with(settings);
    feed_result res;
    feed_stats st;
    redisReply *r;
    int64_t other = -1;
    int rc;

    for (int64_t u = FIRST_UID + 100; other < 0 && u < FIRST_UID + 1000; u++) {
        r = on(dst, "EXISTS %s", tu_key(u, ""));     /* MOVED unless dst serves it */
        if (r->type == REDIS_REPLY_INTEGER)
            other = u;
        freeReplyObject(r);
    }
    r = on(dst, "KEYS feed:fence*");
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++)
        freeReplyObject(on(dst, "DEL %s", r->element[i]->str));
    freeReplyObject(r);
    tu_insert(pg, other, 5, 1);
    rc = feed_page(g, other, FEED_FIRST, 0, 10, &res);
    feed_stats_get(g, &st);
    ok(other >= 0 && rc == FEED_OK && res.source == FEED_SOURCE_REBUILD && st.fence_flushes == 1,
       "  a new handle flushes the importing node and serves its feed %lld (rc %d, source %d, "
       "%llu flushes: %s)", (long long)other, rc, rc == FEED_OK ? (int)res.source : 0,
       (unsigned long long)st.fence_flushes, feed_errmsg(g));
    if (rc == FEED_OK)
        feed_result_free(&res);
    r = on(dst, "ASKING");
    freeReplyObject(r);
    r = on(dst, "EXISTS %s", tu_key(uid, ""));
    ok(r->type == REDIS_REPLY_INTEGER && r->integer == 0,
       "  the flush dropped the migrated set too");
    freeReplyObject(r);
    feed_close(g);
}

/* One slot caught mid-migration, by hand: the feed's set already on the
 * target, the slot still MIGRATING / IMPORTING. Its scripts then get
 * TRYAGAIN (ASK sends them to the target, which lacks the lease key): pages
 * come from SQL, a hook retries for redis_timeout_ms and is remembered, and
 * once the slot settles the walk equals SQL, the hook's row included. */
static void migration_by_hand(PGconn *pg)
{
    int64_t uid = FIRST_UID + 1;
    int ports[6], primary[6], n = cluster_nodes(ports, primary), src = -1, dst = -1;
    redisContext *c[6];
    redisReply *r;
    char src_id[64] = "", dst_id[64] = "";
    feed *f = tu_open_with(settings);
    feed_result res;
    feed_stats before, d;
    tu_walk_info info;
    long long slot;
    int64_t fan[5] = { uid, FIRST_UID + 3, FIRST_UID + 5, FIRST_UID + 7, FIRST_UID + 9 };
    int rc;

    ok(feed_page(f, uid, FEED_FIRST, 0, 10, &res) == FEED_OK, "by hand: feed %lld cached",
       (long long)uid);
    feed_result_free(&res);
    for (int i = 0; i < n; i++) {
        c[i] = tu_redis_at(ports[i]);
        if (!primary[i])
            continue;
        r = on(c[i], "EXISTS %s", tu_key(uid, ""));
        if (r->type == REDIS_REPLY_INTEGER && r->integer == 1)
            src = i;
        else if (dst < 0)
            dst = i;
        freeReplyObject(r);
    }
    if (src < 0 || dst < 0) {
        tap_bail("by hand: no owner or no other primary found");
        exit(255);
    }
    r = on(c[src], "CLUSTER KEYSLOT %s", tu_key(uid, ""));
    slot = r->integer;
    freeReplyObject(r);
    r = on(c[src], "CLUSTER MYID");
    snprintf(src_id, sizeof src_id, "%s", r->str);
    freeReplyObject(r);
    r = on(c[dst], "CLUSTER MYID");
    snprintf(dst_id, sizeof dst_id, "%s", r->str);
    freeReplyObject(r);
    freeReplyObject(on(c[dst], "CLUSTER SETSLOT %lld IMPORTING %s", slot, src_id));
    freeReplyObject(on(c[src], "CLUSTER SETSLOT %lld MIGRATING %s", slot, dst_id));
    r = on(c[src], "MIGRATE 127.0.0.1 %d %s 0 5000", ports[dst], tu_key(uid, ""));
    ok(r->type == REDIS_REPLY_STATUS, "by hand: the feed's set moved, the slot still migrating");
    freeReplyObject(r);

    feed_stats_get(f, &before);
    rc = feed_page(f, uid, FEED_FIRST, 0, 10, &res);
    {   /* a plain read of the set alone follows ASK to the target's copy;
         * page.lua (set + lease) gets TRYAGAIN and SQL answers: both right */
        feed_item *want;
        size_t nwant = tu_sql_feed(pg, uid, &want);
        int same = rc == FEED_OK && res.count == (nwant < 10 ? nwant : 10);
        for (size_t i = 0; same && i < res.count; i++)
            same = res.items[i].score == want[i].score && res.items[i].id == want[i].id;
        ok(same && (res.source == FEED_SOURCE_DB || res.source == FEED_SOURCE_CACHE),
           "  a page mid-migration is right (rc %d, source %d)", rc, (int)res.source);
        free(want);
    }
    feed_result_free(&res);
    tu_insert(pg, uid, 999999, 424242);
    rc = feed_on_insert(f, uid, 999999, 424242);
    d = tu_stats_since(f, &before);
    ok(d.redis_retries > 0, "  TRYAGAIN was retried (%llu waits, %llu redirects)",
       (unsigned long long)d.redis_retries, (unsigned long long)d.redis_redirects);
    is_int(rc, FEED_EREDIS, "  the hook that cannot apply fails, remembered for repair");
    {   /* A fan-out over that feed and others (by node: the feed declared,
         * or undeclared and sent back, then by slot): it fails the same way,
         * and every feed it names is remembered. */
        for (int i = 1; i < 5; i++) {
            ok(feed_page(f, fan[i], FEED_FIRST, 0, 10, &res) == FEED_OK, "  feed %lld cached",
               (long long)fan[i]);
            feed_result_free(&res);
        }
        for (int i = 0; i < 5; i++)
            tu_insert(pg, fan[i], 999998, 424243);
        is_int(feed_fanout(f, fan, 5, 999998, 424243), FEED_EREDIS,
               "  a fan-out over it and 4 others fails the same way");
    }

    fence_mid_import(pg, c[dst], uid);

    for (int i = 0; i < n; i++)
        if (primary[i])
            freeReplyObject(on(c[i], "CLUSTER SETSLOT %lld NODE %s", slot, dst_id));
    for (int i = 0; i < n; i++)
        redisFree(c[i]);
    ok(tu_walk_equals_sql(f, pg, uid, 7, &info), "  the slot settled: the walk equals SQL,"
       " the hook's row included");
    for (int i = 1; i < 5; i++)
        ok(tu_walk_equals_sql(f, pg, fan[i], 7, &info), "  feed %lld equals SQL, the"
           " fan-out's row included", (long long)fan[i]);
    feed_close(f);
}

/* feed_fanout groups its feeds by node, by the handle's slot map, one call
 * naming the node's other feeds undeclared (hooks.c, insert.lua). After a
 * reshard that map is stale: a call whose first feed moved gets MOVED and
 * goes to the new owner, and feeds a node no longer serves come back and go
 * out again by slot. Every feed must get the row, exactly once, cached or
 * not, complete or a partial window. */
#define FAN_FEEDS 300
#define FAN_UID0  9000
static void fanout_by_node(PGconn *pg)
{
    int64_t uids[FAN_FEEDS];
    feed_config cfg;
    feed_stats before, d;
    tu_walk_info info;
    feed *f, *check;
    int a = pick(1, 0), b = pick(1, a), wrong = 0, rc;
    char args[128];

    tu_config(&cfg);
    cfg.max_len = 12;           /* feeds of up to 30 rows: some partial windows */
    /* The reshard takes seconds: with the default 250 ms a node's trust
     * lapses meanwhile, and the look taken again finds the stale map
     * itself (a slot's fence key MOVED) before the fan-out is sent. */
    cfg.redis_timeout_ms = 60000;
    f = tu_open(&cfg);
    check = tu_open(&cfg);
    for (int k = 0; k < FAN_FEEDS; k++) {
        feed_result res;
        uids[k] = FAN_UID0 + k;
        tu_sql(pg, "INSERT INTO feed_entry (uid, score, id) SELECT %lld, (g * 37) %% 1000, g"
                   " FROM generate_series(1, %d) g", (long long)uids[k], k % 31);
        if (k % 3 != 0 && feed_page(f, uids[k], FEED_FIRST, 0, 5, &res) == FEED_OK)
            feed_result_free(&res);     /* a third stay uncached */
    }
    for (int round = 0; round < 2; round++) {
        int64_t score = round ? 500 : 2000, id = 900000 + round;
        if (round == 1) {   /* f's map is now stale for the slots that moved */
            snprintf(args, sizeof args, "cluster-reshard %d %d 1500", a, b);
            ok(srv(args) == 0, "fan-out: resharded 1500 slots %d -> %d", a, b);
        }
        for (int k = 0; k < FAN_FEEDS; k++)
            tu_insert(pg, uids[k], score, id);
        feed_stats_get(f, &before);
        rc = feed_fanout(f, uids, FAN_FEEDS, score, id);
        d = tu_stats_since(f, &before);
        is_int(rc, FEED_OK, "fan-out to %d feeds, %s map (%llu redirects)", FAN_FEEDS,
               round ? "a stale" : "a fresh", (unsigned long long)d.redis_redirects);
        if (round == 1) {
            ok(d.redis_redirects > 0, "  the stale map was followed");
            /* The reshard moved a's lowest slots, and a's fence key with
             * them: the same data sets (run_id and replication id
             * unchanged) are not flushed for it. */
            is_int(d.fence_flushes, 0, "  and no node's copies were dropped for it");
        }
        for (int k = 0; k < FAN_FEEDS; k++)
            if (!tu_walk_equals_sql(check, pg, uids[k], 7, &info) && wrong++ < 3)
                tap_diag("uid %lld: %s", (long long)uids[k], info.why);
        is_int(wrong, 0, "  every feed's walk equals SQL, the new row included");
    }
    snprintf(args, sizeof args, "cluster-reshard %d %d 1500", b, a);
    srv(args);
    feed_close(check);
    feed_close(f);
}

int main(void)
{
    worker wr[WRITERS], rd[READERS];
    PGconn *pg;
    unsigned long p0, d0;
    int a, b;

    if (!tu_cluster()) {
        printf("1..0 # SKIP needs the Redis Cluster (tests/run.sh runs t_cluster:cluster)\n");
        return 0;
    }
    pg = tu_begin(NULL);
    for (int k = 0; k < FEEDS; k++) {
        tu_sql(pg, "INSERT INTO feed_entry (uid, score, id) SELECT %d, (g * 37) %% 1000, g"
                   " FROM generate_series(1, %d) g", FIRST_UID + k, 20 + 7 * (k % 11));
        if (k % 2 == 0)
            expected_n[k] = tu_sql_feed(pg, FIRST_UID + k, &expected[k]);
    }
    migration_by_hand(pg);
    fanout_by_node(pg);
    for (int i = 0; i < WRITERS; i++) {
        wr[i].n = i;
        wr[i].rng = 11 + (uint64_t)i;
        pthread_create(&wr[i].thread, NULL, writer_main, &wr[i]);
    }
    for (int i = 0; i < READERS; i++) {
        rd[i].n = i;
        rd[i].rng = 101 + (uint64_t)i;
        pthread_create(&rd[i].thread, NULL, reader_main, &rd[i]);
    }
    fault_sleep_ms(1000);
    check_all(pg, "warm");

    /* 1. Resharding: 2000 slots from one primary to another and back. */
    a = pick(1, 0);
    b = pick(1, a);
    p0 = atomic_load(&pages);
    d0 = atomic_load(&db_pages);
    {
        char args[128];
        snprintf(args, sizeof args, "cluster-reshard %d %d 2000", a, b);
        ok(srv(args) == 0, "resharded 2000 slots %d -> %d under load", a, b);
        snprintf(args, sizeof args, "cluster-reshard %d %d 2000", b, a);
        srv(args);
    }
    report("resharding (2 x 2000 slots)", p0, d0);
    check_all(pg, "after resharding");

    /* 2. A planned failover: CLUSTER FAILOVER on a replica. */
    p0 = atomic_load(&pages);
    d0 = atomic_load(&db_pages);
    {
        char args[128];
        snprintf(args, sizeof args, "cluster-failover %d", pick(0, 0));
        ok(srv(args) == 0, "CLUSTER FAILOVER under load");
    }
    fault_sleep_ms(500);
    report("CLUSTER FAILOVER", p0, d0);
    check_all(pg, "after CLUSTER FAILOVER");

    /* 3. A primary crashes; its replica takes over. */
    p0 = atomic_load(&pages);
    d0 = atomic_load(&db_pages);
    {
        char args[128];
        int victim = pick(1, 0);
        snprintf(args, sizeof args, "cluster-kill %d", victim);
        srv(args);
        ok(srv("cluster-wait") == 0, "a replica took over from SIGKILLed primary %d", victim);
        report("SIGKILL of a primary", p0, d0);
        snprintf(args, sizeof args, "cluster-restart %d", victim);
        srv(args);
        srv("cluster-wait");
    }
    check_all(pg, "after SIGKILL of a primary");

    atomic_store(&stop, 1);
    for (int i = 0; i < WRITERS; i++)
        pthread_join(wr[i].thread, NULL);
    for (int i = 0; i < READERS; i++)
        pthread_join(rd[i].thread, NULL);
    tap_diag("totals: %lu walks, %lu pages checked, %lu fell back to SQL, %lu hooks"
             " (%lu of them fan-outs to up to %d feeds),"
             " %lu hooks retried (MOVED/ASK/TRYAGAIN), %lu hooks failed (repaired later),"
             " %lu redirects and %lu retry waits in all, %lu read errors,"
             " longest call %lld ms, %lu mismatches",
             (unsigned long)walks, (unsigned long)pages, (unsigned long)db_pages,
             (unsigned long)hooks, (unsigned long)fanouts, FAN, (unsigned long)hooks_retried,
             (unsigned long)hooks_failed,
             (unsigned long)redirects, (unsigned long)retry_waits,
             (unsigned long)read_errors, (long long)max_call_ms, mismatches);
    ok(redirects > 0, "the routing followed the moves (%lu MOVED/ASK)", (unsigned long)redirects);
    is_int(wrong_pages, 0, "no wrong page during any phase");
    /* A page or a hook: its Redis calls end within redis_timeout_ms of
     * retries plus one I/O timeout each, a rebuild adds an install and SQL. */
    ok((double)max_call_ms < 4 * 250 + 100 + 2 * fault_slack_ms(),
       "no call blocked past its timeouts (longest %lld ms)", (long long)max_call_ms);
    for (int k = 0; k < FEEDS; k++)
        free(expected[k]);
    PQfinish(pg);
    return tap_done();
}
