/* ha.c -- section "wait": what the failover guarantee costs.
 *
 * Against the Sentinel set of tools/servers.sh (one primary, one replica on
 * the same machine; bench/run.sh starts it and exports FEED_SENTINELS),
 * interleaved rounds of:
 *   - feed_on_insert without the guarantee (redis_wait_replicas = 0) and with
 *     it (= 1: WAIT 1 in the same round trip, so the hook returns once the
 *     replica holds the write);
 *   - a cached feed_page without and with it (with it, ROLE rides in the
 *     same round trip: the read is used only if the primary still has its
 *     replica).
 * Latency percentiles per call, and the median over rounds of the ratio.
 * Both handles also use the restart fence, which costs nothing per call
 * (it runs once per connection).
 *
 * Then, on the Redis Cluster of bench/run.sh (3 primaries + 3 replicas,
 * FEED_REDIS_CLUSTER), the same for hooks side by side: feed_on_insert and
 * a feed_fanout to 1,000 feeds (over the 3 primaries: one WAIT per node)
 * without and with redis_wait_replicas = 1. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "reads.h"

#define HA_UID   7    /* a bench user with rows (bench/load.sql) */
#define CL_FAN   1000         /* the cluster's fan-out: feeds per call */
#define CL_UID0  60000000     /* its feeds: no rows in SQL, each caches empty */

typedef struct ha_ctx {
    feed    *f;
    int64_t  next_id;
    int64_t *uids;          /* the cluster's fan-out */
} ha_ctx;

static int ha_insert(void *arg)
{
    ha_ctx *x = arg;

    /* Ids above the data set's: a new top item each time, trimmed to max_len. */
    x->next_id++;
    return feed_on_insert(x->f, HA_UID, 2000000000000LL + x->next_id, x->next_id) != FEED_OK;
}

static int ha_page(void *arg)
{
    ha_ctx *x = arg;
    feed_result res;
    int rc = feed_page(x->f, HA_UID, FEED_FIRST, 0, PAGE_LIMIT, &res);

    if (rc == FEED_OK && res.source != FEED_SOURCE_CACHE)
        rc = -1;
    feed_result_free(&res);
    return rc != FEED_OK;
}

/* Through the Sentinels, or on the cluster. */
static feed *ha_open(uint32_t wait, const char *prefix, int cluster);
static void latency_table(FILE *md, variant *v, int n);

/* ---- The restart fence's steady-state cost (section "fence") ----
 * The fence runs once per connection (and, on a cluster, once per node and
 * slot-map change); per call it is one test of the connection's state. So
 * hooks and cached pages with the fence on (the default) and turned off,
 * each on its own handle and prefix, interleaved rounds, on the single
 * Redis and on the cluster. */
static feed *fence_open(int fence, const char *prefix, int cluster)
{
    feed_config cfg;
    feed *f = NULL;

    feed_config_init(&cfg);
    cfg.pg_conninfo = env_or("FEED_PG_CONNINFO", "");
    if (cluster) {
        cfg.redis_cluster = env_or("FEED_REDIS_CLUSTER", "");
    } else {
        cfg.redis_host = env_or("FEED_REDIS_HOST", "127.0.0.1");
        cfg.redis_port = atoi(env_or("FEED_REDIS_PORT", "6379"));
    }
    cfg.key_prefix = prefix;
    cfg.redis_restart_fence = fence;
    if (feed_open(&f, &cfg) != FEED_OK)
        die("feed_open (%s): %s", cluster ? "cluster" : "Redis", feed_errmsg(NULL));
    return f;
}

