/* t_stress.c -- concurrency: many threads, each with its own handle, on a
 * few shared feeds, against the real servers.
 *
 *   writers      insert, change scores and delete rows in SQL (each writer
 *                owns its ids, so the hooks of one row come in commit order)
 *                and call the hooks after each commit;
 *   readers      walk whole feeds with random page sizes and check every
 *                page: strictly ordered, no id twice, strictly after its
 *                cursor, has_more and the next cursor consistent;
 *   maintainer   feed_reload, feed_invalidate, forced expiries and now and
 *                then SCRIPT FLUSH; the feed TTL is 2 s, so keys also expire
 *                by themselves during the run.
 *
 * Phase 1 runs with both servers healthy; phase 2 adds Redis faults (freezes
 * and kills) while everything runs. After each phase, with the writers
 * stopped: the Redis contents obey the invariant (docs/internals.md: the
 * cached set is an exact prefix of the feed, the whole feed when the end
 * marker is there), and every feed walked through the library equals SQL
 * exactly.
 *
 * Then the stampede: many handles miss the same cold feed at once, wave
 * after wave; leases must keep it to one rebuild, and one SQL query, a wave.
 *
 * Env: FEED_STRESS_SECONDS (per phase, default 4), FEED_STRESS_WRITERS (2),
 * FEED_STRESS_READERS (3), FEED_STRESS_WAVES (12), FEED_STRESS_FAULTS
 * (1: run phase 2), FEED_STRESS_SEED. `make soak` runs it long. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "tap.h"
#include "testutil.h"
#include "fault.h"

#define FEEDS     4
#define FIRST_UID 800
#define MAX_LEN   40
#define MAX_PAGE  25
#define MAX_WRITERS 16

static const int pool_size[FEEDS] = { 200, 200, 30, 10 };   /* ids per writer per feed */

static int writers_n = 2, readers_n = 3, waves = 12;
static double seconds = 4;
static uint64_t seed = 20240501;
static atomic_int stop, stop_faults;
static atomic_int faulting;       /* phase 2: Redis may be down */

/* ---------------------------------------------------------------- helpers */

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

/* A handle of the phases: lease waits end after lease_wait_ms, Redis calls
 * after phase_redis_ms: REDIS_MS_FAULTS while faults freeze and kill Redis
 * (a frozen Redis must cost little), REDIS_MS_CALM in the healthy phase,
 * the checks after each phase and the stampede. Those count failures,
 * statements and SQL pages, and a reply late on a machine busy with other
 * tests (sanitizers, the whole suite and a benchmark beside it) fails a
 * blocking call, which is not what they test. */
#define REDIS_MS_FAULTS 200
#define REDIS_MS_CALM   2000
static int phase_redis_ms = REDIS_MS_CALM;   /* set by run_phase before its threads start */

static feed *open_handle_with(int lease_wait_ms, int redis_timeout_ms)
{
    feed_config cfg;

    tu_config(&cfg);
    cfg.max_len = MAX_LEN;
    cfg.max_page = MAX_PAGE;
    cfg.ttl_seconds = 2;
    cfg.redis_timeout_ms = (uint32_t)redis_timeout_ms;
    cfg.retry_ms = 200;
    cfg.lease_ms = 1000;
    cfg.lease_wait_ms = (uint32_t)lease_wait_ms;
    return tu_open(&cfg);
}

static feed *open_handle(int lease_wait_ms)
{
    return open_handle_with(lease_wait_ms, phase_redis_ms);
}

/* ---------------------------------------------------------------- writers */

typedef struct writer {
    pthread_t     thread;
    int           w;
    uint64_t      rng;
    unsigned char live[FEEDS][200];   /* which of my ids are rows in SQL */
    unsigned long ops, inserts, rescores, deletes, hook_failures, hook_errors;
} writer;

static int64_t id_of(const writer *wr, int j) { return (int64_t)j * writers_n + wr->w; }

