/* t_lease.c -- leases: a stampede of handles missing one cold feed rebuilds
 * it once; a rebuild whose lease a write cancelled does not install; a reader
 * that finds another's lease waits for it, then falls back to SQL. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"   /* test_before_install */
#include "tap.h"
#include "testutil.h"

#define THREADS 16

/* The handle's counters (through the async twin too, tests/shim.h). */
static feed_stats stats_of(feed *f)
{
    feed_stats st;

    feed_stats_get(f, &st);
    return st;
}

static PGconn *pg;
static redisContext *r;

static int64_t score_of(size_t i) { return (int64_t)(i / 4); }
static int64_t id_of(size_t i) { return (int64_t)i; }

typedef struct reader {
    pthread_t   thread;
    feed       *f;
    int         rc;
    feed_result res;
    feed_stats  s0;         /* its counts once its slot was settled */
} reader;

static pthread_barrier_t start_line;

static void *read_first_page(void *arg)
{
    reader *rd = arg;

    pthread_barrier_wait(&start_line);
    rd->rc = feed_page(rd->f, 10, FEED_FIRST, 0, 20, &rd->res);
    return NULL;
}

static void stampede(void)
{
    reader rd[THREADS];
    feed_item *want;
    size_t nwant;
    feed_stats total = { 0 };
    int pages_ok = 1, by_source[4] = { 0 };
    feed_config cfg;

    tu_insert_rows(pg, 10, 5000, score_of, id_of);
    nwant = tu_sql_feed(pg, 10, &want);
    tu_config(&cfg);
    cfg.lease_wait_ms = 2000;        /* long enough that nobody falls back */
    /* On a cluster each new handle checks the feed's slot (its fence) on
     * its first read of it: done here, before the stampede, which is about
     * the lease (under valgrind a slow fence check made readers fall back). */
    for (int i = 0; i < THREADS; i++) {
        rd[i].f = tu_open(&cfg);
        tu_settle_feed(rd[i].f, 10);
        feed_stats_get(rd[i].f, &rd[i].s0);
    }
    pthread_barrier_init(&start_line, NULL, THREADS);
    for (int i = 0; i < THREADS; i++)
        pthread_create(&rd[i].thread, NULL, read_first_page, &rd[i]);
    for (int i = 0; i < THREADS; i++) {
        feed_stats s;
        pthread_join(rd[i].thread, NULL);
        feed_stats_get(rd[i].f, &s);
        total.rebuilds += s.rebuilds - rd[i].s0.rebuilds;
        total.lease_waits += s.lease_waits - rd[i].s0.lease_waits;
        total.db_pages += s.db_pages - rd[i].s0.db_pages;
        if (rd[i].rc != FEED_OK || rd[i].res.count != 20 || nwant < 20) {
            pages_ok = 0;
        } else {
            by_source[rd[i].res.source]++;
            for (size_t k = 0; k < 20; k++)
                if (rd[i].res.items[k].score != want[k].score ||
                    rd[i].res.items[k].id != want[k].id)
                    pages_ok = 0;
        }
        feed_result_free(&rd[i].res);
        feed_close(rd[i].f);
    }
    pthread_barrier_destroy(&start_line);
    ok(pages_ok, "%d handles missed one cold feed at once: every page equals SQL", THREADS);
    is_int(total.rebuilds, 1, "  exactly one rebuild");
    is_int(by_source[FEED_SOURCE_REBUILD], 1, "  one page answered by the rebuild");
    is_int(total.db_pages, 0, "  no reader fell back to SQL");
    tap_diag("stampede: %llu lease waits, %d pages from cache after waiting",
             (unsigned long long)total.lease_waits, by_source[FEED_SOURCE_CACHE]);
    free(want);
}

/* Called by the rebuilding handle after its SQL read, before its install:
 * a writer commits a row and calls its hook right there. */
static void write_in_between(feed *rebuilder, int64_t uid, void *arg)
{
    feed *writer = arg;

    (void)rebuilder;
    tu_insert(pg, uid, 1000000, 424242);
    if (feed_on_insert(writer, uid, 1000000, 424242) != FEED_OK)
        tap_diag("hook failed: %s", feed_errmsg(writer));
}

