/* filter.c -- section "filter": filtered pages (lib/core/filter.c) beside the
 * unfiltered page they extend.
 *
 *   1. Redis CPU and round trips per page: feed_page against
 *      feed_page_filtered with 10%, 50% and 90% of the items hidden (by
 *      author), and with a hide set none of the feed's authors is in (0%
 *      matching); warm copies, first pages and pages at depth 500, in
 *      interleaved rounds; ratios to the unfiltered page of the same depth.
 *      Twice: with the author index as those pages filled it (a listpack up
 *      to zset-max-listpack-entries entries), and once a walk of the whole
 *      copy filled it (a skiplist).
 *   2. SQL work past the cached copy: a walk of pages from the copy's last
 *      item on, unfiltered (the plain keyset page) and filtered at 10%, 50%
 *      and 90% hidden: index rows PostgreSQL read (pg_stat_user_tables, the
 *      handle's backend closed so that its counts are flushed), statements
 *      and rows read per visible item.
 *   3. Memory per cached item: a plain zset of the same items (decimal ids),
 *      the copy of a handle without item_author_column, and the copy plus
 *      its author index once filtered pages walked the copy (and a page past
 *      it); max_len 100 (listpacks) and 1,000 (skiplists).
 *
 * Data (its own, beside bench/load.sql's): table filter_entry (uid, score,
 * id, author), FILTER_UID with FILTER_ROWS rows, row g by author g % 100 (each
 * author 1% of the rows, spread over the feed by the scores), so hiding
 * authors 0 .. k-1 hides k% of the items. Key prefixes "flt*".
 */
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "reads.h"
#include "filter.h"

#define FILTER_TABLE  "filter_entry"
#define FILTER_UID    7
#define FILTER_ROWS   20000
#define FILTER_LEN    1000          /* max_len of the copies of parts 1 and 2 */
#define DEEP          500           /* the deep page's depth */
#define WALK_PAGES    10            /* pages of a walk past the copy */

/* The hide sets: authors 0 .. k-1 hide k% of the items; the "0% matching"
 * set names authors the feed does not have. */
enum { H_NONE, H_MISS, H_10, H_50, H_90, NHIDE };
static const char *const hide_label[NHIDE] = {
    "feed_page (unfiltered)", "filtered, 10 authors hidden, 0% of items",
    "filtered, 10% hidden", "filtered, 50% hidden", "filtered, 90% hidden"
};
static int64_t hide_set[NHIDE][90];
static size_t hide_n[NHIDE];

static void hide_init(void)
{
    static const size_t k[NHIDE] = { 0, 10, 10, 50, 90 };

    for (int h = 0; h < NHIDE; h++) {
        hide_n[h] = k[h];
        for (size_t i = 0; i < k[h]; i++)
            hide_set[h][i] = h == H_MISS ? 1000 + (int64_t)i : (int64_t)i;
    }
}

static void load(PGconn *pg)
{
    note("filter: loading %d rows by 100 authors into " FILTER_TABLE, FILTER_ROWS);
    PQclear(b_sql(pg, "DROP TABLE IF EXISTS " FILTER_TABLE));
    PQclear(b_sql(pg, "CREATE TABLE " FILTER_TABLE " (uid bigint NOT NULL, score bigint NOT NULL,"
                      " id bigint NOT NULL, author bigint, PRIMARY KEY (uid, id))"));
    PQclear(b_sql(pg, "INSERT INTO " FILTER_TABLE " SELECT 7, 1700000000000 +"
                      " (g::int8 * 2654435761) % 100000000000, 2 * g, g % 100"
                      " FROM generate_series(1, 20000) g"));
    PQclear(b_sql(pg, "CREATE INDEX " FILTER_TABLE "_page ON " FILTER_TABLE
                      " (uid, score DESC, id DESC)"));
    PQclear(b_sql(pg, "VACUUM ANALYZE " FILTER_TABLE));
}

/* The feed, or its rows whose author is not hidden by h, in page order;
 * authors into *auth when not NULL. */
