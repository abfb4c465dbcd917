/* cluster.c -- section "cluster": feedcache on a Redis Cluster of 3
 * primaries + 3 replicas (tools/servers.sh cluster-start; bench/run.sh
 * exports FEED_REDIS_CLUSTER) next to the single Redis.
 *
 *   - a cached first page and the next page through the cluster vs the
 *     same pages on the single Redis: pages/s and round trips per page
 *     (client instructions per page are counted under callgrind by
 *     bench/run.sh, client_cpu with FEED_BENCH_CLUSTER=1);
 *   - feed_fanout to 10,000 feeds over the 3 primaries vs 10,000
 *     feed_on_insert calls through the same cluster, and where each one's
 *     CPU goes: the client, the primaries, their replicas (all on this
 *     machine's cores), and how many script calls the primaries ran.
 * Interleaved rounds, medians of per-round ratios, like every section. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    /* The fan-out's feeds have no rows: cached empty, they would expire
     * after empty_ttl_seconds (60) and the hooks find them uncached, a far
     * cheaper path. 0: as long as a real feed. */
    cfg.empty_ttl_seconds = 0;
    if ((rc = feed_open(&f, &cfg)) != FEED_OK)
        die("feed_open (cluster): %s: %s", feed_strerror(rc), feed_errmsg(NULL));
    return f;
}

/* A page of uid 2: the first (score FEED_FIRST), or the next one after
 * the cursor (score, id), on a handle that read the first page before. */
typedef struct page_ctx { feed *f; int64_t score, id; } page_ctx;

