/* t_ha_failover.c -- the failover and restart losses (docs/ha.md, "The
 * failover and restart guarantee"), reproduced on real servers, and closed:
 *
 *   - Failover: a cached feed is on the primary and its replica; the
 *     replica's link is cut (SIGSTOP, then CLIENT KILL TYPE replica on the
 *     primary, so the write cannot even sit in its socket buffer); a hook
 *     writes a new top item to the primary, which acknowledges it; the
 *     primary is SIGKILLed; the replica, thawed, is promoted by the
 *     Sentinels. Three configurations, each on its own prefix:
 *       none   redis_restart_fence = 0, redis_wait_replicas = 0: the hook
 *              returned FEED_OK and the promoted copy misses the item: a
 *              walk differs from SQL (the loss is real: the control);
 *       fence  the defaults (the fence on, WAIT off): the hook "succeeds"
 *              on the old primary, but a handle with no memory of it
 *              (another process: the repair list forgotten) walks a feed
 *              equal to SQL, because the promoted node's run_id is not the
 *              one the fence recorded;
 *       both   redis_wait_replicas = 1 as well: the hook itself reports
 *              FEED_EREDIS (WAIT: 0 of 1), and the other process's walk
 *              equals SQL.
 *   - Restart from disk, no replica: SAVE, a hook write, SIGKILL, restart
 *     (the RDB is loaded, older than the write). Without the fence the copy
 *     misses the write; with it, the walk equals SQL.
 *   - SENTINEL FAILOVER with a reader in another process: the old primary
 *     stays a primary until the Sentinels reconfigure it. A reader with
 *     WAIT (its reads checked by ROLE) walks equal to SQL; the control, a
 *     reader with the defaults, goes on serving the old primary's copy,
 *     which misses the writes made on the new one.
 */
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "testutil.h"
#include "fault.h"
#include "ha.h"

void feed__repair_forget(void);   /* lib/core/exchange.c, tests only */

#define UID   7001
#define ROWS  40
#define LIMIT 10

enum { NONE, FENCE, BOTH };

static PGconn *pg;

static int64_t score_of(size_t i) { return (int64_t)i * 10; }
static int64_t id_of(size_t i) { return (int64_t)i + 1; }

static void raw(redisContext *c, const char *cmd)
{
    redisReply *r = tu_redis_cmd(c, cmd);
    freeReplyObject(r);
}

/* The replica holds everything the primary has so far. */
static int replica_synced(int primary)
{
    redisContext *c = ha_node(primary);
    redisReply *r;
    int n;

    raw(c, "SET ha:sync 1");
    r = tu_redis_cmd(c, "WAIT 1 5000");
    n = r->type == REDIS_REPLY_INTEGER ? (int)r->integer : -1;
    freeReplyObject(r);
    redisFree(c);
    return n == 1;
}

/* The rows were just replaced behind the cache's back: drop a copy an
 * earlier run on these servers left (each test runs through both APIs).
 * Right after ha_start the replica may not be linked yet, and a guarded
 * handle's DEL fails its WAIT: try again for a while. */
static void drop_copy(feed *f)
{
    for (int tries = 0; feed_invalidate(f, UID) != FEED_OK; tries++) {
        if (tries == 100) {
            tap_diag("feed_invalidate: %s", feed_errmsg(f));
            tap_bail("feed_invalidate"), exit(255);
        }
        fault_sleep_ms(100);
    }
}

static void failover_case(int mode)
{
    const char *name = mode == BOTH ? "with the fence and WAIT" :
                       mode == FENCE ? "with the fence (the defaults)" : "without either";
    int guard = mode != NONE;
    feed_config cfg;
    feed_stats st;
    tu_walk_info info;
    feed *f, *other;
    redisContext *c;
    int primary, fresh, rc;
    char prefix[16];

    ha_start();
    snprintf(prefix, sizeof prefix, "hf%d", mode);
    ha_config(&cfg);
    cfg.key_prefix = prefix;
    cfg.redis_timeout_ms = 2000;   /* well above an answer on a loaded machine */
    cfg.retry_ms = 100;
    cfg.redis_wait_replicas = mode == BOTH ? 1 : 0;
    cfg.redis_restart_fence = guard;
    f = tu_open(&cfg);

    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = %d", UID);
    tu_insert_rows(pg, UID, ROWS, score_of, id_of);
    drop_copy(f);
    ok(tu_walk_equals_sql(f, pg, UID, LIMIT, &info) && info.sources[FEED_SOURCE_REBUILD] == 1,
       "%s: the feed is cached on the primary (%s)", name, info.why);
    primary = ha_port("ha-primary");
    ok(primary > 0 && replica_synced(primary), "%s: the replica has the cached copy", name);

    /* Cut replication: frozen, and its link closed by the primary. */
    fault_inject("ha-freeze-replica");
    c = ha_node(primary);
    raw(c, "CLIENT KILL TYPE replica");
    redisFree(c);

    tu_insert(pg, UID, 100000, 5000);
    rc = feed_on_insert(f, UID, 100000, 5000);
    feed_stats_get(f, &st);
    if (mode == BOTH)
        ok(rc == FEED_EREDIS && st.wait_failures == 1,
           "%s: the hook reports that no replica has its write (%s; %s)", name,
           feed_strerror(rc), feed_errmsg(f));
    else
        is_int(rc, FEED_OK, "%s: the primary acknowledged the hook", name);

    fault_inject("ha-kill-primary");
    fault_inject("ha-thaw-replica");
    fresh = ha_wait_new_primary(primary, 30000);
    ok(fresh > 0, "%s: the Sentinels promoted the replica (port %d -> %d)", name, primary, fresh);
    /* The killed node rejoins as the replica: with redis_wait_replicas = 1
     * nothing is served from a primary without one. */
    ha_start();

    /* Another process: knows nothing of the failed hook. */
    feed__repair_forget();
    other = tu_open(&cfg);
    ok(tu_reach_redis(other, UID, LIMIT, 10000), "%s: a new handle reaches the new primary", name);
    if (guard) {
        ok(tu_walk_equals_sql(other, pg, UID, LIMIT, &info),
           "%s: its walk equals SQL (%s)", name, info.why);
        feed_stats_get(other, &st);
        ok(st.fence_flushes == 1, "%s: it found a foreign run_id and flushed (%llu)",
           name, (unsigned long long)st.fence_flushes);
    } else {
        ok(!tu_walk_equals_sql(other, pg, UID, LIMIT, &info) &&
           info.sources[FEED_SOURCE_CACHE] > 0,
           "%s: the promoted copy misses the acknowledged write: the loss is real", name);
    }
    ok(tu_reach_redis(f, UID, LIMIT, 10000), "%s: the first handle follows the failover", name);
    if (guard)
        ok(tu_walk_equals_sql(f, pg, UID, LIMIT, &info), "%s: and walks right (%s)", name,
           info.why);
    feed_close(other);
    feed_close(f);
}