static size_t filter_rows(PGconn *pg, int h, feed_item **out, int64_t **auth)
{
    char sql[512], arr[600] = "{";
    size_t len = 1, n;
    PGresult *res;

    for (size_t i = 0; i < hide_n[h]; i++)
        len += (size_t)snprintf(arr + len, sizeof arr - len, "%s%lld", i ? "," : "",
                                (long long)hide_set[h][i]);
    snprintf(arr + len, sizeof arr - len, "}");
    snprintf(sql, sizeof sql, "SELECT score, id, author FROM " FILTER_TABLE " WHERE uid = %d"
             " AND author <> ALL('%s'::int8[]) ORDER BY score DESC, id DESC", FILTER_UID, arr);
    res = b_sql(pg, sql);
    n = (size_t)PQntuples(res);
    *out = malloc((n + 1) * sizeof **out);
    if (auth)
        *auth = malloc((n + 1) * sizeof **auth);
    if (!*out || (auth && !*auth))
        die("out of memory");
    for (size_t i = 0; i < n; i++) {
        (*out)[i].score = strtoll(PQgetvalue(res, (int)i, 0), NULL, 10);
        (*out)[i].id = strtoll(PQgetvalue(res, (int)i, 1), NULL, 10);
        if (auth)
            (*auth)[i] = strtoll(PQgetvalue(res, (int)i, 2), NULL, 10);
    }
    PQclear(res);
    return n;
}

/* The rank of (score, id) in items (page order): the first item after it. */
static size_t rank_after(const feed_item *items, size_t n, int64_t score, int64_t id)
{
    size_t lo = 0, hi = n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (items[mid].score > score || (items[mid].score == score && items[mid].id > id))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < n && items[lo].score == score && items[lo].id == id)
        lo++;
    return lo;
}

static long long config_num(redisContext *c, const char *name)
{
    redisReply *r = b_cmd(c, "CONFIG GET %s", name);
    long long v;

    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2)
        die("CONFIG GET %s: unexpected reply", name);
    v = atoll(r->element[1]->str);
    freeReplyObject(r);
    return v;
}

static feed *open_filter(const char *prefix, uint32_t max_len, int with_author)
{
    feed_config cfg;
    feed *f;
    int rc;

    b_config(&cfg, prefix, max_len);
    cfg.table = FILTER_TABLE;
    cfg.item_author_column = with_author ? "author" : NULL;
    rc = feed_open(&f, &cfg);
    if (rc != FEED_OK)
        die("feed_open: %s: %s", feed_strerror(rc), feed_errmsg(NULL));
    if (feed_invalidate(f, INT64_MIN) != FEED_OK)     /* settle the restart fence */
        die("settling the restart fence: %s", feed_errmsg(f));
    return f;
}

/* ------------------------------------------------------------ the calls */

typedef struct fctx {
    feed       *f;
    int         hide;            /* H_*: H_NONE is feed_page */
    int         first;
    int64_t     score, id;       /* the cursor when not first */
    feed_source want_source;     /* 0: any */
    feed_result r;               /* the last page */
} fctx;

static int fcall(fctx *x)
{
    feed_filter flt = { hide_set[x->hide], hide_n[x->hide], NULL, NULL };
    int64_t s = x->first ? FEED_FIRST : x->score;

    feed_result_free(&x->r);
    return x->hide == H_NONE ? feed_page(x->f, FILTER_UID, s, x->id, PAGE_LIMIT, &x->r)
                             : feed_page_filtered(x->f, FILTER_UID, s, x->id, PAGE_LIMIT, &flt,
                                                  &x->r);
}

static int op_fpage(void *arg)
{
    fctx *x = arg;
    int rc = fcall(x);

    if (rc != FEED_OK)
        die("filter: %s: %s: %s", hide_label[x->hide], feed_strerror(rc), feed_errmsg(x->f));
    if (x->want_source && x->r.source != x->want_source)
        die("filter: %s: source %s, not %s", hide_label[x->hide], feed_source_name(x->r.source),
            feed_source_name(x->want_source));
    if (x->r.count != PAGE_LIMIT)
        die("filter: %s: a page of %zu", hide_label[x->hide], x->r.count);
    return 0;
}

/* The page x serves must be SQL's with the filter in its WHERE clause. */
static void check_page(PGconn *pg, fctx *x)
{
    feed_item *want;
    size_t n = filter_rows(pg, x->hide, &want, NULL);
    size_t at = x->first ? 0 : rank_after(want, n, x->score, x->id);

    op_fpage(x);
    for (size_t i = 0; i < x->r.count; i++)
        if (at + i >= n || want[at + i].score != x->r.items[i].score ||
            want[at + i].id != x->r.items[i].id)
            die("filter: %s: item %zu of the page differs from SQL's", hide_label[x->hide], i);
    free(want);
}

/* ------------------------------------------------------------ 1. Redis */

/* INFO commandstats as (name, calls, usec) rows. */
typedef struct cmdrow { char name[32]; unsigned long long calls, usec; } cmdrow;

static size_t cmd_rows(redisContext *c, cmdrow *rows, size_t cap)
{
    redisReply *r = b_cmd(c, "INFO commandstats");
    const char *p = r->str;
    size_t n = 0;

    while (n < cap && (p = strstr(p, "cmdstat_")) != NULL) {
        cmdrow *x = &rows[n];
        p += 8;
        if (sscanf(p, "%31[^:]:calls=%llu,usec=%llu", x->name, &x->calls, &x->usec) == 3)
            n++;
    }
    freeReplyObject(r);
    return n;
}

