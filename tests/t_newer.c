/* t_newer.c -- feed_page_newer (pull-to-refresh) against SQL: random feeds
 * with ties, complete and partial cached copies, cursors at, above and below
 * the cached window, deleted and moved cursor items, chained refreshes, where
 * each answer came from, and the error cases. */
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "testutil.h"

#define MAX_LEN  50
#define MAX_PAGE 60

static PGconn *pg;
static redisContext *rds;

/* Is a strictly above b in (score DESC, id DESC)? */
static int above(int64_t as, int64_t ai, int64_t bs, int64_t bi)
{
    return as > bs || (as == bs && ai > bi);
}

/* Compare one call with SQL's whole feed all[0..n): the limit items closest
 * above the cursor, newest first. *source gets where it came from. */
static int newer_equals(feed *f, int64_t uid, const feed_item *all, size_t n,
                        int64_t score, int64_t id, size_t limit, feed_source *source)
{
    size_t above_n = 0, want;
    feed_result r;
    int rc, same;

    while (above_n < n && above(all[above_n].score, all[above_n].id, score, id))
        above_n++;               /* all[0 .. above_n) are above the cursor */
    want = above_n < limit ? above_n : limit;
    rc = feed_page_newer(f, uid, score, id, limit, &r);
    same = rc == FEED_OK && r.count == want && r.has_more == (above_n > limit);
    for (size_t i = 0; same && i < want; i++)   /* newest first: all[above_n - want + i] */
        same = r.items[i].score == all[above_n - want + i].score &&
               r.items[i].id == all[above_n - want + i].id;
    if (same)   /* the cursor to keep: the newest item returned, or the one given */
        same = want ? r.next_score == r.items[0].score && r.next_id == r.items[0].id
                    : r.next_score == score && r.next_id == id;
    if (!same)
        tap_diag("newer than (%lld,%lld) limit %zu: rc %d (%s), %zu items (want %zu),"
                 " has_more %d (want %d)", (long long)score, (long long)id, limit, rc,
                 feed_errmsg(f), r.count, want, r.has_more, above_n > limit);
    *source = r.source;
    feed_result_free(&r);
    return same;
}

static int newer_equals_sql(feed *f, int64_t uid, int64_t score, int64_t id,
                            size_t limit, feed_source *source)
{
    feed_item *all;
    size_t n = tu_sql_feed(pg, uid, &all);
    int same = newer_equals(f, uid, all, n, score, id, limit, source);

    free(all);
    return same;
}

/* Random feed of n rows: scores from a small range (many ties), unique ids. */
static void random_feed(int64_t uid, size_t n, uint64_t *rng)
{
    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = %lld", (long long)uid);
    for (size_t i = 0; i < n; i++)
        tu_insert(pg, uid, (int64_t)(tu_rand(rng) % 12) * 100 - 300,
                  (int64_t)(i * 7919 + tu_rand(rng) % 7) * 10 + 1);
}

/* Cursors to try: every row, and around each a pair that is not a row (a
 * deleted item's position, a moved item: its id at another score), plus the
 * extremes. */
static size_t cursors_of(const feed_item *all, size_t n, feed_item *out)
{
    size_t k = 0;

    for (size_t i = 0; i < n; i++) {
        out[k++] = all[i];
        out[k++] = (feed_item){ all[i].score, all[i].id + 3 };    /* between ids: absent */
        out[k++] = (feed_item){ all[i].score + 50, all[i].id };   /* the id, moved */
    }
    out[k++] = (feed_item){ FEED_SCORE_MAX, INT64_MAX };
    out[k++] = (feed_item){ -FEED_SCORE_MAX, 0 };
    out[k++] = (feed_item){ 0, 0 };
    return k;
}

/* Every cursor and several limits on one cached feed: exact, and from the
 * cache exactly when the copy covers the cursor. */
static void check_feed(feed *f, int64_t uid, size_t n, const char *what)
{
    static const size_t limits[] = { 1, 3, 7, MAX_PAGE };
    feed_item *all, *cursors;
    size_t total = tu_sql_feed(pg, uid, &all), k, wrong = 0, calls = 0;
    size_t from_cache = 0, should_cache = 0, misplaced = 0;
    int complete = total <= MAX_LEN;

    cursors = malloc((3 * total + 3) * sizeof *cursors);
    k = cursors_of(all, total, cursors);
    for (size_t c = 0; c < k; c++) {
        /* Covered: the copy is complete, or the cursor sorts at or above
         * the lowest cached item (all[MAX_LEN - 1]). */
        int covered = complete || !above(all[MAX_LEN - 1].score, all[MAX_LEN - 1].id,
                                         cursors[c].score, cursors[c].id);
        for (size_t l = 0; l < sizeof limits / sizeof *limits; l++) {
            feed_source src;
            calls++;
            wrong += !newer_equals(f, uid, all, total, cursors[c].score, cursors[c].id,
                                   limits[l], &src);
            from_cache += src == FEED_SOURCE_CACHE;
            should_cache += covered;
            misplaced += (src == FEED_SOURCE_CACHE) != covered;
        }
    }
    is_int(wrong, 0, "%s (%zu rows): %zu calls equal SQL", what, n, calls);
    is_int(misplaced, 0, "  %zu from the cache, exactly those the copy covers (%zu)",
           from_cache, should_cache);
    free(cursors);
    free(all);
}

