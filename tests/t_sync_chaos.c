/* t_sync_chaos.c -- feedcache-sync under faults, against real servers:
 *   - Redis frozen for seconds while writes go on: sync retries, then
 *     catches up (nothing confirmed meanwhile);
 *   - PostgreSQL restarted under sync: it reconnects and resumes;
 *   - hooks and sync together with random delays on both sides, writers
 *     that lose one hook in ten, readers rebuilding, and sync SIGKILLed and
 *     restarted again and again: at the end every cached copy is an exact
 *     prefix of its SQL feed (read straight from Redis) and every walk
 *     equals SQL. 0 mismatches over thousands of operations.
 * FEED_SYNC_SECONDS sets the length of the last part (default 8; make
 * soak-sync runs it for minutes). */
#include <pthread.h>

#include "synctest.h"

#define SLOT     "t_sync_chaos"
#define FEEDS    24
#define WRITERS  3
#define READERS  2
#define MAX_LEN  20

static feed_config cfg;
static volatile int running = 1;
static const char *const sync_flags[] = { "--lease-ms", "500", "--max-len", "20", NULL };

static int64_t id_of(size_t i) { return 1000000 + (int64_t)i; }

static void servers(const char *what)
{
    char cmd[1024];

    snprintf(cmd, sizeof cmd, "%s %s %s >/dev/null", st_env("FEED_SERVERS", "tools/servers.sh"),
             what, st_env("FEED_SERVERS_DIR", "/tmp"));
    if (system(cmd) != 0)
        tap_bail("servers.sh failed");
}

static void warm_all(feed *f)
{
    for (int64_t uid = 1; uid <= FEEDS; uid++) {
        feed_result res;
        if (feed_page(f, uid, FEED_FIRST, 0, 5, &res) == FEED_OK)
            feed_result_free(&res);
    }
}

/* Every copy a prefix (Redis read directly) and every walk equal to SQL;
 * returns the number of feeds that fail either. */
static int mismatches(feed *f, PGconn *pg, redisContext *r)
{
    int bad = 0;

    for (int64_t uid = 1; uid <= FEEDS; uid++) {
        tu_walk_info info;
        int good = st_copy_is_prefix(r, pg, uid);
        good &= tu_walk_equals_sql(f, pg, uid, 7, &info);
        bad += !good;
    }
    return bad;
}

static int cached_feeds(redisContext *r)
{
    int n = 0;

    for (int64_t uid = 1; uid <= FEEDS; uid++)
        n += tu_redis_int(r, "EXISTS %s", tu_key(uid, "")) == 1;
    return n;
}

/* On a cluster (t_sync_chaos:cluster) the pid of a live primary, to freeze
 * with SIGSTOP: one node of three stops answering, while sync's batches name
 * feeds on every node. */
static pid_t cluster_primary_pid(void)
{
    char line[1024], role[32];
    int port = 0, p;
    FILE *in;

    snprintf(line, sizeof line, "'%s' cluster-ports '%s'", st_env("FEED_SERVERS", "tools/servers.sh"),
             st_env("FEED_SERVERS_DIR", "/tmp"));
    if (!(in = popen(line, "r")))
        tap_bail("servers.sh cluster-ports failed");
    while (fgets(line, sizeof line, in))
        if (!port && sscanf(line, "%d %31s", &p, role) == 2 && strcmp(role, "master") == 0)
            port = p;
    pclose(in);
    snprintf(line, sizeof line, "%s/cluster/%d/redis.pid", st_env("FEED_SERVERS_DIR", "/tmp"), port);
    if (!port || !(in = fopen(line, "r")) || fscanf(in, "%d", &p) != 1)
        tap_bail("no primary's pid");
    fclose(in);
    return (pid_t)p;
}

/* Freeze Redis (one primary of a cluster) while every feed is written:
 * nothing is confirmed until it answers again. A cluster node stays frozen
 * well below cluster-node-timeout (2 s in tools/servers.sh): a failover
 * would be another test (t_ha_cluster's). */
