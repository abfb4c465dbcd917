/* loop_cpu.c -- one event-loop thread's cached pages, for callgrind and for
 * side-by-side runs of two builds (bench/run.sh, section "hiredis").
 *
 *   loop_cpu libevent 0 N   N cached first pages of uid 2 through
 *   loop_cpu libuv 0 N      feed_async_page on one loop of that kind, 256
 *                           requests kept in flight (each callback starts
 *                           the next), as section "async" runs them
 *
 * The depth is 0 only (the first page: section async's page); it is an
 * argument so that run.sh drives this program and bench/client_cpu.c alike.
 * bench/run.sh runs it under `valgrind --tool=callgrind` for two values of N
 * and takes the difference per page, which removes start-up; with
 * FEED_BENCH_REPORT=1 it also prints, for the N pages alone, the line
 * client_cpu prints: "calls N redis_calls R redis_cpu_ns C wall_ns W".
 * Every page is checked: FEED_OK, from the cache, PAGE_LIMIT items. Needs
 * the feed cached (run.sh warms it). */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <uv.h>

#include "bench.h"
#include "feedcache_libevent.h"
#include "feedcache_libuv.h"

#define IN_FLIGHT 256

typedef struct lrun {
    struct event_base *base;
    uv_loop_t          uv;
    int                is_uv;
    feed_async        *a;
    long               started, done, n;
} lrun;

static void loop_page(feed_async *a, int rc, feed_result *page, void *arg);

static void loop_start(lrun *l)
{
    int rc = feed_async_page(l->a, UID_1K, FEED_FIRST, 0, PAGE_LIMIT, loop_page, l);

    if (rc != FEED_OK)
        die("feed_async_page: %s: %s", feed_strerror(rc), feed_async_errmsg(l->a));
    l->started++;
}

static void loop_page(feed_async *a, int rc, feed_result *page, void *arg)
{
    lrun *l = arg;

    if (rc != FEED_OK || page->source != FEED_SOURCE_CACHE || page->count != PAGE_LIMIT)
        die("feed_async_page: rc %d source %d, %zu items: %s", rc,
            rc == FEED_OK ? (int)page->source : -1, rc == FEED_OK ? page->count : 0,
            feed_async_errmsg(a));
    feed_result_free(page);
    l->done++;
    if (l->started < l->n)
        loop_start(l);
}

/* n pages, IN_FLIGHT at a time, the loop turned until the last is in. */
static void loop_run(lrun *l, long n)
{
    l->started = l->done = 0;
    l->n = n;
    for (long i = 0; i < IN_FLIGHT && i < n; i++)
        loop_start(l);
    while (l->done < n) {
        if (l->is_uv)
            uv_run(&l->uv, UV_RUN_ONCE);
        else
            event_base_loop(l->base, EVLOOP_ONCE);
    }
}

int main(int argc, char **argv)
{
    lrun l;
    feed_config cfg;
    feed *f;
    redisContext *c;
    long n;
    int rc, report;
    pid_t rpid = 0;
    feed_stats s0, s1;
    uint64_t cpu0 = 0, t0 = 0;

    if (argc != 4 || (strcmp(argv[1], "libevent") && strcmp(argv[1], "libuv")) ||
        strcmp(argv[2], "0") != 0)
        die("usage: loop_cpu libevent|libuv 0 N");
    n = atol(argv[3]);
    memset(&l, 0, sizeof l);
    l.is_uv = strcmp(argv[1], "libuv") == 0;
    c = b_redis();
    f = b_open("feed", 1000);     /* settles the restart fence, warms the feed */
    {
        feed_result r;
        if (feed_page(f, UID_1K, FEED_FIRST, 0, PAGE_LIMIT, &r) != FEED_OK)
            die("feed_page: %s", feed_errmsg(f));
        feed_result_free(&r);
    }
    b_config(&cfg, "feed", 1000);
    if (l.is_uv) {
        if (uv_loop_init(&l.uv) != 0)
            die("uv_loop_init failed");
        rc = feed_async_open_libuv(&l.a, &cfg, &l.uv);
    } else {
        if (!(l.base = event_base_new()))
            die("event_base_new failed");
        rc = feed_async_open_libevent(&l.a, &cfg, l.base);
    }
    if (rc != FEED_OK)
        die("feed_async_open: %s: %s", feed_strerror(rc), feed_async_errmsg(NULL));
    loop_run(&l, IN_FLIGHT);    /* connected, scripts loaded: uncounted */
    report = strcmp(env_or("FEED_BENCH_REPORT", "0"), "1") == 0;
    if (report) {
        rpid = redis_pid(c);
        feed_async_stats_get(l.a, &s0);
        cpu0 = proc_cpu_ns(rpid);
        t0 = now_ns();
    }
    loop_run(&l, n);
    if (report) {
        uint64_t t1 = now_ns(), cpu1 = proc_cpu_ns(rpid);
        feed_async_stats_get(l.a, &s1);
        printf("calls %ld redis_calls %llu redis_cpu_ns %llu wall_ns %llu\n", n,
               (unsigned long long)(s1.redis_calls - s0.redis_calls),
               (unsigned long long)(cpu1 - cpu0), (unsigned long long)(t1 - t0));
    }
    feed_async_close(l.a);
    if (l.is_uv) {
        uv_run(&l.uv, UV_RUN_NOWAIT);
        if (uv_loop_close(&l.uv) != 0)
            die("uv_loop_close: a handle is still open");
    } else {
        event_base_free(l.base);
    }
    feed_close(f);
    redisFree(c);
    return 0;
}
