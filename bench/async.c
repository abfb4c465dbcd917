/* async.c -- section "async": the asynchronous API (feedcache_libevent.h,
 * feedcache_libuv.h) against the blocking one, on the cached first page of
 * uid 2's 1,000-item feed, and against the physical limit of one Redis
 * connection.
 *
 *   1. Interleaved rounds of: one libevent loop thread keeping 256 requests
 *      in flight (each callback starts the next request), the same on
 *      libuv, one blocking thread calling feed_page in a loop, 8 blocking
 *      threads (a handle each), and redis-benchmark -c 1 -P 64 of the
 *      ZREVRANGE the page makes. Per round: pages/s, Redis process CPU per
 *      page (/proc, as section "cpu") and the client's CPU per page.
 *   2. Latency of cached pages on one loop while PostgreSQL is frozen
 *      (tools/servers.sh pg-freeze: SIGSTOP) against not frozen, rounds
 *      alternating, with pages past the cache mixed in at a steady rate so
 *      that the loop has SQL to wait on.
 *   3. The client's memory per request in flight (heap growth, mallinfo2,
 *      with Redis frozen so that none can complete), and 10,000 requests in
 *      flight on one handle, every one completing with the right page.
 *
 * The figures are checked pages: every callback compares its items with
 * the feed in SQL, and a wrong page ends the bench. */
#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <uv.h>

#include "bench.h"
#include "reads.h"
#include "feedcache_libevent.h"
#include "feedcache_libuv.h"

#define IN_FLIGHT   256      /* part 1: requests one loop keeps in flight */
#define NTHREADS    8        /* part 1: blocking threads, a handle each */
#define RB_PIPELINE 64       /* part 1: redis-benchmark -P */
#define LAT_FLIGHT  64       /* part 2: cached pages in flight */
#define SQL_EVERY_MS 20      /* part 2: a page past the cache this often */
#define FROZEN_PG_TIMEOUT_MS 1000   /* part 2: the handle's pg_timeout_ms */
#define HOLD        10000    /* part 3: requests in flight on one handle */

/* ------------------------------------------------------------ loops */

/* An event loop of either kind and the handle on it. */
typedef struct aloop {
    struct event_base *base;    /* libevent, or */
    uv_loop_t          uv;      /* libuv */
    int                is_uv;
    feed_async        *a;
} aloop;

static void aloop_open(aloop *l, int is_uv, const feed_config *cfg)
{
    int rc;

    memset(l, 0, sizeof *l);
    l->is_uv = is_uv;
    if (is_uv) {
        if (uv_loop_init(&l->uv) != 0)
            die("uv_loop_init failed");
        rc = feed_async_open_libuv(&l->a, cfg, &l->uv);
    } else {
        if (!(l->base = event_base_new()))
            die("event_base_new failed");
        rc = feed_async_open_libevent(&l->a, cfg, l->base);
    }
    if (rc != FEED_OK)
        die("feed_async_open: %s: %s", feed_strerror(rc), feed_async_errmsg(NULL));
}

/* One turn: waits for something to happen, runs what did. */
static void aloop_once(aloop *l)
{
    if (l->is_uv)
        uv_run(&l->uv, UV_RUN_ONCE);
    else
        event_base_loop(l->base, EVLOOP_ONCE);
}

/* One turn that does not wait. */
static void aloop_poll(aloop *l)
{
    if (l->is_uv)
        uv_run(&l->uv, UV_RUN_NOWAIT);
    else
        event_base_loop(l->base, EVLOOP_NONBLOCK);
}

static void aloop_close(aloop *l)
{
    feed_async_close(l->a);
    if (l->is_uv) {
        uv_run(&l->uv, UV_RUN_NOWAIT);
        if (uv_loop_close(&l->uv) != 0)
            die("uv_loop_close: a handle is still open");
    } else {
        event_base_free(l->base);
    }
}

/* A page as the callback got it against what SQL says it is: items
 * want[0..n), the source, more after it. Ends the bench otherwise. */
static void check_page(feed_async *a, int rc, const feed_result *p, const feed_item *want,
                       size_t n, feed_source src, const char *what)
{
    if (rc != FEED_OK)
        die("%s: %s: %s", what, feed_strerror(rc), feed_async_errmsg(a));
    if (p->source != src || p->count != n || !p->has_more ||
        memcmp(p->items, want, n * sizeof *want) != 0)
        die("%s: a wrong page (source %d, %zu items, has_more %d)", what, (int)p->source,
            p->count, p->has_more);
}

/* ------------------------------------------------------------ floods */

/* Requests for uid 2's first page, kept in flight: each callback checks
 * its page and starts the next request, until stop_ns. */
typedef struct flood flood;

typedef struct slot {
    flood   *fl;
    uint64_t t0;
} slot;

struct flood {
    aloop           *l;
    slot            *slots;
    size_t           inflight, done;
    uint64_t         stop_ns;
    const feed_item *want;      /* the first page in SQL */
    samples         *lat;       /* each page's latency, µs, or NULL */
};

static void flood_page(feed_async *a, int rc, feed_result *page, void *arg);