static void cancelled_rebuild(void)
{
    feed *f = tu_open(NULL), *writer = tu_open(NULL);
    feed_result res;
    tu_walk_info info;
    int rc;

    tu_insert_rows(pg, 11, 50, score_of, id_of);
    f->core.test_before_install = write_in_between;
    f->core.test_arg = writer;
    rc = feed_page(f, 11, FEED_FIRST, 0, 10, &res);
    f->core.test_before_install = NULL;
    is_int(rc, FEED_OK, "a miss whose rebuild a write cancels still answers");
    is_int(res.source, FEED_SOURCE_DB, "  from the rows it read (source db)");
    ok(res.count == 10 && res.items[0].id != 424242,
       "  its page is the feed as read before the write");
    feed_result_free(&res);
    is_int(stats_of(f).rebuilds, 0, "  the rebuild did not install");
    is_int(tu_redis_int(r, "EXISTS %s", tu_key(11, "")), 0, "  so no stale copy is in Redis");
    ok(tu_walk_equals_sql(f, pg, 11, 7, &info), "the next walk equals SQL, new row included");

    /* The same race around feed_reload: the copy is dropped, never stale. */
    f->core.test_before_install = write_in_between;
    tu_sql(pg, "DELETE FROM feed_entry WHERE id = 424242");
    is_int(feed_reload(f, 11), FEED_OK, "a reload cancelled by a write");
    f->core.test_before_install = NULL;
    is_int(tu_redis_int(r, "EXISTS %s", tu_key(11, "")), 0,
           "  drops the cached copy instead of installing");
    ok(tu_walk_equals_sql(f, pg, 11, 7, &info), "  walk equals SQL");
    feed_close(f);
    feed_close(writer);
}

/* Called by the rebuilding handle after its SQL read: the read took
 * longer than the lease lives (queued behind others, a slow statement). */
static void late_install(feed *rebuilder, int64_t uid, void *arg)
{
    feed *writer = arg;
    struct timespec pause = { 0, 250 * 1000000L };   /* lease_ms is 100 here */

    (void)rebuilder;
    nanosleep(&pause, NULL);
    if (writer) {
        tu_insert(pg, uid, 1000000, 424243);
        if (feed_on_insert(writer, uid, 1000000, 424243) != FEED_OK)
            tap_diag("hook failed: %s", feed_errmsg(writer));
    }
}

/* Work that is done counts: a rebuild whose lease ran out while it read
 * SQL still installs, unless a write came between (its hook takes the
 * grant). Refused installs are counted. */
static void late_rebuild(void)
{
    feed_config cfg;
    feed *f, *writer = tu_open(NULL);
    feed_result res;
    feed_stats s0, s1;
    tu_walk_info info;
    int rc;

    tu_insert_rows(pg, 14, 30, score_of, id_of);
    tu_config(&cfg);
    cfg.lease_ms = 100;
    f = tu_open_settled(&cfg);
    tu_settle_feed(f, 14);
    f->core.test_before_install = late_install;
    f->core.test_arg = NULL;
    feed_stats_get(f, &s0);
    rc = feed_page(f, 14, FEED_FIRST, 0, 10, &res);
    feed_stats_get(f, &s1);
    ok(rc == FEED_OK && res.source == FEED_SOURCE_REBUILD && s1.rebuilds == s0.rebuilds + 1 &&
       s1.installs_refused == s0.installs_refused,
       "a rebuild read past lease_ms, no write between: it installs (source rebuild)");
    if (rc == FEED_OK)
        feed_result_free(&res);
    is_int(tu_redis_int(r, "EXISTS %s", tu_key(14, "")), 1, "  its copy is in Redis");
    f->core.test_before_install = NULL;
    ok(tu_walk_equals_sql(f, pg, 14, 7, &info) && info.sources[FEED_SOURCE_CACHE] == (int)info.pages,
       "  and serves the walk, equal to SQL (%s)", info.why);

    feed_invalidate(f, 14);
    f->core.test_before_install = late_install;
    f->core.test_arg = writer;
    feed_stats_get(f, &s0);
    rc = feed_page(f, 14, FEED_FIRST, 0, 10, &res);
    feed_stats_get(f, &s1);
    f->core.test_before_install = NULL;
    ok(rc == FEED_OK && res.source == FEED_SOURCE_DB && s1.rebuilds == s0.rebuilds &&
       s1.installs_refused == s0.installs_refused + 1,
       "a rebuild read past lease_ms with a write between: refused, counted in installs_refused");
    if (rc == FEED_OK)
        feed_result_free(&res);
    is_int(tu_redis_int(r, "EXISTS %s", tu_key(14, "")), 0, "  no stale copy in Redis");
    ok(tu_walk_equals_sql(f, pg, 14, 7, &info), "  the next walk equals SQL, the write included");
    feed_close(f);
    feed_close(writer);
}

