/* t_merge.c -- read-time merge against real servers: feed_page_merged
 * equals
 *     SELECT score, id FROM feed_entry WHERE uid = $1
 *     UNION SELECT score, id FROM author_post WHERE author = ANY($2)
 *     ORDER BY score DESC, id DESC
 * page by page, in every case we can make:
 *
 *   walks      randomized timelines, n from 0 to 100 authors, page sizes
 *              1..max_page, many score ties, the same (score, id) in the
 *              reader's feed and in an author's posts, copies cold, warm,
 *              partial (longer than max_len) and known-empty; the counters
 *              prove a warm page is one round trip (per node) and no SQL;
 *   hooks      inserts, rescores and deletes on either table between the
 *              pages of a walk: every page equals SQL as it is then, and the
 *              copies in Redis stay exact prefixes;
 *   leases     a write between a merged rebuild's SQL read and its install
 *              cancels the install; TTLs of the sources refreshed;
 *   threads    writers and readers, each with its own handle: no page wrong,
 *              and after the writers stop every copy is an exact prefix and
 *              a fresh walk equals SQL;
 *   faults     Redis down mid-walk: pages from SQL, still exact; PostgreSQL
 *              frozen: pages whose sources are cached still come from the
 *              cache; an author hook that could not reach Redis is repaired
 *              in its own family (single Redis only: the faults switch the
 *              single test server);
 *   bad input  n > FEED_MERGE_MAX, NULL authors, no author_table, limit and
 *              cursor as feed_page: FEED_EINVAL / FEED_ERANGE with a message.
 *
 * Env: FEED_MERGE_SEED, FEED_MERGE_SECONDS (the threads' phase, default 3). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"   /* test_before_install, the member codec */
#include "tap.h"
#include "testutil.h"
#include "fault.h"

#define MAX_LEN  30
#define MAX_PAGE 25

static PGconn *pg;
static redisContext *rc_;
static uint64_t seed = 20261125;

/* ---------------------------------------------------------------- helpers */

static feed *open_merge(uint32_t max_len)
{
    feed_config cfg;

    tu_config(&cfg);
    cfg.max_len = max_len;
    cfg.max_page = MAX_PAGE;
    cfg.author_table = "author_post";
    return tu_open(&cfg);
}

static void reset(void)
{
    tu_reset(pg, rc_);
    tu_sql(pg, "TRUNCATE author_post");
}

static void post(int64_t author, int64_t score, int64_t id)
{
    tu_sql(pg, "INSERT INTO author_post (author, score, id) VALUES (%lld,%lld,%lld)"
               " ON CONFLICT (author, id) DO UPDATE SET score = EXCLUDED.score",
           (long long)author, (long long)score, (long long)id);
}

/* "{1,2,3}" */
static char *array_text(const int64_t *v, size_t n)
{
    char *s = malloc(n * 22 + 3);
    size_t len = 0;

    if (!s)
        abort();
    s[len++] = '{';
    for (size_t i = 0; i < n; i++)
        len += (size_t)sprintf(s + len, "%s%lld", i ? "," : "", (long long)v[i]);
    s[len++] = '}';
    s[len] = '\0';
    return s;
}

/* The whole merged timeline from SQL, in order; *out malloc'd. */
static size_t sql_union(PGconn *c, int64_t uid, const int64_t *authors, size_t n,
                        feed_item **out)
{
    char num[24], *arr = array_text(authors, n);
    const char *params[2] = { num, arr };
    PGresult *res;
    size_t rows;

    snprintf(num, sizeof num, "%lld", (long long)uid);
    res = PQexecParams(c, "SELECT score, id FROM feed_entry WHERE uid = $1::int8"
                          " UNION SELECT score, id FROM author_post WHERE author = ANY($2::int8[])"
                          " ORDER BY score DESC, id DESC", 2, NULL, params, NULL, NULL, 0);
    free(arr);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        tap_bail(PQerrorMessage(c));
        exit(255);
    }
    rows = (size_t)PQntuples(res);
    *out = malloc((rows + 1) * sizeof **out);
    if (!*out)
        abort();
    for (size_t i = 0; i < rows; i++) {
        (*out)[i].score = strtoll(PQgetvalue(res, (int)i, 0), NULL, 10);
        (*out)[i].id = strtoll(PQgetvalue(res, (int)i, 1), NULL, 10);
    }
    PQclear(res);
    return rows;
}

static int after(feed_item it, int64_t score, int64_t id)
{
    return score == FEED_FIRST || it.score < score || (it.score == score && it.id < id);
}

/* Is res the page of all[0..nall) after the cursor, has_more included? */
static int page_is(const feed_item *all, size_t nall, int64_t score, int64_t id, size_t limit,
                   const feed_result *res, const char *what)
{
    size_t start = 0, want;
    int same;

    while (start < nall && !after(all[start], score, id))
        start++;
    want = nall - start < limit ? nall - start : limit;
    same = res->count == want && res->has_more == (start + want < nall);
    for (size_t i = 0; same && i < want; i++)
        same = res->items[i].score == all[start + i].score && res->items[i].id == all[start + i].id;
    if (same && res->has_more)
        same = res->next_score == res->items[want - 1].score &&
               res->next_id == res->items[want - 1].id;
    if (!same)
        tap_diag("%s: page after (%lld,%lld) limit %zu: %zu items, has_more %d; SQL has %zu"
                 " from index %zu of %zu", what, (long long)score, (long long)id, limit,
                 res->count, res->has_more, want, start, nall);
    return same;
}

/* The cursor after res: 1, with (*score, *id) moved on, when a next page
 * exists; 0 at the end. res is freed either way. */
static int next_cursor(feed_result *res, int64_t *score, int64_t *id)
{
    int more = res->has_more;

    if (more) {
        *score = res->next_score;
        *id = res->next_id;
    }
    feed_result_free(res);
    return more;
}

typedef struct walk_info {
    size_t pages, items;
    int    sources[4];
    int    wrong;
} walk_info;

/* Walk the merged timeline with page size limit (0: random 1..MAX_PAGE per
 * page), every page checked against SQL's union as it is now. */
static int walk(feed *f, int64_t uid, const int64_t *authors, size_t n, size_t limit,
                walk_info *w, uint64_t *rng)
{
    feed_item *all;
    size_t nall = sql_union(pg, uid, authors, n, &all);
    int64_t score = FEED_FIRST, id = 0;

    memset(w, 0, sizeof *w);
    for (;;) {
        feed_result res;
        size_t lim = limit ? limit : 1 + tu_rand(rng) % MAX_PAGE;
        int rc = feed_page_merged(f, uid, authors, n, score, id, lim, &res);
        if (rc != FEED_OK) {
            tap_diag("feed_page_merged: %s: %s", feed_strerror(rc), feed_errmsg(f));
            w->wrong++;
            break;
        }
        w->pages++;
        w->items += res.count;
        w->sources[res.source & 3]++;
        if (!page_is(all, nall, score, id, lim, &res, "walk"))
            w->wrong++;
        if (!next_cursor(&res, &score, &id) || w->wrong || w->pages > 100000)
            break;
    }
    free(all);
    return w->wrong == 0 && w->items == nall;
}

/* Redis's copy of (fam, owner) is an exact prefix of its SQL rows, all of
 * them when the end marker is there (or the copy is absent). */
