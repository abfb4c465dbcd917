/* t_fault_redis.c -- the Redis half of the failure model (docs/ha.md), against
 * the real test server, killed, frozen and flushed under a running handle:
 *
 *   - Redis killed in the middle of a walk, then started again: every page of
 *     the outage comes back, equal to SQL, from PostgreSQL (FEED_SOURCE_DB);
 *     no call takes longer than the timeout (plus slack); reconnects are
 *     rate-limited (counted with feed_stats.redis_connects); when Redis is
 *     back, pages come from the cache again with no action from the caller.
 *   - Redis frozen (SIGSTOP): calls give up after redis_timeout_ms and fall
 *     back; after SIGCONT the cache, still there, serves again.
 *   - SCRIPT FLUSH: the next call of each script pays NOSCRIPT once (EVALSHA,
 *     SCRIPT LOAD, EVALSHA), the one after pays nothing (a cached first page
 *     calls no script at all: a page that needs page.lua is checked); Redis restarted
 *     empty between two calls: the next call reconnects once and rebuilds.
 *
 * Timing asserts only bound hangs (timeout + generous slack), never speed. */
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "testutil.h"
#include "fault.h"

#define UID     500
#define ROWS    300
#define LIMIT   10
#define TIMEOUT 200      /* redis_timeout_ms */
#define RETRY   400      /* retry_ms */

static PGconn *pg;
static feed_item *want;  /* UID's feed from SQL */
static size_t nwant;

static int64_t score_of(size_t i) { return (int64_t)(i / 3) * 7; }   /* ties of 3 */
static int64_t id_of(size_t i) { return (int64_t)i * 11 + 5; }

/* The settings of every handle this test opens. */
static void settings(feed_config *cfg)
{
    cfg->redis_timeout_ms = TIMEOUT;
    cfg->retry_ms = RETRY;
}

typedef struct timed {
    int         rc;
    feed_result res;
    double      ms;
} timed;

static timed page(feed *f, int64_t score, int64_t id)
{
    timed t;
    double t0 = fault_now_ms();

    t.rc = feed_page(f, UID, score, id, LIMIT, &t.res);
    t.ms = fault_now_ms() - t0;
    return t;
}

/* Is res the page of SQL's feed that starts at index at? */
static int matches(const feed_result *res, size_t at)
{
    size_t expect = nwant - at < LIMIT ? nwant - at : LIMIT;

    if (res->count != expect || res->has_more != (at + expect < nwant))
        return 0;
    for (size_t i = 0; i < expect; i++)
        if (res->items[i].score != want[at + i].score || res->items[i].id != want[at + i].id)
            return 0;
    return 1;
}

/* A whole walk equal to SQL, and every page of it from one source. */
static int walk_from(feed *f, feed_source only, const char *what)
{
    tu_walk_info info;
    int same = tu_walk_equals_sql(f, pg, UID, LIMIT, &info);

    if (same && info.sources[only] != (int)info.pages) {
        tap_diag("%s: %zu pages, %d cache, %d rebuild, %d db", what, info.pages,
                 info.sources[FEED_SOURCE_CACHE], info.sources[FEED_SOURCE_REBUILD],
                 info.sources[FEED_SOURCE_DB]);
        return 0;
    }
    return same;
}

/* A first walk fills the cache; the second must come from it alone. */
static int warm(feed *f)
{
    tu_walk_info info;

    return tu_walk_equals_sql(f, pg, UID, LIMIT, &info) &&
           walk_from(f, FEED_SOURCE_CACHE, "warm");
}

/* Pages until one comes from Redis again (or the bound passes). */
static feed_source wait_for_cache(feed *f, double bound_ms, double *took)
{
    double t0 = fault_now_ms();
    feed_source src = FEED_SOURCE_DB;

    while (fault_now_ms() - t0 < bound_ms) {
        timed t = page(f, FEED_FIRST, 0);
        int good = t.rc == FEED_OK && matches(&t.res, 0);
        src = t.rc == FEED_OK ? t.res.source : FEED_SOURCE_DB;
        feed_result_free(&t.res);
        if (!good) {
            tap_diag("a page while waiting for Redis is wrong: %s", feed_errmsg(f));
            return FEED_SOURCE_DB;
        }
        if (src != FEED_SOURCE_DB)
            break;
        fault_sleep_ms(10);
    }
    *took = fault_now_ms() - t0;
    return src;
}

/* Call first pages for dur_ms during an outage: all must be right, none may
 * hang, and the handle may try to reconnect only once per retry_ms. */