/* The commands pages sent between two snapshots: "name calls (server time)
 * per page", by name. Redis 7 counts a script's inner commands on their own too. */
static void cmd_mix(char *out, size_t cap, const cmdrow *a, size_t na, const cmdrow *b, size_t nb,
                    double pages)
{
    size_t len = 0;

    out[0] = 0;
    for (size_t i = 0; i < nb; i++) {
        unsigned long long before = 0, usec = 0;
        if (strcmp(b[i].name, "info") == 0)
            continue;
        for (size_t j = 0; j < na; j++)
            if (strcmp(a[j].name, b[i].name) == 0) {
                before = a[j].calls;
                usec = a[j].usec;
            }
        if (b[i].calls > before && len < cap)
            len += (size_t)snprintf(out + len, cap - len, "%s%s %.2f (%.2f µs)", len ? ", " : "",
                                    b[i].name, (double)(b[i].calls - before) / pages,
                                    (double)(b[i].usec - usec) / pages);
    }
}

/* What a page sends Redis: the page's reads and scripts, the author index. */
#define FILTER_CMDS "=zrevrange,zrevrangebyscore,pttl,pexpire,evalsha,zadd,zremrangebyrank"

static void walk_copy(feed *f, const feed_item *all, size_t nall, uint32_t max_len, int hide,
                      feed_keep_fn *keep);
static const char *encoding(redisContext *c, const char *key, char buf[16]);

enum { NV = 2 * NHIDE };

/* One measure of the variants of part 1 in the author index's present state:
 * counters over 200 pages each, then interleaved rounds; one table. Returns
 * the worst ratio at 10% hidden, and its round trips in *rt10. */
static double redis_measure(FILE *md, redisContext *c, pid_t rpid, fctx *ctx,
                            const double *examined, const char *state, double *rt10,
                            double ratio50[2], double ratio90[2])
{
    variant v[NV];
    double rt[NV], sqlq[NV], worst10 = 0;
    char mix[NV][320], enc[16];
    cmdrow *ca = malloc(2 * 256 * sizeof *ca), *cb = ca + 256;
    int rounds = q_rounds(9);
    double secs = q_secs(0.3);
    const char *hkey = b_key_of("flt", FILTER_TABLE, FILTER_UID, ":authors");
    long long hlen = b_cmd_int(c, "ZCARD %s", hkey);

    if (!ca)
        die("out of memory");
    encoding(c, hkey, enc);
    memset(v, 0, sizeof v);
    for (int k = 0; k < NV; k++) {
        feed_stats a, b;
        size_t na = cmd_rows(c, ca, 256), nb;
        feed_stats_get(ctx[k].f, &a);
        for (int i = 0; i < 200; i++)
            op_fpage(&ctx[k]);
        feed_stats_get(ctx[k].f, &b);
        nb = cmd_rows(c, cb, 256);
        cmd_mix(mix[k], sizeof mix[0], ca, na, cb, nb, 200);
        rt[k] = (double)(b.redis_calls - a.redis_calls) / 200;
        sqlq[k] = (double)(b.sql_queries - a.sql_queries) / 200;
        v[k] = (variant){ .name = hide_label[ctx[k].hide], .op = op_fpage, .ctx = &ctx[k],
                          .cmd = FILTER_CMDS };
    }
    note("filter: Redis CPU per page (%s), %d rounds of %d variants", state, rounds, NV);
    run_rounds(v, NV, rounds, secs, 3, c, rpid);
    fprintf(md, "#### The author index %s: ZCARD %lld, %s\n\n"
            "| page | variant | Redis CPU per page | / unfiltered | server time (commandstats)"
            " | / unfiltered | round trips per page | SQL statements per page | items examined"
            " | latency p50 | p99 |\n"
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
            state, hlen, enc);
    *rt10 = 0;
    for (int d = 0; d < 2; d++) {
        for (int h = 0; h < NHIDE; h++) {
            variant *x = &v[d * NHIDE + h], *base = &v[d * NHIDE];
            double rc = h ? paired_ratio_cpu(x, base) : 1, rs = h ? paired_ratio_srv(x, base) : 1;
            fprintf(md, "| %s | %s | %s µs | %s%.2fx%s | %s µs | %.2fx | %.2f | %.2f | %s |"
                    " %s µs | %s µs |\n", d ? "depth 500" : "first", hide_label[h],
                    NUM(sm_median(&x->cpu_us)), h == H_10 ? "**" : "", rc, h == H_10 ? "**" : "",
                    NUM(sm_median(&x->srv_us)), rs, rt[d * NHIDE + h], sqlq[d * NHIDE + h],
                    NUM(examined[d * NHIDE + h]), NUM(sm_pct(&x->lat_us, 50)),
                    NUM(sm_pct(&x->lat_us, 99)));
            if (h == H_10) {
                worst10 = rc > worst10 ? rc : worst10;
                *rt10 = rt[d * NHIDE + h] > *rt10 ? rt[d * NHIDE + h] : *rt10;
            }
            if (h == H_50)
                ratio50[d] = rc;
            if (h == H_90)
                ratio90[d] = rc;
        }
    }
    fprintf(md, "\nCommands per page and their server time per page (INFO commandstats over"
            " the 200 pages of the counters, one variant after the other, not interleaved;"
            " Redis 7 counts the commands a script runs on their own too):\n\n"
            "| page | variant | commands per page (server time per page) |\n| --- | --- | --- |\n");
    for (int k = 0; k < NV; k++)
        fprintf(md, "| %s | %s | %s |\n", k >= NHIDE ? "depth 500" : "first",
                hide_label[k % NHIDE], mix[k]);
    fprintf(md, "\n");
    for (int k = 0; k < NV; k++)
        variant_free(&v[k]);
    free(ca);
    return worst10;
}