static int copy_is_prefix(int fam, int64_t owner)
{
    char key[128];
    PGresult *res;
    redisReply *rep;
    size_t n = 0, nsql;
    int complete = 0, good = 1;

    snprintf(key, sizeof key, "%s", fam == FEED_FAM_AUTHOR ? tu_author_key_of("feed", owner, "")
                                                            : tu_key(owner, ""));
    {
        char sql[200];
        snprintf(sql, sizeof sql, "SELECT score, id FROM %s WHERE %s = %lld"
                 " ORDER BY score DESC, id DESC",
                 fam == FEED_FAM_AUTHOR ? "author_post" : "feed_entry",
                 fam == FEED_FAM_AUTHOR ? "author" : "uid", (long long)owner);
        res = PQexec(pg, sql);
    }
    nsql = (size_t)PQntuples(res);
    rep = tu_redis_cmd(rc_, "ZREVRANGE %s 0 -1 WITHSCORES", key);
    for (size_t i = 0; good && i + 1 < rep->elements; i += 2) {
        redisReply *m = rep->element[i], *s = rep->element[i + 1];
        int64_t mid, sc;
        if (m->len == 3 && memcmp(m->str, "end", 3) == 0) {
            complete = 1;
            continue;
        }
        if (feed__member_decode(m->str, m->len, &mid) != FEED_OK ||
            feed__parse_score(s->str, s->len, &sc) != FEED_OK || n >= nsql ||
            strtoll(PQgetvalue(res, (int)n, 0), NULL, 10) != sc ||
            strtoll(PQgetvalue(res, (int)n, 1), NULL, 10) != mid) {
            tap_diag("%s: cached item %zu is not SQL's", key, n);
            good = 0;
        }
        n++;
    }
    if (good && complete && n != nsql) {
        tap_diag("%s: complete with %zu items, SQL has %zu", key, n, nsql);
        good = 0;
    }
    freeReplyObject(rep);
    PQclear(res);
    return good;
}

static int key_exists(int fam, int64_t owner)
{
    redisReply *rep = tu_redis_cmd(rc_, "EXISTS %s",
                                   fam == FEED_FAM_AUTHOR ? tu_author_key_of("feed", owner, "")
                                                          : tu_key(owner, ""));
    int yes = rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;

    freeReplyObject(rep);
    return yes;
}

static void drop_copies(feed *f, int64_t uid, const int64_t *authors, size_t n)
{
    if (feed_invalidate(f, uid) != FEED_OK || feed_author_invalidate_many(f, authors, n) != FEED_OK)
        tap_diag("invalidate: %s", feed_errmsg(f));
}

static int slow(void)
{
    const char *s = getenv("FEED_TEST_SLOW");

    return s && *s && *s != '0';
}

/* ---------------------------------------------------------------- data */

/* Multi-row INSERTs, 500 rows a statement. */
typedef struct inserter {
    const char *head;
    char       *sql;
    size_t      len, rows;
} inserter;

static void ins_flush(inserter *in)
{
    if (in->rows > 0)
        tu_sql(pg, "%s ON CONFLICT DO NOTHING", in->sql);
    in->len = (size_t)sprintf(in->sql, "%s", in->head);
    in->rows = 0;
}

static void ins_init(inserter *in, const char *table)
{
    static char heads[2][100];
    char *h = heads[strcmp(table, "author_post") == 0];

    snprintf(h, sizeof heads[0], "INSERT INTO %s VALUES ", table);
    in->head = h;
    in->sql = malloc(500 * 70 + 200);
    if (!in->sql)
        abort();
    in->rows = 0;
    ins_flush(in);
}

static void ins_row(inserter *in, int64_t owner, int64_t score, int64_t id)
{
    in->len += (size_t)sprintf(in->sql + in->len, "%s(%lld,%lld,%lld)", in->rows ? "," : "",
                               (long long)owner, (long long)score, (long long)id);
    if (++in->rows == 500)
        ins_flush(in);
}

static void ins_done(inserter *in)
{
    ins_flush(in);
    free(in->sql);
}

/* Scores with many ties, now and then at the edges of the range. */
static int64_t tied_score(uint64_t *rng)
{
    uint64_t x = tu_rand(rng) % 64;

    if (x == 0)
        return FEED_SCORE_MAX - (int64_t)(tu_rand(rng) % 2);
    if (x == 1)
        return -FEED_SCORE_MAX + (int64_t)(tu_rand(rng) % 2);
    return (int64_t)(x % 30) * 7;
}

/* A timeline: reader uid with rows of its own; authors[0..n) with posts,
 * author k's count by k % 5: none (known empty), more than max_len
 * (partial copies), or a few. About a third of the posts are fanned out
 * into uid's feed too (the same pair), some with another score (an older
 * score of a post: another pair). Ids repeat across authors, so equal pairs
 * come from several authors as well. */
static void make_timeline(int64_t uid, int64_t *authors, size_t n, uint64_t *rng, int ties)
{
    inserter feedrows, posts;
    size_t own = tu_rand(rng) % 60;

    ins_init(&feedrows, "feed_entry");
    ins_init(&posts, "author_post");
    for (size_t j = 0; j < own; j++)
        ins_row(&feedrows, uid, ties ? tied_score(rng) : (int64_t)(tu_rand(rng) % 1000000),
                500000 + (int64_t)j);
    for (size_t k = 0; k < n; k++) {
        size_t count = k % 5 == 0 ? 0 : k % 5 == 1 ? MAX_LEN + 1 + tu_rand(rng) % 20
                                                    : tu_rand(rng) % 25;
        authors[k] = 1000 + (int64_t)k;
        for (size_t j = 0; j < count; j++) {
            int64_t score = ties ? tied_score(rng) : (int64_t)(tu_rand(rng) % 1000000);
            int64_t id = (int64_t)(j * 7 + k);
            ins_row(&posts, authors[k], score, id);
            if (tu_rand(rng) % 3 == 0)
                ins_row(&feedrows, uid, tu_rand(rng) % 4 ? score
                                      : score > 0 ? score - 1 : score + 1, id);
        }
    }
    ins_done(&feedrows);
    ins_done(&posts);
}

/* ---------------------------------------------------------------- the cut */

/* feed__merge_cut alone, on answers made by hand: when the answers prove
 * the page, and which sources block it when they do not. */
static void cut_alone(void)
{
    feed_item a1[] = { { 10, 1 }, { 9, 1 } }, b1[] = { { 8, 1 }, { 7, 1 }, { 6, 1 } };
    feed_item a2[] = { { 10, 1 }, { 9, 1 }, { 8, 1 } }, b2[] = { { 7, 1 } };
    feed_item a3[] = { { 10, 1 }, { 9, 1 } }, b3[] = { { 10, 1 }, { 5, 1 } };
    feed_item bad[] = { { 9, 1 }, { 10, 1 } };
    feed_cursor_q q = { 1, 0, 0, 3 };
    feed_item out[4];
    unsigned char blocking[3];
    feed_merge_answer ans[3];
    size_t c;

    ans[0] = (feed_merge_answer){ { a1, 2 }, 0 };
    ans[1] = (feed_merge_answer){ { b1, 3 }, 1 };
    c = feed__merge_cut(ans, 2, &q, out, blocking);
    ok(c == FEED_MERGE_UNPROVEN && blocking[0] && !blocking[1],
       "cut: a source known down to 9 cannot prove a page down to 8: it blocks, the ended"
       " one does not");
    ans[0] = (feed_merge_answer){ { a2, 3 }, 0 };
    ans[1] = (feed_merge_answer){ { b2, 1 }, 1 };
    c = feed__merge_cut(ans, 2, &q, out, blocking);
    ok(c == 3 && out[0].score == 10 && out[2].score == 8, "cut: known down to 8, three items"
       " there: proven");
    ans[0] = (feed_merge_answer){ { a3, 2 }, 1 };
    ans[1] = (feed_merge_answer){ { b3, 2 }, 1 };
    c = feed__merge_cut(ans, 2, &q, out, blocking);
    ok(c == 3 && out[0].score == 10 && out[1].score == 9 && out[2].score == 5,
       "cut: the same pair in two sources comes once");
    ans[1] = (feed_merge_answer){ { b3, 2 }, 0 };
    ans[2] = (feed_merge_answer){ { NULL, 0 }, 0 };
    c = feed__merge_cut(ans, 3, &q, out, blocking);
    ok(c == FEED_MERGE_UNPROVEN && !blocking[0] && blocking[2],
       "cut: a source known nowhere after the cursor blocks");
    ans[0] = (feed_merge_answer){ { bad, 2 }, 1 };
    c = feed__merge_cut(ans, 1, &q, out, blocking);
    ok(c == FEED_MERGE_DISORDER, "cut: rows out of order are refused");
    q = (feed_cursor_q){ 0, 9, 1, 3 };
    ans[0] = (feed_merge_answer){ { a2, 3 }, 1 };
    c = feed__merge_cut(ans, 1, &q, out, blocking);
    ok(c == FEED_MERGE_DISORDER, "cut: rows not after the cursor are refused");
}

