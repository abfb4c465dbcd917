/* cpu.c -- section "cpu": what a cached page costs Redis now that
 * most pages are plain reads (lib/core/page.c, "Plain reads"), against a plain
 * ZREVRANGE of the same items.
 *
 *   1. Redis process CPU per call (utime + stime of every redis-server
 *      thread, /proc), single connection, interleaved rounds: the first page,
 *      and next pages at depth 500 and 990 of 1,000 and inside a 10,000-item
 *      tie group; feed_page on a handle that holds the rank hint (it walked
 *      there) and on one that does not (the read by score), and
 *      feed_page_ranked on one that does not, given the rank (a cursor
 *      token's), against ZREVRANGE of ranks d..d+20 + the same parse.
 *   2. The same with a steady write rate on the feed being read: a writer
 *      process calls feed_on_insert (a new item at the top) at WRITE_RATE/s
 *      while walks of the first 500 items run; the share of pages that fell
 *      back to page.lua.
 *   3. Pages/s with 8 client processes on one Redis (saturated: 2 cores),
 *      first page and depth 500, feed_page against the plain read. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "reads.h"

#define WRITE_RATE 1000     /* feed_on_insert calls per second in part 2 */
#define WALK_DEPTH 500      /* part 2 walks ranks 0..WALK_DEPTH-1 */
#define NCLIENTS   8        /* part 3 */
#define UID_W      5        /* part 2's feed (about 890 rows; all cached) */

void prime(feed *f, int64_t uid, size_t depth)
{
    int64_t cs = FEED_FIRST, ci = 0;

    for (size_t at = 0; at < depth;) {
        size_t step = depth - at < PAGE_LIMIT ? depth - at : PAGE_LIMIT;
        feed_result r;
        if (feed_page(f, uid, cs, ci, step, &r) != FEED_OK || r.count != step || !r.has_more)
            die("priming uid %lld at %zu: %s", (long long)uid, at, feed_errmsg(f));
        cs = r.next_score;
        ci = r.next_id;
        at += step;
        feed_result_free(&r);
    }
}

/* The share of f's pages since *was that plain reads served, in %, and
 * how many fell back to page.lua. */
static double plain_share(const feed *f, const feed_stats *was, unsigned long long *fell,
                          unsigned long long *pages)
{
    feed_stats now;

    feed_stats_get(f, &now);
    *fell = now.plain_fallbacks - was->plain_fallbacks;
    *pages = now.pages - was->pages;
    return 100.0 * (double)(now.plain_pages - was->plain_pages) / (double)(*pages ? *pages : 1);
}

/* ------------------------------------------------------------ part 1 */

typedef struct cpu_case {
    const char *label;
    int64_t     uid;
    feed       *hinted, *cold, *ranked;
    const char *key;
    page_pos    pos;
} cpu_case;

/* feed_page_ranked with the rank the previous page handed out: the first
 * entry after the cursor at pos.depth sits at rank pos.depth. */
static int op_page_ranked(void *arg)
{
    page_ctx *x = arg;
    feed_result r;
    int rc = feed_page_ranked(x->f, x->uid, x->pos.score, x->pos.id, (int64_t)x->pos.depth,
                              PAGE_LIMIT, &r, NULL);

    if (rc != FEED_OK || r.source != FEED_SOURCE_CACHE)
        die("feed_page_ranked: rc %d source %d: %s", rc, (int)r.source, feed_errmsg(x->f));
    feed_result_free(&r);
    return 0;
}

static double worst_idle = 0;
static const char *worst_idle_case = "";

