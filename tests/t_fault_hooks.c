/* t_fault_hooks.c -- write hooks while Redis is down or frozen: each returns
 * FEED_EREDIS with a message, in bounded time, and nothing is lost: once
 * Redis is back, walks through the library equal SQL again with no action
 * from the caller.
 *
 *   - Redis killed (it comes back empty): every hook fails; pages during the
 *     outage come from SQL and already show the writes; afterwards rebuilds
 *     repair the cache.
 *   - A rebuild that read SQL before the outage and installs after it (Redis
 *     killed, or frozen, in between; the write's hook failed) cannot install
 *     stale rows.
 *   - Redis frozen, so the cached copy survives the outage: the first hook
 *     times out, the following ones are not even sent (reconnects are
 *     rate-limited). The library remembers those feeds and the first handle
 *     to reach Redis again drops their cached copy.
 *   - Redis up but refusing the hook's script and DEL (an ACL): the feed is
 *     remembered too, and dropped by the first command after Redis accepts
 *     again. The control runs it once with the repair list forgotten (as a
 *     process that restarted would): the stale copy is then served, so the
 *     case fails if it stops leaving a stale copy behind. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"   /* test_before_install */
#include "tap.h"
#include "testutil.h"
#include "fault.h"

void feed__repair_forget(void);   /* the repair list, tests only */

#define MAX_LEN 20
#define TIMEOUT 200
#define RETRY   400

static PGconn *pg;

/* The settings of every handle this test opens. */
static void settings(feed_config *cfg)
{
    cfg->max_len = MAX_LEN;
    cfg->redis_timeout_ms = TIMEOUT;
    cfg->retry_ms = RETRY;
}

static int cached_in_redis(int64_t uid)
{
    redisContext *r = tu_redis();
    int e = (int)tu_redis_int(r, "EXISTS %s", tu_key(uid, ""));

    redisFree(r);
    return e;
}

/* A hook's outcome during an outage: FEED_EREDIS, a message, no hang. */
static int hook_failed(feed *f, int rc, double ms, const char *what)
{
    int good = rc == FEED_EREDIS && strstr(feed_errmsg(f), "Redis") != NULL &&
               ms < TIMEOUT + fault_slack_ms();

    if (!good)
        tap_diag("%s: rc %d after %.1f ms: %s", what, rc, ms, feed_errmsg(f));
    return good;
}

#define TIMED(ms, call) (t0_ = fault_now_ms(), rc_ = (call), (ms) = fault_now_ms() - t0_, rc_)
static double t0_;
static int rc_;

static void killed(void)
{
    feed *f = tu_open_with(settings);
    int64_t uids[2] = { 700, 701 };
    double ms;
    int rc, all = 1;

    for (int i = 0; i < 2; i++)
        ok(tu_walks_equal_sql(f, pg, uids[i]) && cached_in_redis(uids[i]),
           "feed %lld cached and equal to SQL", (long long)uids[i]);

    fault_inject("redis-stop");
    tu_insert(pg, 700, 100000, 1000);
    rc = TIMED(ms, feed_on_insert(f, 700, 100000, 1000));
    all &= hook_failed(f, rc, ms, "insert");
    ok(all, "Redis killed: feed_on_insert gives FEED_EREDIS (%.1f ms): %s", ms, feed_errmsg(f));
    tu_sql(pg, "UPDATE feed_entry SET score = 5 WHERE uid = 700 AND id = 40");
    rc = TIMED(ms, feed_on_insert(f, 700, 5, 40));
    ok(hook_failed(f, rc, ms, "rescore"), "  a score change: FEED_EREDIS (%.1f ms)", ms);
    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = 700 AND id = 39");
    rc = TIMED(ms, feed_on_delete(f, 700, 39));
    ok(hook_failed(f, rc, ms, "delete"), "  feed_on_delete: FEED_EREDIS (%.1f ms)", ms);
    for (int i = 0; i < 2; i++)
        tu_insert(pg, uids[i], 200000, 2000);
    rc = TIMED(ms, feed_fanout(f, uids, 2, 200000, 2000));
    ok(hook_failed(f, rc, ms, "fanout"), "  feed_fanout: FEED_EREDIS (%.1f ms)", ms);
    rc = TIMED(ms, feed_reload(f, 701));
    ok(hook_failed(f, rc, ms, "reload"), "  feed_reload: FEED_EREDIS (%.1f ms)", ms);
    rc = TIMED(ms, feed_invalidate(f, 701));
    ok(hook_failed(f, rc, ms, "invalidate"), "  feed_invalidate: FEED_EREDIS (%.1f ms)", ms);
    ok(tu_walks_equal_sql(f, pg, 700) && tu_walks_equal_sql(f, pg, 701),
       "  meanwhile walks come from SQL and already show every write");

    fault_inject("redis-start");
    fault_sleep_ms(RETRY);
    ok(tu_walks_equal_sql(f, pg, 700) && tu_walks_equal_sql(f, pg, 701),
       "Redis back (empty): walks equal SQL, the cache rebuilt by itself");
    ok(cached_in_redis(700) && cached_in_redis(701), "  and both feeds are cached again");
    feed_close(f);
}

