/* t_ha_sentinel.c -- Sentinel under load: writers and readers on their own
 * handles (redis_sentinels, redis_wait_replicas = 1, redis_restart_fence)
 * while the primary is SIGKILLed, then while SENTINEL FAILOVER moves it.
 *
 * Writers own their feeds and only insert, ids rising, each new item on top:
 * SQL first, then the hook (failed hooks are retried until they pass, as an
 * application would; the library's repair list is what keeps the cache
 * right meanwhile). hooked[u] is the last id whose hook has run. Readers
 * walk a whole feed: every id <= hooked[u] (read before the walk) must be in
 * it, nothing above the ids issued (read after), in strict order. After each
 * event, with the writers paused, every feed walked equals SQL, and Redis
 * serves again once a replica is attached. No call may
 * block past its timeouts (bound: 4 x redis_timeout_ms + lease_wait_ms +
 * slack; a connect asks a Sentinel, checks ROLE, loads scripts, then the page
 * itself, a wait on another's rebuild and its fall-back query). The wait is
 * set short here: by default it is the lease's life (3 s), and a holder
 * caught in a failover may keep its lease that long. Prints pages checked,
 * fell back, hooks retried, mismatches (must be 0).
 *
 * Readers are processes of their own (fork), writers threads of this one:
 * the repair list is per process, and a reader in the writers' process
 * would be moved off a replaced primary by the writers' failed hooks. A
 * reader elsewhere has only its own means (ROLE after each read). */
#define _DEFAULT_SOURCE          /* MAP_ANONYMOUS */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"
#include "testutil.h"
#include "fault.h"
#include "ha.h"

#define FEEDS    12
#define WRITERS  2
#define READERS  3
#define BASE     30          /* rows per feed before the load */
#define LIMIT    10
#define TIMEOUT    300       /* redis_timeout_ms */
#define LEASE_WAIT 300       /* lease_wait_ms */
#define UID0     8100

static feed_config cfg;
static atomic_int  paused, busy_writers;
static atomic_long hooks, retried;

/* Shared with the reader processes (MAP_SHARED). */
typedef struct shared {
    atomic_long hooked[FEEDS], issued[FEEDS];
    atomic_int  running;     /* 0 = not yet, 1 = run, 2 = stop */
    atomic_long pages, fell_back, walks, mismatches, slow_calls, max_call_ms;
} shared;
static shared *sh;
#define hooked     sh->hooked
#define issued     sh->issued
#define running    sh->running
#define pages      sh->pages
#define fell_back  sh->fell_back
#define walks      sh->walks
#define mismatches sh->mismatches
#define slow_calls sh->slow_calls
#define max_call_ms sh->max_call_ms

static int64_t score_of_id(int64_t id) { return id * 10; }
static int64_t base_score(size_t i) { return score_of_id((int64_t)i + 1); }
static int64_t base_id(size_t i) { return (int64_t)i + 1; }

/* A call's time: the longest is reported, and one past the bound says
 * which call it was, what the handle said and what it did meanwhile (its
 * counters' change: lease waits, connects, errors, statements), so a
 * failure shows its path. t0 and s0: the time and counters before it. */
static void note_time(feed *f, const char *op, double t0, const feed_stats *s0)
{
    double ms = fault_now_ms() - t0;
    long v = (long)ms, m = atomic_load(&max_call_ms);
    feed_stats s;

    while (v > m && !atomic_compare_exchange_weak(&max_call_ms, &m, v))
        ;
    if (ms > 4.0 * TIMEOUT + LEASE_WAIT + fault_slack_ms()) {
        atomic_fetch_add(&slow_calls, 1);
        feed_stats_get(f, &s);
        tap_diag("%s took %.0f ms (pid %d): %s; meanwhile lease waits %llu (served %llu),"
                 " Redis connects %llu, calls %llu, errors %llu, WAIT failures %llu,"
                 " failovers %llu, statements %llu", op, ms, (int)getpid(), feed_errmsg(f),
                 (unsigned long long)(s.lease_waits - s0->lease_waits),
                 (unsigned long long)(s.lease_waits_served - s0->lease_waits_served),
                 (unsigned long long)(s.redis_connects - s0->redis_connects),
                 (unsigned long long)(s.redis_calls - s0->redis_calls),
                 (unsigned long long)(s.redis_errors - s0->redis_errors),
                 (unsigned long long)(s.wait_failures - s0->wait_failures),
                 (unsigned long long)(s.failovers - s0->failovers),
                 (unsigned long long)(s.sql_queries - s0->sql_queries));
    }
}