static void one_case(FILE *md, const cpu_case *cc, int rounds, double secs,
                     redisContext *c, redisContext *stats, pid_t rpid)
{
    raw_ctx raw;
    page_ctx hinted = { cc->hinted, cc->uid, cc->pos }, cold = { cc->cold, cc->uid, cc->pos };
    page_ctx ranked = { cc->ranked, cc->uid, cc->pos };
    variant v[4];
    size_t nv = cc->cold ? 4 : 2;
    feed_stats h0, c0, k0;
    unsigned long long fell, pages;
    double r_h, r_c = NAN, share_h;
    char cold_cell[64] = "-", ranked_cell[64] = "-";

    raw_init(&raw, c, cc->key, cc->pos.depth);
    memset(v, 0, sizeof v);
    v[0] = (variant){ .name = "plain ZREVRANGE", .op = op_bare, .ctx = &raw };
    v[1] = (variant){ .name = "feed_page, hinted", .op = op_page, .ctx = &hinted };
    v[2] = (variant){ .name = "feed_page, no hint", .op = op_page, .ctx = &cold };
    v[3] = (variant){ .name = "feed_page_ranked", .op = op_page_ranked, .ctx = &ranked };
    if (!cc->pos.first)
        prime(cc->hinted, cc->uid, cc->pos.depth);
    feed_stats_get(cc->hinted, &h0);
    if (cc->cold) {
        feed_stats_get(cc->cold, &c0);
        feed_stats_get(cc->ranked, &k0);
    }
    run_rounds(v, nv, rounds, secs, 3, stats, rpid);
    share_h = plain_share(cc->hinted, &h0, &fell, &pages);
    r_h = paired_ratio_cpu(&v[1], &v[0]);
    if (cc->cold) {
        double share_c = plain_share(cc->cold, &c0, &fell, &pages);
        r_c = paired_ratio_cpu(&v[2], &v[0]);
        double share_k = plain_share(cc->ranked, &k0, &fell, &pages);
        double r_k = paired_ratio_cpu(&v[3], &v[0]);
        snprintf(cold_cell, sizeof cold_cell, "%s µs, **%.2fx**, %.1f%% plain",
                 NUM(sm_median(&v[2].cpu_us)), r_c, share_c);
        snprintf(ranked_cell, sizeof ranked_cell, "%s µs, **%.2fx**, %.1f%% plain",
                 NUM(sm_median(&v[3].cpu_us)), r_k, share_k);
    }
    fprintf(md, "| %s | %s µs | %s µs | **%.2fx** %s | %.1f%% | %s | %s |\n", cc->label,
            NUM(sm_median(&v[0].cpu_us)), NUM(sm_median(&v[1].cpu_us)), r_h,
            verdict(r_h <= 1.15), share_h, cold_cell, ranked_cell);
    if (r_h > worst_idle) {
        worst_idle = r_h;
        worst_idle_case = cc->label;
    }
    for (size_t k = 0; k < 4; k++)
        variant_free(&v[k]);
}