/* test_before_install: the rebuilding handle has read SQL; now, before it
 * installs, an outage, and a write whose hook cannot reach Redis. */
typedef struct race {
    feed       *writer;
    const char *down, *up;   /* servers.sh commands around the write */
    int         hook_rc;
} race;

static void outage_and_write(feed *rebuilder, int64_t uid, void *arg)
{
    race *rc = arg;

    (void)rebuilder;
    fault_inject(rc->down);
    tu_insert(pg, uid, 100000, 3000);
    rc->hook_rc = feed_on_insert(rc->writer, uid, 100000, 3000);
    fault_inject(rc->up);
}

/* strict: the outage empties Redis (a kill), so the lease is gone for sure.
 * After a freeze the hook that timed out still runs when Redis wakes, before
 * or after the install: either way the copy ends right, which the walks
 * check. */
static void stale_rebuild(const char *down, const char *up, int64_t uid, int strict)
{
    feed *f = tu_open_with(settings), *writer = tu_open_with(settings);
    race rc = { writer, down, up, 0 };
    feed_result res;
    int page_rc;

    tu_insert_rows(pg, uid, 30, tu_score_by10, tu_id_seq);
    f->core.test_before_install = outage_and_write;
    f->core.test_arg = &rc;
    page_rc = feed_page(f, uid, FEED_FIRST, 0, 10, &res);
    f->core.test_before_install = NULL;
    is_int(rc.hook_rc, FEED_EREDIS, "%s between a rebuild's SQL read and its install:"
           " the write's hook failed", down);
    ok(page_rc == FEED_OK && res.count == 10 && res.items[0].id != 3000,
       "  the page that missed is answered from the rows it read");
    if (strict) {
        ok(page_rc == FEED_OK && res.source == FEED_SOURCE_DB, "  but not installed (source db)");
        ok(!cached_in_redis(uid), "  no stale copy in Redis");
    } else {
        tap_diag("  the rebuild was %sinstalled", res.source == FEED_SOURCE_DB ? "not " : "");
    }
    feed_result_free(&res);
    fault_sleep_ms(RETRY);
    ok(tu_walks_equal_sql(f, pg, uid) && tu_walks_equal_sql(writer, pg, uid),
       "  walks equal SQL, the new row included, through either handle");
    feed_close(f);
    feed_close(writer);
}

/* Redis frozen: its data (the cached copy) survives the outage. */
static void frozen(void)
{
    feed *w = tu_open_with(settings), *reader = tu_open_with(settings);
    int64_t uid = 710, uids[2] = { 710, 711 };
    double ms;
    int rc;

    tu_insert_rows(pg, 710, 40, tu_score_by10, tu_id_seq);
    tu_insert_rows(pg, 711, 10, tu_score_by10, tu_id_seq);
    ok(tu_walks_equal_sql(reader, pg, 710) && tu_walks_equal_sql(reader, pg, 711) && cached_in_redis(710),
       "feeds 710 (partly) and 711 (wholly) cached, equal to SQL");

    fault_inject("redis-freeze");
    /* The first hook waits for the timeout; its command reached the frozen
     * server's socket and runs when it wakes. */
    tu_insert(pg, uid, 100000, 1000);
    rc = TIMED(ms, feed_on_insert(w, uid, 100000, 1000));
    ok(hook_failed(w, rc, ms, "insert"), "Redis frozen: feed_on_insert gives FEED_EREDIS"
       " after the timeout (%.1f ms)", ms);
    /* The next ones, within retry_ms, are not even sent. */
    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = 710 AND id = 40");
    rc = TIMED(ms, feed_on_delete(w, uid, 40));
    ok(hook_failed(w, rc, ms, "delete"), "  feed_on_delete: FEED_EREDIS at once (%.1f ms)", ms);
    tu_sql(pg, "UPDATE feed_entry SET score = 395 WHERE uid = 710 AND id = 38");
    rc = TIMED(ms, feed_on_insert(w, uid, 395, 38));
    ok(hook_failed(w, rc, ms, "rescore"), "  a score change: FEED_EREDIS (%.1f ms)", ms);
    for (int i = 0; i < 2; i++)
        tu_insert(pg, uids[i], 200000, 2000);
    rc = TIMED(ms, feed_fanout(w, uids, 2, 200000, 2000));
    ok(hook_failed(w, rc, ms, "fanout"), "  feed_fanout: FEED_EREDIS (%.1f ms)", ms);
    fault_inject("redis-thaw");

    /* The writing handle reaches Redis on its next call after retry_ms. */
    fault_sleep_ms(RETRY);
    ok(tu_walks_equal_sql(w, pg, 710) && tu_walks_equal_sql(w, pg, 711),
       "Redis thawed: walks through the writing handle equal SQL");
    {
        feed_stats a, b;
        feed_stats_get(w, &a);
        feed_stats_get(reader, &b);
        is_int(a.repairs + b.repairs, 2, "  the 2 cached copies the hooks missed were dropped,"
               " once each");
    }
    ok(tu_walks_equal_sql(reader, pg, 710) && tu_walks_equal_sql(reader, pg, 711),
       "  and through another handle too");
    feed_close(w);
    feed_close(reader);
}

