/* t_ranked.c -- rank-carrying cursors: feed_page_ranked and the
 * ranked cursor tokens.
 *
 *   - tokens: a ranked token round trips (score, id, rank) in the same 24
 *     URL-safe characters; rank -1 (or a rank above FEED_CURSOR_RANK_MAX)
 *     gives feed_cursor_encode's token; feed_cursor_decode refuses a
 *     ranked token, feed_cursor_decode_ranked reads both; every
 *     one-character edit and every truncation is refused; bad arguments;
 *   - a walk in which every page is served by a fresh handle (another
 *     process, in a web farm) passing the previous page's next_rank: every
 *     page equals SQL, each one plain read, no fallback, also inside a run
 *     of ties (where the read by score falls back);
 *   - wrong, stale and forged ranks never give a wrong page: every rank
 *     0..n+5 and far ones for cursors across the feed, ranks made stale by
 *     inserts and deletes above the cursor, random (cursor, rank) pairs --
 *     each page equals SQL;
 *   - the caller's rank goes before the handle's own (older) one;
 *   - next_rank: the true rank of the item after the page (cache and
 *     rebuild), -1 for a page from SQL and on errors; rank < -1 refused. */
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "testutil.h"

#define LIMIT 10

static PGconn *pg;
static redisContext *rc_;

/* Round trips are counted on a single Redis only: a fresh handle on a
 * Redis Cluster first asks for the slot map. */

/* ------------------------------------------------------------ tokens */

