/* t_plain.c -- cached pages served by plain Redis reads (lib/core/page.c, "Plain
 * reads"): that they are taken when they should be, that they fall back to
 * page.lua when the reply cannot prove the page, and that every page either
 * way equals what SQL says, also while hooks run concurrently.
 *
 *   - a warm walk is served by plain reads alone (feed_stats.plain_pages),
 *     one round trip a page; a fresh handle without rank hints too (the
 *     read by score), except after a long run of ties;
 *   - past the end of a cache shorter than the feed, one Redis round trip
 *     a page, as before;
 *   - the cursor moved between two pages (cursor item rescored up or down,
 *     deleted; items inserted or deleted above it; a write between pages):
 *     every page equals SQL, and the ones a plain reply cannot prove went to
 *     page.lua (plain_fallbacks);
 *   - the TTL refresh: a first page sends PEXPIRE only when less than half
 *     the TTL is left, and PTTL only when the handle does not know that
 *     more than half is left; a page after a cursor does neither;
 *   - concurrent hooks on the feed while walks run: no item that stays in
 *     SQL throughout a walk is skipped or repeated. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "testutil.h"

#define LIMIT 10

static PGconn *pg;
static redisContext *rc_;

/* Does r equal SQL's page of uid after (score, id)? */
static int equals_sql(int64_t uid, int64_t score, int64_t id, const feed_result *r)
{
    return tu_page_equals_sql(pg, uid, score, id, LIMIT, r, NULL);
}

/* One page, checked against SQL; its stats delta in *d. */
static int page_ok(feed *f, int64_t uid, int64_t score, int64_t id, feed_result *r,
                   feed_stats *d)
{
    feed_stats s0;
    int rc;

    feed_stats_get(f, &s0);
    rc = feed_page(f, uid, score, id, LIMIT, r);
    *d = tu_stats_since(f, &s0);
    return rc == FEED_OK && r->source == FEED_SOURCE_CACHE && equals_sql(uid, score, id, r);
}

static void warm_walks(void)
{
    feed *f = tu_open_settled(NULL), *g = tu_open_settled(NULL);
    tu_walk_info info;
    feed_stats s0, d;
    feed_result r;

    tu_insert_rows(pg, 1, 95, tu_score_desc, tu_id_seq);
    ok(tu_walk_equals_sql(f, pg, 1, LIMIT, &info), "a first walk equals SQL (rebuilds)");
    feed_stats_get(f, &s0);
    ok(tu_walk_equals_sql(f, pg, 1, LIMIT, &info), "the second walk equals SQL");
    d = tu_stats_since(f, &s0);
    is_int(d.plain_pages, (long long)info.pages, "  every page by a plain read");
    is_int(d.script_pages + d.plain_fallbacks, 0, "  no script at all");
    is_int(d.redis_calls, (long long)info.pages, "  one round trip a page");

    /* Another handle has no rank hints: the read by score. */
    ok(page_ok(g, 1, 100000 - 44 * 10, 45, &r, &d), "a fresh handle, a cursor mid-feed: equals SQL");
    ok(d.plain_pages == 1 && d.plain_fallbacks == 0 && d.redis_calls == 1,
       "  a plain read by score, one round trip");
    feed_result_free(&r);
    feed_close(f);
    feed_close(g);
}

/* A feed longer than the cache: past its end, pages come from SQL after one
 * Redis round trip each (page.lua says "short"), as before plain reads,
 * not two (a plain read that cannot tell "short" from "absent", then
 * page.lua). */
static void past_the_cache(void)
{
    feed_config cfg;
    feed *f;
    tu_walk_info info;
    feed_stats s0, d;

    tu_config(&cfg);
    cfg.max_len = 30;
    f = tu_open(&cfg);
    tu_insert_rows(pg, 6, 100, tu_score_desc, tu_id_seq);
    ok(tu_walk_equals_sql(f, pg, 6, LIMIT, &info), "a 100-item feed, max_len 30: walk equals SQL");
    feed_stats_get(f, &s0);
    ok(tu_walk_equals_sql(f, pg, 6, LIMIT, &info), "  again");
    d = tu_stats_since(f, &s0);
    ok(d.cache_pages == 2 && d.db_pages == info.pages - 2,
       "  2 pages from the cache, the rest from SQL (%llu, %llu)",
       (unsigned long long)d.cache_pages, (unsigned long long)d.db_pages);
    is_int(d.redis_calls, (long long)info.pages, "  one Redis round trip a page, past the cache too");
    feed_close(f);
}