static void part_idle(FILE *md, redisContext *c, redisContext *stats, pid_t rpid)
{
    PGconn *pg = b_pg();
    feed *f1k = b_open("feed", 1000), *c1k = b_open("feed", 1000), *k1k = b_open("feed", 1000),
         *ftie = b_open("tie", 10000), *ctie = b_open("tie", 10000);
    feed_item *k1, *tie;
    size_t n1k = sql_feed(pg, UID_1K, &k1), ntie = sql_feed(pg, UID_TIE, &tie);
    int rounds = q_rounds(15);
    double secs = q_secs(0.15);
    char key1k[64], keytie[64];
    cpu_case cases[] = {
        { "first page", UID_1K, f1k, NULL, NULL, key1k, pos_at(k1, n1k, 0) },
        { "next page, depth 500 of 1,000", UID_1K, f1k, c1k, k1k, key1k, pos_at(k1, n1k, 500) },
        { "next page, depth 990 of 1,000", UID_1K, f1k, c1k, k1k, key1k, pos_at(k1, n1k, 990) },
        { "next page inside a 10,000-item tie group, depth 5,000", UID_TIE, ftie, NULL, NULL,
          keytie, pos_at(tie, ntie, 5000) },
    };

    b_key_copy(key1k, sizeof key1k, b_key("feed", UID_1K, ""));
    b_key_copy(keytie, sizeof keytie, b_key("tie", UID_TIE, ""));

    note("cpu: Redis CPU per page, no writes");
    warm(f1k, c, UID_1K, "feed", 1001);
    warm(ftie, c, UID_TIE, "tie", 10001);
    fprintf(md, "### No writes: Redis process CPU per page, single connection\n\n"
            "%d interleaved rounds of %.2f s per variant; CPU per call is the"
            " redis-server process's utime + stime (all threads) over the round /"
            " calls; medians, and the ratio is the median of the per-round ratios."
            " The peer is a plain `ZREVRANGE key d d+%d WITHSCORES` (the %d items"
            " of the page plus the one that tells whether more exist) with the same"
            " parse. *Hinted*: the handle walked to the cursor page by page, so it"
            " holds the rank where the page starts (a reader's own next page); the"
            " first page needs no hint. *No hint*: a handle that never saw the"
            " cursor (another process's next page), read by score. *Rank in token*:"
            " such a handle given the rank the previous page handed out"
            " (feed_page_ranked, the rank a cursor token carries); it sends what"
            " the hinted handle sends. In the tie group a handle without a hint"
            " falls back to page.lua once and holds the hint from then on, so that"
            " row has neither column.\n\n",
            rounds, secs, PAGE_LIMIT, PAGE_LIMIT);
    fprintf(md, "| page | plain ZREVRANGE | **feed_page, hinted** | hinted / plain"
            " (target <= 1.15x) | pages by plain read | no hint: CPU, / plain, plain share |"
            " rank in token: CPU, / plain, plain share |\n"
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        note("cpu: %s", cases[i].label);
        one_case(md, &cases[i], rounds, secs, c, stats, rpid);
    }
    out_summary("cpu_idle", "Redis process CPU per cached page vs a plain ZREVRANGE of the"
                " same items: first page; next page at depth 500/990 of 1,000 and in a"
                " 10,000 tie group (hinted), no writes", "<= 1.15x",
                verdict(worst_idle <= 1.15), "worst %.2fx (%s)", worst_idle, worst_idle_case);
    free(k1);
    free(tie);
    feed_close(f1k);
    feed_close(c1k);
    feed_close(k1k);
    feed_close(ftie);
    feed_close(ctie);
    PQfinish(pg);
}

/* ------------------------------------------------------------ part 2 */

/* A child: feed_on_insert of a new top item at rate/s until killed. */
static pid_t start_writer(int64_t uid, int rate)
{
    pid_t pid = fork();

    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        feed *f;
        double t0;
        /* Ends with the bench, even one that dies: a writer left behind
         * would cancel the next run's rebuild of the feed. */
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() == 1)
            _exit(1);
        f = b_open("wr", 1000);
        t0 = now_s();
        for (long n = 0;; n++) {
            double due = t0 + (double)n / rate, now = now_s();
            if (due > now)
                sleep_s(due - now);
            /* scores above every row of the data set, ids above every id */
            if (feed_on_insert(f, uid, 4000000000000LL + n, 900000000 + n) != FEED_OK)
                die("writer: %s", feed_errmsg(f));
        }
    }
    return pid;
}

typedef struct walk_ctx {
    feed         *f;
    redisContext *c;
    int64_t       uid;
    int64_t       cs, ci;      /* feed_page: the cursor of the next call */
    size_t        at;          /* plain: the rank of the next call */
    char          key[96];
    feed         *g;           /* op_walk_ranked: the other handle */
    int64_t       rank;        /* op_walk_ranked: the next call's rank hint */
    int           turn;
    double        last;        /* now_s() of the previous call */
} walk_ctx;

/* A walk left for a while (the other variants' turns: hundreds of writes)
 * starts again from the top, as a reader coming back would: its cursor may
 * have been pushed past the cached 1,000 entries meanwhile, and that page
 * would come from SQL. */