static void *writer_main(void *arg)
{
    writer *wr = arg;
    PGconn *pg = tu_pg();
    feed *f = open_handle(100);

    while (!atomic_load(&stop)) {
        int k = (int)tu_rand_below(&wr->rng, FEEDS), j = (int)tu_rand_below(&wr->rng, pool_size[k]);
        int64_t uid = FIRST_UID + k, id = id_of(wr, j), score = tu_random_score(&wr->rng);
        int rc;

        if (!wr->live[k][j] || tu_rand_below(&wr->rng, 2) == 0) {
            tu_insert(pg, uid, score, id);          /* insert, or a new score */
            rc = feed_on_insert(f, uid, score, id);
            if (wr->live[k][j])
                wr->rescores++;
            else
                wr->inserts++;
            wr->live[k][j] = 1;
        } else {
            tu_sql(pg, "DELETE FROM feed_entry WHERE uid = %lld AND id = %lld",
                   (long long)uid, (long long)id);
            rc = feed_on_delete(f, uid, id);
            wr->live[k][j] = 0;
            wr->deletes++;
        }
        wr->ops++;
        if (rc == FEED_EREDIS && atomic_load(&faulting)) {
            wr->hook_failures++;                    /* expected: Redis is down */
        } else if (rc != FEED_OK) {
            if (wr->hook_errors++ < 3)
                tap_diag("writer %d: hook: %s: %s", wr->w, feed_strerror(rc), feed_errmsg(f));
        }
    }
    feed_close(f);
    PQfinish(pg);
    return NULL;
}

/* ---------------------------------------------------------------- readers */

typedef struct reader {
    pthread_t     thread;
    int           n;
    uint64_t      rng;
    unsigned long walks, pages, items, violations, errors, by_source[4];
} reader;

static int before(feed_item a, feed_item b)   /* a strictly before b */
{
    return a.score > b.score || (a.score == b.score && a.id > b.id);
}

/* Check one page; returns a reason or NULL. */
static const char *bad_page(const feed_result *res, size_t limit, int first,
                            int64_t score, int64_t id)
{
    if (res->count > limit)
        return "more items than the limit";
    if (res->has_more && (res->count != limit || res->next_score != res->items[res->count - 1].score ||
                          res->next_id != res->items[res->count - 1].id))
        return "has_more without a full page or with a cursor that is not the last item";
    if (!first && res->count > 0 && !before((feed_item){ score, id }, res->items[0]))
        return "first item not after the cursor";
    for (size_t i = 1; i < res->count; i++)
        if (!before(res->items[i - 1], res->items[i]))
            return "items not strictly ordered";
    for (size_t i = 0; i < res->count; i++)          /* pages are small: n^2 is fine */
        for (size_t k = i + 1; k < res->count; k++)
            if (res->items[i].id == res->items[k].id)
                return "an id twice in one page";
    return NULL;
}

static void *reader_main(void *arg)
{
    reader *rd = arg;
    feed *f = open_handle(100);

    while (!atomic_load(&stop)) {
        int64_t uid = FIRST_UID + tu_rand_below(&rd->rng, FEEDS), score = FEED_FIRST, id = 0;
        size_t limit = (size_t)(1 + tu_rand_below(&rd->rng, MAX_PAGE));

        for (int p = 0; p < 10000 && !atomic_load(&stop); p++) {
            feed_result res;
            const char *why;
            int rc = feed_page(f, uid, score, id, limit, &res);

            if (rc != FEED_OK) {
                if (rd->errors++ < 3)
                    tap_diag("reader %d: feed_page: %s: %s", rd->n, feed_strerror(rc), feed_errmsg(f));
                break;
            }
            rd->pages++;
            rd->items += res.count;
            rd->by_source[res.source & 3]++;
            if ((why = bad_page(&res, limit, p == 0, score, id)) != NULL) {
                if (rd->violations++ < 3)
                    tap_diag("reader %d: feed %lld page %d (limit %zu): %s", rd->n,
                             (long long)uid, p, limit, why);
                feed_result_free(&res);
                break;
            }
            if (!res.has_more) {
                feed_result_free(&res);
                break;
            }
            score = res.next_score;
            id = res.next_id;
            feed_result_free(&res);
        }
        rd->walks++;
    }
    feed_close(f);
    return NULL;
}