static void moved_cursor(void)
{
    feed *f = tu_open_settled(NULL);
    feed_result r, r2;
    feed_stats d;
    int64_t cs, ci;

    tu_insert_rows(pg, 2, 95, tu_score_desc, tu_id_seq);
    feed_page(f, 2, FEED_FIRST, 0, LIMIT, &r);   /* the miss: rebuilds */
    feed_result_free(&r);
    ok(page_ok(f, 2, FEED_FIRST, 0, &r, &d), "first page");
    ok(d.plain_pages == 1, "  plain");
    cs = r.next_score;
    ci = r.next_id;
    feed_result_free(&r);

    /* The cursor item gets a new, higher score: the page after the
     * cursor's old (score, id) is unchanged in SQL. */
    tu_insert(pg, 2, 200000, ci);
    is_int(feed_on_insert(f, 2, 200000, ci), FEED_OK, "cursor item rescored to the top");
    ok(page_ok(f, 2, cs, ci, &r, &d), "  the next page equals SQL");
    ok(d.plain_pages + d.script_pages == 1, "  from the cache (%s)",
       d.plain_pages ? "plain" : "page.lua");
    feed_result_free(&r);

    /* Rescored below: it now shows up later in the feed. */
    tu_insert(pg, 2, 100000 - 50 * 10 - 5, ci);
    is_int(feed_on_insert(f, 2, 100000 - 50 * 10 - 5, ci), FEED_OK, "cursor item rescored lower");
    ok(page_ok(f, 2, cs, ci, &r, &d), "  the next page equals SQL");
    feed_result_free(&r);

    /* Deleted. */
    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = 2 AND id = %lld", (long long)ci);
    is_int(feed_on_delete(f, 2, ci), FEED_OK, "cursor item deleted");
    ok(page_ok(f, 2, cs, ci, &r, &d), "  the next page equals SQL");
    ok(d.plain_pages == 1 && d.redis_calls == 1,
       "  still one plain read: the rank proves the place without the item");
    feed_result_free(&r);

    /* One insert above between two pages: within the slack of the hint. */
    ok(page_ok(f, 2, FEED_FIRST, 0, &r, &d), "first page again");
    tu_insert(pg, 2, 300000, 5000);
    is_int(feed_on_insert(f, 2, 300000, 5000), FEED_OK, "one item inserted at the top");
    ok(page_ok(f, 2, r.next_score, r.next_id, &r2, &d), "  the next page equals SQL");
    ok(d.plain_pages == 1 && d.plain_fallbacks == 0, "  a plain read (the cursor moved one rank)");
    feed_result_free(&r2);

    /* Eight inserts above: past the slack, so the hinted reply cannot prove
     * the page and page.lua answers. */
    for (int k = 0; k < 8; k++) {
        tu_insert(pg, 2, 300001 + k, 5001 + k);
        feed_on_insert(f, 2, 300001 + k, 5001 + k);
    }
    ok(page_ok(f, 2, r.next_score, r.next_id, &r2, &d),
       "eight inserts above the cursor: the next page equals SQL");
    ok(d.plain_fallbacks == 1 && d.script_pages == 1, "  page.lua answered (fell back)");
    feed_result_free(&r2);

    /* Deletes above: the cursor moved up past the slack. */
    for (int k = 0; k < 8; k++) {
        tu_sql(pg, "DELETE FROM feed_entry WHERE uid = 2 AND id = %d", 5001 + k);
        feed_on_delete(f, 2, 5001 + k);
    }
    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = 2 AND id IN (1, 2, 3)");
    for (int k = 1; k <= 3; k++)
        feed_on_delete(f, 2, k);
    ok(page_ok(f, 2, r.next_score, r.next_id, &r2, &d),
       "eleven deletes above the cursor: the next page equals SQL");
    ok(d.plain_pages + d.script_pages == 1, "  from the cache (%s)",
       d.plain_pages ? "plain" : "page.lua");
    feed_result_free(&r2);
    feed_result_free(&r);
    feed_close(f);
}