static void redis_frozen(feed *f, PGconn *pg, redisContext *r)
{
    int cluster = tu_cluster(), writes = cluster ? FEEDS : 40;
    long pause_ms = cluster ? 40 : 100;
    pid_t node = cluster ? cluster_primary_pid() : 0;
    long long retries;
    char lsn[32];

    ok(st_caught_up(pg, SLOT, 30), "caught up before the freeze");
    st_sleep_ms(1100);   /* one metrics period */
    retries = st_metric(SLOT, "feedcache_sync_redis_retries_total");
    ok(retries >= 0, "the metrics file is there");
    warm_all(f);
    is_int(cached_feeds(r), FEEDS, "every feed is cached before the freeze");
    if (cluster)
        kill(node, SIGSTOP);
    else
        servers("redis-freeze");
    for (int i = 0; i < writes; i++) {  /* 4 s of writes while Redis is frozen (1 s on a cluster) */
        tu_sql(pg, "INSERT INTO feed_entry VALUES (%d, %d, %d)", 1 + i % FEEDS, 90000 + i, 500 + i);
        st_sleep_ms(pause_ms);
    }
    st_wal_now(pg, lsn, sizeof lsn);
    ok(st_wait_confirmed(pg, SLOT, lsn, cluster ? 0.3 : 1) < 0,
       "Redis frozen%s: the writes are not confirmed", cluster ? " (one primary)" : "");
    if (cluster)
        kill(node, SIGCONT);
    else
        servers("redis-thaw");
    ok(st_wait_confirmed(pg, SLOT, lsn, 30) >= 0, "Redis back: sync catches up");
    ok(cached_feeds(r) < FEEDS, "the copies of the feeds written meanwhile are dropped");
    st_sleep_ms(1100);   /* one metrics period */
    ok(st_metric(SLOT, "feedcache_sync_redis_retries_total") > retries,
       "the metrics count the Redis retries");
    is_int(mismatches(f, pg, r), 0, "after the freeze: 0 feeds wrong");
}

static void pg_restarted(feed *f, PGconn *pg, redisContext *r)
{
    warm_all(f);
    servers("pg-stop");
    st_sleep_ms(1500);
    servers("pg-start");
    PQreset(pg);
    if (PQstatus(pg) != CONNECTION_OK)
        tap_bail("cannot reconnect to PostgreSQL");
    warm_all(f);
    for (int i = 0; i < 20; i++)
        tu_sql(pg, "INSERT INTO feed_entry VALUES (%d, %d, %d)", 1 + i % FEEDS, 95000 + i, 700 + i);
    ok(st_caught_up(pg, SLOT, 60), "PostgreSQL restarted under sync: it resumes");
    is_int(mismatches(f, pg, r), 0, "after the restart: 0 feeds wrong");
    st_sleep_ms(1100);
    ok(st_metric(SLOT, "feedcache_sync_pg_reconnects_total") > 0,
       "the metrics count the reconnects");
}

/* ---- hooks and sync together ---- */

typedef struct row { int64_t uid, score; int live; } row;

typedef struct writer {
    int       index;
    uint64_t  seed;
    long      ops, hooks_lost;
    row       rows[64];      /* this writer's rows: ids index * 64 + k + 1 */
} writer;

static void delay(uint64_t *seed, int max_us)
{
    struct timespec ts = { 0, (long)(tu_rand(seed) % (uint64_t)(max_us + 1)) * 1000L };
    nanosleep(&ts, NULL);
}

/* One writer owns its rows: a row's hooks run in its commit order, as when
 * every write of a row comes from one request at a time. Between COMMIT
 * and hook a random delay; one hook in ten is never called (a writer that
 * died, or psql). */
static void *write_loop(void *arg)
{
    writer *w = arg;
    PGconn *pg = tu_pg();
    feed *f = tu_open(&cfg);

    while (running) {
        int k = (int)(tu_rand(&w->seed) % 64), op = (int)(tu_rand(&w->seed) % 4);
        int64_t id = w->index * 64 + k + 1, uid = 1 + (int64_t)(tu_rand(&w->seed) % FEEDS);
        int64_t score = 1000 + (int64_t)(tu_rand(&w->seed) % 600);
        row *r = &w->rows[k], old = *r;
        int lose = tu_rand(&w->seed) % 10 == 0;

        if (!r->live) {
            tu_sql(pg, "INSERT INTO feed_entry VALUES (%lld, %lld, %lld)", (long long)uid,
                   (long long)score, (long long)id);
            *r = (row){ uid, score, 1 };
        } else if (op == 0) {
            tu_sql(pg, "DELETE FROM feed_entry WHERE uid = %lld AND id = %lld",
                   (long long)r->uid, (long long)id);
            r->live = 0;
        } else if (op == 1) {
            tu_sql(pg, "UPDATE feed_entry SET uid = %lld, score = %lld WHERE uid = %lld AND id = %lld",
                   (long long)uid, (long long)score, (long long)r->uid, (long long)id);
            *r = (row){ uid, score, 1 };
        } else {
            tu_sql(pg, "UPDATE feed_entry SET score = %lld WHERE uid = %lld AND id = %lld",
                   (long long)score, (long long)r->uid, (long long)id);
            r->score = score;
        }
        w->ops++;
        delay(&w->seed, 2000);
        if (lose) {
            w->hooks_lost++;
            continue;
        }
        if (old.live && (!r->live || old.uid != r->uid))
            feed_on_delete(f, old.uid, id);
        if (r->live)
            feed_on_insert(f, r->uid, r->score, id);
    }
    feed_close(f);
    PQfinish(pg);
    return NULL;
}

