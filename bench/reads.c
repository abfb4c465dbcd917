/* reads.c -- the read path against its peers.
 *
 *   section "pages":  a cached page (feed_page) at depth 0 / 500 / 990 of a
 *     1,000-item feed and inside a 10,000-item tie group, against a bare
 *     ZREVRANGE from hiredis (the raw ceiling), a Lua script doing only that
 *     ZREVRANGE (the floor of a scripted read), a Lua script doing only the
 *     two calls of an exact seek (ZREVRANK + ZREVRANGE: the floor of page.lua
 *     after a cursor) and the common next-page script; pages/s, per-call
 *     p50/p99, Redis server time per call (INFO commandstats) and Redis
 *     process CPU per call. Then the common script
 *     against feed_page on a 100,000-item cache (max_len 100,000).
 *   (section "memory" is bench/memory.c.)
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "reads.h"

/* ------------------------------------------------------------ the calls */

/* The client's share of a bare read: turn WITHSCORES pairs into items, the
 * way the library does (the member codec, score digits). */
static int parse_pairs(const redisReply *r, size_t first, feed_item *out, size_t cap)
{
    size_t n = 0;

    if (!r || r->type != REDIS_REPLY_ARRAY)
        return -1;
    for (size_t i = first; i + 1 < r->elements && n < cap; i += 2) {
        const redisReply *m = r->element[i], *s = r->element[i + 1];
        int64_t id = 0;
        if (m->type != REDIS_REPLY_STRING || s->type != REDIS_REPLY_STRING)
            return -1;
        if (!member_id(m->str, m->len, &id))    /* the end marker */
            break;
        out[n].id = id;
        out[n].score = strtoll(s->str, NULL, 10);
        n++;
    }
    return (int)n;
}

/* One call of a bare peer (raw ZREVRANGE, bare Lua, exact seek), as its
 * *_init set it up, and the client's share: parsing the page. */
int op_bare(void *arg)
{
    raw_ctx *x = arg;
    feed_item items[PAGE_LIMIT + 1];
    redisReply *r = redisCommandArgv(x->c, x->argc, x->argv, x->lens);
    int n = parse_pairs(r, x->skip, items, PAGE_LIMIT + 1);

    freeReplyObject(r);
    return n < 0;
}

void raw_init(raw_ctx *x, redisContext *c, const char *key, size_t depth)
{
    memset(x, 0, sizeof *x);
    x->c = c;
    snprintf(x->start, sizeof x->start, "%zu", depth);
    snprintf(x->stop, sizeof x->stop, "%zu", depth + PAGE_LIMIT);
    x->argv[0] = "ZREVRANGE";
    x->argv[1] = key;
    x->argv[2] = x->start;
    x->argv[3] = x->stop;
    x->argv[4] = "WITHSCORES";
    x->argc = 5;
    for (int i = 0; i < 5; i++)
        x->lens[i] = strlen(x->argv[i]);
}

static void lua_init(raw_ctx *x, redisContext *c, const char *key, size_t depth,
                     const char *sha)
{
    memset(x, 0, sizeof *x);
    x->c = c;
    snprintf(x->start, sizeof x->start, "%zu", depth);
    snprintf(x->stop, sizeof x->stop, "%zu", depth + PAGE_LIMIT);
    memcpy(x->sha, sha, 41);
    x->argv[0] = "EVALSHA";
    x->argv[1] = x->sha;
    x->argv[2] = "1";
    x->argv[3] = key;
    x->argv[4] = x->start;
    x->argv[5] = x->stop;
    x->argc = 6;
    for (int i = 0; i < 6; i++)
        x->lens[i] = strlen(x->argv[i]);
}

/* The exact-seek peer (bench/lua/peer_seek.lua): the cursor member, and
 * after a cursor the reply's first pair is the cursor item itself. */