static void tie_run(void)
{
    feed *f = tu_open_settled(NULL);
    tu_walk_info info;
    feed_result r;
    feed_stats d, s0;

    tu_insert_rows(pg, 3, 200, tu_score_same, tu_id_seq);    /* ids 200..1, one score */
    ok(tu_walk_equals_sql(f, pg, 3, LIMIT, &info), "a 200-item tie group walks equal to SQL");
    feed_close(f);
    f = tu_open_settled(NULL);
    ok(page_ok(f, 3, TU_SCORE_SAME, 101, &r, &d), "a fresh handle, a cursor inside the tie group: equals SQL");
    ok(d.plain_fallbacks == 1 && d.script_pages == 1 && d.redis_calls == 2,
       "  the read by score meets 100 ties first: page.lua answers");
    feed_result_free(&r);
    ok(page_ok(f, 3, TU_SCORE_SAME, 101, &r, &d), "  the same cursor again: equals SQL");
    ok(d.plain_pages == 1 && d.redis_calls == 1, "  a plain read now (page.lua gave the rank)");
    feed_result_free(&r);
    feed_stats_get(f, &s0);
    ok(tu_walk_equals_sql(f, pg, 3, LIMIT, &info), "  a walk of the tie group equals SQL");
    d = tu_stats_since(f, &s0);
    is_int(d.plain_pages, (long long)info.pages, "  by plain reads alone");
    feed_close(f);
}

static long long pttl(int64_t uid) { return tu_redis_int(rc_, "PTTL %s", tu_key(uid, "")); }

/* Calls of one command Redis has served (INFO commandstats). */
static long long served(const char *cmd)
{
    redisReply *rep = tu_redis_cmd(rc_, "INFO commandstats");
    char field[64];
    const char *p;
    long long n;

    snprintf(field, sizeof field, "cmdstat_%s:calls=", cmd);
    p = rep->type == REDIS_REPLY_STRING ? strstr(rep->str, field) : NULL;
    n = p ? atoll(p + strlen(field)) : 0;
    freeReplyObject(rep);
    return n;
}

static void ttl_refresh(void)
{
    feed *g = tu_open_settled(NULL), *f = tu_open_settled(NULL), *h = tu_open_settled(NULL);  /* default 7-day TTL */
    const long long ttl = 604800LL * 1000;
    feed_result r, r2;
    feed_stats d;
    long long pttls;

    tu_insert_rows(pg, 4, 30, tu_score_desc, tu_id_seq);
    feed_page(g, 4, FEED_FIRST, 0, LIMIT, &r);   /* the miss: rebuilds */
    feed_result_free(&r);

    freeReplyObject(tu_redis_cmd(rc_, "PEXPIRE %s %lld", tu_key(4, ""), ttl / 2 + 60000));
    pttls = served("pttl");
    ok(page_ok(f, 4, FEED_FIRST, 0, &r, &d), "more than half the TTL left: a first page");
    ok(d.redis_calls == 1 && served("pttl") == pttls + 1 && pttl(4) <= ttl / 2 + 60000,
       "  one round trip with a PTTL; the TTL left as it was");
    feed_result_free(&r);
    pttls = served("pttl");
    ok(page_ok(f, 4, FEED_FIRST, 0, &r, &d), "  the next first page on that handle");
    ok(d.redis_calls == 1 && served("pttl") == pttls,
       "  sends no PTTL: the key is known to live 60 s past half the TTL");
    feed_result_free(&r);

    freeReplyObject(tu_redis_cmd(rc_, "PEXPIRE %s %lld", tu_key(4, ""), ttl / 2 - 60000));
    ok(page_ok(h, 4, FEED_FIRST, 0, &r, &d), "less than half the TTL left: a first page");
    ok(d.redis_calls == 2 && pttl(4) > ttl - 60000, "  a second round trip set the TTL back to full");
    feed_result_free(&r);
    pttls = served("pttl");
    ok(page_ok(h, 4, FEED_FIRST, 0, &r, &d) && d.redis_calls == 1 && served("pttl") == pttls,
       "  the next first page on that handle: one plain command");

    freeReplyObject(tu_redis_cmd(rc_, "PEXPIRE %s 100000", tu_key(4, "")));
    ok(page_ok(h, 4, r.next_score, r.next_id, &r2, &d), "a page after a cursor");
    ok(d.redis_calls == 1 && pttl(4) <= 100000, "  does not touch the TTL");
    feed_result_free(&r2);
    feed_result_free(&r);
    feed_close(f);
    feed_close(g);
    feed_close(h);
}

/* ---- concurrent hooks ------------------------------------------------
 * Stable items (ids below VOLATILE) are never touched while the writer
 * runs; volatile ones are inserted, rescored anywhere, deleted. A walk
 * that skips or repeats a stable item is wrong whatever the writer did. */
