/* t_ha_config.c -- the Sentinel and failover-guarantee settings without a
 * Sentinel set: what feed_open accepts and refuses, what a handle does when
 * no Sentinel answers or the "Sentinel" is not one (pages from SQL, in
 * bounded time, with the reason), and the restart fence on the single test
 * Redis: on a data set with a foreign run_id no copy of an older generation
 * is served (a stale one planted both as a handle without the fence and as
 * the old data set's handles named it), the pages are right at once, and
 * the older keys are swept (every "<prefix>:*" key but the new
 * generation's, nothing of another prefix, the fence key rewritten at the
 * end); a second handle finds the fence matching and sweeps nothing. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "tap.h"
#include "testutil.h"
#include "fault.h"

#define UID   9100
#define KEYS  20000   /* a sweep of 20 steps, 100 ms apart at the least */

static PGconn *pg;

static int open_rc(const feed_config *cfg)
{
    feed *f = NULL;
    int rc = feed_open(&f, cfg);

    feed_close(f);
    return rc;
}

static void config_checks(void)
{
    static const char *const bad[] = {
        "", "host", "host:", ":26379", "h:0", "h:70000", "h:1,", "h:1,,h:2", "h:x", "h:+1", "h:1 ",
    };
    feed_config cfg;

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tu_config(&cfg);
        cfg.redis_sentinels = bad[i];
        is_int(open_rc(&cfg), FEED_EINVAL, "redis_sentinels \"%s\" is refused", bad[i]);
    }
    tu_config(&cfg);
    cfg.redis_sentinels = "127.0.0.1:1";
    cfg.redis_master_name = "";
    is_int(open_rc(&cfg), FEED_EINVAL, "an empty redis_master_name is refused");
    tu_config(&cfg);
    cfg.redis_wait_replicas = 1;
    cfg.redis_wait_timeout_ms = cfg.redis_timeout_ms;
    is_int(open_rc(&cfg), FEED_EINVAL, "redis_wait_timeout_ms must stay below redis_timeout_ms");
    cfg.redis_wait_timeout_ms = 0;
    is_int(open_rc(&cfg), FEED_EINVAL, "redis_wait_timeout_ms 0 is refused with WAIT on");
    tu_config(&cfg);
    cfg.redis_restart_fence = 2;
    is_int(open_rc(&cfg), FEED_EINVAL, "redis_restart_fence must be 0 or 1");
    tu_config(&cfg);
    cfg.redis_sentinels = "127.0.0.1:1";
    cfg.redis_cluster = "127.0.0.1:2";
    is_int(open_rc(&cfg), FEED_EINVAL, "redis_sentinels with redis_cluster is refused");
}

/* Sentinels that cannot name a primary: feed_open succeeds on PostgreSQL,
 * pages come from SQL with the reason, quickly. */
static void no_sentinel(const char *list, const char *why, const char *expect)
{
    feed_config cfg;
    feed_result res;
    feed *f;
    double t0;
    int rc;

    tu_config(&cfg);
    cfg.redis_sentinels = list;
    cfg.redis_timeout_ms = 200;
    cfg.retry_ms = 0;             /* every call asks again: the hook shows why */
    f = tu_open(&cfg);
    t0 = fault_now_ms();
    rc = feed_page(f, UID, FEED_FIRST, 0, 10, &res);
    ok(rc == FEED_OK && res.source == FEED_SOURCE_DB, "%s: the page comes from SQL", why);
    ok(fault_now_ms() - t0 < 3 * 200 + fault_slack_ms(), "%s: in bounded time", why);
    feed_result_free(&res);
    rc = feed_on_insert(f, UID, 1, 1);
    ok(rc == FEED_EREDIS && strstr(feed_errmsg(f), expect),
       "%s: a hook fails with the reason (%s)", why, feed_errmsg(f));
    feed_close(f);
}

static long long count_keys(redisContext *r, const char *pattern)
{
    long long n = 0;
    char cursor[32] = "0";

    do {
        redisReply *rep = tu_redis_cmd(r, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);
        snprintf(cursor, sizeof cursor, "%s", rep->element[0]->str);
        n += (long long)rep->element[1]->elements;
        freeReplyObject(rep);
    } while (strcmp(cursor, "0") != 0);
    return n;
}

/* feed__info_id: the fence's identity of a server, read out of INFO text. */
static void info_ids(void)
{
    const char *id = "0123456789abcdef0123456789abcdef01234567";
    char text[512], out[41];

    snprintf(text, sizeof text, "# Server\r\nmaster_run_id:%.40s\r\nrun_id:%s\r\n",
             "ffffffffffffffffffffffffffffffffffffffff", id);
    ok(feed__info_id(text, "run_id", out) && strcmp(out, id) == 0,
       "feed__info_id reads the run_id line, not a field that ends in run_id (%s)", out);
    snprintf(text, sizeof text, "run_id:%s", id);
    ok(feed__info_id(text, "run_id", out) && strcmp(out, id) == 0,
       "  a field on the text's first line and at its end (%s)", out);
    snprintf(text, sizeof text, "run_id:%.39s\r\n", id);
    ok(!feed__info_id(text, "run_id", out) && out[0] == '\0', "  39 digits are no id");
    snprintf(text, sizeof text, "run_id:%sa\r\n", id);
    ok(!feed__info_id(text, "run_id", out), "  nor are 41");
    ok(!feed__info_id("run_id:0123456789ABCDEF0123456789abcdef01234567\r\n", "run_id", out),
       "  nor upper-case digits");
    ok(!feed__info_id("# Replication\r\nrole:master\r\n", "master_replid", out) &&
       out[0] == '\0', "  a field absent: 0, and out is empty");
}

