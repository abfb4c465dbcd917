/* merge.c -- section "merge": read-time merge (lib/core/merged.c) beside the plain
 * page it extends, and against fan-out on write, the cost it replaces.
 *
 *   1. A warm merged first page (20 items) of a reader's feed merged with
 *      n = 1 / 10 / 100 authors' posts, against the plain first page of
 *      the same feed (feed_page): Redis process CPU per page, latency, and
 *      round trips per page (the handle's counter), in interleaved rounds.
 *   2. Merged next pages (n = 10) at depths 0 / 500 / 5,000 of the merged
 *      timeline, by the cursor a previous page handed out: the same cost
 *      at every depth.
 *   3. The crossover: fanning one post out to F followers (F = 1,000 ..
 *      1,000,000, feed_fanout, every follower's feed cached, and none
 *      cached) against merging that author into R reads. Redis CPU, the
 *      fan-out's time and the Redis memory it writes; a table and a chart
 *      (bench/plot.gp), and the rule of thumb they give.
 *
 * Data (its own, beside bench/load.sql's): reader uid MERGE_UID with 1,000
 * rows in feed_entry, authors 1..100 with 1,000 posts each in author_post
 * (sql/authors.sql), scores spread over three years; key prefix "merge".
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "merge.h"

#define MERGE_UID   900001
#define AUTHORS     100
#define POSTS       1000          /* per author, and rows of the reader */
#define XOVER_UID0  2000000       /* the fan-out's followers */
#define XOVER_ITEMS 10            /* items in each follower's cached feed */

static feed *open_merge(const char *prefix)
{
    return b_open_with(prefix, 1000, "author_post");
}

static void load(PGconn *pg)
{
    note("merge: loading %d authors x %d posts, and reader %d's %d rows", AUTHORS, POSTS,
         MERGE_UID, POSTS);
    PQclear(b_sql(pg, "TRUNCATE author_post"));
    PQclear(b_sql(pg, "DELETE FROM feed_entry WHERE uid = 900001"));
    PQclear(b_sql(pg, "INSERT INTO author_post SELECT a, 1700000000000 +"
                      " ((a * 1000 + g)::int8 * 2654435761) % 100000000000, a * 1000000 + g"
                      " FROM generate_series(1, 100) a, generate_series(1, 1000) g"));
    PQclear(b_sql(pg, "INSERT INTO feed_entry SELECT 900001, 1700000000000 +"
                      " (g::int8 * 2654435761 * 7) % 100000000000, 500000000 + g"
                      " FROM generate_series(1, 1000) g"));
    PQclear(b_sql(pg, "VACUUM ANALYZE author_post"));
    PQclear(b_sql(pg, "ANALYZE feed_entry"));
}

/* ------------------------------------------------------------ the calls */

typedef struct mctx {
    feed          *f;
    const int64_t *authors;
    size_t         n;            /* 0: feed_page */
    int64_t        score, id;    /* the cursor; FEED_FIRST: first page */
} mctx;

static int op_merged(void *arg)
{
    mctx *x = arg;
    feed_result r;
    int rc = x->n == 0 ? feed_page(x->f, MERGE_UID, x->score, x->id, PAGE_LIMIT, &r)
                       : feed_page_merged(x->f, MERGE_UID, x->authors, x->n, x->score, x->id,
                                          PAGE_LIMIT, &r);

    if (rc != FEED_OK || r.source != FEED_SOURCE_CACHE || r.count != PAGE_LIMIT)
        die("merged page (n %zu): rc %d, source %d, %zu items: %s", x->n, rc, (int)r.source,
            r.count, feed_errmsg(x->f));
    feed_result_free(&r);
    return 0;
}

/* The first calls: rebuilds, and the TTLs learned. */
static void warm_up(mctx *x)
{
    for (int i = 0; i < 2; i++) {
        feed_result r;
        int rc = x->n == 0 ? feed_page(x->f, MERGE_UID, x->score, x->id, PAGE_LIMIT, &r)
                           : feed_page_merged(x->f, MERGE_UID, x->authors, x->n, x->score,
                                              x->id, PAGE_LIMIT, &r);
        if (rc != FEED_OK)
            die("warming up (n %zu): %s", x->n, feed_errmsg(x->f));
        feed_result_free(&r);
    }
}

/* Round trips of one page on each of 20 fresh handles (copies warm): the
 * first merged page of a handle that never read these authors. */