static void seek_init(raw_ctx *x, redisContext *c, const char *key, const page_pos *p,
                      const char *sha)
{
    memset(x, 0, sizeof *x);
    x->c = c;
    snprintf(x->start, sizeof x->start, "%d", PAGE_LIMIT + 1);
    memcpy(x->sha, sha, 41);
    x->argv[0] = "EVALSHA";
    x->argv[1] = x->sha;
    x->argv[2] = "1";
    x->argv[3] = key;
    x->argv[4] = x->start;    /* items to return */
    x->argv[5] = x->stop;     /* the cursor member, "" for the first page */
    x->argc = 6;
    x->skip = p->first ? 0 : 2;
    for (int i = 0; i < 5; i++)
        x->lens[i] = strlen(x->argv[i]);
    x->lens[5] = p->first ? 0 : member_of(p->id, x->stop);   /* may hold NUL bytes */
}

typedef struct next_ctx {
    redisContext *c;
    const char   *argv[7];
    size_t        lens[7];
    char          score[32], member[24], want[8];
    char          sha[41];
} next_ctx;

static int op_next(void *arg)
{
    next_ctx *x = arg;
    feed_item items[PAGE_LIMIT + 1];
    redisReply *r = redisCommandArgv(x->c, 7, x->argv, x->lens);
    int n = parse_pairs(r, 0, items, PAGE_LIMIT + 1);

    freeReplyObject(r);
    return n < 0;
}

static void next_init(next_ctx *x, redisContext *c, const char *key,
                      const page_pos *p, const char *sha)
{
    memset(x, 0, sizeof *x);
    x->c = c;
    memcpy(x->sha, sha, 41);
    if (p->first) {
        snprintf(x->score, sizeof x->score, "+inf");
        x->member[0] = '\0';
    } else {
        snprintf(x->score, sizeof x->score, "%lld", (long long)p->score);
    }
    snprintf(x->want, sizeof x->want, "%d", PAGE_LIMIT + 1);
    x->argv[0] = "EVALSHA";
    x->argv[1] = x->sha;
    x->argv[2] = "1";
    x->argv[3] = key;
    x->argv[4] = x->score;
    x->argv[5] = x->member;
    x->argv[6] = x->want;
    for (int i = 0; i < 7; i++)
        x->lens[i] = strlen(x->argv[i]);
    if (!p->first)
        x->lens[5] = member_of(p->id, x->member);   /* may hold NUL bytes */
}

int op_page(void *arg)
{
    page_ctx *x = arg;
    feed_result r;
    int rc = feed_page(x->f, x->uid, x->pos.first ? FEED_FIRST : x->pos.score,
                       x->pos.id, PAGE_LIMIT, &r);

    if (rc != FEED_OK)
        die("feed_page: %s: %s", feed_strerror(rc), feed_errmsg(x->f));
    if (r.source != FEED_SOURCE_CACHE)
        die("feed_page uid %lld depth %zu: not answered by the cache (source %d)",
            (long long)x->uid, x->pos.depth, (int)r.source);
    feed_result_free(&r);
    return 0;
}

/* The cursor that makes the next page start at rank depth. */
page_pos pos_at(const feed_item *items, size_t n, size_t depth)
{
    page_pos p = { depth, depth == 0, 0, 0 };

    if (depth > 0) {
        if (depth > n)
            die("depth %zu beyond a feed of %zu", depth, n);
        p.score = items[depth - 1].score;
        p.id = items[depth - 1].id;
    }
    return p;
}

/* Fill uid's cache through the library and check its size. */
void warm(feed *f, redisContext *c, int64_t uid, const char *prefix, long long want_card)
{
    warm_table(f, c, uid, prefix, "feed_entry", want_card);
}

void warm_table(feed *f, redisContext *c, int64_t uid, const char *prefix, const char *table,
                long long want_card)
{
    feed_result r;
    long long card;
    int rc;

    b_cmd_ok(c, "DEL %s %s", b_key_of(prefix, table, uid, ""), b_key_of(prefix, table, uid, ":lease"));
    rc = feed_page(f, uid, FEED_FIRST, 0, PAGE_LIMIT, &r);
    if (rc != FEED_OK || r.source != FEED_SOURCE_REBUILD)
        die("warming %s uid %lld: rc %d source %d: %s", prefix, (long long)uid, rc,
            (int)r.source, feed_errmsg(f));
    feed_result_free(&r);
    card = b_cmd_int(c, "ZCARD %s", b_key_of(prefix, table, uid, ""));
    if (card != want_card)
        die("warming %s uid %lld: %lld entries, expected %lld", prefix,
            (long long)uid, card, want_card);
}

