/* t_invalidate.c -- feed_invalidate_many and feed_invalidate_all, what
 * feedcache-sync applies: exactly the named feeds (copies and leases) go,
 * nothing else; a prefix with glob characters matches only itself; bad
 * arguments; and a read after the drop rebuilds from SQL. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tap.h"
#include "testutil.h"

static long long exists(redisContext *r, const char *key)
{
    redisReply *rep = tu_redis_cmd(r, "EXISTS %s", key);
    long long n = rep->integer;

    freeReplyObject(rep);
    return n;
}

static void set(redisContext *r, const char *key)
{
    freeReplyObject(tu_redis_cmd(r, "SET %s x", key));
}

static void servers(const char *what)
{
    char cmd[1024];
    const char *bin = getenv("FEED_SERVERS"), *dir = getenv("FEED_SERVERS_DIR");

    snprintf(cmd, sizeof cmd, "%s %s %s >/dev/null", bin ? bin : "tools/servers.sh", what,
             dir ? dir : "/tmp");
    if (system(cmd) != 0)
        tap_bail("servers.sh failed");
}

static int64_t score_of(size_t i) { return 100 + (int64_t)i; }
static int64_t id_of(size_t i) { return (int64_t)i + 1; }

int main(void)
{
    redisContext *r;
    PGconn *pg = tu_begin(&r);
    feed_config cfg;
    feed *f, *g;
    int64_t uids[3] = { 1, 3, 3 };
    uint64_t dropped = 99;

    tu_config(&cfg);
    f = tu_open(&cfg);
    for (int64_t uid = 1; uid <= 4; uid++) {
        feed_result res;
        tu_insert_rows(pg, uid, 5, score_of, id_of);
        is_int(feed_page(f, uid, FEED_FIRST, 0, 2, &res), FEED_OK, "feed %lld cached", (long long)uid);
        feed_result_free(&res);
    }
    set(r, "feed:2:{1}:lease");
    set(r, "feed:2:{2}:lease");

    is_int(feed_invalidate_many(f, uids, 3), FEED_OK, "feed_invalidate_many of 1, 3, 3");
    ok(!exists(r, "feed:2:{1}") && !exists(r, "feed:2:{1}:lease") && !exists(r, "feed:2:{3}"),
       "feeds 1 and 3 dropped, with the lease");
    ok(exists(r, "feed:2:{2}") && exists(r, "feed:2:{2}:lease") && exists(r, "feed:2:{4}"),
       "feeds 2 and 4 (and 2's lease) untouched");
    is_int(feed_invalidate_many(f, uids, 3), FEED_OK, "again: idempotent");
    is_int(feed_invalidate_many(f, NULL, 0), FEED_OK, "n = 0 is a no-op");
    is_int(feed_invalidate_many(f, NULL, 2), FEED_EINVAL, "uids NULL with n > 0: FEED_EINVAL");
    is_int(feed_invalidate_many(NULL, uids, 1), FEED_EINVAL, "f NULL: FEED_EINVAL");

    tu_insert(pg, 1, 999, 77);   /* no hook: the drop is what lets a read see it */
    tu_walk_info info;
    ok(tu_walk_equals_sql(f, pg, 1, 3, &info), "after the drop a walk rebuilds from SQL");

    /* feed_invalidate_all: only this prefix, its copies and leases. */
    set(r, "feedx:2:{1}");
    set(r, "other:2:{1}");
    set(r, "feed:2:{5}:lease");
    is_int(feed_invalidate_all(f, &dropped), FEED_OK, "feed_invalidate_all");
    ok(!exists(r, "feed:2:{1}") && !exists(r, "feed:2:{2}") && !exists(r, "feed:2:{2}:lease") &&
       !exists(r, "feed:2:{4}") && !exists(r, "feed:2:{5}:lease"), "every copy and lease of prefix feed gone");
    ok(exists(r, "feedx:2:{1}") && exists(r, "other:2:{1}"), "keys of other prefixes kept");
    ok(dropped >= 4, "dropped counts the keys removed (%llu)", (unsigned long long)dropped);

    /* A prefix with glob characters matches itself only. */
    cfg.key_prefix = "f*";
    g = tu_open(&cfg);
    set(r, "f*:2:{1}");
    set(r, "fa:2:{1}");
    is_int(feed_invalidate_all(g, NULL), FEED_OK, "feed_invalidate_all with prefix f*");
    ok(!exists(r, "f*:2:{1}") && exists(r, "fa:2:{1}") && exists(r, "feedx:2:{1}"),
       "prefix f* drops f*:2:{1} only, not fa:2:{1} or feedx:2:{1}");
    is_int(feed_invalidate_all(NULL, NULL), FEED_EINVAL, "f NULL: FEED_EINVAL");

    /* Redis frozen: a first call times out and drops the connection; the
     * next one, before retry_ms, is not even sent: it fails, and its feeds
     * go on the repair list, so the first call that reaches Redis again
     * drops them. */
    {
        int64_t seven = 7, nine = 9;
        feed_result res;
        cfg.key_prefix = "feed";
        cfg.retry_ms = 500;
        feed *h = tu_open(&cfg);
        tu_insert_rows(pg, 7, 5, score_of, id_of);
        is_int(feed_page(h, 7, FEED_FIRST, 0, 2, &res), FEED_OK, "feed 7 cached");
        feed_result_free(&res);
        servers("redis-freeze");
        is_int(feed_invalidate_many(h, &nine, 1), FEED_EREDIS, "Redis frozen: FEED_EREDIS");
        is_int(feed_invalidate_many(h, &seven, 1), FEED_EREDIS, "... and at once for the next call");
        servers("redis-thaw");
        ok(exists(r, "feed:2:{7}"), "the copy of feed 7 is still there after the thaw");
        nanosleep(&(struct timespec){ 0, 600 * 1000000L }, NULL);   /* retry_ms */
        is_int(feed_page(h, 8, FEED_FIRST, 0, 2, &res), FEED_OK, "the next call reaches Redis");
        feed_result_free(&res);
        ok(!exists(r, "feed:2:{7}"), "... and drops the copy the failed call could not");
        feed_close(h);
    }

    feed_close(g);
    feed_close(f);
    redisFree(r);
    PQfinish(pg);
    return tap_done();
}