/* ---------------------------------------------------------------- maintainer */

typedef struct maint {
    pthread_t     thread;
    uint64_t      rng;
    unsigned long reloads, invalidates, expiries, flushes, failures, errors;
} maint;

/* A raw Redis command that may fail (phase 2): reconnect next time. */
static void raw_cmd(redisContext **r, const char *fmt, const char *arg)
{
    struct timeval tv = { 0, 300 * 1000 };
    redisReply *rep;

    if (tu_cluster()) {     /* no faults there: follow the key to its node */
        if (!*r)
            *r = tu_redis();
        freeReplyObject(tu_redis_cmd(*r, fmt, arg));
        return;
    }
    if (!*r) {
        *r = redisConnectWithTimeout(getenv("FEED_REDIS_HOST") ? getenv("FEED_REDIS_HOST") : "127.0.0.1",
                                     atoi(getenv("FEED_REDIS_PORT") ? getenv("FEED_REDIS_PORT") : "6379"), tv);
        if (!*r || (*r)->err || redisSetTimeout(*r, tv) != REDIS_OK) {
            if (*r)
                redisFree(*r);
            *r = NULL;
            return;
        }
    }
    rep = redisCommand(*r, fmt, arg);
    if (!rep) {
        redisFree(*r);
        *r = NULL;
        return;
    }
    freeReplyObject(rep);
}

static void *maint_main(void *arg)
{
    maint *m = arg;
    feed *f = open_handle(100);
    redisContext *r = NULL;
    struct timespec pause = { 0, 15 * 1000000L };

    while (!atomic_load(&stop)) {
        int64_t uid = FIRST_UID + tu_rand_below(&m->rng, FEEDS);
        int rc = FEED_OK;

        switch (tu_rand_below(&m->rng, 40)) {
        case 0:
            raw_cmd(&r, "SCRIPT FLUSH", "");
            m->flushes++;
            break;
        case 1: case 2: case 3: case 4: case 5: case 6:
            raw_cmd(&r, "PEXPIRE %s 1", tu_key(uid, ""));
            m->expiries++;
            break;
        case 7: case 8: case 9: case 10: case 11: case 12: case 13: case 14: case 15:
            rc = feed_invalidate(f, uid);
            m->invalidates++;
            break;
        default:
            rc = feed_reload(f, uid);
            m->reloads++;
            break;
        }
        if (rc == FEED_EREDIS && atomic_load(&faulting)) {
            m->failures++;
        } else if (rc != FEED_OK) {
            if (m->errors++ < 3)
                tap_diag("maintainer: %s: %s", feed_strerror(rc), feed_errmsg(f));
        }
        nanosleep(&pause, NULL);
    }
    if (r)
        redisFree(r);
    feed_close(f);
    return NULL;
}

/* ---------------------------------------------------------------- faults */

static void *fault_main(void *arg)
{
    int *injected = arg;
    uint64_t rng = seed ^ 0xfa17;

    while (!atomic_load(&stop_faults)) {
        fault_sleep_ms(300 + (double)tu_rand_below(&rng, 400));
        if (atomic_load(&stop_faults))
            break;
        if (tu_rand_below(&rng, 2) == 0) {
            fault_inject("redis-freeze");
            fault_sleep_ms(150 + (double)tu_rand_below(&rng, 300));
            fault_inject("redis-thaw");
        } else {
            fault_inject("redis-stop");
            fault_sleep_ms(100 + (double)tu_rand_below(&rng, 300));
            fault_inject("redis-start");
        }
        (*injected)++;
    }
    return NULL;
}

/* ---------------------------------------------------------------- checks */

/* The invariant, read straight from Redis: the zset (if any) minus the end
 * marker is exactly the rows of SQL at or above its lowest member, and all
 * of them when the marker is there. Returns 1 if it holds. */
static int cached_at_check;

