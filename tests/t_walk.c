/* t_walk.c -- the read path against SQL: full walks of feeds of every
 * interesting length and page size, tie groups, odd cursors, and what the
 * counters prove about where pages came from. */
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "testutil.h"

#define MAX_LEN  40
#define MAX_PAGE 25

static PGconn *pg;
static redisContext *rc_;

/* Groups of three equal scores, ids scattered (an odd multiplier is a
 * bijection mod 2^32, so they are unique). */
static int64_t score_tied3(size_t i) { return (int64_t)(i / 3) * 10; }
static int64_t id_scattered(size_t i) { return (int64_t)((i * 2654435761u) & 0xffffffffu); }

/* The expected page after (score, id) from SQL's whole feed. */
static size_t expect_after(const feed_item *all, size_t n, int64_t score, int64_t id)
{
    size_t i = 0;

    if (score == FEED_FIRST)
        return 0;
    while (i < n && !(all[i].score < score || (all[i].score == score && all[i].id < id)))
        i++;
    return i;
}

static int page_equals_sql(feed *f, int64_t uid, int64_t score, int64_t id,
                           size_t limit, feed_result *r)
{
    feed_item *all;
    size_t n = tu_sql_feed(pg, uid, &all), start = expect_after(all, n, score, id);
    size_t want = n - start < limit ? n - start : limit;
    int same, rc = feed_page(f, uid, score, id, limit, r);

    same = rc == FEED_OK && r->count == want && r->has_more == (n - start > limit);
    for (size_t i = 0; same && i < want; i++)
        same = r->items[i].score == all[start + i].score && r->items[i].id == all[start + i].id;
    if (!same)
        tap_diag("page after (%lld,%lld): rc %d, %zu items (want %zu), has_more %d",
                 (long long)score, (long long)id, rc, r->count, want, r->has_more);
    free(all);
    return same;
}

static void walks_of_every_length(void)
{
    const size_t lengths[] = { 0, 1, MAX_LEN - 1, MAX_LEN, MAX_LEN + 1, 5 * MAX_LEN };
    const size_t pages[] = { 1, 7, MAX_PAGE };
    feed_config cfg;
    feed *f;

    tu_config(&cfg);
    cfg.max_len = MAX_LEN;
    cfg.max_page = MAX_PAGE;
    f = tu_open(&cfg);
    for (size_t l = 0; l < sizeof lengths / sizeof *lengths; l++) {
        int64_t uid = 100 + (int64_t)l;
        tu_insert_rows(pg, uid, lengths[l], score_tied3, id_scattered);
        for (size_t p = 0; p < sizeof pages / sizeof *pages; p++) {
            tu_walk_info cold, warm;
            feed_invalidate(f, uid);
            ok(tu_walk_equals_sql(f, pg, uid, pages[p], &cold),
               "cold walk of %zu rows, page size %zu, equals SQL", lengths[l], pages[p]);
            ok(cold.sources[FEED_SOURCE_REBUILD] == 1,
               "  the first page rebuilt the cache (%d rebuild pages)",
               cold.sources[FEED_SOURCE_REBUILD]);
            ok(tu_walk_equals_sql(f, pg, uid, pages[p], &warm),
               "warm walk of %zu rows, page size %zu, equals SQL", lengths[l], pages[p]);
            /* Every page within the cached max_len items comes from Redis. */
            if (lengths[l] <= MAX_LEN)
                is_int(warm.sources[FEED_SOURCE_CACHE], (long long)warm.pages,
                       "  every page of a feed that fits came from the cache");
            else
                /* a cached page needs limit + 1 items to know has_more */
                ok(warm.sources[FEED_SOURCE_CACHE] >= (int)((MAX_LEN - 1) / pages[p]) &&
                   warm.sources[FEED_SOURCE_DB] >= 1,
                   "  pages in the window from cache (%d), past it from SQL (%d)",
                   warm.sources[FEED_SOURCE_CACHE], warm.sources[FEED_SOURCE_DB]);
        }
    }
    feed_close(f);
}

/* A small feed: once rebuilt, the end marker answers every page, the last
 * included, without a single SQL statement. */
static void small_feed_sends_no_sql(void)
{
    feed *f;
    feed_config cfg;
    feed_stats before, d;
    tu_walk_info info;

    tu_config(&cfg);
    cfg.max_len = MAX_LEN;
    cfg.max_page = MAX_PAGE;
    f = tu_open(&cfg);
    tu_insert_rows(pg, 300, MAX_LEN - 3, score_tied3, id_scattered);
    feed_stats_get(f, &before);
    ok(tu_walk_equals_sql(f, pg, 300, 5, &info), "small feed walk equals SQL");
    d = tu_stats_since(f, &before);
    is_int(d.sql_queries, 1, "  the whole walk sent one SQL query: the rebuild");
    is_int(d.rebuilds, 1, "  one rebuild installed");
    is_int(d.cache_pages, (long long)info.pages - 1, "  every later page from the cache");

    feed_stats_get(f, &before);
    ok(tu_walk_equals_sql(f, pg, 300, 5, &info), "second walk equals SQL");
    d = tu_stats_since(f, &before);
    is_int(d.sql_queries, 0, "  the second walk sent no SQL at all");
    is_int(d.redis_calls, (long long)info.pages, "  one Redis round trip per page");

    /* An empty feed is cached as known empty. */
    feed_stats_get(f, &before);
    ok(tu_walk_equals_sql(f, pg, 301, 5, &info), "empty feed: walk equals SQL (nothing)");
    ok(tu_walk_equals_sql(f, pg, 301, 5, &info), "empty feed again");
    d = tu_stats_since(f, &before);
    is_int(d.sql_queries, 1, "  an empty feed costs one query, then none");
    is_int(info.sources[FEED_SOURCE_CACHE], 1, "  and is answered by the cache");
    feed_close(f);
}