/* ------------------------------------------------------------ section pages */

typedef struct depth_case {
    const char *label;
    const char *short_label;   /* for the chart */
    int64_t     uid;
    feed       *f;
    const char *prefix;
    page_pos    pos;
    int         targeted;      /* counts for the >= 0.9x / <= 1.3x targets */
} depth_case;

enum { V_RAW, V_LUA, V_FEED, V_NEXT, V_SEEK, NV };
static const char *const vname[NV] = {
    "raw ZREVRANGE (hiredis)", "bare Lua ZREVRANGE", "feedcache feed_page",
    "common next-page script", "bare Lua exact seek"
};

void section_pages(void)
{
    redisContext *c = b_redis(), *stats = b_redis();
    PGconn *pg = b_pg();
    pid_t rpid = redis_pid(stats);
    feed *f1k = b_open("feed", 1000), *ftie = b_open("tie", 10000),
         *fbig = b_open("big", 100000);
    feed_item *k1, *tie;
    size_t n1k = sql_feed(pg, UID_1K, &k1), ntie = sql_feed(pg, UID_TIE, &tie);
    char lua_sha[41], next_sha[41], seek_sha[41];
    depth_case cases[5];
    size_t ncases = 0;
    int rounds = q_rounds(17);
    double secs = q_secs(0.12);
    FILE *md = out_section("pages"), *dat = out_data("pages");
    double worst_rate = INFINITY, worst_srv = 0;
    const char *worst_rate_case = "", *worst_srv_case = "";
    double next_ratio0 = NAN, worst_floor_raw = 0;

    note("pages: warming the caches");
    if (n1k != 1000 || ntie != 10000)
        die("data set: uid %d has %zu rows, uid %d %zu (run bench/load.sql)",
            UID_1K, n1k, UID_TIE, ntie);
    b_script_load(c, feed_lua_peer_zrevrange, lua_sha);
    b_script_load(c, feed_lua_peer_next_page, next_sha);
    b_script_load(c, feed_lua_peer_seek, seek_sha);
    warm(f1k, c, UID_1K, "feed", 1001);
    warm(ftie, c, UID_TIE, "tie", 10001);

    cases[ncases++] = (depth_case){ "1,000-item feed, depth 0", "depth 0", UID_1K, f1k,
                                    "feed", pos_at(k1, n1k, 0), 1 };
    cases[ncases++] = (depth_case){ "1,000-item feed, depth 500", "depth 500", UID_1K, f1k,
                                    "feed", pos_at(k1, n1k, 500), 1 };
    cases[ncases++] = (depth_case){ "1,000-item feed, depth 990", "depth 990", UID_1K, f1k,
                                    "feed", pos_at(k1, n1k, 990), 1 };
    cases[ncases++] = (depth_case){ "10,000-item tie group, depth 5,000", "tie 5,000",
                                    UID_TIE, ftie, "tie", pos_at(tie, ntie, 5000), 1 };
    /* The same page, after a cursor whose item is gone (an odd id does not
     * exist): page.lua binary-searches the tie group. Not a target row. */
    cases[ncases] = (depth_case){ "tie group, depth 5,000, cursor item deleted",
                                  "tie, deleted", UID_TIE, ftie, "tie",
                                  pos_at(tie, ntie, 5000), 0 };
    cases[ncases].pos.id -= 1;
    ncases++;

    fprintf(md, "## Cached page against the raw ceiling and the common script\n\n"
            "Single connection, pages of %d (%d items fetched: one more tells"
            " whether more exist), %d interleaved rounds of %.2f s per variant;"
            " pages/s is the median over rounds, the ratio the median of the"
            " per-round ratios; p50/p99 are per call over all rounds. The raw"
            " ZREVRANGE and the bare Lua script fetch ranks d..d+%d directly;"
            " feedcache is `feed_page` with the cursor of the item at rank d-1,"
            " on a handle that walked there (it holds the rank hint; bench/cpu.c"
            " also measures one that does not);"
            " the common script gets the same cursor.\n\n",
            PAGE_LIMIT, PAGE_LIMIT + 1, rounds, secs, PAGE_LIMIT);
    fprintf(md, "| case | raw ZREVRANGE | bare Lua ZREVRANGE | **feedcache** | common next-page"
            " | feedcache / raw (target >= 0.9) | the floor: bare Lua / raw | feedcache / common |\n"
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    fprintf(dat, "# case raw lua feedcache common (pages/s, medians)\n");

    FILE *lat = tmpfile(), *srv = tmpfile();
    if (!lat || !srv)
        die("tmpfile failed");
    fprintf(lat, "| case | raw p50 / p99 | bare Lua p50 / p99 | **feedcache** p50 / p99"
            " | common p50 / p99 |\n| --- | ---: | ---: | ---: | ---: |\n");
    fprintf(srv, "| case | raw ZREVRANGE | bare Lua ZREVRANGE | bare Lua exact seek | **feedcache**"
            " | common next-page | feedcache / bare Lua (target <= 1.3) | the floor: exact seek"
            " / bare Lua | Redis process CPU per call: raw / bare Lua / feedcache |\n"
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");

    for (size_t i = 0; i < ncases; i++) {
        depth_case *dc = &cases[i];
        char key[64];
        raw_ctx raw, lua, seek;
        next_ctx next;
        page_ctx page = { dc->f, dc->uid, dc->pos };
        variant v[NV];
        double r_raw, r_srv, r_next, r_floor;   /* r_floor: bare Lua / raw */

        note("pages: %s", dc->label);
        b_key_copy(key, sizeof key, b_key(dc->prefix, dc->uid, ""));
        raw_init(&raw, c, key, dc->pos.depth);
        lua_init(&lua, c, key, dc->pos.depth, lua_sha);
        seek_init(&seek, c, key, &dc->pos, seek_sha);
        next_init(&next, c, key, &dc->pos, next_sha);
        memset(v, 0, sizeof v);
        v[V_RAW] = (variant){ .name = vname[V_RAW], .op = op_bare, .ctx = &raw, .cmd = "zrevrange" };
        v[V_LUA] = (variant){ .name = vname[V_LUA], .op = op_bare, .ctx = &lua, .cmd = "evalsha" };
        v[V_FEED] = (variant){ .name = vname[V_FEED], .op = op_page, .ctx = &page, .cmd = FEED_PAGE_CMDS };
        v[V_NEXT] = (variant){ .name = vname[V_NEXT], .op = op_next, .ctx = &next, .cmd = "evalsha" };
        v[V_SEEK] = (variant){ .name = vname[V_SEEK], .op = op_bare, .ctx = &seek, .cmd = "evalsha" };
        /* feed_page's handle served the page before (it walked there), as
         * a reader's own next page: bench/cpu.c measures a handle that did
         * not. The exact-seek peer needs the cursor item cached: not in the
         * deleted-cursor row (V_SEEK is last, so it is simply left out). */
        if (dc->targeted)
            prime(dc->f, dc->uid, dc->pos.depth);
        run_rounds(v, dc->targeted ? NV : NV - 1, rounds, secs, 3, stats, rpid);

        r_raw = paired_ratio(&v[V_FEED], &v[V_RAW]);
        r_next = paired_ratio(&v[V_FEED], &v[V_NEXT]);
        r_srv = paired_ratio_srv(&v[V_FEED], &v[V_LUA]);
        r_floor = paired_ratio(&v[V_LUA], &v[V_RAW]);
        if (i == 0)
            next_ratio0 = r_next;
        if (dc->targeted && r_raw < worst_rate) {
            worst_rate = r_raw;
            worst_rate_case = dc->label;
        }
        if (dc->targeted && r_srv > worst_srv) {
            worst_srv = r_srv;
            worst_srv_case = dc->label;
        }
        fprintf(md, "| %s | %s | %s | **%s** | %s | %.2fx %s | %.2fx | %.1fx |\n", dc->label,
                NUM(sm_median(&v[V_RAW].rate)), NUM(sm_median(&v[V_LUA].rate)),
                NUM(sm_median(&v[V_FEED].rate)), NUM(sm_median(&v[V_NEXT].rate)),
                r_raw, dc->targeted ? verdict(r_raw >= 0.9) : "(no target)",
                r_floor, r_next);
        if (dc->targeted && r_floor > worst_floor_raw)
            worst_floor_raw = r_floor;
        fprintf(lat, "| %s | %s / %s µs | %s / %s µs | **%s / %s µs** | %s / %s µs |\n",
                dc->label,
                NUM(sm_pct(&v[V_RAW].lat_us, 50)), NUM(sm_pct(&v[V_RAW].lat_us, 99)),
                NUM(sm_pct(&v[V_LUA].lat_us, 50)), NUM(sm_pct(&v[V_LUA].lat_us, 99)),
                NUM(sm_pct(&v[V_FEED].lat_us, 50)), NUM(sm_pct(&v[V_FEED].lat_us, 99)),
                NUM(sm_pct(&v[V_NEXT].lat_us, 50)), NUM(sm_pct(&v[V_NEXT].lat_us, 99)));
        char seek_us[32] = "-", seek_ratio[32] = "-";
        if (dc->targeted) {
            snprintf(seek_us, sizeof seek_us, "%s µs", NUM(sm_median(&v[V_SEEK].srv_us)));
            snprintf(seek_ratio, sizeof seek_ratio, "%.2fx", paired_ratio_srv(&v[V_SEEK], &v[V_LUA]));
        }
        fprintf(srv, "| %s | %s µs | %s µs | %s | **%s µs** | %s µs | %.2fx %s | %s"
                " | %s / %s / %s µs |\n",
                dc->label,
                NUM(sm_median(&v[V_RAW].srv_us)), NUM(sm_median(&v[V_LUA].srv_us)), seek_us,
                NUM(sm_median(&v[V_FEED].srv_us)), NUM(sm_median(&v[V_NEXT].srv_us)),
                r_srv, dc->targeted ? verdict(r_srv <= 1.3) : "(no target)", seek_ratio,
                NUM(sm_median(&v[V_RAW].cpu_us)), NUM(sm_median(&v[V_LUA].cpu_us)),
                NUM(sm_median(&v[V_FEED].cpu_us)));
        fprintf(dat, "\"%s\" %.1f %.1f %.1f %.1f %.3f %.3f %.3f %.3f\n", dc->short_label,
                sm_median(&v[V_RAW].rate), sm_median(&v[V_LUA].rate),
                sm_median(&v[V_FEED].rate), sm_median(&v[V_NEXT].rate),
                sm_median(&v[V_RAW].srv_us), sm_median(&v[V_LUA].srv_us),
                sm_median(&v[V_FEED].srv_us), sm_median(&v[V_NEXT].srv_us));
        for (int k = 0; k < NV; k++)
            variant_free(&v[k]);
    }

    fprintf(md, "\nPer-call latency, client side (µs):\n\n");
    rewind(lat);
    for (int ch; (ch = getc(lat)) != EOF;)
        putc(ch, md);
    fprintf(md, "\nRedis server time per call, from INFO commandstats (`cmdstat_zrevrange`"
            " for the raw call, `cmdstat_evalsha` for the scripts: the script's whole run),"
            " median over rounds; and the CPU time of the whole redis-server process per"
            " call (/proc schedstat: also reading, parsing and replying). The bare Lua"
            " exact seek (bench/lua/peer_seek.lua) is the floor of any exact seek on"
            " Redis 7.0: ZREVRANK of the cursor item, then ZREVRANGE from it, its own"
            " pair included (its score shows it has not moved); page.lua minus"
            " everything but those two calls:\n\n");
    rewind(srv);
    for (int ch; (ch = getc(srv)) != EOF;)
        putc(ch, md);
    fclose(lat);
    fclose(srv);

    out_summary("pages_raw", "cached page vs raw ZREVRANGE, pages/s, single connection,"
                " depth 0/500/990 of 1,000 and inside a 10,000 tie group",
                ">= 0.9x at every depth", verdict(worst_rate >= 0.9),
                "worst %.2fx (%s); the floor of a scripted read, a bare Lua ZREVRANGE,"
                " reaches at best %.2fx", worst_rate, worst_rate_case, worst_floor_raw);
    out_summary("srv_cpu", "Redis server time per cached page (INFO commandstats) vs bare"
                " Lua ZREVRANGE script", "<= 1.3x", verdict(worst_srv <= 1.3),
                "worst %.2fx (%s)", worst_srv, worst_srv_case);
    out_summary("next_1k", "cached page vs common next-page script, 1,000-item feed,"
                " depth 0, pages/s", ">= 4x", verdict(next_ratio0 >= 4),
                "%.1fx", next_ratio0);

    /* ---- max_len 100,000: the common script reads the whole tail ---- */
    {
        feed_item *big;
        size_t nbig = sql_feed(pg, UID_BIG, &big);
        page_pos p0 = pos_at(big, nbig, 0);
        page_ctx page = { fbig, UID_BIG, p0 };
        next_ctx next;
        raw_ctx raw;
        variant v[3];
        double r_next;
        int brounds = q_rounds(7);
        char bigkey[64];

        note("pages: max_len 100,000 (installing 100,000 items)");
        if (nbig != 100000)
            die("data set: uid %d has %zu rows", UID_BIG, nbig);
        warm(fbig, c, UID_BIG, "big", 100001);
        b_key_copy(bigkey, sizeof bigkey, b_key("big", UID_BIG, ""));
        raw_init(&raw, c, bigkey, 0);
        next_init(&next, c, bigkey, &p0, next_sha);
        memset(v, 0, sizeof v);
        v[0] = (variant){ .name = "raw", .op = op_bare, .ctx = &raw, .cmd = "zrevrange" };
        v[1] = (variant){ .name = "feedcache", .op = op_page, .ctx = &page, .cmd = FEED_PAGE_CMDS };
        v[2] = (variant){ .name = "common", .op = op_next, .ctx = &next, .cmd = "evalsha" };
        run_rounds(v, 3, brounds, q_secs(0.3), 3, stats, rpid);
        r_next = paired_ratio(&v[1], &v[2]);
        fprintf(md, "\n### max_len 100,000: a 100,000-item cached feed, depth 0\n\n"
                "%d interleaved rounds of %.2f s (at least 3 calls).\n\n"
                "| variant | pages/s | p50 / p99 latency | Redis server time per call |\n"
                "| --- | ---: | ---: | ---: |\n", brounds, q_secs(0.3));
        for (int k = 0; k < 3; k++)
            fprintf(md, "| %s | %s | %s / %s µs | %s µs |\n",
                    k == 0 ? "raw ZREVRANGE" : k == 1 ? "**feedcache**" : "common next-page script",
                    NUM(sm_median(&v[k].rate)), NUM(sm_pct(&v[k].lat_us, 50)),
                    NUM(sm_pct(&v[k].lat_us, 99)), NUM(sm_median(&v[k].srv_us)));
        fprintf(md, "\nfeedcache / common next-page: **%sx** pages/s (target >= 300x: %s).\n",
                NUM(r_next), verdict(r_next >= 300));
        out_summary("next_100k", "cached page vs common next-page script, max_len 100,000,"
                    " depth 0, pages/s", ">= 300x", verdict(r_next >= 300), "%sx", NUM(r_next));
        for (int k = 0; k < 3; k++)
            variant_free(&v[k]);
        b_cmd_ok(c, "DEL %s", bigkey);   /* 100,000 entries: give the memory back */
        free(big);
    }

    fclose(md);
    fclose(dat);
    free(k1);
    free(tie);
    feed_close(f1k);
    feed_close(ftie);
    feed_close(fbig);
    PQfinish(pg);
    redisFree(c);
    redisFree(stats);
}
