/* t_defaults.c -- failovers and restarts under load with the DEFAULT
 * configuration: feed_config_init and the servers' addresses, nothing
 * else (the guarantee table of docs/ha.md, row "defaults").
 *
 * Writer threads insert and delete rows (SQL, then the hook; each feed has
 * one writer, so a row's hooks come in commit order) and reader threads
 * walk the feeds, so that copies are cached and written all along. Then:
 *
 *   - restart from an older snapshot, one Redis: SAVE, more writes and
 *     hooks, the workers paused, Redis SIGKILLed and started again (it
 *     loads the snapshot, older than the hooks), the workers resumed;
 *   - SENTINEL FAILOVER (1 primary + 1 replica, 3 Sentinels), the load
 *     running until the Sentinels have turned the old primary into a
 *     replica and its clients have moved: the hooks the old primary took
 *     after the promotion are lost with its data set;
 *   - SIGKILL of the Sentinel primary, the load running until the killed
 *     node is back as the replica.
 *
 * After each, the workers paused, a new handle walks every feed: a feed is
 * stale if its walk differs from SQL. Prints the counts; the defaults must
 * leave none. The first two run first with the fence turned off
 * (redis_restart_fence = 0), the control, which must leave stale feeds:
 * if it does not, the run no longer produces the loss the fence is for and
 * the test fails. The SIGKILL has no such control here: on loopback the
 * replica has every write the primary acknowledged when it dies, so it
 * loses nothing with the fence off either (the SIGKILL loss is made
 * deterministic, replica cut off first, in t_ha_failover). (Cluster
 * failover and primary kill: t_cluster and t_ha_cluster.) */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "testutil.h"
#include "fault.h"
#include "ha.h"

#define FEEDS    60
#define WRITERS  2
#define READERS  2
#define BASE     25          /* rows per feed before the load */
#define LIMIT    10
#define UID0     8300

static feed_config cfg;
static atomic_int  stop, pause_req, paused;
static atomic_long hooks, hooks_failed, walks;
static atomic_llong issued[FEEDS];

static int64_t base_score(size_t i) { return (int64_t)i * 10; }
static int64_t base_id(size_t i) { return (int64_t)i + 1; }

static void pause_point(void)
{
    if (!atomic_load(&pause_req))
        return;
    atomic_fetch_add(&paused, 1);
    while (atomic_load(&pause_req) && !atomic_load(&stop))
        fault_sleep_ms(5);
    atomic_fetch_sub(&paused, 1);
}

static void *writer(void *arg)
{
    int w = (int)(intptr_t)arg;
    uint64_t rng = 77 + (uint64_t)w;
    feed *f = tu_open(&cfg);
    PGconn *pg = tu_pg();

    while (!atomic_load(&stop)) {
        int u = w + WRITERS * (int)(tu_rand(&rng) % (FEEDS / WRITERS));
        int64_t uid = UID0 + u;
        int rc;

        pause_point();
        if (tu_rand(&rng) % 5 == 0) {       /* delete the feed's newest row */
            long long id = tu_sql_int(pg, "SELECT coalesce(max(id), -1) FROM feed_entry"
                                          " WHERE uid = %lld", (long long)uid);
            if (id < 0)
                continue;
            tu_sql(pg, "DELETE FROM feed_entry WHERE uid = %lld AND id = %lld",
                   (long long)uid, id);
            rc = feed_on_delete(f, uid, id);
        } else {
            int64_t id = atomic_fetch_add(&issued[u], 1) + 1;
            tu_insert(pg, uid, id * 10, id);
            rc = feed_on_insert(f, uid, id * 10, id);
        }
        atomic_fetch_add(&hooks, 1);
        if (rc != FEED_OK)
            atomic_fetch_add(&hooks_failed, 1);     /* remembered: the library repairs it */
        fault_sleep_ms(1);
    }
    PQfinish(pg);
    feed_close(f);
    return NULL;
}