static void tokens(void)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    static const struct { int64_t score, id, rank; } cases[] = {
        { 42, 7, 0 }, { 42, 7, 1 }, { -5, 0, 1000 }, { 0, 0, FEED_CURSOR_RANK_MAX },
        { FEED_SCORE_MAX, INT64_MAX, 12345 }, { -FEED_SCORE_MAX, INT64_MAX, 0 },
        { -FEED_SCORE_MAX, 0, FEED_CURSOR_RANK_MAX },
    };
    char tok[FEED_CURSOR_SIZE], plain[FEED_CURSOR_SIZE], edit[FEED_CURSOR_SIZE];
    int64_t s = 1, id = 1, rank = 1;
    int all = 1, edits = 1;

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int ok1 = feed_cursor_encode_ranked(cases[i].score, cases[i].id, cases[i].rank, tok,
                                            sizeof tok) == FEED_OK &&
                  strlen(tok) == FEED_CURSOR_LEN && strspn(tok, alphabet) == FEED_CURSOR_LEN &&
                  feed_cursor_decode_ranked(tok, &s, &id, &rank) == FEED_OK &&
                  s == cases[i].score && id == cases[i].id && rank == cases[i].rank &&
                  feed_cursor_decode(tok, &s, &id) == FEED_EINVAL;
        if (!ok1)
            tap_diag("case %zu (%lld, %lld, %lld): %s", i, (long long)cases[i].score,
                     (long long)cases[i].id, (long long)cases[i].rank, tok);
        all = all && ok1;
        /* Every one-character edit is refused (the check byte). */
        for (int k = 0; k < FEED_CURSOR_LEN; k++)
            for (int c = 0; c < 64; c++) {
                if (alphabet[c] == tok[k])
                    continue;
                memcpy(edit, tok, sizeof edit);
                edit[k] = alphabet[c];
                if (feed_cursor_decode_ranked(edit, &s, &id, &rank) != FEED_EINVAL)
                    edits = 0;
            }
        for (int k = 0; k < FEED_CURSOR_LEN; k++) {
            memcpy(edit, tok, sizeof edit);
            edit[k] = '\0';
            if (feed_cursor_decode_ranked(edit, &s, &id, &rank) != FEED_EINVAL)
                edits = 0;
        }
    }
    ok(all, "ranked tokens round trip (score, id, rank) in %d URL-safe characters, and"
       " feed_cursor_decode refuses them", FEED_CURSOR_LEN);
    ok(edits, "  every one-character edit and every truncation is refused");

    feed_cursor_encode(42, 7, plain, sizeof plain);
    ok(feed_cursor_encode_ranked(42, 7, -1, tok, sizeof tok) == FEED_OK && strcmp(tok, plain) == 0,
       "rank -1: the plain token");
    ok(feed_cursor_encode_ranked(42, 7, FEED_CURSOR_RANK_MAX + 1, tok, sizeof tok) == FEED_OK &&
       strcmp(tok, plain) == 0, "a rank above FEED_CURSOR_RANK_MAX: the plain token");
    rank = 5;
    ok(feed_cursor_decode_ranked(plain, &s, &id, &rank) == FEED_OK && s == 42 && id == 7 &&
       rank == -1, "feed_cursor_decode_ranked reads a plain token: rank -1");

    s = id = rank = 9;
    memset(tok, 'x', sizeof tok);
    is_int(feed_cursor_encode_ranked(42, 7, -2, tok, sizeof tok), FEED_EINVAL, "rank -2: FEED_EINVAL");
    ok(tok[0] == 'x', "  buf untouched");
    is_int(feed_cursor_encode_ranked(42, -1, 3, tok, sizeof tok), FEED_EINVAL, "id -1: FEED_EINVAL");
    is_int(feed_cursor_encode_ranked(42, 7, 3, tok, FEED_CURSOR_SIZE - 1), FEED_EINVAL,
           "a buffer of FEED_CURSOR_LEN bytes: FEED_EINVAL");
    is_int(feed_cursor_encode_ranked(42, 7, 3, NULL, 64), FEED_EINVAL, "buf NULL: FEED_EINVAL");
    is_int(feed_cursor_encode_ranked(FEED_SCORE_MAX + 1, 7, 3, tok, sizeof tok), FEED_ERANGE,
           "score 2^53: FEED_ERANGE");
    is_int(feed_cursor_encode_ranked(-FEED_SCORE_MAX - 1, 7, 3, tok, sizeof tok), FEED_ERANGE,
           "score -2^53: FEED_ERANGE");
    feed_cursor_encode_ranked(42, 7, 3, tok, sizeof tok);
    is_int(feed_cursor_decode_ranked(tok, NULL, &id, &rank), FEED_EINVAL, "score NULL: FEED_EINVAL");
    is_int(feed_cursor_decode_ranked(tok, &s, &id, NULL), FEED_EINVAL, "rank NULL: FEED_EINVAL");
    is_int(feed_cursor_decode_ranked(NULL, &s, &id, &rank), FEED_EINVAL, "token NULL: FEED_EINVAL");
    ok(s == 9 && id == 9 && rank == 9, "  nothing written on errors");
}

/* ------------------------------------------------------------ pages */

/* Does r equal SQL's page of uid after (score, id)? *rank_after gets the
 * index in SQL's order of the item after r's last one. */
static int equals_sql(int64_t uid, int64_t score, int64_t id, const feed_result *r,
                      int64_t *rank_after)
{
    size_t next_at;
    int same = tu_page_equals_sql(pg, uid, score, id, LIMIT, r, &next_at);

    if (rank_after)
        *rank_after = (int64_t)next_at;
    return same;
}

/* A page through a fresh handle (no rank hint of its own), with rank. */
static int fresh_page(int64_t uid, int64_t score, int64_t id, int64_t rank, feed_result *r,
                      int64_t *next_rank, feed_stats *d)
{
    feed *f = tu_open_settled(NULL);
    feed_stats s0;
    int rc;

    feed_stats_get(f, &s0);
    rc = feed_page_ranked(f, uid, score, id, rank, LIMIT, r, next_rank);
    *d = tu_stats_since(f, &s0);
    feed_close(f);
    return rc;
}

/* Walk uid's feed, every page on a fresh handle, passing the rank on
 * through a token as a web server would. Returns 1 when every page equals
 * SQL; counts into *d. */