/* Thousands of equal scores: the seek must land inside the tie group. */
static void tie_groups(void)
{
    feed *f = tu_open(NULL);          /* default max_len 1000, max_page 100 */
    tu_walk_info info;

    tu_insert_rows(pg, 400, 3000, tu_score_same, tu_id_seq);
    tu_insert(pg, 400, 9000, 77777);  /* one above the group */
    tu_insert(pg, 400, 10, 88888);    /* one below it */
    ok(tu_walk_equals_sql(f, pg, 400, 7, &info), "3002 items, 3000 tied: walk by 7 equals SQL");
    ok(tu_walk_equals_sql(f, pg, 400, 100, &info), "  walk by 100 equals SQL");
    ok(info.sources[FEED_SOURCE_CACHE] >= 9, "  the cached part came from Redis (%d pages)",
       info.sources[FEED_SOURCE_CACHE]);

    /* A cursor deleted from inside the tie group. */
    {
        feed_result r;
        feed_on_delete(f, 400, 2500);
        tu_sql(pg, "DELETE FROM feed_entry WHERE uid = 400 AND id = 2500");
        ok(page_equals_sql(f, 400, TU_SCORE_SAME, 2500, 10, &r),
           "cursor deleted inside the tie group: next page equals SQL");
        is_int(r.source, FEED_SOURCE_CACHE, "  answered by the cache");
        feed_result_free(&r);
        ok(page_equals_sql(f, 400, TU_SCORE_SAME, 2001, 10, &r),
           "cursor at the lowest cached tie: rest comes from SQL, equal");
        feed_result_free(&r);
        ok(page_equals_sql(f, 400, TU_SCORE_SAME, 123456, 10, &r),
           "cursor id never existed, above the group's ids: equals SQL");
        feed_result_free(&r);
    }
    feed_close(f);
}

static void odd_cursors(void)
{
    feed_config cfg;
    feed *f;
    feed_result r;
    feed_item *all;
    size_t n;

    tu_config(&cfg);
    cfg.max_len = MAX_LEN;
    cfg.max_page = MAX_PAGE;
    f = tu_open(&cfg);
    tu_insert_rows(pg, 500, 30, score_tied3, id_scattered);
    n = tu_sql_feed(pg, 500, &all);

    ok(page_equals_sql(f, 500, FEED_FIRST, 0, 10, &r), "first page equals SQL");
    feed_result_free(&r);
    ok(page_equals_sql(f, 500, all[0].score, all[0].id, 10, &r),
       "cursor at the first item: the page starts at the second");
    feed_result_free(&r);
    ok(page_equals_sql(f, 500, all[n - 1].score, all[n - 1].id, 10, &r),
       "cursor at the last item: empty page");
    ok(r.count == 0 && !r.has_more && r.source == FEED_SOURCE_CACHE,
       "  empty, no more, from the cache (the end marker)");
    feed_result_free(&r);

    /* Delete the cursor item, then ask for the page after it. */
    feed_on_delete(f, 500, all[9].id);
    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = 500 AND id = %lld", (long long)all[9].id);
    ok(page_equals_sql(f, 500, all[9].score, all[9].id, 10, &r),
       "cursor item deleted: the next page still equals SQL");
    is_int(r.source, FEED_SOURCE_CACHE, "  from the cache");
    feed_result_free(&r);

    /* Move the cursor item to the top: its old position still works. */
    feed_on_insert(f, 500, 1000000, all[12].id);
    tu_insert(pg, 500, 1000000, all[12].id);
    ok(page_equals_sql(f, 500, all[12].score, all[12].id, 10, &r),
       "cursor item rescored: the page after its old place equals SQL");
    feed_result_free(&r);

    /* Move the cursor item down to just below its old place: the seek finds
     * it cached under the cursor's id but at another score, so it is the
     * first item of the page, not the cursor to drop. */
    {
        size_t k = 15;
        while (k + 1 < n && all[k].score == all[k + 1].score)
            k++;
        feed_on_insert(f, 500, all[k].score - 1, all[k].id);
        tu_insert(pg, 500, all[k].score - 1, all[k].id);
        ok(page_equals_sql(f, 500, all[k].score, all[k].id, 10, &r),
           "cursor item moved just below its place: the page after it equals SQL");
        ok(r.count > 0 && r.items[0].id == all[k].id && r.items[0].score == all[k].score - 1,
           "  and starts with that item at its new score");
        is_int(r.source, FEED_SOURCE_CACHE, "  from the cache");
        feed_result_free(&r);
    }

    /* Scores below and above everything. */
    ok(page_equals_sql(f, 500, -FEED_SCORE_MAX, 0, 10, &r), "cursor below everything: empty");
    feed_result_free(&r);
    ok(page_equals_sql(f, 500, FEED_SCORE_MAX, INT64_MAX, 10, &r),
       "cursor above everything: the first page");
    feed_result_free(&r);
    free(all);
    feed_close(f);
}

int main(void)
{
    pg = tu_begin(&rc_);
    walks_of_every_length();
    small_feed_sends_no_sql();
    tie_groups();
    odd_cursors();
    PQfinish(pg);
    redisFree(rc_);
    return tap_done();
}
