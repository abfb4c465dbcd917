/* t_hooks.c -- the write path: each hook keeps the cache an exact prefix of
 * the feed (walks equal SQL) and the Redis contents are what
 * docs/internals.md says: nothing cached below a partial window, trimming
 * drops the end marker, a hook on an absent feed caches nothing, every hook
 * cancels the lease. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "tap.h"
#include "testutil.h"

#define MAX_LEN 10

static PGconn *pg;
static redisContext *r;
static feed *f;

static long long zcard(int64_t uid) { return tu_redis_int(r, "ZCARD %s", tu_key(uid, "")); }
static int exists(const char *key) { return (int)tu_redis_int(r, "EXISTS %s", key); }

static int cached(int64_t uid, int64_t id)
{
    char m[FEED_MEMBER_MAX];
    size_t mlen = tu_member(id, m);
    redisReply *rep = tu_redis_cmd(r, "ZSCORE %s %b", tu_key(uid, ""), m, mlen);
    int c = rep->type == REDIS_REPLY_STRING;
    freeReplyObject(rep);
    return c;
}

static int complete(int64_t uid)
{
    redisReply *rep = tu_redis_cmd(r, "ZSCORE %s end", tu_key(uid, ""));
    int c = rep->type == REDIS_REPLY_STRING;
    freeReplyObject(rep);
    return c;
}

/* Read page 1 so the feed is cached. */
static void warm(int64_t uid)
{
    feed_result res;

    if (feed_page(f, uid, FEED_FIRST, 0, 5, &res) != FEED_OK)
        tap_diag("warm: %s", feed_errmsg(f));
    feed_result_free(&res);
}

static int walk_ok(int64_t uid) { return tu_walks_equal_sql(f, pg, uid); }

/* SQL first, then the hook: the order an application must follow. */
static int insert(int64_t uid, int64_t score, int64_t id)
{
    tu_insert(pg, uid, score, id);
    return feed_on_insert(f, uid, score, id);
}

static int delete(int64_t uid, int64_t id)
{
    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = %lld AND id = %lld", (long long)uid,
           (long long)id);
    return feed_on_delete(f, uid, id);
}

static void complete_feed(void)
{
    feed_stats before, d;

    tu_insert_rows(pg, 1, 5, tu_score_by10, tu_id_seq);
    warm(1);
    ok(complete(1) && zcard(1) == 6, "5 rows, max_len 10: cached with the end marker");
    is_int(insert(1, 25, 100), FEED_OK, "insert into a complete feed");
    ok(cached(1, 100) && complete(1), "  cached, still complete");
    feed_stats_get(f, &before);
    ok(walk_ok(1), "  walk equals SQL");
    is_int(tu_stats_since(f, &before).sql_queries, 0, "  and needed no SQL");

    is_int(insert(1, 5, 101), FEED_OK, "insert below every item of a complete feed");
    ok(cached(1, 101), "  cached: a complete feed has no gap below");
    ok(walk_ok(1), "  walk equals SQL");

    /* Trimming: fill to max_len, then one more drops the end marker. */
    for (int64_t id = 200; zcard(1) < MAX_LEN + 1; id++)
        insert(1, 1000 + id, id);
    ok(complete(1) && zcard(1) == MAX_LEN + 1, "filled to max_len items + the end marker");
    is_int(insert(1, 5000, 300), FEED_OK, "one more insert at the top");
    ok(!complete(1) && zcard(1) == MAX_LEN, "  trimmed to max_len: the end marker went first");
    ok(walk_ok(1), "  walk equals SQL (the tail now from SQL)");

    /* Delete down to nothing: the end marker stays, known empty. */
    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = 2");
    insert(2, 7, 1);
    feed_invalidate(f, 2);
    warm(2);
    ok(complete(2) && zcard(2) == 2, "one-item feed cached with its end marker");
    is_int(delete(2, 1), FEED_OK, "delete the last item");
    ok(complete(2) && zcard(2) == 1, "  only the end marker stays: known empty");
    feed_stats_get(f, &before);
    ok(walk_ok(2), "  walk equals SQL (empty)");
    d = tu_stats_since(f, &before);
    is_int(d.sql_queries, 0, "  with no SQL");
    ok(d.pages > 0 && d.cache_pages == d.pages, "  every page from the cache");
}