static void random_feeds(void)
{
    const size_t lengths[] = { 0, 1, 13, MAX_LEN, MAX_LEN + 1, 4 * MAX_LEN };
    feed_config cfg;
    feed *f;
    uint64_t rng = 20261123;

    tu_config(&cfg);
    cfg.max_len = MAX_LEN;
    cfg.max_page = MAX_PAGE;
    f = tu_open(&cfg);
    for (size_t i = 0; i < sizeof lengths / sizeof *lengths; i++) {
        int64_t uid = 7000 + (int64_t)i;
        feed_result r;
        char what[64];
        random_feed(uid, lengths[i], &rng);
        /* Not cached yet: SQL answers, and nothing gets cached. */
        {
            feed_stats before;
            feed_source src;
            feed_stats_get(f, &before);
            ok(newer_equals_sql(f, uid, -FEED_SCORE_MAX, 0, 5, &src) && src == FEED_SOURCE_DB,
               "feed of %zu rows, not cached: newer comes from SQL", lengths[i]);
            is_int(tu_stats_since(f, &before).rebuilds, 0, "  without a rebuild");
        }
        is_int(feed_page(f, uid, FEED_FIRST, 0, 5, &r), FEED_OK, "  first page caches it");
        feed_result_free(&r);
        snprintf(what, sizeof what, "%s copy", lengths[i] <= MAX_LEN ? "complete" : "partial");
        check_feed(f, uid, lengths[i], what);
    }
    feed_close(f);
}

/* Ties: one score for everything; cursors inside the tie group, at the edge
 * of the window, on a deleted item. */
static void ties_and_deletes(void)
{
    feed_config cfg;
    feed *f;
    feed_result r;
    feed_item *all;
    size_t n;
    int64_t uid = 7100;

    tu_config(&cfg);
    cfg.max_len = MAX_LEN;
    cfg.max_page = MAX_PAGE;
    f = tu_open(&cfg);
    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = %lld", (long long)uid);
    for (int i = 0; i < 3 * MAX_LEN; i++)
        tu_insert(pg, uid, 777, (int64_t)i * 2 + 1);
    feed_page(f, uid, FEED_FIRST, 0, 5, &r);
    feed_result_free(&r);
    check_feed(f, uid, 3 * MAX_LEN, "one tie group, partial copy");

    /* Delete items inside the window; their positions stay valid cursors. */
    n = tu_sql_feed(pg, uid, &all);
    ok(n == 3 * MAX_LEN, "  SQL holds the %zu rows", n);
    for (size_t i = 5; i < 40; i += 5) {
        tu_sql(pg, "DELETE FROM feed_entry WHERE uid = %lld AND id = %lld",
               (long long)uid, (long long)all[i].id);
        feed_on_delete(f, uid, all[i].id);
    }
    {
        size_t wrong = 0, cached = 0;
        for (size_t i = 5; i < 40; i += 5) {
            feed_source src;
            wrong += !newer_equals_sql(f, uid, all[i].score, all[i].id, 4, &src);
            cached += src == FEED_SOURCE_CACHE;
        }
        ok(wrong == 0 && cached == 7, "deleted cursor items: 7 answers equal SQL, all from the cache"
           " (%zu)", cached);
    }
    free(all);
    feed_close(f);
}

/* Pull to refresh until nothing is newer: the items collected, reversed, are
 * the feed above the starting cursor, each exactly once. */