static void fence_table(FILE *md, const char *where, int cluster, int rounds)
{
    static const char *const names[4] = {
        "feed_on_insert, fence off", "feed_on_insert, fence on (default)",
        "cached feed_page, fence off", "cached feed_page, fence on (default)",
    };
    static const char *const prefixes[2][4] = { { "ff0", "ff1", "ff0", "ff1" },
                                                { "cf0", "cf1", "cf0", "cf1" } };
    ha_ctx x[4];
    variant v[4];
    double hook50, hook99, page50, page99;

    memset(v, 0, sizeof v);
    for (int i = 0; i < 4; i++) {
        x[i].f = fence_open(i % 2, prefixes[cluster][i], cluster);
        x[i].next_id = 0;
        x[i].uids = NULL;
        v[i].name = names[i];
        v[i].op = i < 2 ? ha_insert : ha_page;
        v[i].ctx = &x[i];
    }
    for (int i = 0; i < 4; i++) {      /* warm: the feed cached under both prefixes */
        feed_result res;
        if (feed_page(x[i].f, HA_UID, FEED_FIRST, 0, PAGE_LIMIT, &res) != FEED_OK)
            die("warming the feed (%s): %s", where, feed_errmsg(x[i].f));
        feed_result_free(&res);
    }
    note("fence: %d rounds of the four calls (%s)", rounds, where);
    run_rounds(v, 4, rounds, q_secs(0.5), 50, NULL, 0);
    hook50 = sm_pct(&v[1].lat_us, 50) / sm_pct(&v[0].lat_us, 50);
    hook99 = sm_pct(&v[1].lat_us, 99) / sm_pct(&v[0].lat_us, 99);
    page50 = sm_pct(&v[3].lat_us, 50) / sm_pct(&v[2].lat_us, 50);
    page99 = sm_pct(&v[3].lat_us, 99) / sm_pct(&v[2].lat_us, 99);
    fprintf(md, "### %s\n\n", where);
    latency_table(md, v, 4);
    fprintf(md, "\nFence on / off: hook p50 %.2fx, p99 %.2fx; cached page p50 %.2fx, p99 %.2fx."
                " Calls/s off / on, median of per-round ratios: hook %.2fx, page %.2fx.\n\n",
            hook50, hook99, page50, page99, paired_ratio(&v[0], &v[1]),
            paired_ratio(&v[2], &v[3]));
    out_summary(cluster ? "fence_cluster" : "fence_single",
                cluster ? "cluster: fence on vs off, hook and page p50 (steady state)"
                        : "fence on vs off, hook and page p50 (steady state)",
                "report", "report", "hook %.2fx, page %.2fx (p99 %.2fx, %.2fx)", hook50, page50,
                hook99, page99);
    for (int i = 0; i < 4; i++) {
        variant_free(&v[i]);
        feed_close(x[i].f);
    }
}

void section_fence(void)
{
    FILE *md = out_section("fence");
    int rounds = q_rounds(11);

    fprintf(md, "## The restart fence in steady state\n\n"
                "`redis_restart_fence` is on by default. It costs one round trip (INFO, GET)\n"
                "per new connection, and a cold cache after a restart or failover; per call it\n"
                "tests the connection's state. Each call kind on its own handle and prefix,\n"
                "fence on and off, %d interleaved rounds of %.1f s; latency per call, µs.\n\n",
            rounds, q_secs(0.5));
    fence_table(md, "One Redis", 0, rounds);
    if (*env_or("FEED_REDIS_CLUSTER", ""))
        fence_table(md, "Redis Cluster (3 primaries + 3 replicas)", 1, rounds);
    else
        fprintf(md, "### Redis Cluster\n\nSkipped: FEED_REDIS_CLUSTER is not set.\n\n");
    fclose(md);
}

static feed *ha_open(uint32_t wait, const char *prefix, int cluster)
{
    feed_config cfg;
    feed *f = NULL;

    feed_config_init(&cfg);
    cfg.pg_conninfo = env_or("FEED_PG_CONNINFO", "");
    if (cluster) {
        cfg.redis_cluster = env_or("FEED_REDIS_CLUSTER", "");
    } else {
        cfg.redis_sentinels = env_or("FEED_SENTINELS", "");
        cfg.redis_master_name = env_or("FEED_MASTER_NAME", "mymaster");
    }
    cfg.key_prefix = prefix;
    cfg.redis_timeout_ms = 1000;
    cfg.redis_wait_replicas = wait;
    cfg.redis_wait_timeout_ms = 500;
    cfg.redis_restart_fence = 1;
    if (feed_open(&f, &cfg) != FEED_OK)
        die("feed_open (%s): %s", cluster ? "cluster" : "Sentinels", feed_errmsg(NULL));
    return f;
}