static double fresh_round_trips(const mctx *x)
{
    double sum = 0;

    for (int i = 0; i < 20; i++) {
        mctx y = *x;
        feed_stats a, b;
        y.f = open_merge("merge");
        warm_up(&(mctx){ y.f, NULL, 0, FEED_FIRST, 0 });   /* connections, the fence */
        feed_stats_get(y.f, &a);
        op_merged(&y);
        feed_stats_get(y.f, &b);
        sum += (double)(b.redis_calls - a.redis_calls);
        feed_close(y.f);
    }
    return sum / 20;
}

/* Round trips per page, from the handle's counter over 200 pages. */
static double round_trips(mctx *x)
{
    feed_stats a, b;

    feed_stats_get(x->f, &a);
    for (int i = 0; i < 200; i++)
        op_merged(x);
    feed_stats_get(x->f, &b);
    return (double)(b.redis_calls - a.redis_calls) / 200.0;
}

/* ------------------------------------------------------------ 1. first page */

/* Medians, µs per page: plain, n = 1, 10, 100; and each merged page's
 * paired ratio to the plain one (the figures derived from them below use
 * the ratios: measured side by side, they are far steadier than the
 * differences of medians of a shared machine). */
static double cpu_plain, cpu_n[3], ratio_n[3];

static void first_pages(FILE *md, feed *f, const int64_t *authors, pid_t rpid)
{
    static const size_t ns[3] = { 1, 10, 100 };
    mctx ctx[4];
    variant v[4];
    double rt[4], fresh[4], ratio[3];
    int rounds = q_rounds(15);
    double secs = q_secs(0.3);

    memset(v, 0, sizeof v);
    for (int k = 0; k < 4; k++) {
        ctx[k] = (mctx){ f, authors, k == 0 ? 0 : ns[k - 1], FEED_FIRST, 0 };
        warm_up(&ctx[k]);
        rt[k] = round_trips(&ctx[k]);
        fresh[k] = fresh_round_trips(&ctx[k]);
        v[k] = (variant){ .name = k == 0 ? "plain" : "merged", .op = op_merged, .ctx = &ctx[k] };
    }
    note("merge: first pages, %d rounds", rounds);
    run_rounds(v, 4, rounds, secs, 3, NULL, rpid);
    cpu_plain = sm_median(&v[0].cpu_us);
    for (int k = 0; k < 3; k++) {
        cpu_n[k] = sm_median(&v[k + 1].cpu_us);
        ratio[k] = ratio_n[k] = paired_ratio_cpu(&v[k + 1], &v[0]);
    }
    fprintf(md, "## Read-time merge\n\n"
            "Reader %d's feed (1,000 rows, cached whole) merged with the posts of n of 100"
            " authors (1,000 each, cached whole: max_len 1,000), 20 items a page, one"
            " handle, one connection (`bench/merge.c`). Redis CPU per page is the"
            " redis-server process's utime + stime over a round / pages; %d interleaved"
            " rounds of %.2f s per variant, medians, and each ratio the median of the"
            " per-round ratios. Round trips per page from the handle's `redis_calls` over"
            " 200 pages.\n\n"
            "### A warm merged first page against the plain first page\n\n"
            "| page | Redis CPU per page | / plain page | latency p50 | p99 | round trips"
            " per page | ... on a fresh handle | pages/s |\n"
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
            MERGE_UID, rounds, secs);
    fprintf(md, "| plain first page (feed_page) | %s µs | 1 | %s µs | %s µs | %.2f | %.2f | %s |\n",
            NUM(cpu_plain), NUM(sm_pct(&v[0].lat_us, 50)), NUM(sm_pct(&v[0].lat_us, 99)), rt[0],
            fresh[0], NUM(sm_median(&v[0].rate)));
    for (int k = 0; k < 3; k++)
        fprintf(md, "| merged, n = %zu | %s µs | **%.2fx**%s | %s µs | %s µs | %.2f | %.2f | %s |\n",
                ns[k], NUM(cpu_n[k]), ratio[k], ns[k] == 10 ? (ratio[k] <= 3 ? " pass" : " MISS")
                : "", NUM(sm_pct(&v[k + 1].lat_us, 50)), NUM(sm_pct(&v[k + 1].lat_us, 99)),
                rt[k + 1], fresh[k + 1], NUM(sm_median(&v[k + 1].rate)));
    fprintf(md, "\nAll sources are read in one pipeline: the reader's feed for 21 entries, as"
            " a plain page is, and each author for its share of the last merged page it was"
            " in on this handle, and two more (a handle that never read it asks for a few:"
            " the last column counts the first page of 20 fresh handles, where an author"
            " that held more than that is read again in a second round trip). Every entry"
            " costs Redis a score formatted as text (about 0.4 µs each on Redis 7.0), most"
            " of a read's cost. Past the plain page's cost a merged page pays about %s µs of"
            " Redis CPU per author (n = 10 to 100: (ratio(100) - ratio(10)) x CPU(plain) /"
            " 90).\n\n", NUM((ratio[2] - ratio[1]) * cpu_plain / 90));
    out_summary("merge_first", "read-time merge: Redis CPU of a warm merged first page, n = 10"
                " authors, vs a plain first page; round trips", "<= 3x, one round trip",
                verdict(ratio[1] <= 3 && rt[2] == 1.0),
                "%.2fx (%s vs %s µs), %.2f round trips per page; n = 1: %.2fx, n = 100: %.2fx",
                ratio[1], NUM(cpu_n[1]), NUM(cpu_plain), rt[2], ratio[0], ratio[2]);
    for (int k = 0; k < 4; k++)
        variant_free(&v[k]);
}