static int invariant_holds(PGconn *pg, redisContext *r, int64_t uid)
{
    redisReply *rep = tu_redis_cmd(r, "ZREVRANGE %s 0 -1 WITHSCORES", tu_key(uid, ""));
    feed_item *d, *z;
    size_t nd = tu_sql_feed(pg, uid, &d), nz = 0, expect;
    int ended = 0, good = 1;

    z = malloc((rep->elements / 2 + 1) * sizeof *z);
    for (size_t i = 0; i + 1 < rep->elements; i += 2) {
        const char *m = rep->element[i]->str;
        if (strcmp(m, "end") == 0) {
            ended = 1;
            continue;
        }
        if (feed__member_decode(m, rep->element[i]->len, &z[nz].id) != FEED_OK)
            z[nz].id = -1;   /* not a member: the comparison below fails */
        z[nz].score = strtoll(rep->element[i + 1]->str, NULL, 10);
        nz++;
    }
    if (rep->elements > 0) {
        cached_at_check++;
        if (ended) {
            expect = nd;
        } else {
            expect = 0;
            while (expect < nd && (nz == 0 || !before(z[nz - 1], d[expect])))
                expect++;
        }
        if (nz != expect || nz > MAX_LEN) {
            tap_diag("feed %lld: Redis holds %zu items%s, SQL has %zu (%zu at or above the"
                     " lowest cached)", (long long)uid, nz, ended ? " and the end marker" : "",
                     nd, expect);
            good = 0;
        }
        for (size_t i = 0; good && i < nz; i++) {
            if (z[i].score != d[i].score || z[i].id != d[i].id) {
                tap_diag("feed %lld: Redis item %zu is (%lld,%lld), SQL's (%lld,%lld)",
                         (long long)uid, i, (long long)z[i].score, (long long)z[i].id,
                         (long long)d[i].score, (long long)d[i].id);
                good = 0;
            }
        }
    }
    freeReplyObject(rep);
    free(z);
    free(d);
    return good;
}

static unsigned long mismatches_total;

/* Writers stopped: Redis obeys the invariant and walks equal SQL. */
static void check_after(PGconn *pg, const char *phase)
{
    redisContext *r = tu_redis();
    feed *f = open_handle(100);
    unsigned long bad_inv = 0, bad_walks = 0, walks = 0;
    static const size_t sizes[] = { 1, 7, MAX_PAGE };
    tu_walk_info info;
    feed_result res;

    /* After faults, copies whose hooks could not reach Redis are dropped by
     * the first library call that reaches it: make one before looking. */
    feed_page(f, FIRST_UID, FEED_FIRST, 0, 1, &res);
    feed_result_free(&res);
    cached_at_check = 0;
    for (int k = 0; k < FEEDS; k++)
        bad_inv += !invariant_holds(pg, r, FIRST_UID + k);
    for (int k = 0; k < FEEDS; k++) {
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            bad_walks += !tu_walk_equals_sql(f, pg, FIRST_UID + k, sizes[s], &info);
            walks++;
        }
    }
    is_int(bad_inv, 0, "%s: the Redis copies (%d of %d feeds cached) obey the invariant", phase,
           cached_at_check, FEEDS);
    is_int(bad_walks, 0, "%s: %lu walks through the library equal SQL exactly", phase, walks);
    mismatches_total += bad_inv + bad_walks;
    feed_close(f);
    redisFree(r);
}

static void setup_rows(PGconn *pg, writer *wr)
{
    for (int k = 0; k < FEEDS; k++) {
        PGresult *res;
        char sql[512];

        snprintf(sql, sizeof sql,
                 "INSERT INTO feed_entry (uid, score, id)"
                 " SELECT %d, (random() * 19)::int * 100, g * %d + %d"
                 " FROM generate_series(0, %d) g WHERE random() < 0.4"
                 " RETURNING id", FIRST_UID + k, writers_n, wr->w, pool_size[k] - 1);
        res = PQexec(pg, sql);
        if (PQresultStatus(res) != PGRES_TUPLES_OK) {
            tap_bail(PQerrorMessage(pg));
            exit(255);
        }
        for (int i = 0; i < PQntuples(res); i++)
            wr->live[k][strtoll(PQgetvalue(res, i, 0), NULL, 10) / writers_n] = 1;
        PQclear(res);
    }
}