/* An author who holds most of a page: its first read asks for a few items,
 * the proof sends it back for more (a second round trip), and the next
 * page asks for its share at once. */
static void dominant_author(void)
{
    int64_t authors[4] = { 7001, 7002, 7003, 7004 }, uid = 86;
    feed *f = open_merge(MAX_LEN);
    feed_stats before, d;
    feed_item *all;
    size_t nall;
    feed_result res;
    int nodes = tu_cluster() ? 3 : 1;
    walk_info w;
    uint64_t rng = seed;
    int same;

    reset();
    for (int j = 0; j < 25; j++)
        post(7001, 10000 + j, j);          /* the 25 newest items of the timeline */
    for (int k = 1; k < 4; k++)
        for (int j = 0; j < 5; j++)
            post(authors[k], 100 * j + k, 1000 * k + j);
    for (int j = 0; j < 20; j++)
        tu_insert(pg, uid, 50 * j, 9000 + j);
    nall = sql_union(pg, uid, authors, 4, &all);
    ok(feed_page_merged(f, uid, authors, 4, FEED_FIRST, 0, 20, &res) == FEED_OK &&
       page_is(all, nall, FEED_FIRST, 0, 20, &res, "dominant, cold"), "cold: equals SQL");
    feed_result_free(&res);
    feed_close(f);
    f = open_merge(MAX_LEN);               /* knows nothing of the authors' shares */
    {
        /* Keys on every node: each connection set up, fenced (through the
         * async API too when the tests run through it: a merged page). */
        int64_t spread[64];
        for (int i = 0; i < 64; i++)
            spread[i] = 990000 + i;
        int warm = feed_page_merged(f, 990000, spread, 64, FEED_FIRST, 0, 5, &res) == FEED_OK;
        feed_result_free(&res);
        ok(warm && feed_page(f, uid, FEED_FIRST, 0, 5, &res) == FEED_OK, "a new handle reads"
           " the reader's own feed (its connections set up, the restart fence checked)");
        feed_result_free(&res);
        for (int k = 0; k < 4; k++)         /* and, on a cluster, the authors' slots' fences */
            tu_settle_feed(f, authors[k]);
    }
    feed_stats_get(f, &before);
    ok(feed_page_merged(f, uid, authors, 4, FEED_FIRST, 0, 20, &res) == FEED_OK &&
       page_is(all, nall, FEED_FIRST, 0, 20, &res, "dominant"),
       "an author with 20 of a page's 20 items, warm: equals SQL");
    d = tu_stats_since(f, &before);
    ok(res.source == FEED_SOURCE_CACHE && d.redis_calls >= 2 && d.redis_calls <= 2 * (uint64_t)nodes,
       "  from the cache, the dominant author asked again: %llu round trips",
       (unsigned long long)d.redis_calls);
    feed_result_free(&res);
    feed_stats_get(f, &before);
    ok(feed_page_merged(f, uid, authors, 4, FEED_FIRST, 0, 20, &res) == FEED_OK &&
       page_is(all, nall, FEED_FIRST, 0, 20, &res, "dominant again"), "  again: equals SQL");
    d = tu_stats_since(f, &before);
    ok(d.redis_calls >= 1 && d.redis_calls <= (uint64_t)nodes, "  in one round trip (per node)"
       " now that the handle knows its share (%llu)", (unsigned long long)d.redis_calls);
    feed_result_free(&res);
    same = walk(f, uid, authors, 4, 0, &w, &rng);
    ok(same, "  a walk with random page sizes equals SQL");
    free(all);
    feed_close(f);
}

/* ---------------------------------------------------------------- walks */

static void walks(void)
{
    static const size_t ns[] = { 0, 1, 2, 3, 7, 17, 40, 100 };
    size_t count = slow() ? 4 : sizeof ns / sizeof ns[0];
    int64_t authors[FEED_MERGE_MAX];
    uint64_t rng = seed;

    for (size_t i = 0; i < count; i++) {
        size_t n = slow() ? ns[i * 2] : ns[i];
        int64_t uid = 77;
        feed *f = open_merge(MAX_LEN);
        walk_info w;
        int prefix = 1, same;

        reset();
        make_timeline(uid, authors, n, &rng, 1);
        drop_copies(f, uid, authors, n);
        same = walk(f, uid, authors, n, 0, &w, &rng);
        ok(same, "n = %zu authors, cold copies: the walk (random page sizes, %zu pages) equals"
           " SQL's UNION", n, w.pages);
        ok(w.sources[FEED_SOURCE_REBUILD] >= 1, "  the cold copies were rebuilt (%d pages REBUILD,"
           " %d CACHE, %d DB)", w.sources[FEED_SOURCE_REBUILD], w.sources[FEED_SOURCE_CACHE],
           w.sources[FEED_SOURCE_DB]);
        same = walk(f, uid, authors, n, 0, &w, &rng);
        ok(same, "  warm: equals SQL (%zu pages: %d CACHE, %d DB)", w.pages,
           w.sources[FEED_SOURCE_CACHE], w.sources[FEED_SOURCE_DB]);
        is_int(w.sources[FEED_SOURCE_REBUILD], 0, "  warm: nothing rebuilt");
        ok(walk(f, uid, authors, n, MAX_PAGE, &w, &rng) &&
           (n > 17 || walk(f, uid, authors, n, 1, &w, &rng)),
           "  page size %d%s: equals SQL", MAX_PAGE, n > 17 ? "" : " and 1");
        prefix &= copy_is_prefix(FEED_FAM_FEED, uid);
        for (size_t k = 0; k < n; k++)
            prefix &= copy_is_prefix(FEED_FAM_AUTHOR, authors[k]);
        ok(prefix, "  every copy in Redis is an exact prefix of its rows");
        if (n >= 1) {
            redisReply *rep = tu_redis_cmd(rc_, "ZRANGE %s 0 -1",
                                           tu_author_key_of("feed", authors[0], ""));
            ok(rep->type == REDIS_REPLY_ARRAY && rep->elements == 1 &&
               strcmp(rep->element[0]->str, "end") == 0,
               "  an author without posts is cached as known empty (the end marker alone)");
            freeReplyObject(rep);
        }
        feed_close(f);
    }
}