static void walk_resume(walk_ctx *w)
{
    double now = now_s();

    if (now - w->last > 0.02)
        w->at = 0;
    w->last = now;
}

/* One page of a walk down to WALK_DEPTH, then again from the top. */
static int op_walk_page(void *arg)
{
    walk_ctx *w = arg;
    feed_result r;
    int rc;

    walk_resume(w);
    rc = feed_page(w->f, w->uid, w->at ? w->cs : FEED_FIRST, w->ci, PAGE_LIMIT, &r);
    if (rc != FEED_OK || r.source != FEED_SOURCE_CACHE || !r.has_more)
        die("walk at %zu: rc %d source %d has_more %d: %s", w->at, rc, (int)r.source,
            r.has_more, feed_errmsg(w->f));
    w->cs = r.next_score;
    w->ci = r.next_id;
    w->at = w->at + PAGE_LIMIT >= WALK_DEPTH ? 0 : w->at + PAGE_LIMIT;
    feed_result_free(&r);
    return 0;
}

/* The same walk, pages alternating between two handles (so neither holds
 * the hint of the page it serves), the rank passed on as a token would. */
static int op_walk_ranked(void *arg)
{
    walk_ctx *w = arg;
    feed *f = w->turn ? w->g : w->f;
    feed_result r;
    int rc;

    walk_resume(w);
    rc = feed_page_ranked(f, w->uid, w->at ? w->cs : FEED_FIRST, w->ci, w->at ? w->rank : -1,
                          PAGE_LIMIT, &r, &w->rank);
    if (rc != FEED_OK || r.source != FEED_SOURCE_CACHE || !r.has_more)
        die("ranked walk at %zu: rc %d source %d has_more %d: %s", w->at, rc, (int)r.source,
            r.has_more, feed_errmsg(f));
    w->cs = r.next_score;
    w->ci = r.next_id;
    w->at = w->at + PAGE_LIMIT >= WALK_DEPTH ? 0 : w->at + PAGE_LIMIT;
    w->turn ^= 1;
    feed_result_free(&r);
    return 0;
}

static int op_walk_plain(void *arg)
{
    walk_ctx *w = arg;
    raw_ctx raw;

    walk_resume(w);
    raw_init(&raw, w->c, w->key, w->at);
    w->at = w->at + PAGE_LIMIT >= WALK_DEPTH ? 0 : w->at + PAGE_LIMIT;
    return op_bare(&raw);
}