static void *writer(void *arg)
{
    int w = (int)(intptr_t)arg;
    feed *f = tu_open(&cfg);
    PGconn *pg = tu_pg();

    while (atomic_load(&running) == 1) {
        if (atomic_load(&paused)) {
            fault_sleep_ms(5);
            continue;
        }
        atomic_fetch_add(&busy_writers, 1);
        if (!atomic_load(&paused)) {
            for (int u = w; u < FEEDS; u += WRITERS) {
                int64_t id = atomic_load(&issued[u]) + 1;
                double t0;
                feed_stats s0;
                int rc;
                atomic_store(&issued[u], id);
                tu_insert(pg, UID0 + u, score_of_id(id), id);
                feed_stats_get(f, &s0);
                t0 = fault_now_ms();
                rc = feed_on_insert(f, UID0 + u, score_of_id(id), id);
                note_time(f, "feed_on_insert", t0, &s0);
                atomic_store(&hooked[u], id);     /* it has run, failed or not */
                atomic_fetch_add(&hooks, 1);
                for (int k = 0; rc != FEED_OK && k < 100 && atomic_load(&running) == 1; k++) {
                    fault_sleep_ms(20);
                    atomic_fetch_add(&retried, 1);
                    feed_stats_get(f, &s0);
                    t0 = fault_now_ms();
                    rc = feed_on_insert(f, UID0 + u, score_of_id(id), id);
                    note_time(f, "feed_on_insert (again)", t0, &s0);
                }
            }
        }
        atomic_fetch_sub(&busy_writers, 1);
        fault_sleep_ms(2);
    }
    PQfinish(pg);
    feed_close(f);
    return NULL;
}

/* One walk of feed u, checked as the header says. */
static void check_walk(feed *f, int u, uint64_t *rng)
{
    long lo = atomic_load(&hooked[u]), hi;
    int64_t score = FEED_FIRST, id = 0;
    char *seen = NULL;
    size_t cap = 0;
    int bad = 0;

    (void)rng;
    for (;;) {
        feed_result res;
        feed_stats s0;
        double t0;
        int rc;
        feed_stats_get(f, &s0);
        t0 = fault_now_ms();
        rc = feed_page(f, UID0 + u, score, id, LIMIT, &res);
        note_time(f, "feed_page", t0, &s0);
        if (rc != FEED_OK) {          /* neither store: not a wrong page */
            free(seen);
            return;
        }
        atomic_fetch_add(&pages, 1);
        if (res.source == FEED_SOURCE_DB)
            atomic_fetch_add(&fell_back, 1);
        hi = atomic_load(&issued[u]);
        if (!seen && !(seen = calloc(cap = (size_t)hi + 100000, 1))) {
            feed_result_free(&res);
            return;
        }
        for (size_t i = 0; i < res.count; i++) {
            feed_item it = res.items[i];
            if (it.id < 1 || it.id > hi || (size_t)it.id >= cap || it.score != score_of_id(it.id) ||
                (score != FEED_FIRST && !(it.score < score || (it.score == score && it.id < id))))
                bad = 1;
            else
                seen[it.id] = 1;
            score = it.score;
            id = it.id;
        }
        if (!res.has_more || res.count == 0) {
            feed_result_free(&res);
            break;
        }
        feed_result_free(&res);
    }
    for (long i = 1; i <= lo && seen && !bad; i++)
        bad = !seen[i];
    free(seen);
    atomic_fetch_add(&walks, 1);
    if (bad)
        atomic_fetch_add(&mismatches, 1);
}

/* A reader process: forked before the parent opened anything (so it owns
 * every allocation it has), waits for the start, walks until told to stop,
 * then leaves without the parent's atexit handlers. */
static void reader(int r)
{
    uint64_t rng = 0x9e3779b9u * (uint64_t)(r + 1);
    feed *f;

    while (atomic_load(&running) == 0)
        fault_sleep_ms(10);
    f = tu_open(&cfg);
    while (atomic_load(&running) == 1)
        check_walk(f, (int)(tu_rand(&rng) % FEEDS), &rng);
    feed_close(f);
    fflush(stdout);
    _exit(0);
}

/* Writers paused: every feed, walked by a fresh handle, equals SQL. */
static void settled(PGconn *pg, const char *after)
{
    feed *f;
    int same = 1, cached = 0;
    double end = fault_now_ms() + 15000;

    atomic_store(&paused, 1);
    while (atomic_load(&busy_writers) > 0)
        fault_sleep_ms(5);
    f = tu_open(&cfg);
    /* The new primary may still be settling: walk until Redis answers. */
    while (fault_now_ms() < end) {
        feed_stats st;
        same = 1;
        for (int u = 0; u < FEEDS; u++) {
            tu_walk_info info;
            if (!tu_walk_equals_sql(f, pg, UID0 + u, LIMIT, &info)) {
                same = 0;
                tap_diag("feed %d after %s: %s", UID0 + u, after, info.why);
            }
        }
        feed_stats_get(f, &st);
        cached = st.cache_pages + st.rebuilds > 0;
        if (!same || cached)
            break;
        fault_sleep_ms(200);
    }
    ok(same, "after %s: every feed walked equals SQL", after);
    ok(cached, "after %s: and Redis serves again", after);
    feed_close(f);
    atomic_store(&paused, 0);
}