static void *read_loop(void *arg)
{
    uint64_t seed = (uint64_t)(uintptr_t)arg;
    feed *f = tu_open(&cfg);

    while (running) {
        feed_item *items = NULL;
        size_t n = 0;
        tu_walk_info info;
        tu_walk(f, 1 + (int64_t)(tu_rand(&seed) % FEEDS), 1 + tu_rand(&seed) % 9, &items, &n, &info);
        free(items);
        delay(&seed, 3000);
    }
    feed_close(f);
    return NULL;
}

static void together(feed *f, PGconn *pg, redisContext *r, pid_t *pid)
{
    double seconds = atof(st_env("FEED_SYNC_SECONDS", "8")), start = st_now();
    pthread_t wt[WRITERS], rt[READERS];
    static writer w[WRITERS];
    long ops = 0, lost = 0;
    int kills = 0;

    for (int i = 0; i < WRITERS; i++) {
        w[i].index = i;
        w[i].seed = 1000 + (uint64_t)i;
        pthread_create(&wt[i], NULL, write_loop, &w[i]);
    }
    for (int i = 0; i < READERS; i++)
        pthread_create(&rt[i], NULL, read_loop, (void *)(uintptr_t)(77 + i));
    /* First half: sync applies late (random delays). Second half: also
     * SIGKILLed mid-stream and restarted, again and again. */
    while (st_now() - start < seconds) {
        st_sleep_ms(300 + (long)(rand() % 500));
        if (st_now() - start > seconds / 2) {
            st_sync_stop(*pid, SIGKILL);
            kills++;
            *pid = st_sync_start(SLOT, sync_flags);
        }
    }
    running = 0;
    for (int i = 0; i < WRITERS; i++) {
        pthread_join(wt[i], NULL);
        ops += w[i].ops;
        lost += w[i].hooks_lost;
    }
    for (int i = 0; i < READERS; i++)
        pthread_join(rt[i], NULL);
    tap_diag("hooks + sync: %ld writes (%ld hooks never called), %d SIGKILLs of sync, %.0f s",
             ops, lost, kills, seconds);
    /* Under valgrind (FEED_TEST_SLOW) the writers are far slower. */
    ok(ops >= (getenv("FEED_TEST_SLOW") ? 100 : 1000), "thousands of writes were made (%ld)", ops);
    ok(kills >= 2, "sync was SIGKILLed mid-stream and restarted (%d times)", kills);
    ok(st_caught_up(pg, SLOT, 60), "sync catches up after the last restart");
    is_int(mismatches(f, pg, r), 0, "hooks and sync in any order: 0 feeds wrong");
}

int main(void)
{
    redisContext *r;
    PGconn *pg = tu_begin(&r);
    feed *f;
    pid_t pid;

    tu_config(&cfg);
    cfg.lease_ms = 500;
    cfg.max_len = MAX_LEN;
    cfg.retry_ms = 100;
    f = tu_open(&cfg);
    st_drop_slot(pg, SLOT);
    for (int64_t uid = 1; uid <= FEEDS; uid++)
        tu_insert_rows(pg, uid, 30, tu_score_from1000, id_of);

    setenv("FEEDCACHE_SYNC_TEST_DELAY_MS", "20", 1);
    pid = st_sync_start(SLOT, sync_flags);
    ok(st_wait_following(SLOT, 30) && st_caught_up(pg, SLOT, 30), "sync runs");
    redis_frozen(f, pg, r);
    pg_restarted(f, pg, r);
    PQreset(pg);
    together(f, pg, r, &pid);

    is_int(st_sync_stop(pid, SIGTERM), 0, "SIGTERM: exit 0");
    st_drop_slot(pg, SLOT);
    feed_close(f);
    redisFree(r);
    PQfinish(pg);
    return tap_done();
}