static void part_writes(FILE *md, redisContext *c, redisContext *stats, pid_t rpid)
{
    feed *f = b_open("wr", 1000), *fa = b_open("wr", 1000), *fb = b_open("wr", 1000);
    walk_ctx page = { .f = f, .uid = UID_W }, plain = { .c = c, .uid = UID_W };
    walk_ctx ranked = { .f = fa, .g = fb, .uid = UID_W, .rank = -1 };
    variant v[3];
    feed_stats s0, a0, b0, a1, b1;
    unsigned long long fallbacks, pages;
    int rounds = q_rounds(15), status;
    double secs = q_secs(0.15), r, r_k, fell, fell_k;
    long long card;
    pid_t wpid;

    note("cpu: with %d writes/s on the feed being read", WRITE_RATE);
    b_cmd_ok(c, "DEL %s %s", b_key("wr", UID_W, ""), b_key("wr", UID_W, ":lease"));
    {
        feed_result fr;
        if (feed_page(f, UID_W, FEED_FIRST, 0, PAGE_LIMIT, &fr) != FEED_OK)
            die("warming %s: %s", b_key("wr", UID_W, ""), feed_errmsg(f));
        feed_result_free(&fr);
    }
    card = b_cmd_int(c, "ZCARD %s", b_key("wr", UID_W, ""));
    if (card < WALK_DEPTH + PAGE_LIMIT + 1)
        die("%s holds %lld entries", b_key("wr", UID_W, ""), card);
    b_key_copy(plain.key, sizeof plain.key, b_key("wr", UID_W, ""));
    memset(v, 0, sizeof v);
    v[0] = (variant){ .name = "plain walk", .op = op_walk_plain, .ctx = &plain };
    v[1] = (variant){ .name = "feed_page walk", .op = op_walk_page, .ctx = &page };
    v[2] = (variant){ .name = "feed_page_ranked walk", .op = op_walk_ranked, .ctx = &ranked };
    wpid = start_writer(UID_W, WRITE_RATE);
    sleep_s(0.2);
    feed_stats_get(f, &s0);
    feed_stats_get(fa, &a0);
    feed_stats_get(fb, &b0);
    run_rounds(v, 3, rounds, secs, 3, stats, rpid);
    plain_share(f, &s0, &fallbacks, &pages);
    kill(wpid, SIGTERM);
    waitpid(wpid, &status, 0);
    feed_stats_get(fa, &a1);
    feed_stats_get(fb, &b1);
    r = paired_ratio_cpu(&v[1], &v[0]);
    r_k = paired_ratio_cpu(&v[2], &v[0]);
    fell = 100.0 * (double)fallbacks / (double)(pages ? pages : 1);
    {
        unsigned long long kf = (a1.plain_fallbacks - a0.plain_fallbacks) +
                                (b1.plain_fallbacks - b0.plain_fallbacks);
        unsigned long long kp = (a1.pages - a0.pages) + (b1.pages - b0.pages);
        fell_k = 100.0 * (double)kf / (double)(kp ? kp : 1);
        fprintf(md, "\n### With a steady write rate on the same feed\n\n"
                "A writer process calls `feed_on_insert` %d times a second (a new item at"
                " the top of the feed, so every page below moves down one rank per"
                " write) on a %lld-entry cached feed while a reader walks its first %d"
                " items, page after page, from the first page again at the end; the"
                " peer walks the same ranks with plain ZREVRANGE calls. *feed_page*: one"
                " handle walks (it holds the rank hint of each next page). *feed_page_ranked,"
                " two handles*: pages alternate between two handles, so no handle ever"
                " served the page before the one it is asked for (a web farm), and the"
                " rank comes from the previous page (`next_rank`, what a token carries)."
                " Redis CPU per call includes the writer's share (the same per second for"
                " all). %d interleaved rounds of %.2f s.\n\n"
                "| walk | plain ZREVRANGE | **feed_page** | feed_page / plain | feed_page"
                " pages/s (writes per page) | pages that fell back to page.lua |\n"
                "| --- | ---: | ---: | ---: | ---: | ---: |\n"
                "| pages 1-%d, one handle | %s µs | **%s µs** | **%.2fx** | %s (%.2f) |"
                " %.2f%% (%llu of %llu) |\n"
                "| pages 1-%d, feed_page_ranked, two handles | %s µs | **%s µs** | **%.2fx** |"
                " %s (%.2f) | %.2f%% (%llu of %llu) |\n",
                WRITE_RATE, card, WALK_DEPTH, rounds, secs, WALK_DEPTH / PAGE_LIMIT,
                NUM(sm_median(&v[0].cpu_us)), NUM(sm_median(&v[1].cpu_us)), r,
                NUM(sm_median(&v[1].rate)), WRITE_RATE / sm_median(&v[1].rate), fell,
                fallbacks, pages, WALK_DEPTH / PAGE_LIMIT, NUM(sm_median(&v[0].cpu_us)),
                NUM(sm_median(&v[2].cpu_us)), r_k, NUM(sm_median(&v[2].rate)),
                WRITE_RATE / sm_median(&v[2].rate), fell_k, kf, kp);
    }
    out_summary("cpu_writes", "the same, walks of 500 items while 1,000 writes/s land on"
                " the feed", "report", "report", "%.2fx; %.2f%% of pages fell back to"
                " page.lua (two handles, rank in the token: %.2fx, %.2f%%)", r, fell, r_k,
                fell_k);
    for (int k = 0; k < 3; k++)
        variant_free(&v[k]);
    feed_close(f);
    feed_close(fa);
    feed_close(fb);
}

