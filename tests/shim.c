/* shim.c -- the C tests through the asynchronous API (shim.h says how). */
#define TU_SHIM_SELF
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <uv.h>

#include "internal.h"
#include "drive/async.h"
#include "feedcache_libevent.h"
#include "feedcache_libuv.h"
#include "shim.h"

typedef struct twin {
    feed              *f;
    feed_async        *a;
    struct event_base *base;
    uv_loop_t          uv;
    int                last_async;  /* the last call went through a */
    char               errmsg[512];
    struct twin       *next;
} twin;

static pthread_mutex_t twins_lock = PTHREAD_MUTEX_INITIALIZER;
static twin *twins;

static void die(const char *why)
{
    printf("Bail out! shim: %s\n", why);
    fflush(stdout);
    exit(255);
}

int tu_async(void)
{
    const char *v = getenv("FEED_TEST_ASYNC");

    if (!v || !*v || strcmp(v, "0") == 0)
        return 0;
    return strcmp(v, "libuv") == 0 ? 2 : 1;
}

static twin *twin_of(const feed *f)
{
    twin *t;

    pthread_mutex_lock(&twins_lock);
    for (t = twins; t && t->f != f; t = t->next)
        ;
    pthread_mutex_unlock(&twins_lock);
    return t;
}

int tu_feed_open(feed **out, const feed_config *cfg)
{
    int rc = feed_open(out, cfg), arc;
    twin *t;

    if (rc != FEED_OK || !tu_async())
        return rc;
    if (!(t = calloc(1, sizeof *t)))
        die("out of memory");
    t->f = *out;
    if (tu_async() == 1) {
        if (!(t->base = event_base_new()))
            die("event_base_new");
        arc = feed_async_open_libevent(&t->a, cfg, t->base);
    } else {
        if (uv_loop_init(&t->uv) != 0)
            die("uv_loop_init");
        arc = feed_async_open_libuv(&t->a, cfg, &t->uv);
    }
    if (arc != FEED_OK)
        die(feed_async_errmsg(NULL));
    t->a->core.handle = t->f;
    /* As feed_open returns connected, so does the twin before the test
     * counts anything. */
    while (feed__async_busy(t->a)) {
        if (t->base)
            event_base_loop(t->base, EVLOOP_ONCE);
        else
            uv_run(&t->uv, UV_RUN_ONCE);
    }
    pthread_mutex_lock(&twins_lock);
    t->next = twins;
    twins = t;
    pthread_mutex_unlock(&twins_lock);
    return rc;
}

void tu_feed_close(feed *f)
{
    twin **p, *t = NULL;

    pthread_mutex_lock(&twins_lock);
    for (p = &twins; *p; p = &(*p)->next)
        if ((*p)->f == f) {
            t = *p;
            *p = t->next;
            break;
        }
    pthread_mutex_unlock(&twins_lock);
    if (t) {
        feed_async_close(t->a);
        if (t->base) {
            event_base_free(t->base);
        } else {
            uv_run(&t->uv, UV_RUN_NOWAIT);     /* the handles' close callbacks */
            if (uv_loop_close(&t->uv) != 0)
                die("uv_loop_close: a handle is still open");
        }
        free(t);
    }
    feed_close(f);
}

const char *tu_feed_errmsg(const feed *f)
{
    twin *t = f ? twin_of(f) : NULL;

    return t && t->last_async ? t->errmsg : feed_errmsg(f);
}

void tu_feed_stats_get(const feed *f, feed_stats *out)
{
    twin *t = f ? twin_of(f) : NULL;
    feed_stats as;

    feed_stats_get(f, out);
    if (!t || !out)
        return;
    feed_async_stats_get(t->a, &as);
    for (size_t i = 0; i < sizeof as / sizeof(uint64_t); i++)
        ((uint64_t *)out)[i] += ((uint64_t *)&as)[i];
}

/* ---- One request, run to its callback ---------------------------------- */

typedef struct call {
    twin        *t;
    int          starting;      /* inside the starting call */
    int          calls;         /* callbacks seen */
    int          rc;
    feed_result *out;
    int64_t      next_rank;
    feed_health_info *health;
} call;

static void check_callback(call *c, feed_async *a, int rc)
{
    if (c->starting)
        die("a callback came from inside the call that started its request");
    if (++c->calls > 1)
        die("a callback came twice");
    c->rc = rc;
    snprintf(c->t->errmsg, sizeof c->t->errmsg, "%s", feed_async_errmsg(a));
}

static void on_page(feed_async *a, int rc, feed_result *page, void *arg)
{
    call *c = arg;

    check_callback(c, a, rc);
    if ((rc == FEED_OK) != (page != NULL))
        die("a page callback's page and code disagree");
    if (page)
        *c->out = *page;        /* the test frees it */
}