static void flood_start(slot *s)
{
    flood *fl = s->fl;
    int rc;

    s->t0 = now_ns();
    rc = feed_async_page(fl->l->a, UID_1K, FEED_FIRST, 0, PAGE_LIMIT, flood_page, s);
    if (rc != FEED_OK)
        die("feed_async_page: %s: %s", feed_strerror(rc), feed_async_errmsg(fl->l->a));
    fl->inflight++;
}

static void flood_page(feed_async *a, int rc, feed_result *page, void *arg)
{
    slot *s = arg;
    flood *fl = s->fl;
    uint64_t t = now_ns();

    check_page(a, rc, page, fl->want, PAGE_LIMIT, FEED_SOURCE_CACHE, "async first page");
    feed_result_free(page);
    fl->inflight--;
    fl->done++;
    if (fl->lat)
        sm_add(fl->lat, (double)(t - s->t0) / 1e3);
    if (t < fl->stop_ns)
        flood_start(s);
}

/* Start n requests; the caller turns the loop. */
static void flood_begin(flood *fl, aloop *l, size_t n, const feed_item *want, double secs,
                        samples *lat)
{
    memset(fl, 0, sizeof *fl);
    fl->l = l;
    fl->want = want;
    fl->lat = lat;
    fl->slots = calloc(n, sizeof *fl->slots);
    if (!fl->slots)
        die("out of memory");
    fl->stop_ns = now_ns() + (uint64_t)(secs * 1e9);
    for (size_t i = 0; i < n; i++) {
        fl->slots[i].fl = fl;
        flood_start(&fl->slots[i]);
    }
}

/* ------------------------------------------------------------ part 1 */

enum { K_EV, K_UV, K_B1, K_B8, K_RB, NK };
static const char *const kname[NK] = {
    "**one libevent loop thread, 256 in flight**", "one libuv loop thread, 256 in flight",
    "one blocking thread (feed_page in a loop)", "8 blocking threads, a handle each",
    "redis-benchmark -c 1 -P 64 (the same ZREVRANGE, no parse)"
};

typedef struct kstats {
    samples rate;     /* pages/s per round */
    samples rcpu;     /* Redis CPU per page, µs, per round */
    samples ccpu;     /* client CPU per page, µs, per round */
    samples tcpu;     /* the two together */
    samples lat;      /* every page, µs (not redis-benchmark) */
} kstats;

/* The measurement of one run of one kind. */
typedef struct krun {
    double   pages, secs;
    uint64_t client_ns;
} krun;

static uint64_t process_cpu_ns(void)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0)
        die("clock_gettime: %s", strerror(errno));
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static krun run_loop(aloop *l, const feed_item *want, double secs, samples *lat)
{
    flood fl;
    uint64_t c0 = process_cpu_ns(), t0 = now_ns();
    krun k;

    flood_begin(&fl, l, IN_FLIGHT, want, secs, lat);
    while (fl.inflight > 0)
        aloop_once(l);
    k.secs = (double)(now_ns() - t0) / 1e9;
    k.pages = (double)fl.done;
    k.client_ns = process_cpu_ns() - c0;
    free(fl.slots);
    return k;
}

static krun run_blocking(feed *f, double secs, samples *lat)
{
    page_ctx page = { f, UID_1K, { 0, 1, 0, 0 } };
    uint64_t c0 = process_cpu_ns(), t0 = now_ns(), stop = t0 + (uint64_t)(secs * 1e9), t = t0;
    size_t n = 0;
    krun k;

    do {
        uint64_t a = t;
        op_page(&page);
        t = now_ns();
        sm_add(lat, (double)(t - a) / 1e3);
        n++;
    } while (t < stop);
    k.secs = (double)(t - t0) / 1e9;
    k.pages = (double)n;
    k.client_ns = process_cpu_ns() - c0;
    return k;
}

typedef struct bthread {
    feed     *f;
    uint64_t  start, stop;
    size_t    pages;
    pthread_t t;
} bthread;

static void *bthread_run(void *arg)
{
    bthread *b = arg;
    page_ctx page = { b->f, UID_1K, { 0, 1, 0, 0 } };
    uint64_t now = now_ns();

    if (b->start > now)
        sleep_s((double)(b->start - now) / 1e9);
    b->pages = 0;
    do {
        op_page(&page);
        b->pages++;
    } while (now_ns() < b->stop);
    return NULL;
}

/* NTHREADS threads from one start to one stop; pages over that span. */
static krun run_threads(bthread *bt, double secs)
{
    uint64_t start = now_ns() + 20000000u, stop = start + (uint64_t)(secs * 1e9), c0, t1;
    krun k = { 0, 0, 0 };

    for (int i = 0; i < NTHREADS; i++) {
        bt[i].start = start;
        bt[i].stop = stop;
        if (pthread_create(&bt[i].t, NULL, bthread_run, &bt[i]) != 0)
            die("pthread_create failed");
    }
    sleep_s((double)(start - now_ns()) / 1e9);
    c0 = process_cpu_ns();
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(bt[i].t, NULL);
        k.pages += (double)bt[i].pages;
    }
    t1 = now_ns();
    k.client_ns = process_cpu_ns() - c0;
    k.secs = (double)(t1 - start) / 1e9;
    return k;
}