static void partial_window(void)
{
    /* 15 rows, scores 10..150; the cache holds the top 10 (60..150). */
    tu_insert_rows(pg, 3, 15, tu_score_by10, tu_id_seq);
    warm(3);
    ok(!complete(3) && zcard(3) == MAX_LEN, "15 rows: top 10 cached, no end marker");

    is_int(insert(3, 15, 500), FEED_OK, "insert below the window");
    ok(!cached(3, 500), "  not cached: it would hide the rows between it and the window");
    ok(walk_ok(3), "  walk equals SQL");

    is_int(delete(3, 15), FEED_OK, "delete the two top items: the window has room");
    delete(3, 14);
    is_int(insert(3, 14, 502), FEED_OK, "two inserts below the window, one after the other");
    is_int(insert(3, 13, 503), FEED_OK, "  (the second below the first)");
    ok(!cached(3, 502) && !cached(3, 503), "  neither cached");
    ok(walk_ok(3), "  walk equals SQL");
    insert(3, 150, 15);
    insert(3, 140, 14);

    is_int(insert(3, 155, 501), FEED_OK, "insert at the top of a full window");
    ok(cached(3, 501) && zcard(3) == MAX_LEN, "  cached, and the lowest item trimmed");
    ok(!cached(3, 6), "  the trimmed one (score 60) is gone from Redis");
    ok(walk_ok(3), "  walk equals SQL");

    is_int(insert(3, 1, 10), FEED_OK, "score change moves a cached item below the window");
    ok(!cached(3, 10), "  removed from the cache");
    ok(walk_ok(3), "  walk equals SQL");

    is_int(insert(3, 1000, 2), FEED_OK, "score change moves an uncached item into the window");
    ok(cached(3, 2) && zcard(3) <= MAX_LEN, "  cached, window still at most max_len");
    ok(walk_ok(3), "  walk equals SQL");

    is_int(insert(3, 999, 2), FEED_OK, "score change inside the window");
    ok(walk_ok(3), "  walk equals SQL");

    is_int(delete(3, 501), FEED_OK, "delete a cached item");
    ok(!cached(3, 501), "  gone from the cache");
    ok(walk_ok(3), "  walk equals SQL");
    is_int(delete(3, 4), FEED_OK, "delete an uncached item");
    ok(walk_ok(3), "  walk equals SQL");
}

static void absent_feed(void)
{
    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = 4");
    feed_invalidate(f, 4);
    is_int(insert(4, 10, 1), FEED_OK, "insert into a feed that is not cached");
    ok(!exists(tu_key(4, "")), "  nothing cached: the next read rebuilds");
    is_int(delete(4, 1), FEED_OK, "delete from a feed that is not cached");
    ok(!exists(tu_key(4, "")), "  still nothing cached");
    ok(walk_ok(4), "walk equals SQL");
}

static void leases_cancelled(void)
{
    const char *hooks[] = { "insert", "delete", "fanout", "invalidate" };
    int64_t uid = 5;

    for (int i = 0; i < 4; i++) {
        tu_plant_lease(r, tu_key(uid, ":lease"), "someone");
        switch (i) {
        case 0: insert(uid, 10, 1); break;
        case 1: delete(uid, 1); break;
        case 2: feed_fanout(f, &uid, 1, 10, 1); break;
        case 3: feed_invalidate(f, uid); break;
        }
        ok(!exists(tu_key(uid, ":lease")), "%s cancels a lease in flight", hooks[i]);
    }
}