static void outage_calls(feed *f, double dur_ms, const char *what)
{
    feed_stats s0, s1;
    double t0 = fault_now_ms(), worst = 0, elapsed;
    int calls = 0, bad = 0;
    unsigned long long connects;

    feed_stats_get(f, &s0);
    while (fault_now_ms() - t0 < dur_ms) {
        timed t = page(f, FEED_FIRST, 0);
        if (t.rc != FEED_OK || t.res.source != FEED_SOURCE_DB || !matches(&t.res, 0)) {
            if (bad++ == 0)
                tap_diag("%s: rc %d: %s", what, t.rc, feed_errmsg(f));
        }
        if (t.ms > worst)
            worst = t.ms;
        feed_result_free(&t.res);
        calls++;
        fault_sleep_ms(5);
    }
    elapsed = fault_now_ms() - t0;
    feed_stats_get(f, &s1);
    connects = (unsigned long long)(s1.redis_connects - s0.redis_connects);
    ok(bad == 0, "%s: %d pages in %.0f ms, all from PostgreSQL and equal to SQL", what,
       calls, elapsed);
    ok(worst < TIMEOUT + fault_slack_ms(), "  none hung: slowest %.1f ms (timeout %d ms)",
       worst, TIMEOUT);
    ok(connects >= 1 && (double)connects <= elapsed / RETRY + 2,
       "  reconnects rate-limited: %llu attempts for %d calls in %.0f ms (retry_ms %d)",
       connects, calls, elapsed, RETRY);
}

static void stopped_mid_walk(void)
{
    feed *f = tu_open_with(settings);
    int64_t score = FEED_FIRST, id = 0;
    size_t at = 0;
    int pages = 0, bad = 0, cached_before = 0, db_after = 0, msg_ok = 1;
    double worst = 0, took;
    feed_source src;
    timed t;

    ok(warm(f),
       "warm: a walk of %zu items equals SQL, all from the cache", nwant);

    for (;;) {
        if (pages == 5)
            fault_inject("redis-stop");
        t = page(f, score, id);
        if (t.rc != FEED_OK) {
            tap_diag("page %d: %s: %s", pages, feed_strerror(t.rc), feed_errmsg(f));
            bad++;
            break;
        }
        if (!matches(&t.res, at))
            bad++;
        if (pages < 5 && t.res.source == FEED_SOURCE_CACHE)
            cached_before++;
        if (pages >= 5) {
            if (t.res.source == FEED_SOURCE_DB)
                db_after++;
            if (t.ms > worst)
                worst = t.ms;
            if (!strstr(feed_errmsg(f), "Redis"))
                msg_ok = 0;
        }
        at += t.res.count;
        pages++;
        if (!t.res.has_more) {
            feed_result_free(&t.res);
            break;
        }
        score = t.res.next_score;
        id = t.res.next_id;
        feed_result_free(&t.res);
    }
    ok(bad == 0 && at == nwant,
       "Redis killed at page 6 of %d: every page came back and equals SQL", pages);
    is_int(cached_before, 5, "  the 5 pages before the kill came from the cache");
    is_int(db_after, pages - 5, "  every page after it came from PostgreSQL");
    ok(msg_ok, "  and left the Redis error in feed_errmsg (\"%s\")", feed_errmsg(f));
    ok(worst < TIMEOUT + fault_slack_ms(), "  no call hung: slowest %.1f ms", worst);

    outage_calls(f, 6 * RETRY, "Redis dead");

    fault_inject("redis-start");
    src = wait_for_cache(f, RETRY + TIMEOUT + fault_slack_ms(), &took);
    ok(src != FEED_SOURCE_DB,
       "Redis back: pages from Redis again after %.0f ms, no caller action (retry_ms %d)",
       took, RETRY);
    is_int(src, FEED_SOURCE_REBUILD, "  the first of them rebuilt the emptied cache");
    ok(walk_from(f, FEED_SOURCE_CACHE, "after restart"),
       "  then a whole walk equals SQL, every page from the cache");
    feed_close(f);
}