static uint64_t rusage_ns(const struct rusage *ru)
{
    return (uint64_t)ru->ru_utime.tv_sec * 1000000000u + (uint64_t)ru->ru_utime.tv_usec * 1000u +
           (uint64_t)ru->ru_stime.tv_sec * 1000000000u + (uint64_t)ru->ru_stime.tv_usec * 1000u;
}

/* redis-benchmark of key's first page, n requests: its own pages/s (the
 * figure it prints, start-up excluded) and its CPU (rusage). */
static krun run_rb(const char *key, long n)
{
    char port[16], num[24], pipe_n[8], line[512], *p;
    int fds[2], status;
    pid_t pid;
    struct rusage ru0, ru;
    FILE *fp;
    double rps = NAN;
    krun k;

    snprintf(port, sizeof port, "%s", env_or("FEED_REDIS_PORT", "6379"));
    snprintf(num, sizeof num, "%ld", n);
    snprintf(pipe_n, sizeof pipe_n, "%d", RB_PIPELINE);
    if (pipe(fds) != 0)
        die("pipe: %s", strerror(errno));
    pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        char stop[8];
        snprintf(stop, sizeof stop, "%d", PAGE_LIMIT);
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execlp("redis-benchmark", "redis-benchmark", "-h", env_or("FEED_REDIS_HOST", "127.0.0.1"),
               "-p", port, "-c", "1", "-P", pipe_n, "-n", num, "--csv", "ZREVRANGE", key, "0",
               stop, "WITHSCORES", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    if (!(fp = fdopen(fds[0], "r")))
        die("fdopen: %s", strerror(errno));
    /* "test","rps",...  then  "ZREVRANGE ...","97000.00",... */
    while (fgets(line, sizeof line, fp))
        if (strncmp(line, "\"ZREVRANGE", 10) == 0 && (p = strstr(line, "\",\"")) != NULL)
            rps = strtod(p + 3, NULL);
    fclose(fp);
    /* its CPU: what the children reaped so far used, before and after */
    if (getrusage(RUSAGE_CHILDREN, &ru0) != 0)
        die("getrusage: %s", strerror(errno));
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
        getrusage(RUSAGE_CHILDREN, &ru) != 0)
        die("redis-benchmark failed (exit status %d)", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    if (!(rps > 0))
        die("redis-benchmark: no requests per second in its output");
    k.pages = (double)n;
    k.secs = (double)n / rps;
    k.client_ns = rusage_ns(&ru) - rusage_ns(&ru0);
    return k;
}

static int have_rb(void)
{
    return system("redis-benchmark --version >/dev/null 2>&1") == 0;
}

static void part_pages(FILE *md, const feed_item *want, pid_t rpid)
{
    feed_config cfg;
    aloop ev, uv;
    feed *f1 = b_open("feed", 1000);
    bthread bt[NTHREADS];
    kstats ks[NK];
    int rounds = q_rounds(9), rb = have_rb();
    double secs = q_secs(0.6), rb_rate = 0;
    size_t nk = rb ? NK : NK - 1;
    char key[64];
    double r_pages, r_uv, r_cpu, r_cpu_uv, r_lim = NAN, r_lim_uv = NAN, r_bound, r_bound_uv;
    double r_ceil = NAN;

    b_key_copy(key, sizeof key, b_key("feed", UID_1K, ""));
    memset(ks, 0, sizeof ks);
    b_config(&cfg, "feed", 1000);
    aloop_open(&ev, 0, &cfg);
    aloop_open(&uv, 1, &cfg);
    for (int i = 0; i < NTHREADS; i++)
        bt[i].f = b_open("feed", 1000);
    /* Connected and warm, all of them, before the first round. */
    run_loop(&ev, want, 0.05, NULL);
    run_loop(&uv, want, 0.05, NULL);
    if (rb) {
        krun k = run_rb(key, 20000);
        rb_rate = k.pages / k.secs;
    } else {
        note("async: redis-benchmark not found (Debian's redis-tools): no physical-limit row");
    }

    for (int r = 0; r < rounds; r++) {
        for (size_t j = 0; j < nk; j++) {
            /* the order rotates, and turns around every other round */
            size_t kind = (j + (size_t)r) % nk;
            uint64_t cpu0, cpu1;
            krun k;
            if (r % 2)
                kind = nk - 1 - kind;
            cpu0 = proc_cpu_ns(rpid);
            switch (kind) {
            case K_EV: k = run_loop(&ev, want, secs, &ks[K_EV].lat); break;
            case K_UV: k = run_loop(&uv, want, secs, &ks[K_UV].lat); break;
            case K_B1: k = run_blocking(f1, secs, &ks[K_B1].lat); break;
            case K_B8: k = run_threads(bt, secs); break;
            default:   k = run_rb(key, (long)(rb_rate * secs) + 1000); break;
            }
            cpu1 = proc_cpu_ns(rpid);
            if (kind == K_RB)
                rb_rate = k.pages / k.secs;
            sm_add(&ks[kind].rate, k.pages / k.secs);
            sm_add(&ks[kind].rcpu, (double)(cpu1 - cpu0) / 1e3 / k.pages);
            sm_add(&ks[kind].ccpu, (double)k.client_ns / 1e3 / k.pages);
            sm_add(&ks[kind].tcpu, ks[kind].rcpu.v[ks[kind].rcpu.n - 1] +
                                   ks[kind].ccpu.v[ks[kind].ccpu.n - 1]);
        }
    }

    r_pages = median_of_ratios(&ks[K_EV].rate, &ks[K_B1].rate);
    r_uv = median_of_ratios(&ks[K_UV].rate, &ks[K_B1].rate);
    r_bound = median_of_ratios(&ks[K_B1].tcpu, &ks[K_EV].tcpu);
    r_bound_uv = median_of_ratios(&ks[K_B1].tcpu, &ks[K_UV].tcpu);
    r_cpu = median_of_ratios(&ks[K_EV].rcpu, &ks[K_B8].rcpu);
    r_cpu_uv = median_of_ratios(&ks[K_UV].rcpu, &ks[K_B8].rcpu);
    if (rb) {
        r_lim = median_of_ratios(&ks[K_EV].rate, &ks[K_RB].rate);
        r_lim_uv = median_of_ratios(&ks[K_UV].rate, &ks[K_RB].rate);
        r_ceil = median_of_ratios(&ks[K_RB].rate, &ks[K_B1].rate);
    }

    fprintf(md, "### Pages/s and Redis CPU per cached page\n\n"
            "The first page of uid 2's cached 1,000-item feed (%d items), every page"
            " checked against SQL. %d interleaved rounds of %.2f s per client (the order"
            " rotates every round); medians over rounds, and each ratio is the median of"
            " the per-round ratios. A loop thread keeps %d `feed_async_page` requests in"
            " flight on one handle: each callback checks its page and starts the next"
            " (requests started in one turn share one write). Redis CPU per page is the"
            " redis-server process's CPU (all threads, /proc) over the round / pages;"
            " client CPU is this process's (all threads), or redis-benchmark's own"
            " (rusage). redis-benchmark sends `ZREVRANGE %s 0 %d WITHSCORES` with %d"
            " requests pipelined on one connection and parses nothing: the physical"
            " limit of one connection; its pages/s is the figure it prints.\n\n"
            "| client | pages/s | Redis CPU per page | client CPU per page | p50 / p99 latency |\n"
            "| --- | ---: | ---: | ---: | ---: |\n",
            PAGE_LIMIT, rounds, secs, IN_FLIGHT, key, PAGE_LIMIT, RB_PIPELINE);
    for (size_t k = 0; k < nk; k++) {
        char lat[64] = "-";
        if (ks[k].lat.n)
            snprintf(lat, sizeof lat, "%s / %s µs", NUM(sm_pct(&ks[k].lat, 50)),
                     NUM(sm_pct(&ks[k].lat, 99)));
        fprintf(md, "| %s | %s | %s µs | %s µs | %s |\n", kname[k], NUM(sm_median(&ks[k].rate)),
                NUM(sm_median(&ks[k].rcpu)), NUM(sm_median(&ks[k].ccpu)), lat);
    }
    fprintf(md, "\n| ratio (median of per-round ratios) | libevent | libuv | target |\n"
            "| --- | ---: | ---: | --- |\n"
            "| pages/s: one loop thread / one blocking thread | **%.2fx** | %.2fx | >= 5x: %s |\n"
            "| Redis CPU per page: one loop thread / 8 blocking threads | **%.2fx** | %.2fx |"
            " <= 0.6x: %s |\n"
            "| pages/s: one loop thread / redis-benchmark -c 1 -P %d | **%.2fx** | %.2fx |"
            " >= 0.6x: %s |\n"
            "| client + Redis CPU per page: one blocking thread / one loop thread | %.2fx |"
            " %.2fx | (the CPU bound) |\n"
            "| pages/s: redis-benchmark -c 1 -P %d / one blocking thread | %.2fx | | (its pipeline of %d) |\n"
            "\nThe last two rows put the first in context. redis-benchmark keeps %d"
            " requests in flight on one connection and parses nothing; its rate is set by"
            " Redis's CPU per page, which falls as more requests share each read and write"
            " of the socket: a loop thread that keeps more in flight can pass it (compare"
            " the two rows' Redis CPU per page). When other work keeps every core busy,"
            " each client gets pages in proportion to the CPU it is given over the CPU a"
            " page costs (client and Redis): that gives the row before. A blocking thread"
            " loses its whole round-trip wait only where a core sits idle while it waits;"
            " read the first row against both and the load average.\n",
            r_pages, r_uv, verdict(r_pages >= 5), r_cpu, r_cpu_uv, verdict(r_cpu <= 0.6),
            RB_PIPELINE, r_lim, r_lim_uv, rb ? verdict(r_lim >= 0.6) : "no redis-benchmark",
            r_bound, r_bound_uv, RB_PIPELINE, r_ceil, RB_PIPELINE, RB_PIPELINE);
    out_summary("async_pages", "cached first pages/s: one libevent loop thread with 256"
                " requests in flight vs one blocking thread", ">= 5x", verdict(r_pages >= 5),
                "%.2fx (%s vs %s pages/s; libuv %.2fx; redis-benchmark -c 1 -P 64 /"
                " blocking: %.2fx; the CPU bound %.2fx)", r_pages,
                NUM(sm_median(&ks[K_EV].rate)), NUM(sm_median(&ks[K_B1].rate)), r_uv, r_ceil,
                r_bound);
    out_summary("async_cpu", "Redis CPU per cached page: one loop thread, 256 in flight, vs"
                " 8 blocking threads", "<= 0.6x", verdict(r_cpu <= 0.6),
                "%.2fx (%s vs %s µs; libuv %.2fx)", r_cpu, NUM(sm_median(&ks[K_EV].rcpu)),
                NUM(sm_median(&ks[K_B8].rcpu)), r_cpu_uv);
    if (rb)
        out_summary("async_limit", "the physical limit: one loop thread's pages/s vs"
                    " redis-benchmark -c 1 -P 64 of the same ZREVRANGE", ">= 0.6x",
                    verdict(r_lim >= 0.6), "%.2fx (%s vs %s pages/s; libuv %.2fx)", r_lim,
                    NUM(sm_median(&ks[K_EV].rate)), NUM(sm_median(&ks[K_RB].rate)), r_lim_uv);
    else
        out_summary("async_limit", "the physical limit: one loop thread's pages/s vs"
                    " redis-benchmark -c 1 -P 64 of the same ZREVRANGE", ">= 0.6x", "MISS",
                    "not measured: redis-benchmark missing (redis-tools)");

    for (size_t k = 0; k < NK; k++) {
        sm_free(&ks[k].rate);
        sm_free(&ks[k].rcpu);
        sm_free(&ks[k].ccpu);
        sm_free(&ks[k].tcpu);
        sm_free(&ks[k].lat);
    }
    for (int i = 0; i < NTHREADS; i++)
        feed_close(bt[i].f);
    feed_close(f1);
    aloop_close(&ev);
    aloop_close(&uv);
}

/* ------------------------------------------------------------ servers */

static int pg_frozen, redis_frozen;

static void servers_or_die(const char *cmd)
{
    if (b_servers(cmd) != 0)
        die("tools/servers.sh %s failed", cmd);
}

/* A bench that dies with a server frozen must not leave it so: the next
 * sections and run.sh's stop would hang on it. */
static void thaw_at_exit(void)
{
    if (pg_frozen)
        b_servers("pg-thaw");
    if (redis_frozen)
        b_servers("redis-thaw");
}

static void freeze(int store, int on)
{
    static int registered;
    int *flag = store ? &redis_frozen : &pg_frozen;

    if (!registered) {
        atexit(thaw_at_exit);
        registered = 1;
    }
    if (on)
        *flag = 1;      /* first: a freeze that half worked is undone at exit too */
    servers_or_die(store ? (on ? "redis-freeze" : "redis-thaw") : (on ? "pg-freeze" : "pg-thaw"));
    if (!on)
        *flag = 0;
}

/* ------------------------------------------------------------ part 2 */

/* Pages past the cache: uid 1's feed (100,000 rows; the handle caches the
 * first 1,000), one started every SQL_EVERY_MS by a timer on the loop. */
typedef struct sql_lane {
    aloop           *l;
    struct event    *tick;
    const feed_item *items;     /* uid 1 in SQL */
    size_t           n, next;
    size_t           inflight, ok, failed, started;
    uint64_t         stop_ns;
    samples          lat_ok, lat_failed;   /* ms */
    char             why[160];  /* the first failure's message */
} sql_lane;

typedef struct sql_req {
    sql_lane *lane;
    size_t    depth;
    uint64_t  t0;
} sql_req;

static void sql_page(feed_async *a, int rc, feed_result *page, void *arg)
{
    sql_req *q = arg;
    sql_lane *s = q->lane;
    double ms = (double)(now_ns() - q->t0) / 1e6;

    if (rc == FEED_OK) {
        check_page(a, rc, page, s->items + q->depth, PAGE_LIMIT, FEED_SOURCE_DB,
                   "a page past the cache");
        s->ok++;
        sm_add(&s->lat_ok, ms);
    } else {
        if (!s->failed++)
            snprintf(s->why, sizeof s->why, "%s: %s", feed_strerror(rc), feed_async_errmsg(a));
        sm_add(&s->lat_failed, ms);
    }
    feed_result_free(page);
    s->inflight--;
    free(q);
}

static void sql_tick(evutil_socket_t fd, short what, void *arg)
{
    sql_lane *s = arg;
    sql_req *q;
    int rc;

    (void)fd;
    (void)what;
    if (now_ns() >= s->stop_ns)
        return;
    if (!(q = malloc(sizeof *q)))
        die("out of memory");
    q->lane = s;
    q->depth = 1000 + (s->next++ % 50) * PAGE_LIMIT;   /* ranks 1,000..1,999 */
    q->t0 = now_ns();
    rc = feed_async_page(s->l->a, UID_BIG, s->items[q->depth - 1].score,
                         s->items[q->depth - 1].id, PAGE_LIMIT, sql_page, q);
    if (rc != FEED_OK)
        die("feed_async_page past the cache: %s", feed_strerror(rc));
    s->inflight++;
    s->started++;
}

enum { S_THAWED, S_FROZEN };

typedef struct state_stats {
    samples p99;                /* per round, µs */
    samples lat;                /* every cached page, µs */
    samples rate;               /* cached pages/s per round */
    samples ccpu;               /* this process's CPU per cached page, µs, per round */
    samples drain;              /* ms from the round's end until all settled */
    size_t  sql_ok, sql_failed, sql_started;
    samples sql_ok_ms, sql_failed_ms;
    char    why[160];           /* the first failure of a page past the cache */
} state_stats;

static void part_frozen(FILE *md, const feed_item *want, PGconn *pg)
{
    feed_config cfg;
    aloop l;
    feed_item *big;
    size_t nbig = sql_feed(pg, UID_BIG, &big);
    state_stats st[2];
    int rounds = q_rounds(7);
    double secs = q_secs(2.0), ratio;
    struct timeval every = { 0, SQL_EVERY_MS * 1000 };

    if (nbig != 100000)
        die("data set: uid %d has %zu rows", UID_BIG, nbig);
    if (b_servers("status") != 0) {
        note("async: no tools/servers.sh folder (FEED_SERVERS_DIR): PostgreSQL cannot be frozen");
        fprintf(md, "\n### Cached pages while PostgreSQL is frozen\n\nNot measured: no"
                " `FEED_SERVERS` / `FEED_SERVERS_DIR` (bench/run.sh sets them).\n");
        out_summary("async_frozen", "p99 of cached pages on the async API, PostgreSQL frozen"
                    " vs not", "<= 1.5x", "MISS", "not measured (no servers folder)");
        free(big);
        return;
    }
    memset(st, 0, sizeof st);
    b_config(&cfg, "feed", 1000);
    cfg.pg_timeout_ms = FROZEN_PG_TIMEOUT_MS;
    aloop_open(&l, 0, &cfg);
    {   /* warm: uid 1's first 1,000 cached, the connections made */
        feed *f = b_open("feed", 1000);
        feed_result r;
        if (feed_page(f, UID_BIG, FEED_FIRST, 0, PAGE_LIMIT, &r) != FEED_OK)
            die("warming uid %d: %s", UID_BIG, feed_errmsg(f));
        feed_result_free(&r);
        feed_close(f);
    }
    run_loop(&l, want, 0.05, NULL);

    for (int r = 0; r < rounds; r++) {
        for (int j = 0; j < 2; j++) {
            int state = (j + r) % 2;
            flood fl;
            sql_lane s;
            samples lat = { 0 };
            uint64_t t0, t1, c0, c1;
            memset(&s, 0, sizeof s);
            s.l = &l;
            s.items = big;
            s.n = nbig;
            if (state == S_FROZEN)
                freeze(0, 1);
            if (!(s.tick = event_new(l.base, -1, EV_PERSIST, sql_tick, &s)))
                die("event_new failed");
            t0 = now_ns();
            c0 = process_cpu_ns();
            s.stop_ns = t0 + (uint64_t)(secs * 1e9);
            event_add(s.tick, &every);
            flood_begin(&fl, &l, LAT_FLIGHT, want, secs, &lat);
            while (now_ns() < s.stop_ns)
                aloop_once(&l);
            t1 = now_ns();
            c1 = process_cpu_ns();
            event_free(s.tick);
            /* The cached pages settle first, PostgreSQL still frozen (the
             * thaw stops the loop for a while: its wait must not count);
             * one held up by PostgreSQL would keep them for a whole
             * pg_timeout_ms and more, and its latency shows. Then the
             * thaw, and the pages past the cache settle. */
            while (fl.inflight > 0 &&
                   now_ns() - t1 < (uint64_t)(FROZEN_PG_TIMEOUT_MS + 1000) * 1000000u)
                aloop_once(&l);
            if (state == S_FROZEN)
                freeze(0, 0);
            while (fl.inflight > 0 || s.inflight > 0)
                aloop_once(&l);
            sm_add(&st[state].drain, (double)(now_ns() - t1) / 1e6);
            sm_add(&st[state].p99, sm_pct(&lat, 99));
            sm_add(&st[state].rate, (double)fl.done / ((double)(t1 - t0) / 1e9));
            sm_add(&st[state].ccpu, (double)(c1 - c0) / 1e3 / (double)fl.done);
            for (size_t i = 0; i < lat.n; i++)
                sm_add(&st[state].lat, lat.v[i]);
            st[state].sql_ok += s.ok;
            st[state].sql_failed += s.failed;
            st[state].sql_started += s.started;
            if (!st[state].why[0])
                memcpy(st[state].why, s.why, sizeof s.why);
            for (size_t i = 0; i < s.lat_ok.n; i++)
                sm_add(&st[state].sql_ok_ms, s.lat_ok.v[i]);
            for (size_t i = 0; i < s.lat_failed.n; i++)
                sm_add(&st[state].sql_failed_ms, s.lat_failed.v[i]);
            sm_free(&lat);
            sm_free(&s.lat_ok);
            sm_free(&s.lat_failed);
            free(fl.slots);
        }
    }
    ratio = median_of_ratios(&st[S_FROZEN].p99, &st[S_THAWED].p99);

    fprintf(md, "\n### Cached pages while PostgreSQL is frozen\n\n"
            "One libevent loop thread keeps %d requests for uid 2's cached first page in"
            " flight (each callback starts the next) while a timer on the same loop starts"
            " a page past the cache every %d ms (uid 1: 100,000 rows, the first 1,000"
            " cached; ranks 1,000-1,999, read from SQL). Rounds alternate between"
            " PostgreSQL frozen (`tools/servers.sh pg-freeze`: SIGSTOP, the socket accepts"
            " and nothing answers) and not frozen, %d rounds of %.2f s each;"
            " `pg_timeout_ms` %d. At a round's end the cached pages in flight settle"
            " and count, PostgreSQL still frozen (one held up by it would show, for up"
            " to `pg_timeout_ms` + 1 s, then the thaw frees it); then the thaw, and the"
            " pages past the cache settle (the last column: how long). p99 per round, and the ratio is the median of the per-round"
            " ratios; p50 / p99 / max pooled over rounds.\n\n"
            "| PostgreSQL | cached pages/s | client CPU per cached page | cached p50 / p99 / max |"
            " pages past the cache: ok (median ms) / failed (median ms) of started | settled"
            " after the round |\n"
            "| --- | ---: | ---: | ---: | ---: | ---: |\n",
            LAT_FLIGHT, SQL_EVERY_MS, rounds, secs, FROZEN_PG_TIMEOUT_MS);
    for (int s = 0; s < 2; s++)
        fprintf(md, "| %s | %s | %s µs | %s / %s / %s µs | %zu (%s ms) / %zu (%s ms) of %zu |"
                " %s ms (max %s) |\n",
                s == S_FROZEN ? "**frozen**" : "running", NUM(sm_median(&st[s].rate)),
                NUM(sm_median(&st[s].ccpu)),
                NUM(sm_pct(&st[s].lat, 50)), NUM(sm_pct(&st[s].lat, 99)), NUM(sm_max(&st[s].lat)),
                st[s].sql_ok, NUM(sm_median(&st[s].sql_ok_ms)), st[s].sql_failed,
                NUM(sm_median(&st[s].sql_failed_ms)), st[s].sql_started,
                NUM(sm_median(&st[s].drain)), NUM(sm_max(&st[s].drain)));
    for (int s = 0; s < 2; s++)
        if (st[s].why[0])
            fprintf(md, "\nThe first page past the cache that failed, PostgreSQL %s: `%s`\n",
                    s == S_FROZEN ? "frozen" : "running", st[s].why);
    fprintf(md, "\np99 of cached pages, frozen / running: **%.2fx** (target <= 1.5x: %s).\n",
            ratio, verdict(ratio <= 1.5));
    out_summary("async_frozen", "p99 of cached pages on one loop, PostgreSQL frozen vs not,"
                " pages past the cache mixed in", "<= 1.5x", verdict(ratio <= 1.5),
                "%.2fx (%s vs %s µs)", ratio, NUM(sm_median(&st[S_FROZEN].p99)),
                NUM(sm_median(&st[S_THAWED].p99)));
    for (int s = 0; s < 2; s++) {
        sm_free(&st[s].p99);
        sm_free(&st[s].lat);
        sm_free(&st[s].rate);
        sm_free(&st[s].ccpu);
        sm_free(&st[s].drain);
        sm_free(&st[s].sql_ok_ms);
        sm_free(&st[s].sql_failed_ms);
    }
    aloop_close(&l);
    free(big);
}

/* ------------------------------------------------------------ part 3 */

/* The heap in use: glibc's arenas and its mmapped blocks. */
static double heap_bytes(void)
{
    struct mallinfo2 m = mallinfo2();

    return (double)m.uordblks + (double)m.hblkhd;
}

static double rss_bytes(void)
{
    long pages = 0, rss = 0;
    FILE *fp = fopen("/proc/self/statm", "r");

    if (!fp || fscanf(fp, "%ld %ld", &pages, &rss) != 2)
        die("/proc/self/statm unreadable");
    fclose(fp);
    return (double)rss * (double)sysconf(_SC_PAGESIZE);
}

/* Requests held: page at a depth of uid 2 (a cursor from SQL), checked
 * when it comes. */
typedef struct held {
    const feed_item *items;     /* uid 2 in SQL */
    size_t           depth;
    int              done;
} held;

static size_t held_left;

static void held_page(feed_async *a, int rc, feed_result *page, void *arg)
{
    held *h = arg;

    if (h->done)
        die("a request called back twice");
    check_page(a, rc, page, h->items + h->depth, PAGE_LIMIT, FEED_SOURCE_CACHE,
               "a page held in flight");
    h->done = 1;
    held_left--;
    feed_result_free(page);
}

typedef struct hold_res {
    double queued, sent, rss;   /* bytes per request: started; written; RSS */
    double settle_ms;
    size_t early;
} hold_res;

/* With Redis frozen, start n requests (pages at 49 depths), turn the loop
 * until they are written, measure, thaw, and check every page. */
static hold_res hold(aloop *l, const feed_item *items, size_t n)
{
    held *h = calloc(n, sizeof *h);
    double m0, m1, m2, r0, r2;
    uint64_t t0;
    hold_res res;

    if (!h)
        die("out of memory");
    freeze(1, 1);
    malloc_trim(0);
    m0 = heap_bytes();
    r0 = rss_bytes();
    held_left = 0;
    for (size_t i = 0; i < n; i++) {
        size_t d = (i % 49) * PAGE_LIMIT;
        int rc;
        h[i].items = items;
        h[i].depth = d;
        rc = d ? feed_async_page(l->a, UID_1K, items[d - 1].score, items[d - 1].id, PAGE_LIMIT,
                                 held_page, &h[i])
               : feed_async_page(l->a, UID_1K, FEED_FIRST, 0, PAGE_LIMIT, held_page, &h[i]);
        if (rc != FEED_OK)
            die("request %zu of %zu: %s: %s", i, n, feed_strerror(rc), feed_async_errmsg(l->a));
        held_left++;
    }
    m1 = heap_bytes();
    /* A few turns: the requests run, their commands go out (to the
     * kernel's buffer, or hiredis's when that is full) and wait. */
    for (int i = 0; i < 50; i++)
        aloop_poll(l);
    m2 = heap_bytes();
    r2 = rss_bytes();
    res.early = n - held_left;
    t0 = now_ns();
    freeze(1, 0);
    while (held_left > 0)
        aloop_once(l);
    res.settle_ms = (double)(now_ns() - t0) / 1e6;
    res.queued = (m1 - m0) / (double)n;
    res.sent = (m2 - m0) / (double)n;
    res.rss = (r2 - r0) / (double)n;
    for (size_t i = 0; i < n; i++)
        if (!h[i].done)
            die("request %zu of %zu never called back", i, n);
    free(h);
    return res;
}

static void part_memory(FILE *md, const feed_item *items)
{
    feed_config cfg;
    aloop l;
    size_t ns[2] = { 1000, HOLD };
    hold_res res[2];
    double base0, base1;

    if (b_servers("status") != 0) {
        fprintf(md, "\n### Memory per request in flight\n\nNot measured: no"
                " `FEED_SERVERS` / `FEED_SERVERS_DIR` (bench/run.sh sets them).\n");
        out_summary("async_memory", "client memory per request in flight; 10,000 in flight"
                    " on one handle", "report", "MISS", "not measured (no servers folder)");
        return;
    }
    b_config(&cfg, "feed", 1000);
    cfg.redis_timeout_ms = 60000;     /* the requests wait for a frozen Redis */
    malloc_trim(0);
    base0 = heap_bytes();
    aloop_open(&l, 0, &cfg);
    run_loop(&l, items, 0.05, NULL);  /* connected, warm */
    base1 = heap_bytes();
    for (int i = 0; i < 2; i++) {
        note("async: %zu requests in flight on one handle", ns[i]);
        res[i] = hold(&l, items, ns[i]);
        if (res[i].early)
            die("%zu of %zu requests completed with Redis frozen", res[i].early, ns[i]);
    }
    fprintf(md, "\n### Memory per request in flight; 10,000 in flight on one handle\n\n"
            "One libevent handle, connected and warm (the handle itself: %s bytes of heap,"
            " its loop included). Redis is frozen (`tools/servers.sh redis-freeze`) so"
            " that no request can complete; N `feed_async_page` requests are started"
            " (pages of uid 2 at 49 cursors, ranks 0-960), then the loop turns until they"
            " are written and wait for their replies. Heap in use from glibc's mallinfo2"
            " (arenas + mmapped blocks) before and after, per request; RSS from"
            " /proc/self/statm. Then Redis is thawed and every request must call back"
            " once with the page SQL holds (the last column counts from the thaw"
            " command's start: `tools/servers.sh` itself takes part of it).\n\n"
            "| requests in flight | heap per request, started | **heap per request, sent and"
            " waiting** | RSS per request | all settled after the thaw in |\n"
            "| ---: | ---: | ---: | ---: | ---: |\n", NUM(base1 - base0));
    for (int i = 0; i < 2; i++)
        fprintf(md, "| %s | %s B | **%s B** | %s B | %s ms, every page right |\n", NUM((double)ns[i]),
                NUM(res[i].queued), NUM(res[i].sent), NUM(res[i].rss), NUM(res[i].settle_ms));
    out_summary("async_memory", "client memory per request in flight (heap, sent and waiting);"
                " 10,000 in flight on one handle", "report", "report",
                "%s B per request at 10,000 in flight (%s B at 1,000); 10,000 held, all"
                " completed right", NUM(res[1].sent), NUM(res[0].sent));
    aloop_close(&l);
}

/* ------------------------------------------------------------ section */

void section_async(void)
{
    redisContext *c = b_redis(), *stats = b_redis();
    pid_t rpid = redis_pid(stats);
    PGconn *pg = b_pg();
    feed *f = b_open("feed", 1000);
    feed_item *k1;
    size_t n1k = sql_feed(pg, UID_1K, &k1);
    FILE *md = out_section("async");

    if (n1k != 1000)
        die("data set: uid %d has %zu rows (run bench/load.sql)", UID_1K, n1k);
    warm(f, c, UID_1K, "feed", 1001);
    feed_close(f);
    fprintf(md, "## The asynchronous API: one event-loop thread\n\n"
            "`feed_async_*` (feedcache_libevent.h, feedcache_libuv.h) against the blocking"
            " API and against the physical limit of one Redis connection.\n\n");
    note("async: pages/s and Redis CPU per page");
    part_pages(md, k1, rpid);
    note("async: cached pages with PostgreSQL frozen");
    part_frozen(md, k1, pg);
    note("async: memory per request in flight");
    part_memory(md, k1);
    fclose(md);
    free(k1);
    PQfinish(pg);
    redisFree(c);
    redisFree(stats);
}