/* What a page costs: round trips and statements, from the counters. */
static void costs(void)
{
    int64_t authors[10], uid = 78;
    feed *f = open_merge(MAX_LEN);
    feed_stats before, d;
    feed_result res;
    feed_item *all;
    size_t nall;
    int nodes = tu_cluster() ? 3 : 1;

    reset();
    for (int k = 0; k < 10; k++) {
        authors[k] = 2000 + k;
        for (int j = 0; j < 10; j++)
            post(authors[k], 10000 + 100 * j + k, 100 * k + j);
    }
    for (int j = 0; j < 20; j++)
        tu_insert(pg, uid, 10000 + 100 * j + 50, 5000 + j);
    nall = sql_union(pg, uid, authors, 10, &all);
    drop_copies(f, uid, authors, 10);

    feed_stats_get(f, &before);
    ok(feed_page_merged(f, uid, authors, 10, FEED_FIRST, 0, 10, &res) == FEED_OK &&
       page_is(all, nall, FEED_FIRST, 0, 10, &res, "cold"), "cold first page of 11 sources"
       " equals SQL");
    d = tu_stats_since(f, &before);
    is_int(res.source, FEED_SOURCE_REBUILD, "  source REBUILD");
    is_int(d.sql_queries, 1, "  one SQL statement rebuilt all 11 copies");
    is_int(d.rebuilds, 11, "  11 copies installed");
    if (!tu_cluster())
        is_int(d.redis_calls, 3, "  three round trips: the reads, page.lua's leases, one install");
    feed_result_free(&res);

    feed_stats_get(f, &before);
    ok(feed_page_merged(f, uid, authors, 10, FEED_FIRST, 0, 10, &res) == FEED_OK &&
       page_is(all, nall, FEED_FIRST, 0, 10, &res, "warm"), "warm first page equals SQL");
    d = tu_stats_since(f, &before);
    is_int(res.source, FEED_SOURCE_CACHE, "  from the cache");
    is_int(d.sql_queries, 0, "  no SQL");
    ok(d.redis_calls >= 1 && d.redis_calls <= (uint64_t)nodes,
       "  one round trip per Redis node (%llu, %d node%s)", (unsigned long long)d.redis_calls,
       nodes, nodes > 1 ? "s" : "");
    {
        int64_t s = res.next_score, i = res.next_id;
        feed_result_free(&res);
        feed_stats_get(f, &before);
        ok(feed_page_merged(f, uid, authors, 10, s, i, 10, &res) == FEED_OK &&
           page_is(all, nall, s, i, 10, &res, "next"), "warm next page equals SQL");
        d = tu_stats_since(f, &before);
        ok(res.source == FEED_SOURCE_CACHE && d.sql_queries == 0 && d.redis_calls >= 1 &&
           d.redis_calls <= (uint64_t)nodes, "  from the cache in one round trip per node,"
           " no SQL (%llu round trips)", (unsigned long long)d.redis_calls);
        feed_result_free(&res);
    }
    /* The same authors named twice, in another order: the same page. */
    {
        int64_t twice[20];
        for (int k = 0; k < 10; k++)
            twice[k] = twice[19 - k] = authors[k];
        ok(feed_page_merged(f, uid, twice, 20, FEED_FIRST, 0, 10, &res) == FEED_OK &&
           page_is(all, nall, FEED_FIRST, 0, 10, &res, "twice"),
           "authors named twice, in any order: the same page");
        feed_result_free(&res);
    }
    free(all);

    /* Long runs of ties at the cursor: every copy whole, so every page
     * still comes from the cache, by page.lua's seek where a plain read
     * cannot prove it. */
    reset();
    for (int k = 0; k < 10; k++)
        for (int j = 0; j < 25; j++)
            post(authors[k], j < 20 ? 7 : j, 100 * k + j);
    for (int j = 0; j < 25; j++)
        tu_insert(pg, uid, 7, 5000 + j);
    drop_copies(f, uid, authors, 10);
    {
        walk_info w;
        uint64_t rng = seed;
        int same = walk(f, uid, authors, 10, 0, &w, &rng);
        ok(same, "ties: 250 of 275 items share one score: a walk equals SQL");
        feed_stats_get(f, &before);
        same = walk(f, uid, authors, 10, 0, &w, &rng);
        d = tu_stats_since(f, &before);
        ok(same && w.sources[FEED_SOURCE_CACHE] == (int)w.pages && d.sql_queries == 0,
           "  warm: every page (%zu) from the cache, no SQL", w.pages);
        ok(d.plain_fallbacks > 0, "  page.lua's seek answered where the ties ran long (%llu"
           " sources)", (unsigned long long)d.plain_fallbacks);
    }

    /* Copies shorter than the page: several sources short, one statement. */
    feed_close(f);
    f = open_merge(3);
    drop_copies(f, uid, authors, 10);
    nall = sql_union(pg, uid, authors, 10, &all);
    ok(feed_page_merged(f, uid, authors, 10, FEED_FIRST, 0, 10, &res) == FEED_OK &&
       page_is(all, nall, FEED_FIRST, 0, 10, &res, "partial"), "max_len 3, cold: equals SQL");
    feed_result_free(&res);
    {
        int64_t s = all[5].score, i = all[5].id;
        feed_stats_get(f, &before);
        ok(feed_page_merged(f, uid, authors, 10, s, i, 10, &res) == FEED_OK &&
           page_is(all, nall, s, i, 10, &res, "within"),
           "a page within what the partial copies prove equals SQL");
        d = tu_stats_since(f, &before);
        ok(res.source == FEED_SOURCE_CACHE && d.sql_queries == 0,
           "  from the cache: each copy holds its source's top 3, so the union is known"
           " down to the highest of their ends");
        feed_result_free(&res);
        s = all[40].score;
        i = all[40].id;
        feed_stats_get(f, &before);
        ok(feed_page_merged(f, uid, authors, 10, s, i, 10, &res) == FEED_OK &&
           page_is(all, nall, s, i, 10, &res, "past"), "a page past every copy equals SQL");
        d = tu_stats_since(f, &before);
        is_int(res.source, FEED_SOURCE_DB, "  source DB");
        is_int(d.sql_queries, 1, "  one SQL statement for the 11 short sources");
        feed_result_free(&res);
    }
    free(all);
    feed_close(f);
}

/* ---------------------------------------------------------------- hooks */

/* One write on either table through SQL and its hook (handle w). */
static void random_write(feed *w, int64_t uid, const int64_t *authors, size_t n, uint64_t *rng)
{
    int64_t score = tied_score(rng);
    size_t k = tu_rand(rng) % n;
    int64_t a = authors[k], id = (int64_t)(tu_rand(rng) % 40 * 7 + k);
    int rc = FEED_OK;

    switch (tu_rand(rng) % 6) {
    case 0:     /* a post, insert or new score */
    case 1:
        post(a, score, id);
        rc = feed_author_on_insert(w, a, score, id);
        break;
    case 2:     /* fanned out into the reader's feed too: the same pair */
        post(a, score, id);
        rc = feed_author_on_insert(w, a, score, id);
        tu_insert(pg, uid, score, id);
        if (rc == FEED_OK)
            rc = feed_on_insert(w, uid, score, id);
        break;
    case 3:     /* a row of the reader's own */
        id = 500000 + (int64_t)(tu_rand(rng) % 80);
        tu_insert(pg, uid, score, id);
        rc = feed_on_insert(w, uid, score, id);
        break;
    case 4:     /* a post deleted */
        tu_sql(pg, "DELETE FROM author_post WHERE author = %lld AND id = %lld", (long long)a,
               (long long)id);
        rc = feed_author_on_delete(w, a, id);
        break;
    default:    /* a row of the reader's deleted */
        tu_sql(pg, "DELETE FROM feed_entry WHERE uid = %lld AND id = %lld", (long long)uid,
               (long long)id);
        rc = feed_on_delete(w, uid, id);
    }
    if (rc != FEED_OK)
        tap_diag("hook: %s: %s", feed_strerror(rc), feed_errmsg(w));
}

static void hooks_between_pages(void)
{
    int64_t authors[12], uid = 79;
    size_t n = 12, pages = 0, writes = 0;
    uint64_t rng = seed + 2;
    feed *f = open_merge(MAX_LEN), *w = open_merge(MAX_LEN);
    int wrong = 0, prefix = 1;
    walk_info wi;

    reset();
    make_timeline(uid, authors, n, &rng, 1);
    for (int round = 0; round < (slow() ? 3 : 12); round++) {
        int64_t score = FEED_FIRST, id = 0;
        if (round % 4 == 0)
            drop_copies(f, uid, authors, n);    /* cold now and then */
        for (;;) {
            feed_result res;
            feed_item *all;
            size_t nall, lim = 1 + tu_rand(&rng) % MAX_PAGE;
            for (uint64_t k = tu_rand(&rng) % 4; k > 0; k--, writes++)
                random_write(w, uid, authors, n, &rng);
            nall = sql_union(pg, uid, authors, n, &all);
            if (feed_page_merged(f, uid, authors, n, score, id, lim, &res) != FEED_OK) {
                tap_diag("feed_page_merged: %s", feed_errmsg(f));
                wrong++;
                free(all);
                break;
            }
            pages++;
            wrong += !page_is(all, nall, score, id, lim, &res, "between writes");
            free(all);
            if (!next_cursor(&res, &score, &id))
                break;
        }
    }
    ok(wrong == 0, "writes on either table between pages (%zu writes, %zu pages): every page"
       " equals SQL as it is then", writes, pages);
    prefix &= copy_is_prefix(FEED_FAM_FEED, uid);
    for (size_t k = 0; k < n; k++)
        prefix &= copy_is_prefix(FEED_FAM_AUTHOR, authors[k]);
    ok(prefix, "  every copy in Redis is still an exact prefix of its rows");
    ok(walk(f, uid, authors, n, 0, &wi, &rng), "  a fresh walk equals SQL");
    feed_close(w);
    feed_close(f);
}