static void fence(redisContext *r)
{
    feed_config cfg;
    feed_stats st;
    tu_walk_info info;
    redisReply *rep;
    feed *f, *g;
    char run_id[96] = "";
    const char *p;

    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = %d", UID);
    tu_insert(pg, UID, 10, 1);
    tu_insert(pg, UID, 20, 2);
    /* A data set "from before a restart": many keys of ours, a stale complete
     * copy of UID (one item SQL does not have) both as a handle without the
     * fence names it and in the old data set's generation, a fence naming
     * another server, and keys of another prefix. */
    freeReplyObject(tu_redis_cmd(r, "EVAL %s 0 %d", "for i = 0, ARGV[1] - 1 do"
                                 " redis.call('SET', 'hz:{' .. (i + 100000) .. '}', 'x')"
                                 " redis.call('SET', 'hzz:{' .. i .. '}', 'x') end", KEYS));
    tu_config(&cfg);
    cfg.key_prefix = "hz";
    {
        char m[FEED_MEMBER_MAX], old[FEED_KEY_GEN_LEN + 1];
        size_t mlen = tu_member(99, m);
        feed__key_gen("0000000000000000000000000000000000000000", "", old);
        freeReplyObject(tu_redis_cmd(r, "ZADD %s -inf end 5 %b",
                                     tu_key_gen(&cfg, FEED_FAM_FEED, UID, "", FEED_KEY_GEN_NONE),
                                     m, mlen));
        freeReplyObject(tu_redis_cmd(r, "ZADD %s -inf end 5 %b",
                                     tu_key_gen(&cfg, FEED_FAM_FEED, UID, "", old), m, mlen));
    }
    freeReplyObject(tu_redis_cmd(r, "SET hz:fence 0000000000000000000000000000000000000000"));

    tu_config(&cfg);
    is_int(cfg.redis_restart_fence, 1, "feed_config_init turns the restart fence on");
    is_int(cfg.redis_wait_replicas, 0, "  and leaves WAIT off");
    cfg.key_prefix = "hz";
    cfg.redis_restart_fence = 0;
    f = tu_open(&cfg);
    ok(!tu_walk_equals_sql(f, pg, UID, 10, &info),
       "with the fence turned off the stale copy is served (%s)", info.why);
    feed_close(f);

    tu_config(&cfg);                /* the default: the fence on */
    cfg.key_prefix = "hz";
    f = tu_open(&cfg);
    ok(tu_walk_equals_sql(f, pg, UID, 10, &info), "with it the walk equals SQL (%s)", info.why);
    ok(tu_walk_equals_sql(f, pg, UID, 10, &info) &&
       info.sources[FEED_SOURCE_CACHE] == (int)info.pages,
       "  and the next walk comes from the new copy (%s)", info.why);
    feed_stats_get(f, &st);
    is_int(st.fence_flushes, 1, "one flush");
    is_int(st.fence_sweeps, 0, "  served while the sweep of the old keys is under way");
    tu_settle(f);                   /* the old copies are swept in the background */
    is_int(count_keys(r, "hz:{1*"), 0, "every hz:* key of the old data set is gone");
    is_int(count_keys(r, "hz:3:*"), 1, "  the old generations' copies too: the new copy is left");
    is_int(count_keys(r, "hzz:*"), KEYS, "keys of another prefix are untouched");
    /* The fence names the data set: "<run_id>:<master_replid>". */
    rep = tu_redis_cmd(r, "INFO server");
    if ((p = strstr(rep->str, "run_id:")) != NULL)
        snprintf(run_id, sizeof run_id, "%.40s:", p + 7);
    freeReplyObject(rep);
    rep = tu_redis_cmd(r, "INFO replication");
    if ((p = strstr(rep->str, "master_replid:")) != NULL)
        snprintf(run_id + strlen(run_id), sizeof run_id - strlen(run_id), "%.40s", p + 14);
    freeReplyObject(rep);
    rep = tu_redis_cmd(r, "GET hz:fence");
    is_str(rep->type == REDIS_REPLY_STRING ? rep->str : "", run_id,
           "the fence names the live server and its data set (run_id:master_replid)");
    freeReplyObject(rep);

    g = tu_open(&cfg);
    ok(tu_walk_equals_sql(g, pg, UID, 10, &info), "a second handle walks right");
    feed_stats_get(g, &st);
    is_int(st.fence_flushes, 0, "and flushes nothing: the fence matches");
    ok(st.cache_pages > 0, "its pages come from the cache");
    feed_close(g);
    feed_close(f);
}

int main(void)
{
    redisContext *r;
    char list[64];

    pg = tu_begin(&r);
    config_checks();
    info_ids();
    no_sentinel("127.0.0.1:1,127.0.0.1:2", "no Sentinel answers", "no Sentinel named");
    snprintf(list, sizeof list, "127.0.0.1:%s", getenv("FEED_REDIS_PORT"));
    no_sentinel(list, "a plain Redis as the Sentinel", "no Sentinel named");
    fence(r);
    redisFree(r);
    PQfinish(pg);
    return tap_done();
}