static void busy_lease(void)
{
    feed_config cfg;
    feed *f;
    feed_result res;
    struct timespec t0, t1;
    double ms;
    feed_stats before;

    tu_insert_rows(pg, 12, 30, score_of, id_of);
    tu_config(&cfg);
    cfg.lease_wait_ms = 50;
    f = tu_open_settled(&cfg);   /* the fence must not drop a planted lease */
    tu_settle_feed(f, 12);
    before = stats_of(f);
    /* Someone else's lease, and no rebuild coming. */
    tu_plant_lease(r, tu_key(12, ":lease"), "another-handle");
    clock_gettime(CLOCK_MONOTONIC, &t0);
    is_int(feed_page(f, 12, FEED_FIRST, 0, 10, &res), FEED_OK,
           "a miss while another handle holds the lease");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    is_int(res.source, FEED_SOURCE_DB, "  falls back to SQL after waiting");
    is_int(stats_of(f).lease_waits - before.lease_waits, 1, "  counted as one lease wait");
    is_int(stats_of(f).rebuilds - before.rebuilds, 0, "  and does not rebuild");
    /* The library's clock counts whole milliseconds (feed__now_ms): a wait
     * that starts 0.9 ms into one ends up to 1 ms short in real time. */
    ok(ms >= 49, "  it waited lease_wait_ms first (%.1f ms)", ms);
    feed_result_free(&res);
    feed_close(f);

    /* With lease_wait_ms 0 the reader does not wait at all. */
    cfg.lease_wait_ms = 0;
    f = tu_open_settled(&cfg);   /* the fence must not drop a planted lease */
    tu_settle_feed(f, 12);
    is_int(feed_page(f, 12, FEED_FIRST, 0, 10, &res), FEED_OK, "lease_wait_ms 0");
    is_int(res.source, FEED_SOURCE_DB, "  straight to SQL");
    feed_result_free(&res);
    feed_close(f);
}

typedef struct late_reload { feed *f; int64_t uid; } late_reload;

static void *reload_later(void *arg)
{
    late_reload *lr = arg;
    struct timespec pause = { 0, 30 * 1000000L };

    nanosleep(&pause, NULL);
    feed_reload(lr->f, lr->uid);      /* takes the lease over and installs */
    return NULL;
}

static void waiter_served_by_cache(void)
{
    feed_config cfg;
    feed *f, *other;
    feed_result res;
    feed_stats before;
    pthread_t t;
    late_reload lr;

    tu_insert_rows(pg, 13, 30, score_of, id_of);
    tu_config(&cfg);
    cfg.lease_wait_ms = 3000;
    f = tu_open_settled(&cfg);   /* the fence must not drop a planted lease */
    tu_settle_feed(f, 13);
    feed_stats_get(f, &before);
    other = tu_open(NULL);
    tu_plant_lease(r, tu_key(13, ":lease"), "another-handle");
    lr.f = other;
    lr.uid = 13;
    pthread_create(&t, NULL, reload_later, &lr);
    is_int(feed_page(f, 13, FEED_FIRST, 0, 10, &res), FEED_OK, "a reader waits on a rebuild");
    pthread_join(t, NULL);
    is_int(res.source, FEED_SOURCE_CACHE, "  and is served by the cache it installed");
    is_int(stats_of(f).sql_queries - before.sql_queries, 0, "  without any SQL of its own");
    feed_result_free(&res);
    feed_close(f);
    feed_close(other);
}

int main(void)
{
    pg = tu_begin(&r);
    stampede();
    cancelled_rebuild();
    busy_lease();
    late_rebuild();
    waiter_served_by_cache();
    PQfinish(pg);
    redisFree(r);
    return tap_done();
}