/* ------------------------------------------------------------ 2. depth */

static void next_pages(FILE *md, feed *f, PGconn *pg, const int64_t *authors, pid_t rpid)
{
    static const size_t depths[3] = { 0, 500, 5000 };
    PGresult *res = b_sql(pg, "SELECT score, id FROM feed_entry WHERE uid = 900001 UNION"
                              " SELECT score, id FROM author_post WHERE author BETWEEN 1 AND 10"
                              " ORDER BY score DESC, id DESC LIMIT 5001");
    mctx ctx[3];
    variant v[3];
    double rt[3], worst = 1;
    int rounds = q_rounds(15);
    double secs = q_secs(0.3);

    memset(v, 0, sizeof v);
    for (int k = 0; k < 3; k++) {
        ctx[k] = (mctx){ f, authors, 10, 0, 0 };
        if (depths[k] == 0) {   /* a cursor right above the top item: its page is the top */
            ctx[k].score = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
            ctx[k].id = strtoll(PQgetvalue(res, 0, 1), NULL, 10) + 1;
        } else {
            ctx[k].score = strtoll(PQgetvalue(res, (int)depths[k] - 1, 0), NULL, 10);
            ctx[k].id = strtoll(PQgetvalue(res, (int)depths[k] - 1, 1), NULL, 10);
        }
        warm_up(&ctx[k]);
        rt[k] = round_trips(&ctx[k]);
        v[k] = (variant){ .name = "next", .op = op_merged, .ctx = &ctx[k] };
    }
    PQclear(res);
    note("merge: next pages by depth, %d rounds", rounds);
    run_rounds(v, 3, rounds, secs, 3, NULL, rpid);
    fprintf(md, "### Merged next pages by depth (n = 10)\n\n"
            "The page after a cursor at depth d of the merged timeline of the reader and 10"
            " authors (11,000 items; at depth 5,000 each source's copy is read around rank"
            " 450), on the handle that served the page before (it knows the authors'"
            " shares). Depth 0: a cursor right above the top item. Each source is one"
            " `ZREVRANGEBYSCORE <cursor score> -inf WITHSCORES LIMIT 0 <its share + 1>`, one"
            " pipeline.\n\n"
            "| depth | Redis CPU per page | / depth 0 | latency p50 | p99 | round trips per"
            " page |\n| ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int k = 0; k < 3; k++) {
        double r = k == 0 ? 1 : paired_ratio_cpu(&v[k], &v[0]);
        double spread = r >= 1 ? r : 1 / r;
        worst = spread > worst ? spread : worst;
        fprintf(md, "| %s | %s µs | %.2fx | %s µs | %s µs | %.2f |\n", NUM((double)depths[k]),
                NUM(sm_median(&v[k].cpu_us)), r, NUM(sm_pct(&v[k].lat_us, 50)),
                NUM(sm_pct(&v[k].lat_us, 99)), rt[k]);
    }
    fprintf(md, "\nThe cost does not grow with depth: the widest spread from depth 0 is"
            " **%.2fx** (target <= 1.2x: %s).\n\n", worst, verdict(worst <= 1.2));
    out_summary("merge_depth", "read-time merge: Redis CPU of merged next pages (n = 10) at"
                " depths 0 / 500 / 5,000", "within 1.2x at every depth", verdict(worst <= 1.2),
                "widest spread %.2fx (%s / %s / %s µs)", worst, NUM(sm_median(&v[0].cpu_us)),
                NUM(sm_median(&v[1].cpu_us)), NUM(sm_median(&v[2].cpu_us)));
    for (int k = 0; k < 3; k++)
        variant_free(&v[k]);
}

/* ------------------------------------------------------------ 3. crossover */