static void *reader(void *arg)
{
    uint64_t rng = 991 + (uint64_t)(intptr_t)arg;
    feed *f = tu_open(&cfg);

    while (!atomic_load(&stop)) {
        feed_item *items = NULL;
        size_t n = 0;
        tu_walk_info info;

        pause_point();
        tu_walk(f, UID0 + (int64_t)(tu_rand(&rng) % FEEDS), LIMIT, &items, &n, &info);
        free(items);
        atomic_fetch_add(&walks, 1);
    }
    feed_close(f);
    return NULL;
}

static pthread_t threads[WRITERS + READERS];

static void start_load(PGconn *pg)
{
    atomic_store(&stop, 0);
    atomic_store(&pause_req, 0);
    atomic_store(&hooks, 0);        /* the counts stale_feeds prints are this run's */
    atomic_store(&hooks_failed, 0);
    atomic_store(&walks, 0);
    for (int u = 0; u < FEEDS; u++) {
        tu_sql(pg, "DELETE FROM feed_entry WHERE uid = %d", UID0 + u);
        tu_insert_rows(pg, UID0 + u, BASE, base_score, base_id);
        atomic_store(&issued[u], 1000);
    }
    for (int i = 0; i < WRITERS + READERS; i++)
        if (pthread_create(&threads[i], NULL, i < WRITERS ? writer : reader,
                           (void *)(intptr_t)(i < WRITERS ? i : i - WRITERS)) != 0)
            tap_bail("pthread_create"), exit(255);
}

static void pause_load(void)
{
    atomic_store(&pause_req, 1);
    while (atomic_load(&paused) < WRITERS + READERS)
        fault_sleep_ms(5);
}

static void resume_load(void)
{
    atomic_store(&pause_req, 0);
}

static void stop_load(void)
{
    atomic_store(&stop, 1);
    atomic_store(&pause_req, 0);
    for (int i = 0; i < WRITERS + READERS; i++)
        pthread_join(threads[i], NULL);
}

/* Workers paused or stopped: feeds whose walk by a new handle differs from
 * SQL, once the handle reaches Redis again. */
static int stale_feeds(PGconn *pg, const char *after)
{
    feed *f = tu_open(&cfg);
    int stale = 0, cached = 0;

    ok(tu_reach_redis(f, UID0, LIMIT, 20000), "%s: a new handle reaches Redis", after);
    for (int u = 0; u < FEEDS; u++) {
        tu_walk_info info;
        if (!tu_walk_equals_sql(f, pg, UID0 + u, LIMIT, &info)) {
            if (stale++ < 3)
                tap_diag("%s: feed %d: %s", after, UID0 + u, info.why);
        } else if (info.sources[FEED_SOURCE_CACHE] > 0) {
            cached++;
        }
    }
    tap_diag("%s: %d of %d feeds stale, %d walked from the cache; %ld hooks (%ld failed), "
             "%ld walks under load", after, stale, FEEDS, cached, atomic_load(&hooks),
             atomic_load(&hooks_failed), atomic_load(&walks));
    feed_close(f);
    return stale;
}

/* SAVE, hooks after it, a SIGKILL and a restart that loads the snapshot. */
static int restart_from_snapshot(PGconn *pg, int fence)
{
    redisContext *r = tu_redis();
    int stale;

    tu_config(&cfg);
    if (!fence)
        cfg.redis_restart_fence = 0;
    freeReplyObject(tu_redis_cmd(r, "FLUSHALL"));
    start_load(pg);
    fault_sleep_ms(1200);
    freeReplyObject(tu_redis_cmd(r, "SAVE"));   /* the older data the restart loads */
    redisFree(r);
    fault_sleep_ms(1200);
    pause_load();
    fault_inject("redis-stop");
    fault_inject("redis-start");
    resume_load();
    fault_sleep_ms(1000);
    stop_load();
    stale = stale_feeds(pg, fence ? "restart from a snapshot, defaults"
                                  : "restart from a snapshot, fence off");
    r = tu_redis();
    freeReplyObject(tu_redis_cmd(r, "FLUSHALL"));
    freeReplyObject(tu_redis_cmd(r, "SAVE"));   /* later restarts load nothing of this */
    redisFree(r);
    return stale;
}