/* ---------------------------------------------------------------- leases, TTL */

static int wrote_between;

/* test_before_install: the rebuild has read SQL; a new post commits and
 * its hook runs before the install. */
static void write_in_between(feed *f, int64_t owner, void *arg)
{
    feed *w = arg;

    (void)f;
    if (wrote_between || owner != 4001)
        return;
    wrote_between = 1;
    post(4001, 999999, 424242);
    if (feed_author_on_insert(w, 4001, 999999, 424242) != FEED_OK)
        tap_diag("hook: %s", feed_errmsg(w));
}

static void leases_and_ttl(void)
{
    int64_t authors[3] = { 4001, 4002, 4003 }, uid = 80;
    feed *f = open_merge(MAX_LEN), *w = open_merge(MAX_LEN), *g;
    feed_config cfg;
    feed_item *before, *now;
    size_t nbefore, nnow;
    feed_result res;
    redisReply *rep;
    feed_stats st0, st;

    reset();
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < 8; j++)
            post(authors[k], 100 * j + k, 10 * j + k);
    tu_insert(pg, uid, 50, 1);
    nbefore = sql_union(pg, uid, authors, 3, &before);
    f->core.test_before_install = write_in_between;
    f->core.test_arg = w;
    feed_stats_get(f, &st0);
    ok(feed_page_merged(f, uid, authors, 3, FEED_FIRST, 0, 5, &res) == FEED_OK &&
       page_is(before, nbefore, FEED_FIRST, 0, 5, &res, "raced"),
       "a post committed between a merged rebuild's SQL read and its install: the page is"
       " SQL's from before it");
    f->core.test_before_install = NULL;
    st = tu_stats_since(f, &st0);
    ok(res.source == FEED_SOURCE_DB && st.rebuilds == 3, "  source DB: 3 of the 4 copies"
       " installed (%llu), one answered from rows it could not install",
       (unsigned long long)st.rebuilds);
    feed_result_free(&res);
    ok(wrote_between && !key_exists(FEED_FAM_AUTHOR, 4001) && key_exists(FEED_FAM_AUTHOR, 4002),
       "  its hook cancelled that author's install (copy absent), the others installed");
    nnow = sql_union(pg, uid, authors, 3, &now);
    ok(feed_page_merged(f, uid, authors, 3, FEED_FIRST, 0, 5, &res) == FEED_OK &&
       page_is(now, nnow, FEED_FIRST, 0, 5, &res, "after") && res.items[0].id == 424242,
       "  the next page has the new post on top");
    feed_result_free(&res);
    ok(copy_is_prefix(FEED_FAM_AUTHOR, 4001), "  and the copy rebuilt then is exact");
    free(before);
    free(now);

    /* TTL: a first page refreshes each source's TTL once less than half is
     * left (a handle that knows nothing of the copies asks with PTTL). */
    tu_config(&cfg);
    cfg.author_table = "author_post";
    cfg.ttl_seconds = 100;
    g = tu_open(&cfg);
    freeReplyObject(tu_redis_cmd(rc_, "PEXPIRE %s 2000", tu_author_key_of("feed", 4002, "")));
    ok(feed_page_merged(g, uid, authors, 3, FEED_FIRST, 0, 5, &res) == FEED_OK &&
       res.source == FEED_SOURCE_CACHE, "a first page from the cache");
    feed_result_free(&res);
    rep = tu_redis_cmd(rc_, "PTTL %s", tu_author_key_of("feed", 4002, ""));
    ok(rep->type == REDIS_REPLY_INTEGER && rep->integer > 50000,
       "  refreshed the TTL of an author's copy that had 2 s left (PTTL now %lld ms)",
       (long long)rep->integer);
    freeReplyObject(rep);
    feed_close(g);
    feed_close(w);
    feed_close(f);
}

/* Many handles miss the same cold sources at once: each source is rebuilt
 * once, the others wait for it (lease_wait_ms), nobody reads SQL. */
#define STAMPEDE 8

typedef struct stamper {
    pthread_t   thread;
    feed       *f;
    int         rc;
    feed_result res;
} stamper;

static pthread_barrier_t stampede_line;
static int64_t stampede_authors[5] = { 6001, 6002, 6003, 6004, 6005 };

static void *stamper_main(void *arg)
{
    stamper *s = arg;

    pthread_barrier_wait(&stampede_line);
    s->rc = feed_page_merged(s->f, 85, stampede_authors, 5, FEED_FIRST, 0, 10, &s->res);
    return NULL;
}

static void stampede(void)
{
    stamper st[STAMPEDE];
    feed_config cfg;
    feed_item *all;
    size_t nall;
    feed_stats total = { 0 };
    int same = 1;

    reset();
    for (int k = 0; k < 5; k++)
        for (int j = 0; j < 400; j++)
            post(stampede_authors[k], j * 3 + k, j);
    for (int j = 0; j < 400; j++)
        tu_insert(pg, 85, j * 5, 10000 + j);
    nall = sql_union(pg, 85, stampede_authors, 5, &all);
    tu_config(&cfg);
    cfg.author_table = "author_post";
    cfg.lease_wait_ms = 10000;       /* long enough that nobody falls back */
    cfg.lease_ms = 10000;
    for (int i = 0; i < STAMPEDE; i++)
        st[i].f = tu_open(&cfg);
    pthread_barrier_init(&stampede_line, NULL, STAMPEDE);
    for (int i = 0; i < STAMPEDE; i++)
        pthread_create(&st[i].thread, NULL, stamper_main, &st[i]);
    for (int i = 0; i < STAMPEDE; i++) {
        feed_stats s;
        pthread_join(st[i].thread, NULL);
        feed_stats_get(st[i].f, &s);
        total.rebuilds += s.rebuilds;
        total.db_pages += s.db_pages;
        total.lease_waits += s.lease_waits;
        same &= st[i].rc == FEED_OK &&
                page_is(all, nall, FEED_FIRST, 0, 10, &st[i].res, "stampede");
        feed_result_free(&st[i].res);
        feed_close(st[i].f);
    }
    pthread_barrier_destroy(&stampede_line);
    ok(same, "%d handles miss the same 6 cold sources at once: every page equals SQL",
       STAMPEDE);
    is_int(total.rebuilds, 6, "  each source rebuilt once (leases)");
    is_int(total.db_pages, 0, "  nobody read SQL");
    tap_diag("stampede: %llu lease waits", (unsigned long long)total.lease_waits);
    free(all);
}

/* ---------------------------------------------------------------- threads */

#define T_UIDS    2
#define T_AUTHORS 20
#define T_WRITERS 2
#define T_READERS 3

static atomic_int t_stop;

/* Every (score, id) pair ever written: a page may only show those. */
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;
static feed_item *seen;
static size_t seen_cap, seen_n;

static uint64_t pair_hash(feed_item it)
{
    return ((uint64_t)it.score * 0x9E3779B97F4A7C15ULL) ^ ((uint64_t)it.id * 0xC2B2AE3D27D4EB4FULL);
}

static void seen_add_locked(feed_item it);