typedef struct totals {
    unsigned long ops, inserts, rescores, deletes, hook_failures, hook_errors;
    unsigned long walks, pages, items, violations, read_errors, by_source[4];
    unsigned long reloads, invalidates, expiries, flushes, maint_failures, maint_errors;
} totals;

static void run_phase(PGconn *pg, writer *wr, int with_faults, const char *name, totals *t)
{
    reader rd[MAX_WRITERS];
    maint m;
    pthread_t faulter;
    int injected = 0;

    memset(rd, 0, sizeof rd);
    memset(&m, 0, sizeof m);
    atomic_store(&stop, 0);
    atomic_store(&stop_faults, 0);
    atomic_store(&faulting, with_faults);
    phase_redis_ms = with_faults ? REDIS_MS_FAULTS : REDIS_MS_CALM;
    for (int i = 0; i < writers_n; i++)
        pthread_create(&wr[i].thread, NULL, writer_main, &wr[i]);
    for (int i = 0; i < readers_n; i++) {
        rd[i].n = i;
        rd[i].rng = seed * 31 + (uint64_t)i + 7;
        pthread_create(&rd[i].thread, NULL, reader_main, &rd[i]);
    }
    m.rng = seed * 17 + 3;
    pthread_create(&m.thread, NULL, maint_main, &m);
    if (with_faults)
        pthread_create(&faulter, NULL, fault_main, &injected);

    fault_sleep_ms(seconds * 1000);
    if (with_faults) {
        /* End inside an outage that keeps Redis's data (a freeze): the last
         * writes' hooks fail and nothing comes after them to hide it, so the
         * checks below see any copy left stale. */
        atomic_store(&stop_faults, 1);
        pthread_join(faulter, NULL);
        fault_sleep_ms(600);      /* healthy a while: the feeds get cached again */
        fault_inject("redis-freeze");
        injected++;
        fault_sleep_ms(300);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < writers_n; i++)
        pthread_join(wr[i].thread, NULL);
    for (int i = 0; i < readers_n; i++)
        pthread_join(rd[i].thread, NULL);
    pthread_join(m.thread, NULL);
    if (with_faults)
        fault_inject("redis-thaw");
    atomic_store(&faulting, 0);

    memset(t, 0, sizeof *t);
    for (int i = 0; i < writers_n; i++) {
        t->ops += wr[i].ops;
        t->inserts += wr[i].inserts;
        t->rescores += wr[i].rescores;
        t->deletes += wr[i].deletes;
        t->hook_failures += wr[i].hook_failures;
        t->hook_errors += wr[i].hook_errors;
        wr[i].ops = wr[i].inserts = wr[i].rescores = wr[i].deletes = 0;
        wr[i].hook_failures = wr[i].hook_errors = 0;
    }
    for (int i = 0; i < readers_n; i++) {
        t->walks += rd[i].walks;
        t->pages += rd[i].pages;
        t->items += rd[i].items;
        t->violations += rd[i].violations;
        t->read_errors += rd[i].errors;
        for (int s = 0; s < 4; s++)
            t->by_source[s] += rd[i].by_source[s];
    }
    t->reloads = m.reloads;
    t->invalidates = m.invalidates;
    t->expiries = m.expiries;
    t->flushes = m.flushes;
    t->maint_failures = m.failures;
    t->maint_errors = m.errors;

    tap_diag("%s: %.0f s, %d writers, %d readers, 1 maintainer%s", name, seconds, writers_n,
             readers_n, with_faults ? ", 1 fault injector" : "");
    tap_diag("  writes: %lu (%lu inserts, %lu score changes, %lu deletes), hooks failed"
             " while Redis was down: %lu", t->ops, t->inserts, t->rescores, t->deletes,
             t->hook_failures);
    tap_diag("  reads: %lu walks, %lu pages checked (%lu cache, %lu rebuild, %lu db), %lu items",
             t->walks, t->pages, t->by_source[FEED_SOURCE_CACHE], t->by_source[FEED_SOURCE_REBUILD],
             t->by_source[FEED_SOURCE_DB], t->items);
    tap_diag("  maintenance: %lu reloads, %lu invalidations, %lu forced expiries, %lu SCRIPT"
             " FLUSH, %lu failed while Redis was down", t->reloads, t->invalidates, t->expiries,
             t->flushes, t->maint_failures);
    if (with_faults)
        tap_diag("  Redis faults injected: %d (freezes and kills)", injected);

    ok(t->ops > 0 && t->pages > 0, "%s: writers wrote (%lu) and readers read (%lu pages)", name,
       t->ops, t->pages);
    is_int(t->violations, 0, "%s: every page strictly ordered, no id twice, after its cursor", name);
    is_int(t->read_errors, 0, "%s: every feed_page call succeeded%s", name,
           with_faults ? " (from SQL while Redis was down)" : "");
    is_int(t->hook_errors + t->maint_errors, 0, "%s: no hook, reload or invalidate failed%s", name,
           with_faults ? " except with FEED_EREDIS while Redis was down" : "");
    mismatches_total += t->violations;
    phase_redis_ms = REDIS_MS_CALM;   /* the faults are over: the checks wait calmly */
    check_after(pg, name);
}