static void acl(const char *script_rule, const char *del_rule)
{
    redisContext *r = tu_redis();

    freeReplyObject(tu_redis_cmd(r, "ACL SETUSER default %s %s", script_rule, del_rule));
    redisFree(r);
}

/* Redis answers but refuses: the write's feed is remembered all the same.
 * repair 0 is the control: the list forgotten before the walk, which must
 * then serve the stale copy. */
static void refused(int repair)
{
    feed *w = tu_open_with(settings), *reader = tu_open_with(settings);
    feed_stats before, after;
    int64_t uid = repair ? 730 : 731;
    int rc, same;

    tu_insert_rows(pg, uid, 40, tu_score_by10, tu_id_seq);
    ok(tu_walks_equal_sql(reader, pg, uid) && cached_in_redis(uid), "feed %lld cached, equal"
       " to SQL", (long long)uid);
    acl("-evalsha", "-del");
    tu_insert(pg, uid, 100000, 1000);
    rc = feed_on_insert(w, uid, 100000, 1000);
    ok(rc == FEED_EREDIS && strstr(feed_errmsg(w), "NOPERM") != NULL,
       "Redis refuses the hook (ACL): FEED_EREDIS (%d: %s)", rc, feed_errmsg(w));
    ok(feed_invalidate(w, uid) == FEED_EREDIS && cached_in_redis(uid),
       "  feed_invalidate is refused too: the stale copy stays in Redis");
    acl("+evalsha", "+del");
    if (!repair)
        feed__repair_forget();
    feed_stats_get(reader, &before);
    same = tu_walks_equal_sql(reader, pg, uid);
    feed_stats_get(reader, &after);
    if (repair) {
        ok(same, "Redis accepts again: walks through another handle equal SQL");
        is_int((long long)(after.repairs - before.repairs), 1,
               "  that handle dropped the copy first, once");
    } else {
        ok(!same && after.repairs == before.repairs, "control, the repair list forgotten:"
           " the stale copy is served (the fault bites)");
    }
    feed_close(w);
    feed_close(reader);
}

/* A handle opened while Redis was down (PostgreSQL answered, so feed_open
 * succeeds) has not loaded the scripts: its first hooks once Redis is back
 * must still run them (the simulation found hooks built their EVALSHA with
 * the SHA's length read before any node was set up: NOSCRIPT twice). */
static void opened_down(void)
{
    feed *f;
    int rc;

    fault_inject("redis-stop");
    f = tu_open_with(settings);
    fault_inject("redis-start");
    fault_sleep_ms(RETRY);
    tu_insert(pg, 702, 300000, 3000);
    rc = feed_on_insert(f, 702, 300000, 3000);
    ok(rc == FEED_OK, "a handle opened with Redis down: its first hook once Redis is back"
       " runs insert.lua: %s", rc == FEED_OK ? "FEED_OK" : feed_errmsg(f));
    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = 702 AND id = 3000");
    feed_close(f);
    f = tu_open_with(settings);
    fault_inject("redis-stop");
    feed_close(f);
    f = tu_open_with(settings);
    fault_inject("redis-start");
    fault_sleep_ms(RETRY);
    rc = feed_on_delete(f, 702, 3000);
    ok(rc == FEED_OK, "  and delete.lua: %s", rc == FEED_OK ? "FEED_OK" : feed_errmsg(f));
    ok(tu_walks_equal_sql(f, pg, 702), "  walks equal SQL after both");
    feed_close(f);
}

int main(void)
{
    tu_plain_redis_only("t_fault_hooks");   /* a cluster's nodes are t_cluster's to fault */
    fault_setup();
    pg = tu_begin(NULL);
    tu_insert_rows(pg, 700, 40, tu_score_by10, tu_id_seq);
    tu_insert_rows(pg, 701, 10, tu_score_by10, tu_id_seq);

    killed();
    stale_rebuild("redis-stop", "redis-start", 720, 1);
    stale_rebuild("redis-freeze", "redis-thaw", 721, 0);
    frozen();
    refused(0);
    refused(1);
    opened_down();

    tap_diag("faults injected: %d (Redis kills and freezes)", fault_count);
    PQfinish(pg);
    return tap_done();
}