static int token_walk(int64_t uid, feed_stats *sum, size_t *pages, int *ranks_true)
{
    char tok[FEED_CURSOR_SIZE] = "";
    int64_t score = FEED_FIRST, id = 0, rank = -1;
    int good = 1;

    memset(sum, 0, sizeof *sum);
    *pages = 0;
    *ranks_true = 1;
    for (;;) {
        feed_result r;
        feed_stats d;
        int64_t next_rank, truth = -2;
        if (tok[0] && feed_cursor_decode_ranked(tok, &score, &id, &rank) != FEED_OK)
            return 0;
        if (fresh_page(uid, score, id, rank, &r, &next_rank, &d) != FEED_OK)
            return 0;
        (*pages)++;
        good = good && r.source == FEED_SOURCE_CACHE && equals_sql(uid, score, id, &r, &truth);
        sum->plain_pages += d.plain_pages;
        sum->plain_fallbacks += d.plain_fallbacks;
        sum->script_pages += d.script_pages;
        sum->redis_calls += d.redis_calls;
        if (!r.has_more) {
            *ranks_true = *ranks_true && next_rank == -1;
            feed_result_free(&r);
            return good;
        }
        if (next_rank != truth) {
            tap_diag("page %zu: next_rank %lld, SQL says %lld", *pages, (long long)next_rank,
                     (long long)truth);
            *ranks_true = 0;
        }
        if (feed_cursor_encode_ranked(r.next_score, r.next_id, next_rank, tok, sizeof tok) != FEED_OK)
            return 0;
        feed_result_free(&r);
    }
}

static void walks(void)
{
    feed *f = tu_open_settled(NULL);
    feed_result r;
    feed_stats sum;
    size_t pages;
    int ranks_true;
    int64_t next_rank = 99;

    tu_insert_rows(pg, 1, 95, tu_score_desc, tu_id_seq);
    is_int(feed_page_ranked(f, 1, FEED_FIRST, 0, -1, LIMIT, &r, &next_rank), FEED_OK,
           "a first page on a cold feed (rebuild)");
    ok(r.source == FEED_SOURCE_REBUILD && next_rank == LIMIT,
       "  next_rank %lld: the rank of the next item (%d)", (long long)next_rank, LIMIT);
    feed_result_free(&r);
    feed_close(f);

    ok(token_walk(1, &sum, &pages, &ranks_true),
       "a walk with a fresh handle per page, the rank in the token: equals SQL");
    ok(ranks_true, "  every next_rank is the true rank; -1 on the last page");
    ok(sum.plain_pages == pages && sum.plain_fallbacks == 0 && sum.script_pages == 0 &&
       (tu_cluster() || sum.redis_calls == pages),
       "  every page one plain read (%zu pages, %llu round trips)",
       pages, (unsigned long long)sum.redis_calls);

    /* A run of 200 ties: the read by score meets them and falls back; the
     * rank reads plainly. */
    tu_insert_rows(pg, 3, 200, tu_score_same, tu_id_seq);
    f = tu_open_settled(NULL);
    ok(tu_walk_equals_sql(f, pg, 3, LIMIT, &(tu_walk_info){ 0 }), "a 200-item tie group (cached)");
    feed_close(f);
    ok(token_walk(3, &sum, &pages, &ranks_true), "  a walk with the rank in the token: equals SQL");
    ok(sum.plain_pages == pages && sum.plain_fallbacks == 0 && ranks_true,
       "  every page one plain read, inside the ties too");
}