/* ------------------------------------------------------------ part 3 */

enum { K_PLAIN, K_FEED };

/* The calling process's CPU time (user + system), ns. */
static uint64_t self_cpu_ns(void)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0)
        die("clock_gettime: %s", strerror(errno));
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* What a client process reports: calls made, CPU spent making them. */
typedef struct client_report {
    long     n;
    uint64_t cpu_ns;
} client_report;

/* A child: from start to stop (now_s), the kind of call at depth; writes
 * its count and its CPU time over the run to fd. */
static void client(int kind, size_t depth, const page_pos *pos, double start,
                   double stop, int fd)
{
    redisContext *c = b_redis();
    feed *f = b_open("feed", 1000);
    raw_ctx raw;
    page_ctx page = { f, UID_1K, *pos };
    client_report rep = { 0, 0 };
    char key[64];

    b_key_copy(key, sizeof key, b_key("feed", UID_1K, ""));
    raw_init(&raw, c, key, depth);
    if (kind == K_FEED && depth > 0)
        prime(f, UID_1K, depth);
    if (start > now_s())
        sleep_s(start - now_s());
    rep.cpu_ns = self_cpu_ns();
    while (now_s() < stop) {
        if (kind == K_FEED)
            op_page(&page);
        else
            op_bare(&raw);
        rep.n++;
    }
    rep.cpu_ns = self_cpu_ns() - rep.cpu_ns;
    if (write(fd, &rep, sizeof rep) != (ssize_t)sizeof rep)
        _exit(1);
    feed_close(f);
    redisFree(c);
    _exit(0);
}

/* One phase: NCLIENTS processes for secs; pages/s, and Redis's and the
 * clients' CPU per page. */
static void phase(int kind, size_t depth, const page_pos *pos, double secs, pid_t rpid,
                  samples *rate, samples *cpu, samples *ccpu)
{
    int fds[2];
    double start = now_s() + 0.5, stop = start + secs;
    uint64_t cpu0, cpu1, client_ns = 0;
    long total = 0;

    if (pipe(fds) != 0)
        die("pipe: %s", strerror(errno));
    for (int i = 0; i < NCLIENTS; i++) {
        pid_t pid = fork();
        if (pid < 0)
            die("fork: %s", strerror(errno));
        if (pid == 0) {
            close(fds[0]);
            client(kind, depth, pos, start, stop, fds[1]);
        }
    }
    close(fds[1]);
    sleep_s(start - now_s());
    cpu0 = proc_cpu_ns(rpid);
    sleep_s(stop - now_s());
    cpu1 = proc_cpu_ns(rpid);
    for (int i = 0; i < NCLIENTS; i++) {
        client_report rep;
        int status;
        if (read(fds[0], &rep, sizeof rep) != (ssize_t)sizeof rep)
            die("a client process failed");
        total += rep.n;
        client_ns += rep.cpu_ns;
        wait(&status);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            die("a client process failed");
    }
    close(fds[0]);
    sm_add(rate, (double)total / secs);
    sm_add(cpu, (double)(cpu1 - cpu0) / 1e3 / (double)total);
    sm_add(ccpu, (double)client_ns / 1e3 / (double)total);
}