static int seen_has(feed_item it)
{
    int found = 0;

    pthread_mutex_lock(&seen_lock);
    for (size_t h = pair_hash(it) % seen_cap;; h = (h + 1) % seen_cap) {
        if (seen[h].id == -1)
            break;
        if (seen[h].score == it.score && seen[h].id == it.id) {
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&seen_lock);
    return found;
}

static void seen_add_locked(feed_item it)
{
    if (2 * (seen_n + 1) > seen_cap) {
        feed_item *old = seen;
        size_t cap = seen_cap;
        seen_cap = cap ? 2 * cap : 4096;
        seen = malloc(seen_cap * sizeof *seen);
        if (!seen)
            abort();
        for (size_t i = 0; i < seen_cap; i++)
            seen[i].id = -1;
        seen_n = 0;
        for (size_t i = 0; i < cap; i++)
            if (old[i].id != -1)
                seen_add_locked(old[i]);
        free(old);
    }
    for (size_t h = pair_hash(it) % seen_cap;; h = (h + 1) % seen_cap) {
        if (seen[h].id == -1) {
            seen[h] = it;
            seen_n++;
            return;
        }
        if (seen[h].score == it.score && seen[h].id == it.id)
            return;
    }
}

static void seen_add(int64_t score, int64_t id)
{
    pthread_mutex_lock(&seen_lock);
    seen_add_locked((feed_item){ score, id });
    pthread_mutex_unlock(&seen_lock);
}

typedef struct tworker {
    pthread_t thread;
    int       k;
    uint64_t  rng;
    unsigned long ops, pages, walks, bad, errors;
    char      why[200];
} tworker;

static void *writer_main(void *arg)
{
    tworker *t = arg;
    PGconn *c = tu_pg();
    feed *w = open_merge(MAX_LEN);

    while (!atomic_load(&t_stop)) {
        int64_t score = tied_score(&t->rng), id = (int64_t)(tu_rand(&t->rng) % 60) * T_WRITERS + t->k;
        int64_t uid = 81 + (int64_t)(tu_rand(&t->rng) % T_UIDS);
        int64_t a = 5001 + (int64_t)(tu_rand(&t->rng) % T_AUTHORS);
        int rc, action = (int)(tu_rand(&t->rng) % 5);
        char sql[200];

        seen_add(score, id);
        if (action <= 1) {
            snprintf(sql, sizeof sql, "INSERT INTO author_post VALUES (%lld,%lld,%lld) ON CONFLICT"
                     " (author, id) DO UPDATE SET score = EXCLUDED.score", (long long)a,
                     (long long)score, (long long)id);
            PQclear(PQexec(c, sql));
            rc = feed_author_on_insert(w, a, score, id);
        } else if (action == 2) {
            snprintf(sql, sizeof sql, "INSERT INTO feed_entry VALUES (%lld,%lld,%lld) ON CONFLICT"
                     " (uid, id) DO UPDATE SET score = EXCLUDED.score", (long long)uid,
                     (long long)score, (long long)id);
            PQclear(PQexec(c, sql));
            rc = feed_on_insert(w, uid, score, id);
        } else if (action == 3) {
            snprintf(sql, sizeof sql, "DELETE FROM author_post WHERE author = %lld AND id = %lld",
                     (long long)a, (long long)id);
            PQclear(PQexec(c, sql));
            rc = feed_author_on_delete(w, a, id);
        } else {
            snprintf(sql, sizeof sql, "DELETE FROM feed_entry WHERE uid = %lld AND id = %lld",
                     (long long)uid, (long long)id);
            PQclear(PQexec(c, sql));
            rc = feed_on_delete(w, uid, id);
        }
        if (rc != FEED_OK && t->errors++ < 3)
            snprintf(t->why, sizeof t->why, "hook: %s", feed_errmsg(w));
        t->ops++;
    }
    feed_close(w);
    PQfinish(c);
    return NULL;
}

/* A page's shape: at most limit items, strictly ordered, strictly after
 * the cursor, each pair one ever written, has_more and the cursor right. */
static const char *bad_page(const feed_result *res, size_t limit, int64_t score, int64_t id)
{
    if (res->count > limit)
        return "more items than the limit";
    if (res->has_more && (res->count != limit || res->next_score != res->items[limit - 1].score ||
                          res->next_id != res->items[limit - 1].id))
        return "has_more without a full page or a cursor that is not the last item";
    for (size_t i = 0; i < res->count; i++) {
        if (!after(res->items[i], score, id))
            return "an item not after the cursor";
        if (i > 0 && !after(res->items[i], res->items[i - 1].score, res->items[i - 1].id))
            return "items not strictly ordered (or a pair twice)";
        if (!seen_has(res->items[i]))
            return "a pair never written";
    }
    return NULL;
}

static void *reader_main(void *arg)
{
    tworker *t = arg;
    feed *f = open_merge(MAX_LEN);
    int64_t authors[T_AUTHORS];

    while (!atomic_load(&t_stop)) {
        size_t n = tu_rand(&t->rng) % (T_AUTHORS + 1);
        int64_t uid = 81 + (int64_t)(tu_rand(&t->rng) % T_UIDS), score = FEED_FIRST, id = 0;
        for (size_t k = 0; k < n; k++)
            authors[k] = 5001 + (int64_t)(tu_rand(&t->rng) % T_AUTHORS);
        for (int p = 0; p < 1000 && !atomic_load(&t_stop); p++) {
            size_t lim = 1 + tu_rand(&t->rng) % MAX_PAGE;
            feed_result res;
            const char *why;
            if (feed_page_merged(f, uid, authors, n, score, id, lim, &res) != FEED_OK) {
                if (t->errors++ < 3)
                    snprintf(t->why, sizeof t->why, "page: %s", feed_errmsg(f));
                break;
            }
            t->pages++;
            if ((why = bad_page(&res, lim, score, id)) != NULL && t->bad++ < 3)
                snprintf(t->why, sizeof t->why, "%s", why);
            if (!next_cursor(&res, &score, &id))
                break;
        }
        t->walks++;
    }
    feed_close(f);
    return NULL;
}

static void threads(void)
{
    tworker wr[T_WRITERS], rd[T_READERS];
    int64_t authors[T_AUTHORS];
    const char *secs = getenv("FEED_MERGE_SECONDS");
    double seconds = secs && *secs ? atof(secs) : slow() ? 2 : 3;
    unsigned long ops = 0, pages = 0, walks = 0, bad = 0, errors = 0;
    uint64_t rng = seed + 3;
    feed *f;
    int prefix = 1, walks_ok = 1;
    PGresult *res;

    reset();
    for (int k = 0; k < T_AUTHORS; k++) {
        authors[k] = 5001 + k;
        for (int j = 0; j < (k % 4 == 0 ? MAX_LEN + 10 : 12); j++)
            post(authors[k], tied_score(&rng), (int64_t)j * 2 + 1000);
    }
    res = PQexec(pg, "SELECT score, id FROM author_post UNION SELECT score, id FROM feed_entry");
    for (int i = 0; i < PQntuples(res); i++)
        seen_add(strtoll(PQgetvalue(res, i, 0), NULL, 10), strtoll(PQgetvalue(res, i, 1), NULL, 10));
    PQclear(res);
    atomic_store(&t_stop, 0);
    for (int i = 0; i < T_WRITERS; i++) {
        wr[i] = (tworker){ .k = i, .rng = seed + 100 + (uint64_t)i };
        pthread_create(&wr[i].thread, NULL, writer_main, &wr[i]);
    }
    for (int i = 0; i < T_READERS; i++) {
        rd[i] = (tworker){ .k = i, .rng = seed + 200 + (uint64_t)i };
        pthread_create(&rd[i].thread, NULL, reader_main, &rd[i]);
    }
    fault_sleep_ms(seconds * 1000);
    atomic_store(&t_stop, 1);
    for (int i = 0; i < T_WRITERS; i++) {
        pthread_join(wr[i].thread, NULL);
        ops += wr[i].ops;
        errors += wr[i].errors;
        if (wr[i].errors)
            tap_diag("writer %d: %s", i, wr[i].why);
    }
    for (int i = 0; i < T_READERS; i++) {
        pthread_join(rd[i].thread, NULL);
        pages += rd[i].pages;
        walks += rd[i].walks;
        bad += rd[i].bad;
        errors += rd[i].errors;
        if (rd[i].bad || rd[i].errors)
            tap_diag("reader %d: %s", i, rd[i].why);
    }
    ok(ops > 0 && pages > 0, "%d writers and %d readers, %.0f s: %lu writes, %lu merged pages in"
       " %lu walks", T_WRITERS, T_READERS, seconds, ops, pages, walks);
    is_int(bad, 0, "  no page wrong (ordered, after its cursor, only pairs ever written,"
           " has_more and cursor right)");
    is_int(errors, 0, "  no call failed");
    for (int64_t uid = 81; uid < 81 + T_UIDS; uid++)
        prefix &= copy_is_prefix(FEED_FAM_FEED, uid);
    for (int k = 0; k < T_AUTHORS; k++)
        prefix &= copy_is_prefix(FEED_FAM_AUTHOR, authors[k]);
    ok(prefix, "  writers stopped: every copy in Redis is an exact prefix of its rows");
    f = open_merge(MAX_LEN);
    for (int64_t uid = 81; uid < 81 + T_UIDS; uid++) {
        walk_info w;
        walks_ok &= walk(f, uid, authors, T_AUTHORS, 0, &w, &rng);
        walks_ok &= walk(f, uid, authors + 5, 3, 0, &w, &rng);
    }
    ok(walks_ok, "  a fresh walk of each timeline equals SQL");
    feed_close(f);
}

/* ---------------------------------------------------------------- faults */

static feed *open_faulty(uint32_t max_len)
{
    feed_config cfg;

    tu_config(&cfg);
    if (max_len < MAX_LEN)
        cfg.key_prefix = "short";   /* copies of its own, not the others' whole ones */
    cfg.max_len = max_len;
    cfg.max_page = MAX_PAGE;
    cfg.author_table = "author_post";
    cfg.redis_timeout_ms = 200;
    cfg.retry_ms = 200;
    cfg.pg_timeout_ms = 300;
    cfg.lease_wait_ms = 50;
    return tu_open(&cfg);
}

static void redis_down_mid_walk(void)
{
    int64_t authors[6], uid = 90, score = FEED_FIRST, id = 0;
    uint64_t rng = seed + 4;
    feed *f = open_faulty(MAX_LEN);
    feed_item *all;
    size_t nall, pages = 0, db = 0;
    int wrong = 0, stopped = 0;
    walk_info w;

    reset();
    make_timeline(uid, authors, 6, &rng, 1);
    nall = sql_union(pg, uid, authors, 6, &all);
    for (;;) {
        feed_result res;
        if (pages == 2) {
            fault_inject("redis-stop");
            stopped = 1;
        }
        if (feed_page_merged(f, uid, authors, 6, score, id, 7, &res) != FEED_OK) {
            tap_diag("page %zu: %s", pages, feed_errmsg(f));
            wrong++;
            break;
        }
        pages++;
        wrong += !page_is(all, nall, score, id, 7, &res, "redis down");
        db += stopped && res.source == FEED_SOURCE_DB;
        if (!next_cursor(&res, &score, &id))
            break;
    }
    ok(wrong == 0 && pages > 3, "Redis stopped after 2 pages of a merged walk: every page"
       " (%zu) equals SQL", pages);
    is_int(db, pages - 2, "  the pages after the stop came from SQL");
    fault_inject("redis-start");
    redisFree(rc_);
    rc_ = tu_redis();        /* a new server: a new connection */
    fault_sleep_ms(250);     /* retry_ms */
    ok(walk(f, uid, authors, 6, 0, &w, &rng), "Redis back: a walk equals SQL");
    stopped = walk(f, uid, authors, 6, 0, &w, &rng);
    ok(stopped && w.sources[FEED_SOURCE_CACHE] > 0,
       "  and comes from the cache again (%d pages CACHE)", w.sources[FEED_SOURCE_CACHE]);
    free(all);
    feed_close(f);
}

static void pg_frozen(void)
{
    int64_t authors[5], uid = 91, score = FEED_FIRST, id = 0;
    uint64_t rng = seed + 5;
    feed *f = open_faulty(1000), *p = open_faulty(3);
    feed_item *all;
    size_t nall, pages = 0, cache = 0;
    int wrong = 0, rc;
    walk_info w;
    feed_result res;
    double t0;

    reset();
    make_timeline(uid, authors, 5, &rng, 1);
    nall = sql_union(pg, uid, authors, 5, &all);
    ok(walk(f, uid, authors, 5, 0, &w, &rng), "a merged walk warms every copy (whole: max_len"
       " 1000)");
    ok(feed_page_merged(p, uid, authors, 5, FEED_FIRST, 0, 5, &res) == FEED_OK,
       "  and a handle with max_len 3 its partial copies");
    feed_result_free(&res);
    fault_inject("pg-freeze");
    for (;;) {
        if (feed_page_merged(f, uid, authors, 5, score, id, 6, &res) != FEED_OK) {
            tap_diag("page %zu: %s", pages, feed_errmsg(f));
            wrong++;
            break;
        }
        pages++;
        cache += res.source == FEED_SOURCE_CACHE;
        wrong += !page_is(all, nall, score, id, 6, &res, "pg frozen");
        if (!next_cursor(&res, &score, &id))
            break;
    }
    ok(wrong == 0 && cache == pages, "PostgreSQL frozen: every page of the walk (%zu) from the"
       " cache, equal to SQL", pages);
    t0 = fault_now_ms();
    rc = feed_page_merged(p, uid, authors, 5, all[nall / 2].score, all[nall / 2].id, 6, &res);
    is_int(rc, FEED_EPG, "  a page past the partial copies: FEED_EPG (%s)", feed_errmsg(p));
    ok(fault_now_ms() - t0 < 300 + fault_slack_ms(), "  within pg_timeout_ms (%.0f ms)",
       fault_now_ms() - t0);
    fault_inject("pg-thaw");
    fault_sleep_ms(250);
    ok(feed_page_merged(p, uid, authors, 5, all[nall / 2].score, all[nall / 2].id, 6, &res) == FEED_OK &&
       page_is(all, nall, all[nall / 2].score, all[nall / 2].id, 6, &res, "thawed"),
       "  thawed: that page equals SQL");
    feed_result_free(&res);
    free(all);
    feed_close(p);
    feed_close(f);
}

/* An author hook that could not reach Redis: that author's copy is dropped
 * once Redis answers, and not the reader's feed of the same number. */
static void repair_in_family(void)
{
    int64_t authors[1] = { 3001 };
    feed *f = open_faulty(MAX_LEN);
    feed_result res;
    int rc;

    reset();
    post(3001, 10, 1);
    tu_insert(pg, 3001, 20, 2);       /* uid 3001's feed: the same number */
    ok(feed_page_merged(f, 3001, authors, 1, FEED_FIRST, 0, 5, &res) == FEED_OK,
       "reader 3001 with author 3001: both copies cached");
    feed_result_free(&res);
    ok(key_exists(FEED_FAM_FEED, 3001) && key_exists(FEED_FAM_AUTHOR, 3001),
       "  the reader's copy of 3001 and the author's copy of 3001");
    fault_inject("redis-freeze");
    post(3001, 30, 3);
    rc = feed_author_on_insert(f, 3001, 30, 3);
    fault_inject("redis-thaw");
    is_int(rc, FEED_EREDIS, "Redis frozen: the author hook fails (%s)", feed_errmsg(f));
    fault_sleep_ms(250);     /* retry_ms */
    ok(feed_page(f, 12345, FEED_FIRST, 0, 5, &res) == FEED_OK, "the next call reaches Redis");
    feed_result_free(&res);
    ok(!key_exists(FEED_FAM_AUTHOR, 3001), "  and dropped the author's copy first");
    ok(key_exists(FEED_FAM_FEED, 3001), "  the reader's feed of the same number stays");
    feed_close(f);
}

/* feed_author_invalidate drops one author's copy with a plain DEL, so it
 * works where an ACL refuses the library's scripts (and with them the
 * hooks): the author's copy only, not the reader's feed of the same
 * number; the next merged page rebuilds it with what SQL has now. */
static void author_invalidate(void)
{
    int64_t authors[1] = { 3002 };
    feed *f = open_merge(MAX_LEN);
    feed_result res;
    walk_info w;
    int rc;

    reset();
    post(3002, 10, 1);
    tu_insert(pg, 3002, 20, 2);       /* uid 3002's feed: the same number */
    ok(feed_page_merged(f, 3002, authors, 1, FEED_FIRST, 0, 5, &res) == FEED_OK &&
       key_exists(FEED_FAM_FEED, 3002) && key_exists(FEED_FAM_AUTHOR, 3002),
       "reader 3002 with author 3002: both copies cached");
    feed_result_free(&res);
    freeReplyObject(tu_redis_cmd(rc_, "ACL SETUSER default -evalsha"));
    rc = feed_author_invalidate(f, 3002);
    freeReplyObject(tu_redis_cmd(rc_, "ACL SETUSER default +evalsha"));
    is_int(rc, FEED_OK, "EVALSHA refused (an ACL): feed_author_invalidate still drops (%s)",
           feed_errmsg(f));
    ok(!key_exists(FEED_FAM_AUTHOR, 3002), "  the author's copy is gone");
    ok(key_exists(FEED_FAM_FEED, 3002), "  the reader's feed of the same number stays");
    post(3002, 30, 3);                /* SQL only: a copy that was not dropped lacks it */
    ok(walk(f, 3002, authors, 1, 2, &w, NULL) && w.sources[FEED_SOURCE_REBUILD] == 1,
       "  the next merged walk rebuilds it and equals SQL's union");
    feed_close(f);
}

/* ---------------------------------------------------------------- bad input */

static void bad_input(void)
{
    int64_t authors[FEED_MERGE_MAX + 1];
    feed *f = open_merge(MAX_LEN), *plain = tu_open(NULL), *nope;
    feed_config cfg;
    feed_result res;

    for (int k = 0; k <= FEED_MERGE_MAX; k++)
        authors[k] = k;
    ok(FEED_MERGE_MAX >= 100, "FEED_MERGE_MAX is %d (at least 100)", FEED_MERGE_MAX);
    is_int(feed_page_merged(f, 1, authors, FEED_MERGE_MAX + 1, FEED_FIRST, 0, 5, &res),
           FEED_EINVAL, "n = FEED_MERGE_MAX + 1: FEED_EINVAL");
    ok(strstr(feed_errmsg(f), "authors") != NULL, "  with a message: %s", feed_errmsg(f));
    ok(res.items == NULL && res.count == 0, "  and *out zeroed");
    is_int(feed_page_merged(f, 1, authors, FEED_MERGE_MAX, FEED_FIRST, 0, 5, &res), FEED_OK,
           "n = FEED_MERGE_MAX: FEED_OK");
    feed_result_free(&res);
    is_int(feed_page_merged(f, 1, NULL, 3, FEED_FIRST, 0, 5, &res), FEED_EINVAL,
           "authors NULL with n 3: FEED_EINVAL (%s)", feed_errmsg(f));
    is_int(feed_page_merged(f, 1, NULL, 0, FEED_FIRST, 0, 5, &res), FEED_OK,
           "authors NULL with n 0: the reader's page");
    feed_result_free(&res);
    is_int(feed_page_merged(plain, 1, authors, 3, FEED_FIRST, 0, 5, &res), FEED_EINVAL,
           "a handle without author_table: FEED_EINVAL");
    ok(strstr(feed_errmsg(plain), "author_table") != NULL, "  with a message: %s",
       feed_errmsg(plain));
    is_int(feed_author_on_insert(plain, 1, 1, 1), FEED_EINVAL, "  feed_author_on_insert too");
    ok(strstr(feed_errmsg(plain), "author_on_insert: ") != NULL &&
       strstr(feed_errmsg(plain), "author_table") != NULL, "  naming the call: %s",
       feed_errmsg(plain));
    is_int(feed_author_on_delete(plain, 1, 1), FEED_EINVAL, "  feed_author_on_delete too");
    is_int(feed_author_invalidate_many(plain, authors, 2), FEED_EINVAL,
           "  feed_author_invalidate_many too");
    is_int(feed_author_invalidate_all(plain, NULL), FEED_EINVAL, "  feed_author_invalidate_all too");
    is_int(feed_author_invalidate(plain, 1), FEED_EINVAL, "  feed_author_invalidate too");
    is_int(feed_author_invalidate(NULL, 1), FEED_EINVAL, "feed_author_invalidate: f NULL");
    is_int(feed_page_merged(f, 1, authors, 3, FEED_FIRST, 0, 0, &res), FEED_EINVAL, "limit 0");
    is_int(feed_page_merged(f, 1, authors, 3, FEED_FIRST, 0, MAX_PAGE + 1, &res), FEED_EINVAL,
           "limit max_page + 1");
    is_int(feed_page_merged(f, 1, authors, 3, 5, -1, 5, &res), FEED_EINVAL, "cursor id -1");
    is_int(feed_page_merged(f, 1, authors, 3, FEED_SCORE_MAX + 1, 0, 5, &res), FEED_ERANGE,
           "cursor score 2^53: FEED_ERANGE");
    is_int(feed_page_merged(f, 1, authors, 3, FEED_FIRST, 0, 5, NULL), FEED_EINVAL, "out NULL");
    is_int(feed_page_merged(NULL, 1, authors, 3, FEED_FIRST, 0, 5, &res), FEED_EINVAL, "f NULL");
    is_int(feed_author_on_insert(f, 1, FEED_SCORE_MAX + 1, 1), FEED_ERANGE,
           "feed_author_on_insert: score out of range");
    is_int(feed_author_on_insert(f, 1, 1, -1), FEED_EINVAL, "feed_author_on_insert: id -1");
    is_int(feed_author_on_delete(f, 1, -1), FEED_EINVAL, "feed_author_on_delete: id -1");
    ok(strstr(feed_errmsg(f), "author_on_delete: id -1") != NULL,    /* feed_ or feed_async_ */
       "  the message names the call: %s", feed_errmsg(f));
    is_int(feed_author_invalidate_many(f, NULL, 2), FEED_EINVAL,
           "feed_author_invalidate_many: NULL with n 2");

    tu_config(&cfg);
    cfg.author_table = "no_such_table";
    is_int(feed_open(&nope, &cfg), FEED_EPG, "author_table names no table: feed_open FEED_EPG");
    ok(strstr(feed_errmsg(NULL), "no_such_table") != NULL, "  %s", feed_errmsg(NULL));
    cfg.author_table = "author_post";
    cfg.author_column = "";
    is_int(feed_open(&nope, &cfg), FEED_EINVAL, "author_column \"\": FEED_EINVAL");
    cfg.author_column = "no_such_column";
    is_int(feed_open(&nope, &cfg), FEED_EPG, "author_column names no column: FEED_EPG");
    feed_close(plain);
    feed_close(f);
}

int main(void)
{
    const char *s = getenv("FEED_MERGE_SEED");

    if (s && *s)
        seed = strtoull(s, NULL, 10);
    tap_diag("seed %llu (FEED_MERGE_SEED)", (unsigned long long)seed);
    pg = tu_begin(&rc_);
    bad_input();
    cut_alone();
    dominant_author();
    walks();
    costs();
    hooks_between_pages();
    leases_and_ttl();
    stampede();
    threads();
    if (!tu_cluster()) {
        fault_setup();
        redis_down_mid_walk();
        pg_frozen();
        repair_in_family();
        author_invalidate();
    }
    reset();
    redisFree(rc_);
    PQfinish(pg);
    return tap_done();
}