static long long used_memory(redisContext *c)
{
    redisReply *r = b_cmd(c, "INFO memory");
    const char *p = strstr(r->str, "\nused_memory:");
    long long v = p ? atoll(p + 13) : -1;

    freeReplyObject(r);
    if (v < 0)
        die("INFO memory: no used_memory");
    return v;
}

static void drop_followers(redisContext *c, const char *prefix, size_t n)
{
    for (size_t i = 0; i < n; i += 1000) {
        size_t end = i + 1000 < n ? i + 1000 : n;
        for (size_t u = i; u < end; u++)
            redisAppendCommand(c, "UNLINK %s", b_key(prefix, XOVER_UID0 + (int64_t)u, ""));
        for (size_t u = i; u < end; u++) {
            redisReply *r;
            if (redisGetReply(c, (void **)&r) != REDIS_OK)
                die("UNLINK: %s", c->errstr);
            freeReplyObject(r);
        }
    }
}

typedef struct fan_cost {
    double cpu_ms, wall_ms, mem_bytes;
} fan_cost;

/* feed_fanout of one new post to the first n of uids, reps times: medians
 * of CPU and time; the memory written is the mean growth of used_memory
 * (an allocation grows by size classes: one run of a fan-out to identical
 * feeds may move all of them to the next class, the next none). */
static fan_cost fan_out(feed *f, redisContext *c, pid_t rpid, const int64_t *uids, size_t n,
                        int reps, int64_t *id)
{
    samples cpu = { 0 }, wall = { 0 };
    double mem = 0;
    fan_cost out;

    for (int r = 0; r < reps; r++) {
        long long m0 = used_memory(c);
        uint64_t c0 = proc_cpu_ns(rpid), t0 = now_ns();
        int rc = feed_fanout(f, uids, n, 1700000000000LL + *id, *id);
        uint64_t t1 = now_ns(), c1 = proc_cpu_ns(rpid);
        if (rc != FEED_OK)
            die("feed_fanout to %zu: %s", n, feed_errmsg(f));
        sm_add(&wall, (double)(t1 - t0) / 1e6);
        sm_add(&cpu, (double)(c1 - c0) / 1e6);
        mem += (double)(used_memory(c) - m0);
        (*id)++;
    }
    out.cpu_ms = sm_median(&cpu);
    out.wall_ms = sm_median(&wall);
    out.mem_bytes = mem / reps;
    sm_free(&cpu);
    sm_free(&wall);
    return out;
}