static void report(const char *during)
{
    tap_diag("%s: pages checked %ld, fell back %ld, walks %ld, hooks %ld, hooks retried %ld, "
             "mismatches %ld, longest call %ld ms", during, atomic_load(&pages),
             atomic_load(&fell_back), atomic_load(&walks), atomic_load(&hooks),
             atomic_load(&retried), atomic_load(&mismatches), atomic_load(&max_call_ms));
    is_int(atomic_load(&mismatches), 0, "%s: no wrong page", during);
    is_int(atomic_load(&slow_calls), 0, "%s: no call blocked past its timeouts", during);
}

int main(void)
{
    PGconn *pg;
    pthread_t th[WRITERS];
    pid_t kids[READERS];
    int primary, fresh;
    feed *f0;

    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        tap_bail("mmap"), exit(255);
    memset(sh, 0, sizeof *sh);

    ha_start();
    ha_config(&cfg);
    cfg.key_prefix = "hl";
    cfg.redis_timeout_ms = TIMEOUT;
    cfg.lease_wait_ms = LEASE_WAIT;
    cfg.retry_ms = 100;
    cfg.redis_wait_replicas = 1;
    cfg.redis_wait_timeout_ms = 100;
    cfg.redis_restart_fence = 1;
    fflush(stdout);
    for (int i = 0; i < READERS; i++)      /* before any thread or connection */
        if ((kids[i] = fork()) == 0)
            reader(i);
        else if (kids[i] < 0)
            tap_bail("fork"), exit(255);
    fault_setup();
    pg = tu_begin(NULL);
    f0 = tu_open(&cfg);
    for (int u = 0; u < FEEDS; u++) {
        tu_sql(pg, "DELETE FROM feed_entry WHERE uid = %d", UID0 + u);
        tu_insert_rows(pg, UID0 + u, BASE, base_score, base_id);
        /* The rows were replaced behind the cache's back: a copy left by an
         * earlier run on these servers (the test runs twice, through both
         * APIs) would be stale by this test's own doing. */
        for (int tries = 0; feed_invalidate(f0, UID0 + u) != FEED_OK; tries++) {
            if (tries == 100) {   /* a fresh replica may not be linked yet: WAIT */
                tap_diag("feed_invalidate: %s", feed_errmsg(f0));
                tap_bail("feed_invalidate"), exit(255);
            }
            fault_sleep_ms(100);
        }
        atomic_store(&hooked[u], BASE);
        atomic_store(&issued[u], BASE);
    }
    feed_close(f0);
    atomic_store(&running, 1);
    for (int i = 0; i < WRITERS; i++)
        if (pthread_create(&th[i], NULL, writer, (void *)(intptr_t)i) != 0)
            tap_bail("pthread_create"), exit(255);

    fault_sleep_ms(2000);
    report("warm-up");

    primary = ha_port("ha-primary");
    fault_inject("ha-kill-primary");
    fresh = ha_wait_new_primary(primary, 30000);
    ok(fresh > 0, "SIGKILL of the primary: the Sentinels promoted %d", fresh);
    fault_sleep_ms(2000);
    report("SIGKILL of the primary");
    /* With redis_wait_replicas = 1 and no replica left, Redis serves
     * nothing (hooks fail WAIT, reads fail the replica check): the killed
     * node must come back, as the replica, before the cache works again. */
    ha_start();
    settled(pg, "SIGKILL of the primary");

    primary = ha_port("ha-primary");
    fault_inject("ha-failover");
    fresh = ha_port("ha-primary");
    ok(fresh > 0 && fresh != primary, "SENTINEL FAILOVER: %d -> %d", primary, fresh);
    fault_sleep_ms(3000);
    report("SENTINEL FAILOVER");
    settled(pg, "SENTINEL FAILOVER");

    atomic_store(&running, 2);
    for (int i = 0; i < WRITERS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < READERS; i++) {
        int st = 0;
        waitpid(kids[i], &st, 0);
        ok(WIFEXITED(st) && WEXITSTATUS(st) == 0, "reader process %d ended cleanly", i);
    }
    report("the whole run");
    ha_start();
    PQfinish(pg);
    return tap_done();
}