static void on_ranked(feed_async *a, int rc, feed_result *page, int64_t next_rank, void *arg)
{
    call *c = arg;

    on_page(a, rc, page, arg);
    c->next_rank = next_rank;
}

static void on_done(feed_async *a, int rc, void *arg)
{
    check_callback(arg, a, rc);
}

/* The twin's copy of the blocking handle's test hooks (tests/t_lease.c). */
static void share_hooks(twin *t)
{
    t->a->core.test_before_install = t->f->core.test_before_install;
    t->a->core.test_after_node_scan = t->f->core.test_after_node_scan;
    t->a->core.test_arg = t->f->core.test_arg;
}

/* Started (rc from the starting call): run the loop until the callback. */
static int run(call *c, int rc)
{
    c->starting = 0;
    c->t->last_async = 1;
    if (rc != FEED_OK) {        /* refused at once: no callback may come */
        snprintf(c->t->errmsg, sizeof c->t->errmsg, "%s", feed_async_errmsg(c->t->a));
        if (c->t->base)
            event_base_loop(c->t->base, EVLOOP_NONBLOCK);
        else
            uv_run(&c->t->uv, UV_RUN_NOWAIT);
        if (c->calls)
            die("a refused request got a callback");
        return rc;
    }
    while (!c->calls) {
        if (c->t->base)
            event_base_loop(c->t->base, EVLOOP_ONCE);
        else
            uv_run(&c->t->uv, UV_RUN_ONCE);
    }
    return c->rc;
}

#define BEGIN(f) \
    twin *t = tu_async() ? twin_of(f) : NULL; \
    call c = { t, 1, 0, 0, NULL, -1, NULL }; \
    if (t) share_hooks(t)

int tu_feed_page(feed *f, int64_t uid, int64_t last_score, int64_t last_id, size_t limit,
                 feed_result *out)
{
    BEGIN(f);
    if (!t || !out)
        return feed_page(f, uid, last_score, last_id, limit, out);
    memset(out, 0, sizeof *out);
    c.out = out;
    return run(&c, feed_async_page(t->a, uid, last_score, last_id, limit, on_page, &c));
}

int tu_feed_page_ranked(feed *f, int64_t uid, int64_t last_score, int64_t last_id,
                        int64_t rank, size_t limit, feed_result *out, int64_t *next_rank)
{
    int rc;
    BEGIN(f);

    if (!t || !out)
        return feed_page_ranked(f, uid, last_score, last_id, rank, limit, out, next_rank);
    memset(out, 0, sizeof *out);
    c.out = out;
    rc = run(&c, feed_async_page_ranked(t->a, uid, last_score, last_id, rank, limit, on_ranked,
                                        &c));
    if (next_rank)
        *next_rank = rc == FEED_OK ? c.next_rank : -1;
    return rc;
}

int tu_feed_page_newer(feed *f, int64_t uid, int64_t score, int64_t id, size_t limit,
                       feed_result *out)
{
    BEGIN(f);
    if (!t || !out)
        return feed_page_newer(f, uid, score, id, limit, out);
    memset(out, 0, sizeof *out);
    c.out = out;
    return run(&c, feed_async_page_newer(t->a, uid, score, id, limit, on_page, &c));
}

int tu_feed_page_merged(feed *f, int64_t uid, const int64_t *authors, size_t n,
                        int64_t last_score, int64_t last_id, size_t limit, feed_result *out)
{
    BEGIN(f);
    if (!t || !out)
        return feed_page_merged(f, uid, authors, n, last_score, last_id, limit, out);
    memset(out, 0, sizeof *out);
    c.out = out;
    return run(&c, feed_async_page_merged(t->a, uid, authors, n, last_score, last_id, limit,
                                          on_page, &c));
}

int tu_feed_page_filtered(feed *f, int64_t uid, int64_t last_score, int64_t last_id,
                          size_t limit, const feed_filter *filter, feed_result *out)
{
    BEGIN(f);
    if (!t || !out)
        return feed_page_filtered(f, uid, last_score, last_id, limit, filter, out);
    memset(out, 0, sizeof *out);
    c.out = out;
    return run(&c, feed_async_page_filtered(t->a, uid, last_score, last_id, limit, filter,
                                            on_page, &c));
}