/* SENTINEL FAILOVER leaves the old primary a primary (without its
 * replica) until the Sentinels reconfigure it, about 10 s here. A writer
 * with WAIT moves to the new primary (its WAIT fails); a handle in another
 * process that only reads must not go on serving the old primary's copy,
 * which misses the writes made since. guard: the reader has WAIT (its
 * reads followed by ROLE); 0, the control: the reader has the defaults,
 * and its walk must differ from SQL, or this case shows nothing. */
static void reader_case(int guard)
{
    const char *name = guard ? "reader with WAIT" : "reader with the defaults";
    feed_config cfg;
    tu_walk_info info;
    feed *reader, *writer;
    int same;

    ha_start();
    ha_config(&cfg);
    cfg.key_prefix = guard ? "hm1" : "hm0";
    cfg.redis_timeout_ms = 2000;   /* well above an answer on a loaded machine */
    cfg.retry_ms = 100;
    cfg.redis_wait_replicas = 1;
    cfg.redis_restart_fence = 1;
    writer = tu_open(&cfg);
    cfg.redis_wait_replicas = guard ? 1 : 0;
    reader = tu_open(&cfg);
    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = %d", UID);
    tu_insert_rows(pg, UID, ROWS, score_of, id_of);
    drop_copy(reader);
    ok(tu_walk_equals_sql(reader, pg, UID, LIMIT, &info) &&
       info.sources[FEED_SOURCE_REBUILD] == 1, "%s: the feed is cached (%s)", name, info.why);
    fault_inject("ha-failover");
    for (int k = 1; k <= 3; k++) {        /* the first may still land on the old one */
        tu_insert(pg, UID, 100000 + k, 5000 + k);
        feed_on_insert(writer, UID, 100000 + k, 5000 + k);
        fault_sleep_ms(150);              /* > retry_ms: the writer reconnects */
    }
    feed__repair_forget(); /* the reader is another process */
    same = tu_walk_equals_sql(reader, pg, UID, LIMIT, &info);
    if (guard)
        ok(same, "%s: its walk equals SQL after the manual failover (%s)", name, info.why);
    else
        ok(!same && info.sources[FEED_SOURCE_CACHE] > 0, "%s: its walk serves the old"
           " primary's copy, which misses the new primary's writes: the loss is real (%s)",
           name, info.why);
    feed_close(writer);
    feed_close(reader);
    ha_start();                           /* the old primary is a replica again */
}

static void restart_case(int guard)
{
    const char *name = guard ? "restart with the fence" : "restart without it";
    feed_config cfg;
    tu_walk_info info;
    redisContext *r;
    feed *f;
    char prefix[16];
    int rc;

    snprintf(prefix, sizeof prefix, "hr%d", guard);
    tu_config(&cfg);
    cfg.key_prefix = prefix;
    cfg.redis_timeout_ms = 2000;   /* well above an answer on a loaded machine */
    cfg.retry_ms = 100;
    cfg.redis_restart_fence = guard;
    f = tu_open(&cfg);

    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = %d", UID);
    tu_insert_rows(pg, UID, ROWS, score_of, id_of);
    drop_copy(f);
    ok(tu_walk_equals_sql(f, pg, UID, LIMIT, &info), "%s: cached (%s)", name, info.why);
    r = tu_redis();
    raw(r, "SAVE");                 /* the snapshot the restart will load */
    redisFree(r);
    tu_insert(pg, UID, 100000, 5000);
    rc = feed_on_insert(f, UID, 100000, 5000);
    is_int(rc, FEED_OK, "%s: the hook ran after the snapshot", name);
    fault_inject("redis-stop");
    fault_inject("redis-start");
    feed__repair_forget();
    ok(tu_reach_redis(f, UID, LIMIT, 10000), "%s: the handle reconnects", name);
    if (guard)
        ok(tu_walk_equals_sql(f, pg, UID, LIMIT, &info), "%s: the walk equals SQL (%s)",
           name, info.why);
    else
        ok(!tu_walk_equals_sql(f, pg, UID, LIMIT, &info),
           "%s: the reloaded copy misses the write: the loss is real", name);
    feed_close(f);
    r = tu_redis();
    raw(r, "FLUSHALL");
    raw(r, "SAVE");                 /* later restarts load nothing of this test */
    redisFree(r);
}

int main(void)
{
    pg = tu_begin(NULL);
    fault_setup();
    restart_case(0);
    restart_case(1);
    failover_case(NONE);
    failover_case(FENCE);
    failover_case(BOTH);
    reader_case(0);
    reader_case(1);
    PQfinish(pg);
    return tap_done();
}