/* One row per variant: calls, p50, p99, calls/s. */
static void latency_table(FILE *md, variant *v, int n)
{
    fprintf(md, "| call | calls | p50 µs | p99 µs | calls/s (median of rounds) |\n");
    fprintf(md, "| --- | ---: | ---: | ---: | ---: |\n");
    for (int i = 0; i < n; i++)
        fprintf(md, "| %s | %zu | %s | %s | %s |\n", v[i].name, v[i].calls,
                NUM(sm_pct(&v[i].lat_us, 50)), NUM(sm_pct(&v[i].lat_us, 99)),
                NUM(sm_median(&v[i].rate)));
}

/* What one comparison measures: feed_on_insert and a second call (a cached
 * page, or a fan-out), each without and with redis_wait_replicas = 1. */
typedef struct wait_plan {
    const char *names[4];       /* hook without, hook with, second without, with */
    int       (*second)(void *);
    const char *prefix[2];      /* key prefixes without and with the guarantee */
    int         cluster;        /* through the cluster, else the Sentinels */
    int64_t    *uids;           /* the fan-out's feeds (NULL: none) */
    int         min_calls;
} wait_plan;

/* Opens the four handles, caches the feeds their calls touch under both
 * prefixes (so every hook writes and every page is a hit), runs the
 * interleaved rounds and closes the handles; v keeps the figures. The
 * ratio with / without at the p50 of hooks goes to *hook, of the second
 * call to *second. */
static void wait_measure(const wait_plan *p, int rounds, variant v[4], double *hook,
                         double *second)
{
    ha_ctx x[4];

    memset(v, 0, 4 * sizeof *v);
    for (int i = 0; i < 4; i++) {
        x[i].f = ha_open(i % 2 ? 1 : 0, p->prefix[i % 2], p->cluster);
        x[i].uids = p->uids;
        x[i].next_id = 0;
        v[i].name = p->names[i];
        v[i].op = i < 2 ? ha_insert : p->second;
        v[i].ctx = &x[i];
    }
    for (int i = 0; i < 4; i++) {
        feed_result res;
        if (feed_page(x[i].f, HA_UID, FEED_FIRST, 0, PAGE_LIMIT, &res) != FEED_OK)
            die("warming the feed (%s): %s", p->cluster ? "cluster" : "Sentinels",
                feed_errmsg(x[i].f));
        feed_result_free(&res);
        for (int k = 0; p->uids && i < 2 && k < CL_FAN; k++) {
            if (feed_page(x[i].f, p->uids[k], FEED_FIRST, 0, 1, &res) != FEED_OK)
                die("warming feed %d on the cluster: %s", k, feed_errmsg(x[i].f));
            feed_result_free(&res);
        }
    }
    note("wait: %d rounds of the four calls%s", rounds, p->cluster ? " on the cluster" : "");
    run_rounds(v, 4, rounds, q_secs(0.5), p->min_calls, NULL, 0);
    *hook = sm_pct(&v[1].lat_us, 50) / sm_pct(&v[0].lat_us, 50);
    *second = sm_pct(&v[3].lat_us, 50) / sm_pct(&v[2].lat_us, 50);
    for (int i = 0; i < 4; i++)
        feed_close(x[i].f);
}

/* ---- The same guarantee on the Redis Cluster ---- */

static int cl_fan(void *arg)
{
    ha_ctx *x = arg;

    x->next_id++;
    return feed_fanout(x->f, x->uids, CL_FAN, 2000000000000LL + x->next_id, x->next_id) != FEED_OK;
}