static int op_page(void *arg)
{
    page_ctx *x = arg;
    feed_result r;
    int rc = feed_page(x->f, UID_1K, x->score, x->id, PAGE_LIMIT, &r);

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

/* Round trips of one cached page. */
static double calls_per_page(page_ctx *x)
{
    feed_stats a, b;

    feed_stats_get(x->f, &a);
    for (int i = 0; i < 100; i++)
        op_page(x);
    feed_stats_get(x->f, &b);
    return (double)(b.redis_calls - a.redis_calls) / 100.0;
}

/* ---- where a fan-out's CPU goes ---- */

#define CL_MAX_NODES 16
typedef struct cl_node { redisContext *c; pid_t pid; int primary; } cl_node;

/* Every node named in FEED_REDIS_CLUSTER (tools/servers.sh names all six),
 * with its role now. */
static size_t cl_nodes(cl_node *n)
{
    const char *p = getenv("FEED_REDIS_CLUSTER");
    struct timeval tv = { 60, 0 };
    size_t k = 0;

    while (p && *p && k < CL_MAX_NODES) {
        char host[256];
        int port, used = 0;
        redisReply *r;
        if (sscanf(p, "%255[^:]:%d%n", host, &port, &used) != 2)
            die("FEED_REDIS_CLUSTER: cannot parse %s", p);
        n[k].c = redisConnectWithTimeout(host, port, tv);
        if (!n[k].c || n[k].c->err)
            die("cluster node %s:%d: %s", host, port, n[k].c ? n[k].c->errstr : "no memory");
        r = b_cmd(n[k].c, "ROLE");
        n[k].primary = r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                       strcmp(r->element[0]->str, "master") == 0;
        freeReplyObject(r);
        n[k].pid = redis_pid(n[k].c);
        k++;
        p += used;
        p += *p == ',';
    }
    return k;
}

/* CPU (ms) of this process, the primaries and the replicas, and the
 * primaries' script calls, so far. */
typedef struct cl_cpu { double client, primaries, replicas, scripts; } cl_cpu;

static cl_cpu cpu_now(const cl_node *n, size_t nn)
{
    cl_cpu c = { (double)proc_cpu_ns(getpid()) / 1e6, 0, 0, 0 };

    for (size_t i = 0; i < nn; i++) {
        double ms = (double)proc_cpu_ns(n[i].pid) / 1e6;
        if (n[i].primary) {
            c.primaries += ms;
            c.scripts += (double)cmdstat(n[i].c, "evalsha").calls;
        } else {
            c.replicas += ms;
        }
    }
    return c;
}

/* CPU per 10,000 feeds of `runs` calls of op (after the timed rounds). */
static cl_cpu cpu_of(const cl_node *n, size_t nn, op_fn op, void *ctx, int runs, double *wall_ms)
{
    cl_cpu a = cpu_now(n, nn), b;
    double t0 = now_s();

    for (int i = 0; i < runs; i++)
        op(ctx);
    *wall_ms = (now_s() - t0) * 1e3 / runs;
    b = cpu_now(n, nn);
    b.client = (b.client - a.client) / runs;
    b.primaries = (b.primaries - a.primaries) / runs;
    b.replicas = (b.replicas - a.replicas) / runs;
    b.scripts = (b.scripts - a.scripts) / runs;
    return b;
}

void section_cluster(void)
{
    FILE *md = out_section("cluster");
    feed *single, *cl, *fan;
    int64_t *uids;
    double ratio[2], rt_single[2], rt_cluster[2], fan_ratio;
    int rounds = q_rounds(9);
    page_ctx ps[2], pc[2];

    if (!getenv("FEED_REDIS_CLUSTER") || !*getenv("FEED_REDIS_CLUSTER")) {
        note("cluster: FEED_REDIS_CLUSTER not set, skipped");
        fprintf(md, "## Redis Cluster\n\nSkipped: no cluster (FEED_REDIS_CLUSTER unset).\n");
        fclose(md);
        return;
    }
    single = b_open("feed", 1000);
    cl = open_cluster();
    ps[0] = (page_ctx){ single, FEED_FIRST, 0 };
    ps[1] = ps[0];
    pc[0] = (page_ctx){ cl, FEED_FIRST, 0 };
    pc[1] = pc[0];
    {   /* warm both copies of uid 2: the first page may be a miss */
        feed_result r;
        feed *both[2] = { single, cl };
        for (int i = 0; i < 2; i++) {
            if (feed_page(both[i], UID_1K, FEED_FIRST, 0, PAGE_LIMIT, &r) != FEED_OK)
                die("feed_page: %s", feed_errmsg(both[i]));
            feed_result_free(&r);
        }
    }
    {
        feed_result r;      /* the cursor of the next page: the first page's end */
        if (feed_page(single, UID_1K, FEED_FIRST, 0, PAGE_LIMIT, &r) != FEED_OK || !r.has_more)
            die("feed_page: %s", feed_errmsg(single));
        ps[1].score = pc[1].score = r.next_score;
        ps[1].id = pc[1].id = r.next_id;
        feed_result_free(&r);
    }
    for (int k = 0; k < 2; k++) {
        rt_single[k] = calls_per_page(&ps[k]);
        rt_cluster[k] = calls_per_page(&pc[k]);
    }
    {
        variant v[4] = {
            { .name = "cached first page, single Redis", .op = op_page, .ctx = &ps[0] },
            { .name = "cached first page, through the cluster", .op = op_page, .ctx = &pc[0] },
            { .name = "cached next page, single Redis", .op = op_page, .ctx = &ps[1] },
            { .name = "cached next page, through the cluster", .op = op_page, .ctx = &pc[1] },
        };
        run_rounds(v, 4, rounds, q_secs(1.0), 1, NULL, 0);
        ratio[0] = paired_ratio(&v[1], &v[0]);
        ratio[1] = paired_ratio(&v[3], &v[2]);
        fprintf(md, "## Redis Cluster (3 primaries + 3 replicas on this machine)\n\n");
        fprintf(md, "### A cached page: cluster vs single Redis\n\n");
        fprintf(md, "| | pages/s (median of rounds) | p50 µs | p99 µs | round trips per page |\n");
        fprintf(md, "| --- | ---: | ---: | ---: | ---: |\n");
        for (int i = 0; i < 4; i++)
            fprintf(md, "| %s | %s | %s | %s | %.2f |\n", v[i].name, NUM(sm_median(&v[i].rate)),
                    NUM(sm_pct(&v[i].lat_us, 50)), NUM(sm_pct(&v[i].lat_us, 99)),
                    i % 2 ? rt_cluster[i / 2] : rt_single[i / 2]);
        fprintf(md, "\nPages/s through the cluster / single Redis, median of %d paired rounds:"
                    " **%.2fx** (first page), **%.2fx** (next page, cursor at rank 20, on a"
                    " handle that read the first page). Client instructions per page: see"
                    " \"Client CPU\" below.\n\n", rounds, ratio[0], ratio[1]);
        out_summary("cluster_rt", "Redis Cluster: round trips per cached page (first / next),"
                    " cluster vs single", "same (1)",
                    verdict(rt_cluster[0] == 1.0 && rt_single[0] == 1.0 &&
                            rt_cluster[1] == 1.0 && rt_single[1] == 1.0),
                    "%.2f / %.2f vs %.2f / %.2f", rt_cluster[0], rt_cluster[1], rt_single[0],
                    rt_single[1]);
        for (int i = 0; i < 4; i++)
            variant_free(&v[i]);
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
        cl_node nodes[CL_MAX_NODES];
        size_t nn = cl_nodes(nodes);
        cl_cpu cpu[2];
        double wall[2];
        int cached = 0;

        /* A round is at least a second of each (one call of 10,000 single
         * hooks takes longer; fan-outs repeat), so both variants sample the
         * machine's load over a like span, not one fan-out against a spike. */
        run_rounds(v, 2, q_rounds(7), q_secs(1.0), 1, NULL, 0);
        fan_ratio = paired_ratio(&v[0], &v[1]);
        /* Where the CPU goes, apart from the timed rounds (the INFO calls
         * would be timed otherwise): 5 fan-outs, 10,000 single hooks. */
        cpu[0] = cpu_of(nodes, nn, op_fan, &fl, 5, &wall[0]);
        cpu[1] = cpu_of(nodes, nn, op_fan, &fs, 1, &wall[1]);
        for (int i = 0; i < 100; i++) {     /* the feeds are still cached */
            feed_result r;
            if (feed_page(fan, uids[i * (CL_FEEDS / 100)], FEED_FIRST, 0, 1, &r) != FEED_OK)
                die("feed_page: %s", feed_errmsg(fan));
            cached += r.source == FEED_SOURCE_CACHE;
            feed_result_free(&r);
        }
        fprintf(md, "### Fan-out over the cluster\n\n");
        fprintf(md, "| | fan-outs/s (median) | ms per 10,000 feeds (p50) |\n| --- | ---: | ---: |\n");
        for (int i = 0; i < 2; i++)
            fprintf(md, "| %s | %s | %s |\n", v[i].name, NUM(sm_median(&v[i].rate)),
                    NUM(sm_pct(&v[i].lat_us, 50) / 1000.0));
        fprintf(md, "\nfeed_fanout / 10,000 feed_on_insert, median of %d paired rounds:"
                    " **%.1fx** (target >= 10x). %d of 100 sampled feeds were still cached"
                    " after the rounds (each hook then took the full insert path).\n\n",
                q_rounds(7), fan_ratio, cached);
        fprintf(md, "Where the time goes, per 10,000 feeds (CPU time from /proc, outside the"
                    " timed rounds: 5 fan-outs, then 10,000 single hooks; the %zu nodes and the"
                    " client share this machine's %ld cores):\n\n", nn, sysconf(_SC_NPROCESSORS_ONLN));
        fprintf(md, "| | wall ms | client CPU ms | primaries' CPU ms | replicas' CPU ms |"
                    " script calls on the primaries |\n| --- | ---: | ---: | ---: | ---: | ---: |\n");
        for (int i = 0; i < 2; i++)
            fprintf(md, "| %s | %s | %s | %s | %s | %s |\n", i ? "10,000 x feed_on_insert" :
                    "feed_fanout", NUM(wall[i]), NUM(cpu[i].client), NUM(cpu[i].primaries),
                    NUM(cpu[i].replicas), NUM(cpu[i].scripts));
        fprintf(md, "\nA fan-out is bound by CPU (the sum of the last three columns over the"
                    " cores), a single hook by its round trip. The replicas run on the same"
                    " cores here; on their own machines their share would not slow the"
                    " primaries.\n");
        out_summary("cluster_fanout", "Redis Cluster: feed_fanout to 10,000 feeds vs 10,000"
                    " feed_on_insert", ">= 10x", verdict(fan_ratio >= 10.0), "%.1fx", fan_ratio);
        variant_free(&v[0]);
        variant_free(&v[1]);
        for (size_t i = 0; i < nn; i++)
            redisFree(nodes[i].c);
    }
    free(uids);
    feed_close(fan);
    feed_close(cl);
    feed_close(single);
    fclose(md);
}