#define UID_C    5
#define STABLE   300
#define VOLATILE 1000000
static atomic_int writer_stop;

static void *writer(void *arg)
{
    feed *f = tu_open_settled(NULL);
    PGconn *wpg = tu_pg();
    uint64_t seed = 15;
    long *writes = arg;

    while (!writer_stop) {
        uint64_t x = tu_rand(&seed);
        int64_t id = VOLATILE + (int64_t)(x % 64);
        int64_t score = (int64_t)((x >> 8) % (STABLE * 10 + 40)) - 20;
        if ((x >> 40) % 4 == 0) {
            tu_sql(wpg, "DELETE FROM feed_entry WHERE uid = %d AND id = %lld", UID_C, (long long)id);
            feed_on_delete(f, UID_C, id);
        } else {
            tu_insert(wpg, UID_C, score, id);
            feed_on_insert(f, UID_C, score, id);
        }
        (*writes)++;
    }
    PQfinish(wpg);
    feed_close(f);
    return NULL;
}

static int64_t score_stable(size_t i) { return (int64_t)(STABLE - i) * 10; }

static void concurrent_hooks(void)
{
    feed *f = tu_open_settled(NULL);
    pthread_t th;
    long writes = 0;
    int walks = 0, bad = 0;
    feed_stats s0, d;
    unsigned char *seen = malloc(STABLE + 2);

    tu_insert_rows(pg, UID_C, STABLE, score_stable, tu_id_seq);
    feed_stats_get(f, &s0);
    writer_stop = 0;
    if (pthread_create(&th, NULL, writer, &writes) != 0)
        tap_bail("pthread_create");
    for (walks = 0; walks < 60 && !bad; walks++) {
        int64_t cs = FEED_FIRST, ci = 0;
        memset(seen, 0, STABLE + 2);
        for (;;) {
            feed_result r;
            if (feed_page(f, UID_C, cs, ci, LIMIT, &r) != FEED_OK) {
                tap_diag("feed_page failed: %s", feed_errmsg(f));
                bad = 1;
                break;
            }
            for (size_t i = 0; i < r.count; i++) {
                int64_t id = r.items[i].id;
                int after = cs == FEED_FIRST || r.items[i].score < cs ||
                            (r.items[i].score == cs && id < ci);
                if (!after || (i > 0 && !(r.items[i].score < r.items[i - 1].score ||
                                          (r.items[i].score == r.items[i - 1].score &&
                                           id < r.items[i - 1].id)))) {
                    tap_diag("walk %d: out of order at id %lld", walks, (long long)id);
                    bad = 1;
                }
                if (id >= 1 && id <= STABLE && seen[id]++) {
                    tap_diag("walk %d: stable id %lld twice", walks, (long long)id);
                    bad = 1;
                }
            }
            if (!r.has_more) {
                feed_result_free(&r);
                break;
            }
            cs = r.next_score;
            ci = r.next_id;
            feed_result_free(&r);
        }
        for (int id = 1; id <= STABLE && !bad; id++)
            if (!seen[id]) {
                tap_diag("walk %d: stable id %d skipped", walks, id);
                bad = 1;
            }
    }
    writer_stop = 1;
    pthread_join(th, NULL);
    d = tu_stats_since(f, &s0);
    ok(!bad, "%d walks during %ld concurrent hooks: no stable item skipped or repeated,"
       " every page in order", walks, writes);
    tap_diag("pages: %llu plain, %llu page.lua (%llu fallbacks), %llu rebuilt, %llu from SQL",
             (unsigned long long)d.plain_pages, (unsigned long long)d.script_pages,
             (unsigned long long)d.plain_fallbacks, (unsigned long long)d.rebuilds,
             (unsigned long long)d.db_pages);
    ok(d.plain_pages > 0, "  plain reads served pages meanwhile");
    ok(tu_walk_equals_sql(f, pg, UID_C, LIMIT, &(tu_walk_info){ 0 }),
       "  once the writer stops, a walk equals SQL");
    free(seen);
    feed_close(f);
}

int main(void)
{
    pg = tu_begin(&rc_);
    warm_walks();
    past_the_cache();
    moved_cursor();
    tie_run();
    ttl_refresh();
    concurrent_hooks();
    PQfinish(pg);
    redisFree(rc_);
    return tap_done();
}