static void wait_cluster(FILE *md, int rounds)
{
    int64_t *uids = malloc(CL_FAN * sizeof *uids);
    wait_plan plan = {
        .names = { "feed_on_insert, no guarantee", "feed_on_insert, redis_wait_replicas = 1",
                   "feed_fanout to 1,000 feeds, no guarantee",
                   "feed_fanout to 1,000 feeds, redis_wait_replicas = 1" },
        .second = cl_fan, .prefix = { "cw0", "cw1" }, .cluster = 1, .min_calls = 20,
    };
    variant v[4];
    double ins, fan;

    if (!uids)
        die("out of memory");
    for (int i = 0; i < CL_FAN; i++)
        uids[i] = CL_UID0 + i;
    plan.uids = uids;
    wait_measure(&plan, rounds, v, &ins, &fan);

    fprintf(md, "### On the Redis Cluster\n\n");
    fprintf(md, "3 primaries + 3 replicas (`tools/servers.sh cluster-start`), same machine;\n"
                "%d interleaved rounds of %.1f s per call kind. With `redis_wait_replicas = 1`\n"
                "each node written to gets one WAIT in the same pipeline (a fan-out over the\n"
                "3 primaries: 3 WAITs, at once). Latency per call, µs.\n\n", rounds, q_secs(0.5));
    latency_table(md, v, 4);
    fprintf(md, "\nWith the guarantee / without, p50 over all calls: hook %.2fx, fan-out %.2fx;"
                " calls/s without / with, median of per-round ratios: hook %.2fx, fan-out"
                " %.2fx.\n\n", ins, fan, paired_ratio(&v[0], &v[1]), paired_ratio(&v[2], &v[3]));
    out_summary("wait_cluster_hook", "cluster: hook p50/p99 with WAIT 1 vs without", "report",
                "report", "%s/%s µs vs %s/%s µs (%.2fx p50)", NUM(sm_pct(&v[1].lat_us, 50)),
                NUM(sm_pct(&v[1].lat_us, 99)), NUM(sm_pct(&v[0].lat_us, 50)),
                NUM(sm_pct(&v[0].lat_us, 99)), ins);
    out_summary("wait_cluster_fanout", "cluster: fan-out to 1,000 feeds p50 with WAIT 1 vs without",
                "report", "report", "%s vs %s µs (%.2fx)", NUM(sm_pct(&v[3].lat_us, 50)),
                NUM(sm_pct(&v[2].lat_us, 50)), fan);
    for (int i = 0; i < 4; i++)
        variant_free(&v[i]);
    free(uids);
}

void section_wait(void)
{
    static const wait_plan plan = {
        .names = { "feed_on_insert, no guarantee", "feed_on_insert, redis_wait_replicas = 1",
                   "cached feed_page, no guarantee", "cached feed_page, redis_wait_replicas = 1" },
        .second = ha_page, .prefix = { "hw0", "hw1" }, .cluster = 0, .min_calls = 50,
    };
    variant v[4];
    FILE *md = out_section("wait");
    int rounds = q_rounds(11);
    double ins, pg;

    if (!*env_or("FEED_SENTINELS", ""))
        die("section wait: FEED_SENTINELS is not set (bench/run.sh starts the Sentinel set)");
    wait_measure(&plan, rounds, v, &ins, &pg);

    fprintf(md, "## The failover guarantee: WAIT after hooks, ROLE with reads\n\n");
    fprintf(md, "One primary and one replica under Sentinel (`tools/servers.sh sentinel-start`),\n"
                "on this machine over loopback; %d interleaved rounds of %.1f s per call kind.\n"
                "With `redis_wait_replicas = 1` a hook returns once the replica holds its write\n"
                "(WAIT in the same round trip) and a read is used only if the primary still has\n"
                "its replica (ROLE in the same round trip). Latency per call, µs.\n\n",
            rounds, q_secs(0.5));
    latency_table(md, v, 4);
    fprintf(md, "\nWith the guarantee / without, p50 over all calls: hook %.2fx, cached page %.2fx.\n\n",
            ins, pg);
    out_summary("wait_hook", "hook p50/p99 with WAIT 1 vs without", "report", "report",
                "%s/%s µs vs %s/%s µs (%.2fx p50)", NUM(sm_pct(&v[1].lat_us, 50)),
                NUM(sm_pct(&v[1].lat_us, 99)), NUM(sm_pct(&v[0].lat_us, 50)),
                NUM(sm_pct(&v[0].lat_us, 99)), ins);
    out_summary("wait_page", "cached page p50 with the replica check vs without", "report",
                "report", "%s vs %s µs (%.2fx)", NUM(sm_pct(&v[3].lat_us, 50)),
                NUM(sm_pct(&v[2].lat_us, 50)), pg);
    for (int i = 0; i < 4; i++)
        variant_free(&v[i]);
    if (*env_or("FEED_REDIS_CLUSTER", ""))
        wait_cluster(md, rounds);
    else
        fprintf(md, "### On the Redis Cluster\n\nSkipped: FEED_REDIS_CLUSTER is not set.\n\n");
    fclose(md);
}