/* ---------------------------------------------------------------- stampede */

#define STAMPEDE_UID 850
#define STAMPEDE_THREADS 12

typedef struct crowd {
    pthread_t   thread;
    feed       *f;
    int         rc;
    feed_result res;
} crowd;

static pthread_barrier_t go, done;

static void *crowd_main(void *arg)
{
    crowd *c = arg;

    for (int w = 0; w < waves; w++) {
        pthread_barrier_wait(&go);
        c->rc = feed_page(c->f, STAMPEDE_UID, FEED_FIRST, 0, 20, &c->res);
        pthread_barrier_wait(&done);      /* main checks, then frees */
        pthread_barrier_wait(&go);
    }
    return NULL;
}

static void stampede(PGconn *pg)
{
    crowd c[STAMPEDE_THREADS];
    redisContext *r = tu_redis();
    feed_item *want;
    size_t nwant;
    unsigned long one_rebuild = 0, one_query = 0, no_fallback = 0, right = 0;
    unsigned long total_queries = 0, total_rebuilds = 0, total_waits = 0;

    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = %d", STAMPEDE_UID);
    tu_sql(pg, "INSERT INTO feed_entry (uid, score, id) SELECT %d, g / 3, g"
               " FROM generate_series(1, 500) g", STAMPEDE_UID);
    nwant = tu_sql_feed(pg, STAMPEDE_UID, &want);
    for (int i = 0; i < STAMPEDE_THREADS; i++)
        c[i].f = open_handle_with(5000, REDIS_MS_CALM);   /* nobody gives up waiting on the lease */
    pthread_barrier_init(&go, NULL, STAMPEDE_THREADS + 1);
    pthread_barrier_init(&done, NULL, STAMPEDE_THREADS + 1);
    for (int i = 0; i < STAMPEDE_THREADS; i++)
        pthread_create(&c[i].thread, NULL, crowd_main, &c[i]);

    for (int w = 0; w < waves; w++) {
        feed_stats before[STAMPEDE_THREADS];
        unsigned long queries = 0, rebuilds = 0, db = 0, redis_failed = 0, good = 0;

        /* A cold feed: dropped, or (every other wave) expired by Redis. */
        if (w % 2 == 0)
            freeReplyObject(tu_redis_cmd(r, "DEL %s", tu_key(STAMPEDE_UID, "")));
        else {
            freeReplyObject(tu_redis_cmd(r, "PEXPIRE %s 1", tu_key(STAMPEDE_UID, "")));
            fault_sleep_ms(5);
        }
        for (int i = 0; i < STAMPEDE_THREADS; i++)
            feed_stats_get(c[i].f, &before[i]);
        pthread_barrier_wait(&go);
        pthread_barrier_wait(&done);
        for (int i = 0; i < STAMPEDE_THREADS; i++) {
            feed_stats d = tu_stats_since(c[i].f, &before[i]);
            int same = c[i].rc == FEED_OK && c[i].res.count == 20 && nwant >= 20;
            for (size_t k = 0; same && k < 20; k++)
                same = c[i].res.items[k].score == want[k].score && c[i].res.items[k].id == want[k].id;
            good += same;
            queries += d.sql_queries;
            rebuilds += d.rebuilds;
            db += d.db_pages;
            redis_failed += d.redis_failed_pages;
            total_waits += d.lease_waits;
            feed_result_free(&c[i].res);
        }
        pthread_barrier_wait(&go);
        one_rebuild += rebuilds == 1;
        one_query += queries == 1;
        no_fallback += db == 0;
        right += good == STAMPEDE_THREADS;
        total_queries += queries;
        total_rebuilds += rebuilds;
        if (rebuilds != 1 || queries != 1 || good != STAMPEDE_THREADS)
            tap_diag("wave %d: %lu rebuilds, %lu SQL queries, %lu db pages (%lu as Redis failed),"
                     " %lu right pages", w, rebuilds, queries, db, redis_failed, good);
    }
    for (int i = 0; i < STAMPEDE_THREADS; i++) {
        pthread_join(c[i].thread, NULL);
        feed_close(c[i].f);
    }
    pthread_barrier_destroy(&go);
    pthread_barrier_destroy(&done);

    tap_diag("stampede: %d waves of %d handles missing one cold feed at once: %lu rebuilds,"
             " %lu SQL queries, %lu lease waits in all", waves, STAMPEDE_THREADS,
             total_rebuilds, total_queries, total_waits);
    is_int(right, waves, "stampede: in each of %d waves all %d pages equal SQL", waves,
           STAMPEDE_THREADS);
    is_int(one_rebuild, waves, "  each wave: exactly one rebuild");
    is_int(one_query, waves, "  each wave: exactly one SQL query (the rebuild's)");
    is_int(no_fallback, waves, "  each wave: no reader fell back to SQL");
    mismatches_total += (unsigned long)(waves - (int)right);
    free(want);
    redisFree(r);
}