/* Every rank for cursors across the feed, on fresh handles. */
static void wrong_ranks(void)
{
    feed_item *all;
    size_t n = tu_sql_feed(pg, 1, &all);
    int good = 1, plain_when_true = 1;
    size_t tried = 0;
    static const int64_t far[] = { 200, 999, 1000, 1001, 5000, 32767, INT64_MAX / 2, INT64_MAX };
    /* Each page opens a handle: fewer cursors under valgrind (FEED_TEST_SLOW). */
    size_t step = getenv("FEED_TEST_SLOW") ? 47 : 19;

    for (size_t c = 0; c < n; c += step) {
        for (int64_t rank = 0; rank <= (int64_t)n + 5; rank++) {
            feed_result r;
            feed_stats d;
            int64_t next_rank;
            if (fresh_page(1, all[c].score, all[c].id, rank, &r, &next_rank, &d) != FEED_OK) {
                good = 0;
                continue;
            }
            tried++;
            good = good && r.source == FEED_SOURCE_CACHE &&
                   equals_sql(1, all[c].score, all[c].id, &r, NULL);
            if (rank == (int64_t)c + 1 && (d.plain_pages != 1 || d.plain_fallbacks != 0 ||
                                           (!tu_cluster() && d.redis_calls != 1)))
                plain_when_true = 0;
            feed_result_free(&r);
        }
        for (size_t k = 0; k < sizeof far / sizeof far[0]; k++) {
            feed_result r;
            feed_stats d;
            if (fresh_page(1, all[c].score, all[c].id, far[k], &r, NULL, &d) != FEED_OK)
                good = 0;
            else
                good = good && equals_sql(1, all[c].score, all[c].id, &r, NULL);
            feed_result_free(&r);
        }
    }
    ok(good, "every rank 0..n+5 and far ones, cursors across the feed: every page equals SQL"
       " (%zu pages)", tried);
    ok(plain_when_true, "  the true rank: one plain read each");

    /* Cursors that are no item (odd ids between items; past the end). */
    {
        uint64_t seed = 0x5eed15, rng = seed;
        int rnd = 1, tries = getenv("FEED_TEST_SLOW") ? 40 : 150;
        for (int k = 0; k < tries; k++) {
            feed_result r;
            feed_stats d;
            int64_t score = 100000 - (int64_t)(tu_rand(&rng) % 1100), id = (int64_t)(tu_rand(&rng) % 120);
            int64_t rank = (int64_t)(tu_rand(&rng) % 110);
            if (fresh_page(1, score, id, rank, &r, NULL, &d) != FEED_OK ||
                !equals_sql(1, score, id, &r, NULL))
                rnd = 0;
            feed_result_free(&r);
        }
        ok(rnd, "%d random (cursor, rank) pairs, cursors on no item too: every page equals SQL"
           " (seed %llx)", tries, (unsigned long long)seed);
    }
    free(all);
}

/* Ranks handed out, then the feed moves above the cursor. */
static void stale_ranks(void)
{
    feed *f = tu_open_settled(NULL);
    feed_result r, r2;
    feed_stats d;
    int64_t rank, cs, ci;

    tu_insert_rows(pg, 2, 95, tu_score_desc, tu_id_seq);
    feed_page(f, 2, FEED_FIRST, 0, LIMIT, &r);   /* the miss: rebuilds */
    feed_result_free(&r);
    for (int step = 0; step < 3; step++) {       /* a cursor three pages down */
        is_int(feed_page_ranked(f, 2, step ? cs : FEED_FIRST, step ? ci : 0, step ? rank : -1,
                                LIMIT, &r, &rank), FEED_OK, "page %d", step + 1);
        cs = r.next_score;
        ci = r.next_id;
        feed_result_free(&r);
    }
    is_int(rank, 3 * LIMIT, "  the rank after three pages: %d", 3 * LIMIT);

    tu_insert(pg, 2, 300000, 5000);
    feed_on_insert(f, 2, 300000, 5000);
    ok(fresh_page(2, cs, ci, rank, &r2, NULL, &d) == FEED_OK && equals_sql(2, cs, ci, &r2, NULL),
       "one insert above: the stale rank's page equals SQL");
    ok(d.plain_pages == 1 && d.plain_fallbacks == 0 && (tu_cluster() || d.redis_calls == 1),
       "  a plain read (within the slack)");
    feed_result_free(&r2);

    for (int k = 0; k < 8; k++) {
        tu_insert(pg, 2, 300001 + k, 5001 + k);
        feed_on_insert(f, 2, 300001 + k, 5001 + k);
    }
    ok(fresh_page(2, cs, ci, rank, &r2, NULL, &d) == FEED_OK && equals_sql(2, cs, ci, &r2, NULL),
       "nine inserts above: equals SQL");
    ok(d.plain_fallbacks == 1 && d.script_pages == 1, "  page.lua answered (fell back)");
    feed_result_free(&r2);

    /* f served the page before: it holds the rank of (cs, ci) from before
     * the nine inserts. The caller's rank, newer, goes first. */
    {
        feed_stats s0;
        feed_stats_get(f, &s0);
        ok(feed_page_ranked(f, 2, cs, ci, rank + 9, LIMIT, &r2, NULL) == FEED_OK &&
           equals_sql(2, cs, ci, &r2, NULL), "the handle's own rank is stale, the caller's"
           " is not: equals SQL");
        d = tu_stats_since(f, &s0);
        ok(d.plain_pages == 1 && d.plain_fallbacks == 0,
           "  a plain read at the caller's rank, before the handle's");
        feed_result_free(&r2);
    }

    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = 2 AND (id >= 5000 OR id IN (1, 2, 3))");
    for (int k = 0; k < 9; k++)
        feed_on_delete(f, 2, 5000 + k);
    for (int k = 1; k <= 3; k++)
        feed_on_delete(f, 2, k);
    ok(fresh_page(2, cs, ci, rank, &r2, NULL, &d) == FEED_OK && equals_sql(2, cs, ci, &r2, NULL),
       "three deletes above the original top: equals SQL");
    feed_result_free(&r2);

    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = 2 AND id = %lld", (long long)ci);
    feed_on_delete(f, 2, ci);
    ok(fresh_page(2, cs, ci, rank, &r2, NULL, &d) == FEED_OK && equals_sql(2, cs, ci, &r2, NULL),
       "the cursor item deleted: equals SQL");
    feed_result_free(&r2);
    feed_close(f);
}