static void frozen(void)
{
    feed *f = tu_open_with(settings);
    feed_source src;
    double took;
    timed t;

    ok(warm(f),
       "warm again: the walk is served by the cache");
    fault_inject("redis-freeze");
    t = page(f, FEED_FIRST, 0);
    ok(t.rc == FEED_OK && t.res.source == FEED_SOURCE_DB && matches(&t.res, 0),
       "Redis frozen (SIGSTOP): the page comes from PostgreSQL, equal to SQL");
    ok(t.ms < TIMEOUT + fault_slack_ms(), "  after giving up on Redis: %.1f ms (timeout %d ms)",
       t.ms, TIMEOUT);
    ok(strstr(feed_errmsg(f), "Redis") != NULL, "  with the reason: %s", feed_errmsg(f));
    feed_result_free(&t.res);
    {
        /* The timeout counts as an attempt: the next call must not connect
         * again at once (the kernel accepts for a frozen server) and wait
         * out a second timeout. */
        feed_stats before, after;
        feed_stats_get(f, &before);
        t = page(f, FEED_FIRST, 0);
        feed_stats_get(f, &after);
        ok(t.rc == FEED_OK && t.res.source == FEED_SOURCE_DB,
           "  the next call, right after: from PostgreSQL");
        is_int(after.redis_connects - before.redis_connects, 0,
               "  without a reconnect attempt inside retry_ms");
        feed_result_free(&t.res);
    }
    outage_calls(f, 6 * RETRY, "Redis frozen");
    ok(walk_from(f, FEED_SOURCE_DB, "frozen walk"),
       "  a whole walk during the freeze equals SQL, from PostgreSQL");

    fault_inject("redis-thaw");
    src = wait_for_cache(f, RETRY + TIMEOUT + fault_slack_ms(), &took);
    is_int(src, FEED_SOURCE_CACHE, "Redis thawed (SIGCONT): the cache, intact, serves again"
           " after %.0f ms", took);
    ok(walk_from(f, FEED_SOURCE_CACHE, "after thaw"), "  a whole walk equals SQL from the cache");
    feed_close(f);
}

/* "script|load" calls Redis has served (INFO commandstats). */
static long long script_loads(redisContext *r)
{
    redisReply *rep = tu_redis_cmd(r, "INFO commandstats");
    const char *p = rep->type == REDIS_REPLY_STRING ? strstr(rep->str, "cmdstat_script|load:calls=") : NULL;
    long long n = p ? atoll(p + strlen("cmdstat_script|load:calls=")) : 0;

    freeReplyObject(rep);
    return n;
}

static void flush_scripts(redisContext *r)
{
    freeReplyObject(tu_redis_cmd(r, "SCRIPT FLUSH"));
    fault_count++;
}