static void crossover(FILE *md, redisContext *c, pid_t rpid)
{
    static const size_t fs[4] = { 1000, 10000, 100000, 1000000 };
    size_t nf = getenv("BENCH_QUICK") ? 3 : 4, most = fs[nf - 1];
    int64_t *uids = malloc(most * sizeof *uids), id = 1;
    feed *f = open_merge("xover");
    /* The extra Redis CPU a read pays to merge one more author: the slope
     * from n = 1 to n = 10 (a timeline merging a few authors), and the
     * first author's (n = 0 to 1: the plain page becomes a merged one). */
    double per_read = (ratio_n[1] - ratio_n[0]) * cpu_plain / 9;
    double first = (ratio_n[0] - 1) * cpu_plain;
    double rule = 0, per_entry;
    FILE *dat = out_data("merge");
    fan_cost cached[4], cold[4];
    long long m0;

    if (!uids)
        die("out of memory");
    for (size_t i = 0; i < most; i++)
        uids[i] = XOVER_UID0 + (int64_t)i;
    note("merge: caching %zu followers' feeds", most);
    b_cache_feeds(c, "xover", uids, most, XOVER_ITEMS);
    for (size_t k = 0; k < nf; k++) {
        int reps = fs[k] >= 1000000 ? 2 : 5;
        note("merge: fan-out to %zu followers", fs[k]);
        cached[k] = fan_out(f, c, rpid, uids, fs[k], reps, &id);
    }
    /* What one post costs in memory in the long run, size classes averaged
     * out: 40 posts fanned out to 10,000 of the feeds. */
    m0 = used_memory(c);
    for (int p = 0; p < 40; p++, id++)
        if (feed_fanout(f, uids, 10000, 1700000000000LL + id, id) != FEED_OK)
            die("feed_fanout: %s", feed_errmsg(f));
    per_entry = (double)(used_memory(c) - m0) / 40 / 10000;
    drop_followers(c, "xover", most);
    for (size_t k = 0; k < nf; k++) {   /* nothing cached now: the hook's floor */
        int reps = fs[k] >= 1000000 ? 2 : 5;
        cold[k] = fan_out(f, c, rpid, uids, fs[k], reps, &id);
    }
    fprintf(md, "### The crossover: fan out on write, or merge at read time\n\n"
            "Fanning one post out to F followers (`feed_fanout`, one pipeline, 100 feeds a"
            " script call), when every follower's feed is cached (%d items each: every"
            " insert writes) and when none is (the hook only finds that out). Redis"
            " process CPU and the call's time are medians of %s runs; memory written is"
            " the mean growth of `used_memory` per run. Against it, merging that author into a read"
            " costs %s µs of Redis CPU per read (the slope of the first-page figures above"
            " from n = 1 to n = 10, (ratio(10) - ratio(1)) x CPU(plain) / 9; the first"
            " merged author of a timeline costs %s µs, the plain page turning into a merged"
            " one), and writes nothing. R\\* is the number"
            " of merged reads whose CPU equals the fan-out's: below it, merging is"
            " cheaper.\n\n"
            "| followers F | fan-out, all cached: Redis CPU | time | memory written (this run) |"
            " fan-out, none cached: Redis CPU | R\\* (all cached) | R\\* / F |\n"
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
            XOVER_ITEMS, "5 (2 for 1,000,000)", NUM(per_read), NUM(first));
    fprintf(dat, "# F fanout_cached_cpu_ms fanout_cold_cpu_ms merge_R=F/10_ms merge_R=F_ms"
            " merge_R=10F_ms mem_MB\n");
    for (size_t k = 0; k < nf; k++) {
        double rstar = cached[k].cpu_ms * 1000 / per_read;
        fprintf(md, "| %s | %s ms | %s ms | %s MB | %s ms | %s | %.2f |\n", NUM((double)fs[k]),
                NUM(cached[k].cpu_ms), NUM(cached[k].wall_ms), NUM(cached[k].mem_bytes / 1e6),
                NUM(cold[k].cpu_ms), NUM(rstar), rstar / (double)fs[k]);
        fprintf(dat, "%zu %.4f %.4f %.4f %.4f %.4f %.3f\n", fs[k], cached[k].cpu_ms,
                cold[k].cpu_ms, (double)fs[k] / 10 * per_read / 1000,
                (double)fs[k] * per_read / 1000, (double)fs[k] * 10 * per_read / 1000,
                cached[k].mem_bytes / 1e6);
        rule = rstar / (double)fs[k];
    }
    fprintf(md, "\nMemory grows in steps, as allocations reach the next size class: over 40"
            " posts fanned out to 10,000 cached feeds it grew by **%s bytes per follower and"
            " post**.\n", NUM(per_entry));
    fprintf(md, "\n![fan-out vs merge: Redis CPU by followers](merge.png)\n\n"
            "**Rule of thumb** (this machine, these feeds): one post fanned out to cached"
            " feeds costs about as much Redis CPU as **%.2f merged reads per follower**"
            " (%.2f per follower when no follower's feed is cached, as for an author whose"
            " followers are mostly idle). So fan an author out while each follower reads,"
            " on average, more than about %.1f timeline pages per post of that author; merge"
            " the author once they post more often than that, or once F x %s bytes a post is"
            " memory worth keeping: merging writes no memory at all, and a fan-out's time"
            " grows with F (%s ms at F = %s) while a merged read's does not.\n\n",
            rule, cold[nf - 1].cpu_ms * 1000 / per_read / (double)fs[nf - 1], rule,
            NUM(per_entry), NUM(cached[nf - 1].wall_ms), NUM((double)fs[nf - 1]));
    out_summary("merge_xover", "read-time merge vs fan-out: Redis CPU of one post fanned out"
                " to F cached followers = R* merged reads", "report", "report",
                "R*/F = %.2f (F = %s: fan-out %s ms CPU, %s ms, %s bytes a follower written;"
                " a merged read %s µs per author)", rule, NUM((double)fs[nf - 1]),
                NUM(cached[nf - 1].cpu_ms), NUM(cached[nf - 1].wall_ms), NUM(per_entry),
                NUM(per_read));
    fclose(dat);
    feed_close(f);
    free(uids);
}

void section_merge(void)
{
    redisContext *c = b_redis();
    pid_t rpid = redis_pid(c);
    PGconn *pg = b_pg();
    int64_t authors[AUTHORS];
    FILE *md = out_section("merge");
    feed *f;

    load(pg);
    for (int k = 0; k < AUTHORS; k++)
        authors[k] = k + 1;
    f = open_merge("merge");
    first_pages(md, f, authors, rpid);
    next_pages(md, f, pg, authors, rpid);
    crossover(md, c, rpid);
    fclose(md);
    feed_close(f);
    PQfinish(pg);
    redisFree(c);
}