/* The role a node reports first ("master", "slave"), or "" if it does not
 * answer. */
static void role_of(int port, char *out, size_t cap)
{
    struct timeval tv = { 1, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    redisReply *r = c && !c->err ? redisCommand(c, "ROLE") : NULL;

    snprintf(out, cap, "%s", r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
             r->element[0]->type == REDIS_REPLY_STRING ? r->element[0]->str : "");
    freeReplyObject(r);
    if (c)
        redisFree(c);
}

/* Every copy on the current Sentinel primary dropped: a run starts from
 * no copy, whatever the run before it left. */
static void ha_flush(void)
{
    redisContext *c = ha_node(ha_port("ha-primary"));

    freeReplyObject(tu_redis_cmd(c, "FLUSHALL"));
    redisFree(c);
}

/* SENTINEL FAILOVER under load: the number of feeds left stale. */
static int sentinel_failover(PGconn *pg, const char *what)
{
    int old, fresh, stale;
    char role[32] = "";
    double end;

    old = ha_port("ha-primary");
    /* servers.sh gives the Sentinels 10 s; on a loaded machine (the :async
     * run beside other work) they took longer once: wait up to 30 s in all. */
    fresh = fault_srv("ha-failover", 0) == 0 ? ha_port("ha-primary")
                                             : ha_wait_new_primary(old, 20000);
    ok(fresh > 0 && fresh != old, "%s under load: %d -> %d", what, old, fresh);
    /* The old primary stays a writable primary until the Sentinels turn it
     * into a replica (and close its clients): keep the load on until then. */
    end = fault_now_ms() + 30000;
    while (fault_now_ms() < end && strcmp(role, "slave") != 0) {
        fault_sleep_ms(200);
        role_of(old, role, sizeof role);
    }
    ok(strcmp(role, "slave") == 0, "the old primary %d became a replica under load", old);
    fault_sleep_ms(1500);
    pause_load();
    stale = stale_feeds(pg, what);
    resume_load();
    return stale;
}

static void sentinel_kill(PGconn *pg)
{
    int old = ha_port("ha-primary"), fresh;

    fault_inject("ha-kill-primary");
    fresh = ha_wait_new_primary(old, 30000);
    ok(fresh > 0, "SIGKILL of the primary under load: the Sentinels promoted %d", fresh);
    fault_sleep_ms(1500);
    ha_start();                     /* the killed node comes back, as the replica */
    fault_sleep_ms(1000);
    pause_load();
    is_int(stale_feeds(pg, "SIGKILL of the Sentinel primary, defaults"), 0,
           "SIGKILL of the Sentinel primary, defaults: no feed stale");
    resume_load();
}

int main(void)
{
    PGconn *pg;
    int off, on;

    tu_plain_redis_only("t_defaults");     /* its restart-from-snapshot control */
    pg = tu_begin(NULL);

    fault_setup();
    off = restart_from_snapshot(pg, 0);
    ok(off > 0, "restart from a snapshot with the fence off: %d feeds stale (the fault bites)",
       off);
    on = restart_from_snapshot(pg, 1);
    is_int(on, 0, "restart from a snapshot, defaults: no feed stale");

    ha_start();
    ha_config(&cfg);
    cfg.redis_restart_fence = 0;    /* the control */
    ha_flush();
    start_load(pg);
    fault_sleep_ms(1500);
    off = sentinel_failover(pg, "SENTINEL FAILOVER, fence off");
    stop_load();
    ok(off > 0, "SENTINEL FAILOVER with the fence off: %d feeds stale (the fault bites)", off);

    ha_start();
    ha_config(&cfg);                /* the defaults and the Sentinels: nothing else */
    ha_flush();
    start_load(pg);
    fault_sleep_ms(1500);
    is_int(sentinel_failover(pg, "SENTINEL FAILOVER, defaults"), 0,
           "SENTINEL FAILOVER, defaults: no feed stale");
    sentinel_kill(pg);
    stop_load();
    ha_start();
    PQfinish(pg);
    return tap_done();
}