static void noscript(void)
{
    redisContext *r = tu_redis();
    feed *f = tu_open_with(settings);
    int64_t uids[3] = { UID, UID + 1, UID + 2 };
    feed_stats s0, d;
    long long loads;
    timed t;
    int rc;

    ok(warm(f),
       "warm: the walk is served by the cache");

    loads = script_loads(r);
    flush_scripts(r);
    feed_stats_get(f, &s0);
    t = page(f, FEED_FIRST, 0);
    d = tu_stats_since(f, &s0);
    ok(t.rc == FEED_OK && t.res.source == FEED_SOURCE_CACHE && matches(&t.res, 0),
       "SCRIPT FLUSH: the next page still comes from the cache, equal to SQL");
    ok(d.redis_calls == 1 && d.plain_pages == 1,
       "  a first page needs no script: one plain round trip");
    feed_result_free(&t.res);

    /* After the last item of a tie group (ties of 3 in SQL order: index
     * 3k+2 has the group's lowest id), with no rank hint for it on this
     * handle, the plain read by score starts with the three ties and
     * cannot prove the page: page.lua answers, and meets NOSCRIPT. */
    feed_stats_get(f, &s0);
    t = page(f, want[14].score, want[14].id);
    d = tu_stats_since(f, &s0);
    ok(t.rc == FEED_OK && t.res.source == FEED_SOURCE_CACHE && matches(&t.res, 15),
       "SCRIPT FLUSH: a page that needs page.lua still comes from the cache, equal to SQL");
    ok(d.plain_fallbacks == 1 && d.script_pages == 1, "  (it needed page.lua)");
    is_int(d.redis_calls, 4, "  NOSCRIPT handled once: plain read, EVALSHA, SCRIPT LOAD, EVALSHA");
    is_int(script_loads(r) - loads, 1, "  Redis served exactly one SCRIPT LOAD");
    is_int(d.redis_errors, 0, "  not counted as an error");
    feed_result_free(&t.res);
    feed_stats_get(f, &s0);
    t = page(f, want[14].score, want[14].id);
    d = tu_stats_since(f, &s0);
    is_int(d.redis_calls, 1, "  the page after it costs one round trip again (page.lua's rank hint)");
    ok(matches(&t.res, 15) && d.plain_pages == 1, "  a plain read, equal to SQL");
    feed_result_free(&t.res);

    /* Each hook's script, flushed just before its first call. */
    flush_scripts(r);
    tu_insert(pg, UID, 1000000, 7);
    feed_stats_get(f, &s0);
    rc = feed_on_insert(f, UID, 1000000, 7);
    d = tu_stats_since(f, &s0);
    ok(rc == FEED_OK && d.redis_calls == 3,
       "SCRIPT FLUSH, then feed_on_insert: OK in 3 round trips (%llu)",
       (unsigned long long)d.redis_calls);

    flush_scripts(r);
    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = %d AND id = 7", UID);
    feed_stats_get(f, &s0);
    rc = feed_on_delete(f, UID, 7);
    d = tu_stats_since(f, &s0);
    ok(rc == FEED_OK && d.redis_calls == 3,
       "SCRIPT FLUSH, then feed_on_delete: OK in 3 round trips (%llu)",
       (unsigned long long)d.redis_calls);

    flush_scripts(r);
    for (int i = 0; i < 3; i++)
        tu_insert(pg, uids[i], 2000000, 8);
    feed_stats_get(f, &s0);
    loads = script_loads(r);
    rc = feed_fanout(f, uids, 3, 2000000, 8);
    d = tu_stats_since(f, &s0);
    ok(rc == FEED_OK && d.redis_calls == 3,
       "SCRIPT FLUSH, then a fan-out to 3 feeds: OK in 3 round trips (pipeline, load,"
       " pipeline again: %llu)", (unsigned long long)d.redis_calls);
    is_int(script_loads(r) - loads, 1, "  one SCRIPT LOAD for the whole pipeline");

    flush_scripts(r);
    feed_stats_get(f, &s0);
    rc = feed_reload(f, UID);
    d = tu_stats_since(f, &s0);
    ok(rc == FEED_OK && d.rebuilds == 1,
       "SCRIPT FLUSH, then feed_reload: installed (%llu round trips)",
       (unsigned long long)d.redis_calls);
    free(want);
    nwant = tu_sql_feed(pg, UID, &want);
    ok(walk_from(f, FEED_SOURCE_CACHE, "after flushes"),
       "  a whole walk equals SQL from the cache");
    feed_close(f);
    redisFree(r);
}

static void restarted_empty(void)
{
    feed *f = tu_open_with(settings);
    feed_stats s0, d;
    timed t;

    ok(warm(f),
       "warm: the walk is served by the cache");
    fault_inject("redis-stop");
    fault_inject("redis-start");
    feed_stats_get(f, &s0);
    t = page(f, FEED_FIRST, 0);
    d = tu_stats_since(f, &s0);
    ok(t.rc == FEED_OK && t.res.source == FEED_SOURCE_REBUILD && matches(&t.res, 0),
       "Redis restarted empty between two calls: the next page rebuilds, equal to SQL");
    feed_result_free(&t.res);
    {
        feed_stats now;
        feed_stats_get(f, &now);
        is_int(now.redis_connects - s0.redis_connects, 1, "  after one reconnect (scripts"
               " loaded with it), at once: the server closed the connection");
    }
    is_int(d.db_pages, 0, "  no page fell back to PostgreSQL");
    ok(walk_from(f, FEED_SOURCE_CACHE, "after restart"), "  a whole walk equals SQL from the cache");
    tu_insert(pg, UID, 3000000, 9);
    is_int(feed_on_insert(f, UID, 3000000, 9), FEED_OK, "  a hook works on the new server");
    free(want);
    nwant = tu_sql_feed(pg, UID, &want);
    ok(walk_from(f, FEED_SOURCE_CACHE, "after hook"), "  and the walk still equals SQL");
    feed_close(f);
}

int main(void)
{
    tu_plain_redis_only("t_fault_redis");   /* a cluster's nodes are t_cluster's to fault */
    fault_setup();
    pg = tu_begin(NULL);
    tu_insert_rows(pg, UID, ROWS, score_of, id_of);
    nwant = tu_sql_feed(pg, UID, &want);

    stopped_mid_walk();
    frozen();
    noscript();
    restarted_empty();

    tap_diag("faults injected: %d (kills, freezes, script flushes)", fault_count);
    free(want);
    PQfinish(pg);
    return tap_done();
}