static void redis_cost(FILE *md, PGconn *pg, redisContext *c, pid_t rpid, const feed_item *all,
                       size_t nall)
{
    fctx ctx[NV];
    double examined[NV], worst[2], rt10[2], r50[2][2], r90[2][2];
    feed *warm_f = open_filter("flt", FILTER_LEN, 1);

    warm_table(warm_f, c, FILTER_UID, "flt", FILTER_TABLE, FILTER_LEN);
    b_cmd_ok(c, "DEL %s", b_key_of("flt", FILTER_TABLE, FILTER_UID, ":authors"));
    memset(ctx, 0, sizeof ctx);
    for (int d = 0; d < 2; d++) {
        for (int h = 0; h < NHIDE; h++) {
            fctx *x = &ctx[d * NHIDE + h];
            page_pos p = pos_at(all, nall, d ? DEEP : 0);
            /* A handle of its own: each learns the share its pages hide. */
            x->f = open_filter("flt", FILTER_LEN, 1);
            x->hide = h;
            x->first = p.first;
            x->score = p.score;
            x->id = p.id;
            for (int i = 0; i < 20; i++)     /* authors looked up, the share learnt */
                op_fpage(x);
            x->want_source = FEED_SOURCE_CACHE;
            check_page(pg, x);
            examined[d * NHIDE + h] = x->r.has_more
                ? (double)(rank_after(all, nall, x->r.next_score, x->r.next_id) - p.depth) : 0;
        }
    }
    fprintf(md, "## Filtered pages\n\n"
            "A feed of %s rows (`" FILTER_TABLE "`, `item_author_column` = author, 100"
            " authors, each 1%% of the rows spread over the feed), its copy warm (max_len"
            " %d), 20 items a page (`bench/filter.c`). Hiding authors 0..k-1 hides k%% of"
            " the items; *0%% of items* hides 10 authors the feed does not have. Every"
            " variant has a handle of its own (each learns the share of items its pages"
            " hide) and one cursor: the first page, or the page after the item at depth %d"
            " - 1; every page is checked against SQL with the filter in its WHERE clause"
            " before the measure.\n\n"
            "### Redis CPU and round trips per page\n\n"
            "Redis CPU per page is the redis-server process's utime + stime over a round /"
            " pages; server time is INFO commandstats (the page's reads and scripts, and"
            " the author index's reads and writes) over the pages; %d interleaved rounds of %.2f s"
            " per variant, medians, each ratio the median of the per-round ratios to the"
            " unfiltered page at the same depth. Round trips and SQL statements per page"
            " from the handle's `feed_stats` over 200 pages. Items examined: the unfiltered"
            " rank of the page's cursor minus its start. Measured twice: with the author"
            " index as the measured pages filled it (the authors of the items they examined:"
            " up to zset-max-listpack-entries (here %lld) entries it stays a listpack),"
            " then once filtered pages walked the whole copy and a page past it (the index"
            " holds every copy item's author).\n\n",
            NUM(FILTER_ROWS), FILTER_LEN, DEEP, q_rounds(9), q_secs(0.3),
            config_num(c, "zset-max-listpack-entries"));
    worst[0] = redis_measure(md, c, rpid, ctx, examined, "as these pages filled it", &rt10[0],
                             r50[0], r90[0]);
    walk_copy(warm_f, all, nall, FILTER_LEN, H_10, NULL);
    worst[1] = redis_measure(md, c, rpid, ctx, examined,
                             "after a walk of the whole copy and a page past it", &rt10[1],
                             r50[1], r90[1]);
    fprintf(md, "A warm filtered page is the unfiltered page read (for as many items as the"
            " handle's learnt share predicts) with a read of the author index from the same"
            " cursor in the same pipeline (`<key>:authors_z`): one round trip a chunk while"
            " the index covers the chunk; a chunk it does not cover takes one more (the"
            " index by the chunk's score span), and items it does not know a lookup in"
            " PostgreSQL.\n\n");
    out_summary("filter_cpu", "filtered pages: Redis CPU of a warm page at 10% hidden vs"
                " feed_page, first and depth 500, the author index as the pages filled it /"
                " filled for the whole copy; round trips", "<= 1.3x, one round trip",
                verdict(worst[0] <= 1.3 && worst[1] <= 1.3 && rt10[0] <= 1.0 && rt10[1] <= 1.0),
                "worst %.2fx / %.2fx, %.2f round trips per page; 50%%: %.2fx, %.2fx / %.2fx,"
                " %.2fx, 90%%: %.2fx, %.2fx / %.2fx, %.2fx (first, depth 500)", worst[0],
                worst[1], rt10[0] > rt10[1] ? rt10[0] : rt10[1], r50[0][0], r50[0][1],
                r50[1][0], r50[1][1], r90[0][0], r90[0][1], r90[1][0], r90[1][1]);
    feed_close(warm_f);
    for (int k = 0; k < NV; k++) {
        feed_result_free(&ctx[k].r);
        feed_close(ctx[k].f);
    }
}