int main(void)
{
    writer *wr;
    PGconn *pg;
    redisContext *r;
    totals t1, t2;
    const char *s = getenv("FEED_STRESS_SECONDS");

    fault_setup();
    if (s && *s)
        seconds = atof(s);
    writers_n = env_int("FEED_STRESS_WRITERS", writers_n);
    readers_n = env_int("FEED_STRESS_READERS", readers_n);
    waves = env_int("FEED_STRESS_WAVES", waves);
    if (getenv("FEED_STRESS_SEED"))
        seed = strtoull(getenv("FEED_STRESS_SEED"), NULL, 10);
    if (writers_n < 1 || writers_n > MAX_WRITERS || readers_n < 1 || readers_n > MAX_WRITERS)
        writers_n = 2, readers_n = 3;
    tap_diag("seed %llu (FEED_STRESS_SEED to replay the SQL set-up's choices)",
             (unsigned long long)seed);

    pg = tu_begin(&r);
    redisFree(r);
    tu_sql(pg, "SELECT setseed(%f)", (double)(seed % 1000) / 1000.0);
    wr = calloc((size_t)writers_n, sizeof *wr);
    for (int i = 0; i < writers_n; i++) {
        wr[i].w = i;
        wr[i].rng = seed + (uint64_t)i * 1000003;
        setup_rows(pg, &wr[i]);
    }

    run_phase(pg, wr, 0, "phase 1 (healthy)", &t1);
    /* The fault switches act on the single Redis: not on the cluster
     * (t_cluster has the cluster's faults). */
    if (env_int("FEED_STRESS_FAULTS", !tu_cluster()))
        run_phase(pg, wr, 1, "phase 2 (Redis faults)", &t2);
    else
        memset(&t2, 0, sizeof t2);
    stampede(pg);

    tap_diag("in all: %lu writes, %lu pages checked, %d Redis faults, mismatches: %lu",
             t1.ops + t2.ops, t1.pages + t2.pages, fault_count, mismatches_total);
    free(wr);
    PQfinish(pg);
    return tap_done();
}