static void edges(void)
{
    feed_config cfg;
    feed *f = tu_open_settled(NULL), *g;
    feed_result r;
    feed_stats d;
    int64_t next_rank = 7;

    is_int(feed_page_ranked(f, 1, 100000 - 40, 5, -2, LIMIT, &r, &next_rank), FEED_EINVAL,
           "rank -2: FEED_EINVAL");
    ok(next_rank == -1 && r.items == NULL, "  next_rank -1, result zeroed");
    next_rank = 7;
    is_int(feed_page_ranked(f, 1, FEED_FIRST, 0, -1, 0, &r, &next_rank), FEED_EINVAL,
           "limit 0: FEED_EINVAL");
    ok(next_rank == -1, "  next_rank -1");
    is_int(feed_page_ranked(f, 1, FEED_FIRST, 0, 50, LIMIT, &r, NULL), FEED_OK,
           "a first page with a rank (ignored), next_rank NULL");
    ok(equals_sql(1, FEED_FIRST, 0, &r, NULL), "  equals SQL");
    feed_result_free(&r);
    ok(fresh_page(1, 100000 - 940, 95, 94, &r, &next_rank, &d) == FEED_OK && r.count == 0 &&
       !r.has_more && next_rank == -1, "past the last item: empty, next_rank -1");
    feed_result_free(&r);
    feed_close(f);

    /* A page from SQL: next_rank unknown. */
    tu_config(&cfg);
    cfg.max_len = 30;
    cfg.key_prefix = "short";
    g = tu_open(&cfg);
    feed_page(g, 1, FEED_FIRST, 0, LIMIT, &r);   /* rebuild: 30 of 95 cached */
    feed_result_free(&r);
    next_rank = 7;
    ok(feed_page_ranked(g, 1, 100000 - 490, 50, 49, LIMIT, &r, &next_rank) == FEED_OK &&
       r.source == FEED_SOURCE_DB && equals_sql(1, 100000 - 490, 50, &r, NULL) && next_rank == -1,
       "past a 30-item cache: from SQL, equals SQL, next_rank -1");
    feed_result_free(&r);
    feed_close(g);
}

int main(void)
{
    pg = tu_begin(&rc_);
    tokens();
    walks();
    wrong_ranks();
    stale_ranks();
    edges();
    PQfinish(pg);
    redisFree(rc_);
    return tap_done();
}