static void chained(void)
{
    feed_config cfg;
    feed *f;
    feed_result r;
    feed_item *all, *got;
    size_t n, count = 0, calls = 0;
    int64_t uid = 7200, s, id;
    uint64_t rng = 99;
    int same = 1;

    tu_config(&cfg);
    cfg.max_len = MAX_LEN;
    cfg.max_page = MAX_PAGE;
    f = tu_open(&cfg);
    random_feed(uid, 3 * MAX_LEN, &rng);
    feed_page(f, uid, FEED_FIRST, 0, 5, &r);
    feed_result_free(&r);
    n = tu_sql_feed(pg, uid, &all);
    got = malloc(n * sizeof *got);
    s = all[n - 1].score;      /* the bottom item: everything else is newer */
    id = all[n - 1].id;
    for (;;) {
        int rc = feed_page_newer(f, uid, s, id, 7, &r);
        calls++;
        if (rc != FEED_OK || count + r.count > n) {
            same = 0;
            feed_result_free(&r);
            break;
        }
        for (size_t i = r.count; i-- > 0;)   /* oldest first */
            got[count++] = r.items[i];
        if (!r.has_more) {
            feed_result_free(&r);
            break;
        }
        s = r.next_score;
        id = r.next_id;
        feed_result_free(&r);
    }
    same = same && count == n - 1;
    for (size_t i = 0; same && i < count; i++)
        same = got[i].score == all[n - 2 - i].score && got[i].id == all[n - 2 - i].id;
    ok(same, "chained refreshes from the bottom: %zu calls, %zu items, the feed exactly",
       calls, count);
    free(got);
    free(all);
    feed_close(f);
}

/* Redis unreachable: SQL answers, correctly. PostgreSQL unreachable: covered
 * cursors still come from the cache, uncovered ones are FEED_EPG. */
static void degraded(void)
{
    feed_config cfg;
    feed *f;
    feed_result r;
    feed_source src;
    feed_item *all;
    size_t n;
    int64_t uid = 7300;
    uint64_t rng = 5;

    random_feed(uid, 2 * MAX_LEN, &rng);
    n = tu_sql_feed(pg, uid, &all);

    tu_config(&cfg);
    cfg.max_len = MAX_LEN;
    cfg.max_page = MAX_PAGE;
    cfg.redis_port = 1;   /* nothing listens there */
    f = tu_open(&cfg);
    ok(newer_equals_sql(f, uid, all[10].score, all[10].id, 5, &src) && src == FEED_SOURCE_DB,
       "Redis down: SQL answers, equal to SQL");
    ok(strstr(feed_errmsg(f), "Redis") != NULL, "  and the Redis error stays in feed_errmsg: %s",
       feed_errmsg(f));
    feed_close(f);

    tu_config(&cfg);
    cfg.max_len = MAX_LEN;
    cfg.max_page = MAX_PAGE;
    f = tu_open(&cfg);
    feed_page(f, uid, FEED_FIRST, 0, 5, &r);   /* cache it */
    feed_result_free(&r);
    feed_close(f);
    cfg.pg_conninfo = "host=127.0.0.1 port=1 connect_timeout=2";
    f = tu_open(&cfg);
    ok(newer_equals_sql(f, uid, all[10].score, all[10].id, 5, &src) && src == FEED_SOURCE_CACHE,
       "PostgreSQL down: a covered cursor is answered by the cache");
    is_int(feed_page_newer(f, uid, all[n - 1].score, all[n - 1].id, 5, &r), FEED_EPG,
           "  a cursor below the window is FEED_EPG");
    ok(r.items == NULL && r.count == 0, "  with the result zeroed");
    feed_close(f);
    free(all);
}

static void errors(void)
{
    feed *f = tu_open(NULL);
    feed_result r;

    memset(&r, 0x55, sizeof r);
    is_int(feed_page_newer(NULL, 1, 0, 0, 5, &r), FEED_EINVAL, "NULL handle: FEED_EINVAL");
    ok(r.items == NULL && r.count == 0, "  and the result zeroed");
    is_int(feed_page_newer(f, 1, 0, 0, 5, NULL), FEED_EINVAL, "NULL result: FEED_EINVAL");
    is_int(feed_page_newer(f, 1, 0, 0, 0, &r), FEED_EINVAL, "limit 0: FEED_EINVAL");
    is_int(feed_page_newer(f, 1, 0, 0, 101, &r), FEED_EINVAL, "limit above max_page: FEED_EINVAL");
    ok(strstr(feed_errmsg(f), "limit") != NULL, "  the message says why: %s", feed_errmsg(f));
    is_int(feed_page_newer(f, 1, 0, -1, 5, &r), FEED_EINVAL, "negative id: FEED_EINVAL");
    is_int(feed_page_newer(f, 1, FEED_SCORE_MAX + 1, 0, 5, &r), FEED_ERANGE,
           "score 2^53: FEED_ERANGE");
    is_int(feed_page_newer(f, 1, FEED_FIRST, 0, 5, &r), FEED_ERANGE,
           "FEED_FIRST is no cursor here: FEED_ERANGE");
    is_int(feed_page_newer(f, 1, -FEED_SCORE_MAX - 1, 0, 5, &r), FEED_ERANGE,
           "score -2^53: FEED_ERANGE");
    feed_close(f);
}

int main(void)
{
    pg = tu_begin(&rds);
    random_feeds();
    ties_and_deletes();
    chained();
    degraded();
    errors();
    redisFree(rds);
    PQfinish(pg);
    return tap_done();
}