/* ------------------------------------------------------------ 2. SQL */

typedef struct pgwork { long long idx_read, idx_fetch, seq_read; } pgwork;

static pgwork pg_work(PGconn *pg)
{
    PGresult *res = b_sql(pg, "SELECT coalesce(sum(idx_tup_read), 0), (SELECT coalesce("
                              "idx_tup_fetch, 0) + seq_tup_read FROM pg_stat_user_tables"
                              " WHERE relname = '" FILTER_TABLE "'), (SELECT seq_tup_read"
                              " FROM pg_stat_user_tables WHERE relname = '" FILTER_TABLE "')"
                              " FROM pg_stat_user_indexes WHERE relname = '" FILTER_TABLE "'");
    pgwork w = { strtoll(PQgetvalue(res, 0, 0), NULL, 10), strtoll(PQgetvalue(res, 0, 1), NULL, 10),
                 strtoll(PQgetvalue(res, 0, 2), NULL, 10) };

    PQclear(res);
    return w;
}

/* The counts once every closed connection's backend has flushed its own at
 * exit: they stop moving (unchanged over 1 s). pg itself reads only the
 * statistics views, which count nothing on the table. */
static pgwork pg_work_settled(PGconn *pg)
{
    pgwork w = pg_work(pg), prev;

    for (int same = 0; same < 10;) {
        sleep_s(0.1);
        prev = w;
        w = pg_work(pg);
        same = w.idx_read == prev.idx_read && w.idx_fetch == prev.idx_fetch &&
               w.seq_read == prev.seq_read ? same + 1 : 0;
    }
    return w;
}

