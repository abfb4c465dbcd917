/* cluster.c -- section "cluster": feedcache on a Redis Cluster of 3
 * primaries + 3 replicas (tools/servers.sh cluster-start; bench/run.sh
 * exports FEED_REDIS_CLUSTER) next to the single Redis.
 *
 *   - a cached page through the cluster vs the same page on the single
 *     Redis: pages/s and round trips per page (client instructions per page
 *     are counted under callgrind by bench/run.sh, client_cpu with
 *     FEED_BENCH_CLUSTER=1);
 *   - feed_fanout to 10,000 feeds over the 3 primaries vs 10,000
 *     feed_on_insert calls through the same cluster.
 * Interleaved rounds, medians of per-round ratios, like every section. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cluster.h"

#define CL_FEEDS 10000
#define CL_UID0  50000000       /* no rows in SQL: each feed caches empty */

static feed *open_cluster(void)
{
    feed_config cfg;
    feed *f;
    int rc;

    feed_config_init(&cfg);
    cfg.redis_cluster = getenv("FEED_REDIS_CLUSTER");
    cfg.pg_conninfo = env_or("FEED_PG_CONNINFO", "");
    cfg.redis_timeout_ms = 30000;
    if ((rc = feed_open(&f, &cfg)) != FEED_OK)
        die("feed_open (cluster): %s: %s", feed_strerror(rc), feed_errmsg(NULL));
    return f;
}

typedef struct page_ctx { feed *f; } page_ctx;

static int op_page(void *arg)
{
    page_ctx *x = arg;
    feed_result r;
    int rc = feed_page(x->f, UID_1K, FEED_FIRST, 0, PAGE_LIMIT, &r);

    if (rc != FEED_OK || r.source != FEED_SOURCE_CACHE)
        die("cluster bench: feed_page: rc %d source %d: %s", rc, (int)r.source,
            feed_errmsg(x->f));
    feed_result_free(&r);
    return 0;
}

typedef struct fan_ctx {
    feed    *f;
    int64_t *uids;
    int      single;
    int64_t  score, id;
} fan_ctx;

static int op_fan(void *arg)
{
    fan_ctx *x = arg;
    int rc = FEED_OK;

    x->score += 1000;
    x->id += 2;
    if (!x->single)
        rc = feed_fanout(x->f, x->uids, CL_FEEDS, x->score, x->id);
    for (size_t i = 0; x->single && i < CL_FEEDS && rc == FEED_OK; i++)
        rc = feed_on_insert(x->f, x->uids[i], x->score, x->id);
    if (rc != FEED_OK)
        die("cluster bench: fan-out: %s: %s", feed_strerror(rc), feed_errmsg(x->f));
    return 0;
}

/* Round trips of one cached page on handle f. */
static double calls_per_page(feed *f)
{
    feed_stats a, b;
    page_ctx x = { f };

    feed_stats_get(f, &a);
    for (int i = 0; i < 100; i++)
        op_page(&x);
    feed_stats_get(f, &b);
    return (double)(b.redis_calls - a.redis_calls) / 100.0;
}