static void fanout(void)
{
    int64_t uids[50];
    feed_stats before, d;
    int all_ok = 1;

    for (int i = 0; i < 50; i++) {
        uids[i] = 1000 + i;
        tu_insert_rows(pg, uids[i], (size_t)i % 15, tu_score_by10, tu_id_seq);
        if (i % 2 == 0)
            warm(uids[i]);          /* half the feeds cached */
    }
    for (int i = 0; i < 50; i++)
        tu_insert(pg, uids[i], 75, 9999);
    feed_stats_get(f, &before);
    is_int(feed_fanout(f, uids, 50, 75, 9999), FEED_OK, "fanout to 50 feeds");
    d = tu_stats_since(f, &before);
    if (tu_cluster())   /* one pipeline per primary, all written before any is read */
        ok(d.redis_calls >= 1 && d.redis_calls <= 3, "  one pipeline per primary (%llu)",
           (unsigned long long)d.redis_calls);
    else
        is_int(d.redis_calls, 1, "  one Redis round trip");
    for (int i = 0; i < 50; i++) {
        int want = i % 2 == 0;       /* cached feeds get it (75 is inside every window) */
        if (cached(uids[i], 9999) != want || !walk_ok(uids[i])) {
            all_ok = 0;
            tap_diag("feed %lld wrong after fanout", (long long)uids[i]);
        }
    }
    ok(all_ok, "  every feed walks equal to SQL; only cached feeds hold the item");
    is_int(feed_fanout(f, uids, 0, 75, 9999), FEED_OK, "fanout to no feeds is a no-op");
}

static void reload_and_invalidate(void)
{
    feed_stats before;

    tu_insert_rows(pg, 6, 8, tu_score_by10, tu_id_seq);
    warm(6);
    /* Drift: SQL changed without hooks (as after a Redis outage). */
    tu_sql(pg, "UPDATE feed_entry SET score = score + 1000 WHERE uid = 6 AND id IN (2, 3)");
    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = 6 AND id = 8");
    feed_stats_get(f, &before);
    is_int(feed_reload(f, 6), FEED_OK, "reload");
    is_int(tu_stats_since(f, &before).rebuilds, 1, "  installed one rebuild");
    ok(walk_ok(6), "  walk equals SQL again");
    is_int(feed_invalidate(f, 6), FEED_OK, "invalidate");
    ok(!exists(tu_key(6, "")), "  the feed is gone from Redis");
    feed_stats_get(f, &before);
    ok(walk_ok(6), "  walk equals SQL");
    is_int(tu_stats_since(f, &before).rebuilds, 1, "  after a rebuild");
    is_int(feed_reload(f, 7), FEED_OK, "reload of a feed with no rows");
    ok(complete(7) && zcard(7) == 1, "  cached as known empty");
}

static void member_encoding(void)
{
    redisReply *rep;
    long long pttl;
    char m[FEED_MEMBER_MAX];
    size_t mlen = tu_member(42, m);

    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = 8");
    insert(8, 1, 42);
    feed_reload(f, 8);
    rep = tu_redis_cmd(r, "ZRANGE %s 0 -1 WITHSCORES", tu_key(8, ""));
    ok(rep->type == REDIS_REPLY_ARRAY && rep->elements == 4 &&
       strcmp(rep->element[0]->str, "end") == 0 && strcmp(rep->element[1]->str, "-inf") == 0 &&
       rep->element[2]->len == mlen && memcmp(rep->element[2]->str, m, mlen) == 0 &&
       strcmp(rep->element[3]->str, "1") == 0,
       "Redis holds {end: -inf, <member of 42>: 1} (%s)", m);
    freeReplyObject(rep);
    pttl = tu_redis_int(r, "PTTL %s", tu_key(8, ""));
    ok(pttl > 604000000, "  with the default 7-day TTL (%lld ms)", pttl);
}

int main(void)
{
    feed_config cfg;

    pg = tu_begin(&r);
    tu_config(&cfg);
    cfg.max_len = MAX_LEN;
    f = tu_open(&cfg);
    complete_feed();
    partial_window();
    absent_feed();
    leases_cancelled();
    fanout();
    reload_and_invalidate();
    member_encoding();
    feed_close(f);
    PQfinish(pg);
    redisFree(r);
    return tap_done();
}