static void sql_cost(FILE *md, PGconn *pg, redisContext *c, const feed_item *all, size_t nall)
{
    static const int hides[4] = { H_NONE, H_10, H_50, H_90 };
    page_pos start = pos_at(all, nall, FILTER_LEN);
    double per_item[4], rows_90 = 0, rows_plain = 0;
    feed *warm_f = open_filter("flt", FILTER_LEN, 1);
    feed_item *walked = malloc(4 * WALK_PAGES * PAGE_LIMIT * sizeof *walked);
    size_t nwalked[4];
    PGconn *check;

    if (!walked)
        die("out of memory");

    warm_table(warm_f, c, FILTER_UID, "flt", FILTER_TABLE, FILTER_LEN);
    feed_close(warm_f);
    fprintf(md, "### SQL work past the cached copy\n\n"
            "A walk of %d pages from the copy's last item on (depth %d: every page is"
            " past the copy), on a fresh handle each, the copy warm. Index entries read:"
            " `pg_stat_user_indexes.idx_tup_read` of `" FILTER_TABLE "`, summed over its"
            " indexes, and heap rows fetched (`pg_stat_user_tables.idx_tup_fetch`), before"
            " the walk and after its handle closed (its backend's counts flushed at exit);"
            " statements and Redis round trips from `feed_stats`. The unfiltered walk is the"
            " plain keyset page (`feed_page`, one statement a page). A filtered page past the"
            " copy: the first chunk as `feed_page` reads it, its authors looked up (one"
            " statement) and learnt into the index, then `author <> ALL($5)` statements that"
            " read at most the rest of the page's estimate each. Before the walk the handle"
            " served 20 first pages with the same filter, so that its estimate of the"
            " hidden share (which moves an eighth of the way a page) is near the truth.\n\n"
            "| walk | visible items | index entries read | heap rows fetched | per visible item"
            " | / unfiltered | SQL statements per page | Redis round trips per page |\n"
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n", WALK_PAGES, FILTER_LEN);
    for (int k = 0; k < 4; k++) {
        fctx x = { .hide = hides[k], .first = 0, .score = start.score, .id = start.id };
        feed_stats a, b;
        pgwork w0, w1;
        size_t items = 0;

        w0 = pg_work_settled(pg);
        x.f = open_filter("flt", FILTER_LEN, 1);
        /* The connection and the prepared statements, before the count. */
        if (feed_page(x.f, FILTER_UID, FEED_FIRST, 0, 1, &x.r) != FEED_OK)
            die("filter: %s", feed_errmsg(x.f));
        /* The handle has learnt the share its pages hide, as a handle serving
         * this viewer for a while has (it moves an eighth of the way a page). */
        for (int i = 0; i < 20 && hides[k] != H_NONE; i++) {
            fctx y = { .f = x.f, .hide = hides[k], .first = 1 };
            op_fpage(&y);
            feed_result_free(&y.r);
        }
        feed_stats_get(x.f, &a);
        for (int p = 0; p < WALK_PAGES; p++) {
            int rc = fcall(&x);
            if (rc != FEED_OK)
                die("filter: walk past the copy, %s: %s", hide_label[hides[k]], feed_errmsg(x.f));
            if (items + x.r.count > WALK_PAGES * PAGE_LIMIT)
                die("filter: walk past the copy: pages longer than asked");
            memcpy(&walked[k * WALK_PAGES * PAGE_LIMIT + items], x.r.items,
                   x.r.count * sizeof *x.r.items);
            items += x.r.count;
            if (!x.r.has_more)
                die("filter: walk past the copy ended early");
            x.score = x.r.next_score;
            x.id = x.r.next_id;
        }
        feed_stats_get(x.f, &b);
        feed_result_free(&x.r);
        feed_close(x.f);
        w1 = pg_work_settled(pg);
        nwalked[k] = items;
        per_item[k] = (double)(w1.idx_read - w0.idx_read) / (double)items;
        if (hides[k] == H_NONE)
            rows_plain = per_item[k];
        if (hides[k] == H_90)
            rows_90 = per_item[k];
        fprintf(md, "| %s | %zu | %s | %s | %s | %.2fx | %.2f | %.2f |\n", hide_label[hides[k]],
                items, NUM((double)(w1.idx_read - w0.idx_read)),
                NUM((double)(w1.idx_fetch - w0.idx_fetch)), NUM(per_item[k]),
                per_item[k] / per_item[0], (double)(b.sql_queries - a.sql_queries) / WALK_PAGES,
                (double)(b.redis_calls - a.redis_calls) / WALK_PAGES);
        if (w1.seq_read != w0.seq_read)
            fprintf(md, "| (a sequential scan also read %lld rows during this walk)"
                    " | | | | | | | |\n", w1.seq_read - w0.seq_read);
    }
    /* Every walk is SQL's with the filter in its WHERE clause (read on a
     * connection of its own, after the counts). */
    check = b_pg();
    for (int k = 0; k < 4; k++) {
        feed_item *want;
        size_t n = filter_rows(check, hides[k], &want, NULL);
        size_t at = rank_after(want, n, start.score, start.id);
        for (size_t i = 0; i < nwalked[k]; i++) {
            const feed_item *got = &walked[k * WALK_PAGES * PAGE_LIMIT + i];
            if (at + i >= n || want[at + i].score != got->score || want[at + i].id != got->id)
                die("filter: walk past the copy, %s: item %zu differs from SQL's",
                    hide_label[hides[k]], i);
        }
        free(want);
    }
    PQfinish(check);
    free(walked);
    fprintf(md, "\nEvery walk equals SQL's with the filter in its WHERE clause. The floor for"
            " a filter PostgreSQL evaluates row by row (no index on the author): 1 / (1 -"
            " hidden share) rows per visible item, 10 at 90%% hidden.\n\n");
    out_summary("filter_sql", "filtered pages past the copy at 90% hidden: index entries read"
                " per visible item vs the plain keyset page", "report", "report",
                "%.2f vs %.2f (%.2fx)", rows_90, rows_plain, rows_90 / rows_plain);
}

/* ------------------------------------------------------------ 3. memory */

static long long usage(redisContext *c, const char *key)
{
    redisReply *r = b_cmd(c, "MEMORY USAGE %s SAMPLES 0", key);
    long long v = r->type == REDIS_REPLY_INTEGER ? r->integer : 0;

    freeReplyObject(r);
    return v;
}

static const char *encoding(redisContext *c, const char *key, char buf[16])
{
    redisReply *r = b_cmd(c, "OBJECT ENCODING %s", key);

    snprintf(buf, 16, "%s", r->type == REDIS_REPLY_STRING ? r->str : "none");
    freeReplyObject(r);
    return buf;
}

/* A plain zset: the first n items, decimal ids, one variadic ZADD. */
static long long plain_zset(redisContext *c, const feed_item *items, size_t n, char enc[16])
{
    const char **argv = malloc((2 + 2 * n) * sizeof *argv);
    size_t *lens = malloc((2 + 2 * n) * sizeof *lens), a = 0;
    char *text = malloc(n * 48 + 1);
    long long bytes;

    if (!argv || !lens || !text)
        die("out of memory");
    b_cmd_ok(c, "DEL fltplain:{7}");
    argv[a] = "ZADD";
    lens[a++] = 4;
    argv[a] = "fltplain:{7}";
    lens[a++] = strlen(argv[1]);
    for (size_t i = 0; i < n; i++) {
        char *s = text + i * 48;
        lens[a] = (size_t)snprintf(s, 24, "%lld", (long long)items[i].score);
        argv[a++] = s;
        lens[a] = (size_t)snprintf(s + 24, 24, "%lld", (long long)items[i].id);
        argv[a++] = s + 24;
    }
    freeReplyObject(b_argv(c, (int)a, argv, lens));
    bytes = usage(c, "fltplain:{7}");
    encoding(c, "fltplain:{7}", enc);
    b_cmd_ok(c, "DEL fltplain:{7}");
    free(argv);
    free(lens);
    free(text);
    return bytes;
}

static int keep_not_tenth(void *arg, int64_t score, int64_t id, int64_t author)
{
    (void)arg;
    (void)score;
    (void)author;
    return id % 20 != 0;
}

/* Filtered pages from the top until the walk has examined the whole copy of
 * f (max_len items): the author index then holds what a viewer's walk
 * through the copy put there, the first page past the copy included (its
 * items' authors are learnt too). */
static void walk_copy(feed *f, const feed_item *all, size_t nall, uint32_t max_len, int hide,
                      feed_keep_fn *keep)
{
    feed_filter flt = { hide_set[hide], hide_n[hide], keep, NULL };
    int64_t s = FEED_FIRST, id = 0;

    for (;;) {
        feed_result r;
        size_t at;
        if (feed_page_filtered(f, FILTER_UID, s, id, PAGE_LIMIT, &flt, &r) != FEED_OK)
            die("filter: memory walk: %s", feed_errmsg(f));
        if (!r.has_more)
            die("filter: memory walk: the feed ended");
        s = r.next_score;
        id = r.next_id;
        at = rank_after(all, nall, s, id);
        feed_result_free(&r);
        if (at >= max_len)
            break;
    }
}

static void memory_cost(FILE *md, redisContext *c, const feed_item *all, size_t nall)
{
    static const uint32_t lens[2] = { 100, 1000 };
    double worst_plain = 0, worst_author = 0;

    fprintf(md, "### Memory per cached item\n\n"
            "`MEMORY USAGE key SAMPLES 0` over the copy's items (ZCARD), the server's"
            " defaults: zset-max-listpack-entries %lld."
            " *Plain zset*: the same items with decimal ids, one ZADD, nothing else."
            " *No author column*:"
            " the copy of a handle without `item_author_column`, after filtered pages (a"
            " predicate: there is no author to hide) walked it; it has no author index."
            " *Author column*: the copy plus `<key>:authors_z` after filtered pages hiding"
            " 10%% walked the whole copy, up to the first page past it (the index holds the"
            " authors of the copy's items those pages examined, ZCARD).\n\n"
            "| max_len | plain zset | no author column: copy | / plain (target <= 1.15x) |"
            " author column: copy | author index (ZCARD) | copy + index | / plain |\n"
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
            config_num(c, "zset-max-listpack-entries"));
    for (int k = 0; k < 2; k++) {
        char pfx_n[16], pfx_a[16], e_plain[16], e_n[16], e_a[16], e_h[16];
        feed *fn, *fa;
        long long card_n, card_a, b_n, b_a, b_h, b_nh, hlen, plain;
        double pp, pn, pa;

        snprintf(pfx_n, sizeof pfx_n, "fltn%u", lens[k]);
        snprintf(pfx_a, sizeof pfx_a, "flta%u", lens[k]);
        fn = open_filter(pfx_n, lens[k], 0);
        fa = open_filter(pfx_a, lens[k], 1);
        warm_table(fn, c, FILTER_UID, pfx_n, FILTER_TABLE, lens[k]);
        warm_table(fa, c, FILTER_UID, pfx_a, FILTER_TABLE, lens[k]);
        walk_copy(fn, all, nall, lens[k], H_NONE, keep_not_tenth);
        walk_copy(fa, all, nall, lens[k], H_10, NULL);
        card_n = b_cmd_int(c, "ZCARD %s", b_key_of(pfx_n, FILTER_TABLE, FILTER_UID, ""));
        card_a = b_cmd_int(c, "ZCARD %s", b_key_of(pfx_a, FILTER_TABLE, FILTER_UID, ""));
        b_n = usage(c, b_key_of(pfx_n, FILTER_TABLE, FILTER_UID, ""));
        b_nh = usage(c, b_key_of(pfx_n, FILTER_TABLE, FILTER_UID, ":authors"));
        b_a = usage(c, b_key_of(pfx_a, FILTER_TABLE, FILTER_UID, ""));
        b_h = usage(c, b_key_of(pfx_a, FILTER_TABLE, FILTER_UID, ":authors"));
        hlen = b_cmd_int(c, "ZCARD %s", b_key_of(pfx_a, FILTER_TABLE, FILTER_UID, ":authors"));
        encoding(c, b_key_of(pfx_n, FILTER_TABLE, FILTER_UID, ""), e_n);
        encoding(c, b_key_of(pfx_a, FILTER_TABLE, FILTER_UID, ""), e_a);
        encoding(c, b_key_of(pfx_a, FILTER_TABLE, FILTER_UID, ":authors"), e_h);
        if (b_nh != 0)
            die("filter: a handle without item_author_column wrote an author index");
        if (card_n != card_a)
            die("filter: copies of %lld and %lld items", card_n, card_a);
        plain = plain_zset(c, all, (size_t)card_n, e_plain);
        pp = (double)plain / (double)card_n;
        pn = (double)(b_n + b_nh) / (double)card_n;
        pa = (double)(b_a + b_h) / (double)card_a;
        fprintf(md, "| %u | %.1f B (%s) | %.1f B (%s) | **%.2fx** %s | %.1f B (%s) | %.1f B"
                " a copy item (%s, %lld) | %.1f B | **%.2fx** |\n", lens[k], pp, e_plain, pn, e_n,
                pn / pp, verdict(pn / pp <= 1.15), (double)b_a / (double)card_a, e_a,
                (double)b_h / (double)card_a, e_h, hlen, pa, pa / pp);
        worst_plain = pn / pp > worst_plain ? pn / pp : worst_plain;
        worst_author = pa / pp > worst_author ? pa / pp : worst_author;
        feed_invalidate(fn, FILTER_UID);
        feed_invalidate(fa, FILTER_UID);
        b_cmd_ok(c, "DEL %s", b_key_of(pfx_a, FILTER_TABLE, FILTER_UID, ":authors"));
        feed_close(fn);
        feed_close(fa);
    }
    fprintf(md, "\n");
    out_summary("filter_memory", "filtered pages: memory per cached item (MEMORY USAGE), no"
                " author column / plain zset, max_len 100 and 1,000", "<= 1.15x",
                verdict(worst_plain <= 1.15), "worst %.2fx", worst_plain);
    out_summary("filter_memory_author", "filtered pages: memory per cached item with the"
                " author index filled (copy + index) / plain zset, max_len 100 and 1,000",
                "report", "report", "worst %.2fx", worst_author);
}

void section_filter(void)
{
    redisContext *c = b_redis();
    pid_t rpid = redis_pid(c);
    PGconn *pg = b_pg();
    FILE *md = out_section("filter");
    feed_item *all;
    size_t nall;

    hide_init();
    load(pg);
    nall = filter_rows(pg, H_NONE, &all, NULL);
    if (nall != FILTER_ROWS)
        die("filter: %zu rows loaded", nall);
    redis_cost(md, pg, c, rpid, all, nall);
    /* A connection of its own for the counts: pg read the table (its counts
     * flush at exit, now) and must not flush them during a walk. */
    PQfinish(pg);
    pg = b_pg();
    sql_cost(md, pg, c, all, nall);
    memory_cost(md, c, all, nall);
    fclose(md);
    b_cmd_ok(c, "DEL %s %s", b_key_of("flt", FILTER_TABLE, FILTER_UID, ""), b_key_of("flt", FILTER_TABLE, FILTER_UID, ":authors"));
    PQclear(b_sql(pg, "DROP TABLE " FILTER_TABLE));
    free(all);
    PQfinish(pg);
    redisFree(c);
}