void section_cluster(void)
{
    FILE *md = out_section("cluster");
    feed *single, *cl, *fan;
    int64_t *uids;
    double ratio, rt_single, rt_cluster, fan_ratio;
    int rounds = q_rounds(9);

    if (!getenv("FEED_REDIS_CLUSTER") || !*getenv("FEED_REDIS_CLUSTER")) {
        note("cluster: FEED_REDIS_CLUSTER not set, skipped");
        fprintf(md, "## Redis Cluster\n\nSkipped: no cluster (FEED_REDIS_CLUSTER unset).\n");
        fclose(md);
        return;
    }
    single = b_open("feed", 1000);
    cl = open_cluster();
    {   /* warm both copies of uid 2: the first page may be a miss */
        feed_result r;
        feed *both[2] = { single, cl };
        for (int i = 0; i < 2; i++) {
            if (feed_page(both[i], UID_1K, FEED_FIRST, 0, PAGE_LIMIT, &r) != FEED_OK)
                die("feed_page: %s", feed_errmsg(both[i]));
            feed_result_free(&r);
        }
    }
    rt_single = calls_per_page(single);
    rt_cluster = calls_per_page(cl);
    {
        page_ctx ps = { single }, pc = { cl };
        variant v[2] = {
            { .name = "cached first page, single Redis", .op = op_page, .ctx = &ps },
            { .name = "cached first page, through the cluster", .op = op_page, .ctx = &pc },
        };
        run_rounds(v, 2, rounds, q_secs(1.0), 1, NULL, 0);
        ratio = paired_ratio(&v[1], &v[0]);
        fprintf(md, "## Redis Cluster (3 primaries + 3 replicas on this machine)\n\n");
        fprintf(md, "### A cached page: cluster vs single Redis\n\n");
        fprintf(md, "| | pages/s (median of rounds) | p50 µs | p99 µs | round trips per page |\n");
        fprintf(md, "| --- | ---: | ---: | ---: | ---: |\n");
        for (int i = 0; i < 2; i++)
            fprintf(md, "| %s | %s | %s | %s | %.2f |\n", v[i].name, NUM(sm_median(&v[i].rate)),
                    NUM(sm_pct(&v[i].lat_us, 50)), NUM(sm_pct(&v[i].lat_us, 99)),
                    i ? rt_cluster : rt_single);
        fprintf(md, "\nPages/s through the cluster / single Redis, median of %d paired rounds:"
                    " **%.2fx**. Client instructions per page: see \"Client CPU\" below.\n\n",
                rounds, ratio);
        out_summary("cluster_rt", "Redis Cluster: round trips per cached page, cluster / single",
                    "same (1)", verdict(rt_cluster == 1.0 && rt_single == 1.0), "%.2f / %.2f",
                    rt_cluster, rt_single);
        variant_free(&v[0]);
        variant_free(&v[1]);
    }

    /* 10,000 feeds cached (empty: no rows in SQL), spread over every slot
     * range, so over the 3 primaries. */
    note("cluster: caching %d feeds", CL_FEEDS);
    fan = open_cluster();
    uids = malloc(CL_FEEDS * sizeof *uids);
    if (!uids)
        die("out of memory");
    for (int i = 0; i < CL_FEEDS; i++) {
        feed_result r;
        uids[i] = CL_UID0 + i;
        feed_invalidate(fan, uids[i]);
        if (feed_page(fan, uids[i], FEED_FIRST, 0, 1, &r) != FEED_OK)
            die("feed_page: %s", feed_errmsg(fan));
        feed_result_free(&r);
    }
    {
        fan_ctx fl = { fan, uids, 0, 1700000000000LL, 1000000001LL },
                fs = { fan, uids, 1, 1800000000000LL, 2000000001LL };
        variant v[2] = {
            { .name = "**feed_fanout** to 10,000 feeds (3 primaries, in parallel)",
              .op = op_fan, .ctx = &fl },
            { .name = "10,000 x feed_on_insert", .op = op_fan, .ctx = &fs },
        };
        run_rounds(v, 2, q_rounds(7), 0.0, 1, NULL, 0);
        fan_ratio = paired_ratio(&v[0], &v[1]);
        fprintf(md, "### Fan-out over the cluster\n\n");
        fprintf(md, "| | fan-outs/s (median) | ms per 10,000 feeds (p50) |\n| --- | ---: | ---: |\n");
        for (int i = 0; i < 2; i++)
            fprintf(md, "| %s | %s | %s |\n", v[i].name, NUM(sm_median(&v[i].rate)),
                    NUM(sm_pct(&v[i].lat_us, 50) / 1000.0));
        fprintf(md, "\nfeed_fanout / 10,000 feed_on_insert, median of paired rounds:"
                    " **%.1fx** (target >= 10x).\n", fan_ratio);
        out_summary("cluster_fanout", "Redis Cluster: feed_fanout to 10,000 feeds vs 10,000"
                    " feed_on_insert", ">= 10x", verdict(fan_ratio >= 10.0), "%.1fx", fan_ratio);
        variant_free(&v[0]);
        variant_free(&v[1]);
    }
    free(uids);
    feed_close(fan);
    feed_close(cl);
    feed_close(single);
    fclose(md);
}