static void part_clients(FILE *md, pid_t rpid)
{
    PGconn *pg = b_pg();
    feed_item *k1;
    size_t n1k = sql_feed(pg, UID_1K, &k1);
    size_t depths[2] = { 0, 500 };
    int rounds = q_rounds(9);
    double secs = q_secs(1.0), worst = INFINITY;

    fprintf(md, "\n### %d client processes, pages/s\n\n"
            "%d processes, each with its own connection (and, for feed_page, its own"
            " handle, which walked to the depth first), read the same page of the"
            " cached 1,000-item feed as fast as they can for %.1f s; Redis is"
            " saturated (it shares the machine's cores with the clients). %d rounds,"
            " plain and feed_page alternating; medians, ratio = median of per-round"
            " ratios. CPU per page: Redis's (the process's CPU over the phase / pages)"
            " and the clients' (each process's own CPU over the phase, summed, /"
            " pages). With the cores saturated, pages/s is bounded by cores / (client"
            " + Redis CPU per page): the last column is the ratio that bound gives,"
            " plain's total CPU per page / feed_page's, per round, so it is the"
            " floor the clients' own work sets, measured in the same phases.\n\n"
            "| page | plain ZREVRANGE pages/s | **feed_page pages/s** |"
            " feed_page / plain (target >= 0.9x) | Redis CPU per page: plain / feed_page |"
            " client CPU per page: plain / feed_page | total CPU bound: plain / feed_page |\n"
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
            NCLIENTS, NCLIENTS, secs, rounds);
    for (int di = 0; di < 2; di++) {
        samples rate[2] = { { 0 } }, cpu[2] = { { 0 } }, ccpu[2] = { { 0 } }, tot[2] = { { 0 } };
        page_pos pos = pos_at(k1, n1k, depths[di]);
        double r, bound;
        note("cpu: %d clients, depth %zu", NCLIENTS, depths[di]);
        for (int round = 0; round < rounds; round++)
            for (int k = 0; k < 2; k++) {
                int kind = (k + round) % 2;
                phase(kind, depths[di], &pos, secs, rpid, &rate[kind], &cpu[kind], &ccpu[kind]);
                sm_add(&tot[kind], cpu[kind].v[cpu[kind].n - 1] + ccpu[kind].v[ccpu[kind].n - 1]);
            }
        r = median_of_ratios(&rate[K_FEED], &rate[K_PLAIN]);
        bound = median_of_ratios(&tot[K_PLAIN], &tot[K_FEED]);
        worst = r < worst ? r : worst;
        fprintf(md, "| %s | %s | **%s** | **%.2fx** %s | %s / %s µs | %s / %s µs | %.2fx |\n",
                depths[di] ? "next page, depth 500 (hinted)" : "first page",
                NUM(sm_median(&rate[K_PLAIN])), NUM(sm_median(&rate[K_FEED])), r,
                verdict(r >= 0.9), NUM(sm_median(&cpu[K_PLAIN])), NUM(sm_median(&cpu[K_FEED])),
                NUM(sm_median(&ccpu[K_PLAIN])), NUM(sm_median(&ccpu[K_FEED])), bound);
        for (int k = 0; k < 2; k++) {
            sm_free(&rate[k]);
            sm_free(&cpu[k]);
            sm_free(&ccpu[k]);
            sm_free(&tot[k]);
        }
    }
    out_summary("cpu_clients", "pages/s, 8 client processes, first page and depth 500,"
                " feed_page vs plain ZREVRANGE", ">= 0.9x", verdict(worst >= 0.9),
                "worst %.2fx", worst);
    free(k1);
    PQfinish(pg);
}

void section_cpu(void)
{
    redisContext *c = b_redis(), *stats = b_redis();
    pid_t rpid = redis_pid(stats);
    FILE *md = out_section("cpu");

    fprintf(md, "## Redis CPU per cached page: plain reads\n\n"
            "Cached pages are plain Redis reads whenever the reply proves the page"
            " (lib/core/page.c, \"Plain reads\"); page.lua answers only a miss, the lease,"
            " or a cursor that moved too far. Figures are interleaved and paired by"
            " round, so other work on the machine hits every variant alike.\n\n");
    part_idle(md, c, stats, rpid);
    part_writes(md, c, stats, rpid);
    part_clients(md, rpid);
    fclose(md);
    redisFree(c);
    redisFree(stats);
}