int tu_feed_page_merged_filtered(feed *f, int64_t uid, const int64_t *authors, size_t n,
                                 int64_t last_score, int64_t last_id, size_t limit,
                                 const feed_filter *filter, feed_result *out)
{
    BEGIN(f);
    if (!t || !out)
        return feed_page_merged_filtered(f, uid, authors, n, last_score, last_id, limit,
                                         filter, out);
    memset(out, 0, sizeof *out);
    c.out = out;
    return run(&c, feed_async_page_merged_filtered(t->a, uid, authors, n, last_score, last_id,
                                                   limit, filter, on_page, &c));
}

int tu_feed_page_newer_filtered(feed *f, int64_t uid, int64_t score, int64_t id, size_t limit,
                                const feed_filter *filter, feed_result *out)
{
    BEGIN(f);
    if (!t || !out)
        return feed_page_newer_filtered(f, uid, score, id, limit, filter, out);
    memset(out, 0, sizeof *out);
    c.out = out;
    return run(&c, feed_async_page_newer_filtered(t->a, uid, score, id, limit, filter, on_page,
                                                  &c));
}

int tu_feed_on_insert(feed *f, int64_t uid, int64_t score, int64_t id)
{
    BEGIN(f);
    if (!t)
        return feed_on_insert(f, uid, score, id);
    return run(&c, feed_async_on_insert(t->a, uid, score, id, on_done, &c));
}

int tu_feed_on_delete(feed *f, int64_t uid, int64_t id)
{
    BEGIN(f);
    if (!t)
        return feed_on_delete(f, uid, id);
    return run(&c, feed_async_on_delete(t->a, uid, id, on_done, &c));
}

int tu_feed_author_on_insert(feed *f, int64_t author, int64_t score, int64_t id)
{
    BEGIN(f);
    if (!t)
        return feed_author_on_insert(f, author, score, id);
    return run(&c, feed_async_author_on_insert(t->a, author, score, id, on_done, &c));
}

int tu_feed_author_on_delete(feed *f, int64_t author, int64_t id)
{
    BEGIN(f);
    if (!t)
        return feed_author_on_delete(f, author, id);
    return run(&c, feed_async_author_on_delete(t->a, author, id, on_done, &c));
}

int tu_feed_fanout(feed *f, const int64_t *uids, size_t n, int64_t score, int64_t id)
{
    BEGIN(f);
    if (!t)
        return feed_fanout(f, uids, n, score, id);
    return run(&c, feed_async_fanout(t->a, uids, n, score, id, on_done, &c));
}

int tu_feed_invalidate(feed *f, int64_t uid)
{
    BEGIN(f);
    if (!t)
        return feed_invalidate(f, uid);
    return run(&c, feed_async_invalidate(t->a, uid, on_done, &c));
}

int tu_feed_author_invalidate(feed *f, int64_t author)
{
    BEGIN(f);
    if (!t)
        return feed_author_invalidate(f, author);
    return run(&c, feed_async_author_invalidate(t->a, author, on_done, &c));
}

/* The blocking handle's calls, noted as the last. */
static void blocking_call(feed *f)
{
    twin *t = f ? twin_of(f) : NULL;

    if (t)
        t->last_async = 0;
}

int tu_feed_reload(feed *f, int64_t uid)
{
    blocking_call(f);
    return feed_reload(f, uid);
}

int tu_feed_invalidate_many(feed *f, const int64_t *uids, size_t n)
{
    blocking_call(f);
    return feed_invalidate_many(f, uids, n);
}

int tu_feed_invalidate_all(feed *f, uint64_t *dropped)
{
    blocking_call(f);
    return feed_invalidate_all(f, dropped);
}

static void on_health(feed_async *a, int rc, const feed_health_info *h, void *arg)
{
    call *c = arg;

    check_callback(c, a, rc);
    if ((h == NULL) != (rc == FEED_ECANCELED))
        die("a health callback's info and code disagree");
    if (h && c->health)
        *c->health = *h;
}

/* feed_health(f, NULL) is feed_async_health with no callback: both refuse. */
int tu_feed_health(feed *f, feed_health_info *out)
{
    BEGIN(f);
    if (!t)
        return feed_health(f, out);
    c.health = out;
    return run(&c, feed_async_health(t->a, out ? on_health : NULL, &c));
}

uint32_t tu_feed_retry_after_ms(const feed *f)
{
    twin *t = f && tu_async() ? twin_of(f) : NULL;
    uint32_t ms = feed_retry_after_ms(f), ams = t ? feed_async_retry_after_ms(t->a) : 0;

    return ms > ams ? ms : ams;
}

int tu_feed_author_invalidate_many(feed *f, const int64_t *authors, size_t n)
{
    blocking_call(f);
    return feed_author_invalidate_many(f, authors, n);
}

int tu_feed_author_invalidate_all(feed *f, uint64_t *dropped)
{
    blocking_call(f);
    return feed_author_invalidate_all(f, dropped);
}
