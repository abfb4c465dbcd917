/* t_async.c -- the asynchronous API as an event loop uses it: many
 * requests in flight on one handle, callbacks exactly once and never from
 * inside the call that started them, argument errors at once with no
 * callback, requests started in one turn sharing one write, close with
 * requests pending (and from inside a callback), the health check, and a loop that keeps turning while
 * PostgreSQL or Redis is frozen. Real servers; libevent, and libuv for the walks and the
 * close. (Every other correctness test also runs through this API: their
 * ":async" runs, tests/shim.h.) */
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>
#include <uv.h>

#include "tap.h"
#include "testutil.h"
#include "fault.h"
#include "feedcache_libevent.h"
#include "feedcache_libuv.h"

static PGconn *pg;
static redisContext *r;

/* ---- A loop of either kind -------------------------------------------- */

typedef struct loop {
    struct event_base *base;    /* libevent, or */
    uv_loop_t          uv;      /* libuv */
    feed_async        *a;
} loop;

static void loop_open(loop *l, int uv, const feed_config *cfg)
{
    int rc;

    memset(l, 0, sizeof *l);
    if (uv) {
        uv_loop_init(&l->uv);
        rc = feed_async_open_libuv(&l->a, cfg, &l->uv);
    } else {
        l->base = event_base_new();
        rc = feed_async_open_libevent(&l->a, cfg, l->base);
    }
    if (rc != FEED_OK) {
        tap_bail(feed_async_errmsg(NULL));
        exit(255);
    }
}

static void loop_once(loop *l)
{
    if (l->base)
        event_base_loop(l->base, EVLOOP_ONCE);
    else
        uv_run(&l->uv, UV_RUN_ONCE);
}

static void loop_close(loop *l)
{
    feed_async_close(l->a);
    if (l->base) {
        event_base_free(l->base);
    } else {
        uv_run(&l->uv, UV_RUN_NOWAIT);
        if (uv_loop_close(&l->uv) != 0)
            tap_diag("uv_loop_close: a handle is still open");
    }
}

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- Walks in flight at once ------------------------------------------- */

typedef struct walk {
    loop      *l;
    int64_t    uid;
    size_t     limit;
    int64_t    score, id;       /* the cursor */
    feed_item *items;           /* what the walk got */
    size_t     n, cap;
    int        done, rc, callbacks, bad, starting;
    int        sources[4];
    const int64_t *authors;     /* n > 0: a merged timeline (feed_async_page_merged) */
    size_t     nauthors;
} walk;

static int walks_left;

static void next_page(walk *w);

static void on_walk_page(feed_async *a, int rc, feed_result *page, void *arg)
{
    walk *w = arg;

    (void)a;
    w->callbacks++;
    if (w->starting)
        w->bad = 1;             /* from inside the call that started it */
    if (rc != FEED_OK || !page) {
        w->rc = rc;
        w->done = 1;
        walks_left--;
        return;
    }
    if (page->source >= 1 && page->source <= 3)
        w->sources[page->source]++;
    if (w->n + page->count > w->cap) {
        w->cap = 2 * (w->n + page->count) + 16;
        w->items = realloc(w->items, w->cap * sizeof *w->items);
    }
    if (page->count > 0)
        memcpy(w->items + w->n, page->items, page->count * sizeof *page->items);
    w->n += page->count;
    if (page->has_more) {
        w->score = page->next_score;
        w->id = page->next_id;
        feed_result_free(page);
        next_page(w);
        return;
    }
    feed_result_free(page);
    w->done = 1;
    walks_left--;
}

static void next_page(walk *w)
{
    int64_t authors[16];
    int rc;

    w->starting = 1;
    if (w->nauthors == 0) {
        rc = feed_async_page(w->l->a, w->uid, w->score, w->id, w->limit, on_walk_page, w);
    } else {
        /* Authors from an array that is gone once the call returns: the
         * request must have copied them. */
        memcpy(authors, w->authors, w->nauthors * sizeof *authors);
        rc = feed_async_page_merged(w->l->a, w->uid, authors, w->nauthors, w->score, w->id,
                                    w->limit, on_walk_page, w);
        memset(authors, 0xff, sizeof authors);
    }
    w->starting = 0;
    if (rc != FEED_OK) {
        w->rc = rc;
        w->done = 1;
        walks_left--;
    }
}

/* 1 when w's items are uid's feed in SQL, in order. */
static int walk_equals_sql(const walk *w)
{
    feed_item *sql;
    size_t n = tu_sql_feed(pg, w->uid, &sql);
    int same = n == w->n && (n == 0 || memcmp(sql, w->items, n * sizeof *sql) == 0);

    free(sql);
    return same;
}

/* nwalks walks over nfeeds feeds (several walks per feed: stampedes on the
 * cold ones), all in flight at once on one handle; they run until all
 * are done. Returns how many equal SQL. */
static int walks_at_once(loop *l, int nwalks, int nfeeds, int64_t uid0, int *sources,
                         int *in_start)
{
    walk *w = calloc((size_t)nwalks, sizeof *w);
    int good = 0;

    walks_left = nwalks;
    for (int i = 0; i < nwalks; i++) {
        w[i].l = l;
        w[i].uid = uid0 + i % nfeeds;
        w[i].limit = (size_t)(1 + (i * 7) % 30);
        w[i].score = FEED_FIRST;
        next_page(&w[i]);
    }
    while (walks_left > 0)
        loop_once(l);
    for (int i = 0; i < nwalks; i++) {
        good += w[i].rc == FEED_OK && walk_equals_sql(&w[i]);
        for (int s = 1; s <= 3; s++)
            sources[s] += w[i].sources[s];
        *in_start += w[i].bad;
        free(w[i].items);
    }
    free(w);
    return good;
}

static void concurrent_walks(int uv)
{
    const char *name = uv ? "libuv" : "libevent";
    int64_t uid0 = uv ? 2000 : 1000;
    feed_config cfg;
    loop l;
    int sources[4] = { 0 }, in_start = 0, good;
    feed_stats st;

    for (int i = 0; i < 40; i++)     /* 40 feeds: 0..1,190 rows, ties on every other score */
        tu_insert_rows(pg, uid0 + i, (size_t)(i * 30 + (i % 3)), tu_score_pairs, tu_id_seq);
    tu_config(&cfg);
    cfg.max_len = 300;              /* the longer feeds go past the cache */
    cfg.lease_wait_ms = 2000;
    loop_open(&l, uv, &cfg);
    good = walks_at_once(&l, 200, 40, uid0, sources, &in_start);
    feed_async_stats_get(l.a, &st);
    is_int(good, 200, "%s: 200 walks of 40 cold feeds, all in flight at once on one handle, "
           "each equals SQL", name);
    ok(st.rebuilds > 0 && st.rebuilds <= 40, "  %s: each cold feed rebuilt at most once (%" PRIu64
       " rebuilds, %" PRIu64 " lease waits)", name, st.rebuilds, st.lease_waits);
    ok(sources[FEED_SOURCE_CACHE] > 0 && sources[FEED_SOURCE_DB] > 0,
       "  %s: pages from the cache and from SQL (past the cache) (%d, %d, %d)", name,
       sources[1], sources[2], sources[3]);
    is_int(in_start, 0, "  %s: no callback came from inside the call that started it", name);
    good = walks_at_once(&l, 200, 40, uid0, sources, &in_start);
    is_int(good, 200, "  %s: 200 warm walks at once equal SQL", name);
    loop_close(&l);
}

/* ---- Merged timelines in flight at once ---------------------------------- */

/* uid's feed merged with n authors' posts, from SQL (the UNION), in order. */
static size_t sql_union(int64_t uid, const int64_t *authors, size_t n, feed_item **out)
{
    char num[24], arr[16 * 22 + 3];
    const char *params[2] = { num, arr };
    size_t len = 0, rows;
    PGresult *res;

    snprintf(num, sizeof num, "%lld", (long long)uid);
    arr[len++] = '{';
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(arr + len, sizeof arr - len, "%s%lld", i ? "," : "",
                                (long long)authors[i]);
    snprintf(arr + len, sizeof arr - len, "}");
    res = PQexecParams(pg, "SELECT score, id FROM feed_entry WHERE uid = $1::int8"
                           " UNION SELECT score, id FROM author_post WHERE author = ANY($2::int8[])"
                           " ORDER BY score DESC, id DESC", 2, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        tap_bail(PQerrorMessage(pg));
        exit(255);
    }
    rows = (size_t)PQntuples(res);
    *out = malloc((rows + 1) * sizeof **out);
    for (size_t i = 0; i < rows; i++) {
        (*out)[i].score = strtoll(PQgetvalue(res, (int)i, 0), NULL, 10);
        (*out)[i].id = strtoll(PQgetvalue(res, (int)i, 1), NULL, 10);
    }
    PQclear(res);
    return rows;
}

static int exists(const char *key)
{
    redisReply *rep = redisCommand(r, "EXISTS %s", key);
    int n = rep && rep->type == REDIS_REPLY_INTEGER ? (int)rep->integer : -1;

    freeReplyObject(rep);
    return n;
}

static void on_dropped(feed_async *a, int rc, void *arg)
{
    (void)a;
    *(int *)arg = rc;
}

static int walk_union_ok(const walk *w)
{
    feed_item *all;
    size_t n = sql_union(w->uid, w->authors, w->nauthors, &all);
    int good = n == w->n && (n == 0 || memcmp(all, w->items, n * sizeof *all) == 0);

    free(all);
    return good;
}

/* feed_async_author_invalidate drops that author's warm copy, not another
 * author's nor a reader's feed; the next merged page rebuilds it. */
static void author_dropped(loop *l)
{
    int rc = 1, in_start;
    walk w = { 0 };

    ok(exists(tu_author_key_of("feed", 3101, "")) == 1 && exists(tu_author_key_of("feed", 3102, "")) == 1 &&
       exists(tu_key(3000, "")) == 1, "after the walks, authors' and readers' copies are cached");
    is_int(feed_async_author_invalidate(l->a, 3101, on_dropped, &rc), FEED_OK,
           "feed_async_author_invalidate: started");
    in_start = rc != 1;
    while (rc == 1)
        loop_once(l);
    is_int(rc, FEED_OK, "  its callback says FEED_OK");
    is_int(in_start, 0, "  and did not come from inside the call");
    ok(exists(tu_author_key_of("feed", 3101, "")) == 0, "  the author's copy is gone");
    ok(exists(tu_author_key_of("feed", 3102, "")) == 1 && exists(tu_key(3000, "")) == 1,
       "  another author's copy and the reader's feed stay");
    w.l = l;
    w.uid = 3000;
    w.limit = 5;
    w.score = FEED_FIRST;
    w.authors = (int64_t[]){ 3101 };
    w.nauthors = 1;
    walks_left = 1;
    next_page(&w);
    while (walks_left > 0)
        loop_once(l);
    ok(w.rc == FEED_OK && walk_union_ok(&w) && w.sources[FEED_SOURCE_REBUILD] > 0,
       "  a merged walk afterwards rebuilds the copy and equals SQL's UNION");
    ok(exists(tu_author_key_of("feed", 3101, "")) == 1, "  the copy is back");
    free(w.items);
}

/* 60 walks of merged timelines at once on one handle (10 readers, each
 * with 5 of 20 authors; copies cold, then warm): every walk equals SQL's
 * UNION, though each page's authors came from an array scribbled over
 * once the call returned. */
static void merged_walks(void)
{
    static int64_t authors[20];
    feed_config cfg;
    loop l;
    walk *w = calloc(60, sizeof *w);
    int good[2] = { 0, 0 }, in_start = 0, sources[4] = { 0 };

    tu_sql(pg, "TRUNCATE author_post");
    for (int k = 0; k < 20; k++) {
        authors[k] = 3100 + k;
        /* none, past max_len, or a few posts; ties; pairs also in readers' feeds */
        tu_sql(pg, "INSERT INTO author_post SELECT %d, (g %% 9) * 10, g * 20 + %d"
                   " FROM generate_series(1, %d) g", 3100 + k, k, k % 4 == 0 ? 0 :
                   k % 4 == 1 ? 70 : 12);
    }
    for (int u = 0; u < 10; u++)
        tu_sql(pg, "INSERT INTO feed_entry SELECT %d, score, id FROM author_post"
                   " WHERE id %% 3 = %d UNION ALL SELECT %d, g %% 7 * 10, 900000 + g"
                   " FROM generate_series(1, %d) g ON CONFLICT DO NOTHING", 3000 + u, u % 3,
               3000 + u, 10 * u);
    tu_config(&cfg);
    cfg.author_table = "author_post";
    cfg.max_len = 40;
    cfg.lease_wait_ms = 2000;
    loop_open(&l, 0, &cfg);
    for (int round = 0; round < 2; round++) {
        walks_left = 60;
        for (int i = 0; i < 60; i++) {
            free(w[i].items);
            memset(&w[i], 0, sizeof w[i]);
            w[i].l = &l;
            w[i].uid = 3000 + i % 10;
            w[i].limit = (size_t)(1 + (i * 7) % 30);
            w[i].score = FEED_FIRST;
            w[i].authors = authors + (i * 3) % 15;
            w[i].nauthors = 5;
            next_page(&w[i]);
        }
        while (walks_left > 0)
            loop_once(&l);
        for (int i = 0; i < 60; i++) {
            feed_item *all;
            size_t n = sql_union(w[i].uid, w[i].authors, w[i].nauthors, &all);
            good[round] += w[i].rc == FEED_OK && n == w[i].n &&
                           (n == 0 || memcmp(all, w[i].items, n * sizeof *all) == 0);
            in_start += w[i].bad;
            for (int s = 1; s <= 3; s++)
                sources[s] += w[i].sources[s];
            free(all);
        }
    }
    is_int(good[0], 60, "60 merged walks (5 of 20 authors each), copies cold, all in flight at"
           " once on one handle: each equals SQL's UNION");
    is_int(good[1], 60, "  warm: each equals SQL's UNION");
    ok(sources[FEED_SOURCE_CACHE] > 0 && sources[FEED_SOURCE_REBUILD] > 0,
       "  pages from the cache and rebuilt (%d, %d, %d)", sources[1], sources[2], sources[3]);
    is_int(in_start, 0, "  no callback came from inside the call that started it");
    for (int i = 0; i < 60; i++)
        free(w[i].items);
    free(w);
    author_dropped(&l);
    loop_close(&l);
}

/* ---- Hooks and pages in flight at once ---------------------------------- */

typedef struct hook_call {
    int done, rc;
} hook_call;

static int hooks_left;

static void on_hook(feed_async *a, int rc, void *arg)
{
    hook_call *h = arg;

    (void)a;
    h->done++;
    h->rc = rc;
    hooks_left--;
}

/* Random writes to 10 feeds, each committed in SQL and then hooked, while
 * walks of the same feeds are in flight on the same handle; after the
 * writers stop, fresh walks equal SQL. */
static void hooks_and_walks(void)
{
    enum { FEEDS = 10, WRITES = 600 };
    int64_t uid0 = 3000;
    uint64_t seed = 42;
    feed_config cfg;
    hook_call *calls = calloc(WRITES, sizeof *calls);
    walk *walks[WRITES / 60 + 1];
    int nwalks = 0;
    loop l;
    int sources[4] = { 0 }, in_start = 0, failed = 0, twice = 0, good;

    for (int i = 0; i < FEEDS; i++)
        tu_insert_rows(pg, uid0 + i, 150, tu_score_pairs, tu_id_seq);
    tu_config(&cfg);
    cfg.max_len = 100;
    loop_open(&l, 0, &cfg);
    walks_at_once(&l, 20, FEEDS, uid0, sources, &in_start);     /* warm */
    hooks_left = 0;
    walks_left = 0;
    for (int i = 0; i < WRITES; i++) {
        int64_t uid = uid0 + (int64_t)(tu_rand(&seed) % FEEDS);
        int64_t id = 1000 + (int64_t)(tu_rand(&seed) % 400);
        int64_t score = (int64_t)(tu_rand(&seed) % 200);
        int rc;
        if (tu_rand(&seed) % 3 == 0) {
            tu_sql(pg, "DELETE FROM feed_entry WHERE uid = %lld AND id = %lld", (long long)uid,
                   (long long)id);
            rc = feed_async_on_delete(l.a, uid, id, on_hook, &calls[i]);
        } else {
            tu_sql(pg, "INSERT INTO feed_entry VALUES (%lld, %lld, %lld) ON CONFLICT (uid, id)"
                   " DO UPDATE SET score = EXCLUDED.score", (long long)uid, (long long)score,
                   (long long)id);
            rc = feed_async_on_insert(l.a, uid, score, id, on_hook, &calls[i]);
        }
        if (rc == FEED_OK)
            hooks_left++;
        else
            failed++;
        if (i % 60 == 0) {          /* walks join the hooks in flight */
            walk *w = walks[nwalks++] = calloc(1, sizeof *w);
            w->l = &l;
            w->uid = uid;
            w->limit = 9;
            w->score = FEED_FIRST;
            walks_left++;
            next_page(w);           /* its pages are checked by the library; freed below */
        }
        if (i % 7 == 0)
            loop_once(&l);          /* some in flight, some answered */
    }
    while (hooks_left > 0 || walks_left > 0)
        loop_once(&l);
    for (int i = 0; i < WRITES; i++) {
        failed += calls[i].rc != FEED_OK;
        twice += calls[i].done != 1;
    }
    is_int(failed, 0, "600 hooks in flight among walks on one handle: every one succeeded");
    is_int(twice, 0, "  every hook's callback came exactly once");
    good = walks_at_once(&l, 30, FEEDS, uid0, sources, &in_start);
    is_int(good, 30, "  after the writes, 30 walks at once equal SQL");
    is_int(in_start, 0, "  no callback from inside the starting call");
    for (int i = 0; i < nwalks; i++) {
        in_start += walks[i]->bad;
        free(walks[i]->items);
        free(walks[i]);
    }
    free(calls);
    loop_close(&l);
}

/* ---- Health --------------------------------------------------------------- */

/* One request's outcome and times (here, and the faults below). */
typedef struct timed {
    double start, end;
    int    rc, source, done;
    feed_health_info h;
    uint32_t retry_after;       /* feed_async_retry_after_ms in the callback */
} timed;

static void on_timed_health(feed_async *a, int rc, const feed_health_info *h, void *arg)
{
    timed *t = arg;

    t->end = now_ms();
    t->rc = rc;
    if (h)
        t->h = *h;
    t->retry_after = feed_async_retry_after_ms(a);
    t->done = 1;
}

static int health_starting;

static void on_health(feed_async *a, int rc, const feed_health_info *h, void *arg)
{
    timed *t = arg;

    (void)a;
    t->rc = rc;
    t->h = *h;
    t->done = 1 + health_starting;      /* 2: from inside the starting call */
}

static void healthy(void)
{
    feed_config cfg;
    loop l;
    timed t;

    tu_config(&cfg);
    loop_open(&l, 0, &cfg);
    memset(&t, 0x55, sizeof t);
    t.done = 0;
    health_starting = 1;
    is_int(feed_async_health(l.a, on_health, &t), FEED_OK, "feed_async_health: accepted");
    health_starting = 0;
    while (!t.done)
        loop_once(&l);
    is_int(t.done, 1, "  its callback came from the loop, not from inside the call");
    ok(t.rc == FEED_OK && t.h.redis_up == 1 && t.h.pg_up == 1 && !t.h.redis_msg[0] &&
       !t.h.pg_msg[0], "  both stores up: FEED_OK, both flags 1, no messages");
    is_int((int)feed_async_retry_after_ms(l.a), 0, "  feed_async_retry_after_ms is 0");
    is_int((int)feed_async_retry_after_ms(NULL), 0, "  and 0 for a NULL handle");
    loop_close(&l);
}

/* ---- Argument errors ---------------------------------------------------- */

static int stray_callbacks;

static void stray_page(feed_async *a, int rc, feed_result *page, void *arg)
{
    (void)a;
    (void)rc;
    (void)arg;
    stray_callbacks++;
    feed_result_free(page);
}

static void stray_done(feed_async *a, int rc, void *arg)
{
    (void)a;
    (void)rc;
    (void)arg;
    stray_callbacks++;
}

static void stray_health(feed_async *a, int rc, const feed_health_info *h, void *arg)
{
    (void)a;
    (void)rc;
    (void)h;
    (void)arg;
    stray_callbacks++;
}

static void bad_arguments(void)
{
    feed_config cfg;
    loop l;
    int64_t one = 1;
    feed_async *a;

    tu_config(&cfg);
    loop_open(&l, 0, &cfg);
    stray_callbacks = 0;
    is_int(feed_async_page(l.a, 1, FEED_FIRST, 0, 0, stray_page, NULL), FEED_EINVAL,
           "limit 0: FEED_EINVAL at once (%s)", feed_async_errmsg(l.a));
    ok(strstr(feed_async_errmsg(l.a), "limit") != NULL, "  with a message naming the limit");
    is_int(feed_async_page(l.a, 1, FEED_SCORE_MAX + 1, 0, 10, stray_page, NULL), FEED_ERANGE,
           "cursor score out of range: FEED_ERANGE");
    is_int(feed_async_page(l.a, 1, 5, -1, 10, stray_page, NULL), FEED_EINVAL, "negative cursor id");
    is_int(feed_async_page_ranked(l.a, 1, 5, 1, -2, 10, NULL, NULL), FEED_EINVAL, "rank below -1");
    is_int(feed_async_page_newer(l.a, 1, 5, -1, 10, stray_page, NULL), FEED_EINVAL,
           "newer: negative cursor id");
    is_int(feed_async_on_insert(l.a, 1, FEED_SCORE_MAX + 1, 1, stray_done, NULL), FEED_ERANGE,
           "insert: score out of range");
    is_int(feed_async_on_insert(l.a, 1, 1, -5, stray_done, NULL), FEED_EINVAL, "insert: negative id");
    is_int(feed_async_on_delete(l.a, 1, -5, stray_done, NULL), FEED_EINVAL, "delete: negative id");
    is_int(feed_async_fanout(l.a, NULL, 3, 1, 1, stray_done, NULL), FEED_EINVAL,
           "fanout: NULL uids");
    is_int(feed_async_fanout(l.a, &one, 1, 1, -1, stray_done, NULL), FEED_EINVAL,
           "fanout: negative id");
    is_int(feed_async_page(NULL, 1, FEED_FIRST, 0, 10, stray_page, NULL), FEED_EINVAL,
           "a NULL handle");
    is_int(feed_async_health(l.a, NULL, NULL), FEED_EINVAL, "health: NULL callback");
    is_int(feed_async_health(NULL, stray_health, NULL), FEED_EINVAL, "health: a NULL handle");
    is_int(feed_async_page_merged(l.a, 1, &one, 1, FEED_FIRST, 0, 10, stray_page, NULL),
           FEED_EINVAL, "merged page without author_table: FEED_EINVAL (%s)",
           feed_async_errmsg(l.a));
    is_int(feed_async_author_on_insert(l.a, 1, 1, 1, stray_done, NULL), FEED_EINVAL,
           "  an author hook too");
    is_int(feed_async_author_on_delete(l.a, 1, 1, stray_done, NULL), FEED_EINVAL,
           "  and the other");
    is_int(feed_async_author_invalidate(l.a, 1, stray_done, NULL), FEED_EINVAL,
           "  dropping an author's copy too (%s)", feed_async_errmsg(l.a));
    for (int i = 0; i < 20; i++)
        event_base_loop(l.base, EVLOOP_NONBLOCK);
    is_int(stray_callbacks, 0, "  none of them got a callback");
    is_int(feed_async_open_libevent(&a, NULL, l.base), FEED_EINVAL, "open: NULL config");
    ok(a == NULL && strstr(feed_async_errmsg(NULL), "NULL") != NULL, "  *out NULL, a message (%s)",
       feed_async_errmsg(NULL));
    cfg.max_len = 0;
    is_int(feed_async_open_libevent(&a, &cfg, l.base), FEED_EINVAL, "open: max_len 0");
    is_int(feed_async_open_libevent(&a, &cfg, NULL), FEED_EINVAL, "open: NULL event_base");
    feed_async_close(NULL);
    ok(1, "feed_async_close(NULL) is fine");
    loop_close(&l);
}

/* ---- One write for the requests of one turn ----------------------------- */

static long long server_reads(void)
{
    redisReply *rep = tu_redis_cmd(r, "INFO stats");
    const char *p = rep->type == REDIS_REPLY_STRING ? strstr(rep->str, "total_reads_processed:")
                                                    : NULL;
    long long n = p ? atoll(p + 22) : -1;

    freeReplyObject(rep);
    return n;
}

static int pages_left;

static void count_page(feed_async *a, int rc, feed_result *page, void *arg)
{
    int *good = arg;

    (void)a;
    if (*good >= 0 && !(rc == FEED_OK && page->source == FEED_SOURCE_CACHE && page->count == 20))
        tap_diag("a page: rc %d, source %d (%s)", rc, page ? (int)page->source : 0,
                 feed_async_errmsg(a));
    *good += rc == FEED_OK && page->source == FEED_SOURCE_CACHE && page->count == 20;
    feed_result_free(page);
    pages_left--;
}

static void one_write(void)
{
    feed_config cfg;
    loop l;
    long long before, after;
    int good = 0;

    tu_insert_rows(pg, 4000, 100, tu_score_pairs, tu_id_seq);
    tu_config(&cfg);
    loop_open(&l, 0, &cfg);
    pages_left = 1;
    good = -1000;               /* the warm-up: not counted */
    feed_async_page(l.a, 4000, FEED_FIRST, 0, 20, count_page, &good);   /* warm and connected */
    while (pages_left > 0)
        loop_once(&l);
    good = 0;
    before = server_reads();
    pages_left = 200;
    for (int i = 0; i < 200; i++)
        feed_async_page(l.a, 4000, FEED_FIRST, 0, 20, count_page, &good);
    while (pages_left > 0)
        loop_once(&l);
    after = server_reads();
    is_int(good, 200, "200 cached pages started in one turn of the loop");
    /* The test's own INFO is one read; the pages' commands arrived in one
     * write, which the server may read in a few pieces (16 kB a read). */
    ok(after - before >= 2 && after - before <= 6,
       "  Redis read them in one write: %lld reads for 200 pages (one per page without "
       "pipelining)", after - before - 1);
    loop_close(&l);
}

/* ---- Close with requests pending ---------------------------------------- */

static int cancelled, other_codes;

static void on_cancel_page(feed_async *a, int rc, feed_result *page, void *arg)
{
    (void)a;
    (void)arg;
    if (rc == FEED_ECANCELED && !page)
        cancelled++;
    else
        other_codes++;
    feed_result_free(page);
}

static void on_cancel_done(feed_async *a, int rc, void *arg)
{
    (void)a;
    (void)arg;
    if (rc == FEED_ECANCELED)
        cancelled++;
    else
        other_codes++;
}

static void on_cancel_health(feed_async *a, int rc, const feed_health_info *h, void *arg)
{
    (void)a;
    (void)arg;
    if (rc == FEED_ECANCELED && !h)
        cancelled++;
    else
        other_codes++;
}

static void close_pending(int uv)
{
    const char *name = uv ? "libuv" : "libevent";
    feed_config cfg;
    loop l;
    int started = 0;

    tu_insert_rows(pg, 5000 + uv, 50, tu_score_pairs, tu_id_seq);
    tu_config(&cfg);
    loop_open(&l, uv, &cfg);
    cancelled = other_codes = 0;
    for (int i = 0; i < 1000; i++) {
        int rc = i % 4 == 3
            ? feed_async_on_insert(l.a, 5000 + uv, 7, 100000 + i, on_cancel_done, NULL)
            : i % 8 == 1 ? feed_async_health(l.a, on_cancel_health, NULL)
            : feed_async_page(l.a, 5000 + uv + (i % 5) * 10, FEED_FIRST, 0, 10, on_cancel_page,
                              NULL);
        started += rc == FEED_OK;
    }
    is_int(started, 1000, "%s: 1,000 requests accepted (pages, hooks, health checks)", name);
    is_int(cancelled + other_codes, 0, "  no callback yet (none from inside the calls)");
    feed_async_close(l.a);
    is_int(cancelled, 1000, "  close: 1,000 FEED_ECANCELED callbacks before it returned");
    is_int(other_codes, 0, "  and no other");
    if (l.base) {
        event_base_loop(l.base, EVLOOP_NONBLOCK);
        event_base_free(l.base);
    } else {
        uv_run(&l.uv, UV_RUN_NOWAIT);
        is_int(uv_loop_close(&l.uv), 0, "  libuv: every handle closed on the next turn");
    }
    is_int(cancelled + other_codes, 1000, "  no callback after close");
}

/* ---- Start and close from inside a callback ------------------------------ */

typedef struct reentry {
    int starting;               /* inside the call that started a request */
    int closing;                /* inside the callback that closes the handle */
    int calls, twice, inside, after_close, cancelled;
    int64_t uid;
} reentry;

static reentry re;

static void re_other(feed_async *a, int rc, feed_result *page, void *arg)
{
    int *seen = arg;

    re.inside += re.starting;
    re.twice += (*seen)++ > 0;
    re.calls++;
    re.after_close += !re.closing;
    re.cancelled += rc == FEED_ECANCELED;
    if (rc == FEED_ECANCELED)
        feed_async_close(a);    /* again, from a callback of the close: nothing */
    feed_result_free(page);
}

static int re_seen[64];

/* The first callback starts a request, then closes the handle with 50
 * others still pending. */
static void re_first(feed_async *a, int rc, feed_result *page, void *arg)
{
    int *seen = arg;

    (*seen)++;
    feed_result_free(page);
    (void)rc;
    re.starting = 1;
    feed_async_page(a, re.uid, FEED_FIRST, 0, 5, re_other, &re_seen[63]);
    re.starting = 0;
    re.closing = 1;
    feed_async_close(a);
    re.closing = 0;
}

static void close_from_callback(int uv)
{
    const char *name = uv ? "libuv" : "libevent";
    feed_config cfg;
    loop l;
    int first = 0;

    memset(&re, 0, sizeof re);
    memset(re_seen, 0, sizeof re_seen);
    re.uid = 5100 + 10 * uv;
    tu_insert_rows(pg, re.uid, 20, tu_score_pairs, tu_id_seq);
    tu_config(&cfg);
    loop_open(&l, uv, &cfg);
    feed_async_page(l.a, re.uid, FEED_FIRST, 0, 5, re_first, &first);
    for (int i = 0; i < 50; i++)
        feed_async_page(l.a, re.uid + i % 3, FEED_FIRST, 0, 5, re_other, &re_seen[i]);
    while (!first)
        loop_once(&l);
    is_int(re.calls, 51, "%s: a callback started a request and closed the handle: the 51 "
           "others called back", name);
    ok(re.after_close == 0 && re.twice == 0 && re.inside == 0,
       "  each once, before close returned, none from inside its starting call");
    ok(re.cancelled >= 1 && re_seen[63] == 1,
       "  the request started in the callback too (%d FEED_ECANCELED; close again from "
       "their callbacks did nothing)", re.cancelled);
    if (l.base) {
        event_base_loop(l.base, EVLOOP_NONBLOCK);
        event_base_free(l.base);
    } else {
        uv_run(&l.uv, UV_RUN_NOWAIT);
        is_int(uv_loop_close(&l.uv), 0, "  libuv: every handle closed on the next turn");
    }
    is_int(re.calls, 51, "  no callback after the handle went");
}

/* ---- Connections killed under requests in flight ------------------------ */

static int killed_left, killed_ok;

static void on_killed_page(feed_async *a, int rc, feed_result *page, void *arg)
{
    (void)arg;
    if (rc != FEED_OK)
        tap_diag("a page: rc %d (%s)", rc, feed_async_errmsg(a));
    killed_ok += rc == FEED_OK;
    killed_left--;
    feed_result_free(page);
}

/* Redis closes the handle's connection (CLIENT KILL) with 50 pages on it:
 * the first whose trip ends reconnects the node, and the others, whose
 * trips end after, must not drop that new connection while it connects
 * (they would wait for its set-up for ever). Each is retried once on the
 * fresh connection and comes from the cache. */
static void killed_in_flight(void)
{
    feed_config cfg;
    loop l;
    redisReply *rep;
    double t0;

    tu_insert_rows(pg, 5200, 30, tu_score_pairs, tu_id_seq);
    tu_config(&cfg);
    loop_open(&l, 0, &cfg);
    killed_left = 1;
    feed_async_page(l.a, 5200, FEED_FIRST, 0, 10, on_killed_page, NULL);    /* warm */
    while (killed_left > 0)
        loop_once(&l);
    killed_left = 50;
    killed_ok = 0;
    for (int i = 0; i < 50; i++)
        feed_async_page(l.a, 5200, FEED_FIRST, 0, 10, on_killed_page, NULL);
    rep = tu_redis_cmd(r, "CLIENT KILL TYPE normal SKIPME yes");
    freeReplyObject(rep);
    t0 = now_ms();
    while (killed_left > 0 && now_ms() - t0 < 5000)
        event_base_loop(l.base, EVLOOP_NONBLOCK), fault_sleep_ms(1);
    is_int(50 - killed_left, 50, "connection killed under 50 pages in flight: every callback "
           "came (%.0f ms)", now_ms() - t0);
    is_int(killed_ok, 50, "  each page served on the fresh connection");
    loop_close(&l);
}

/* ---- Faults on the loop ------------------------------------------------- */

static int ticks;

static void tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    ticks++;
}

static void on_timed(feed_async *a, int rc, feed_result *page, void *arg)
{
    timed *t = arg;

    (void)a;
    t->end = now_ms();
    t->rc = rc;
    t->source = page ? (int)page->source : 0;
    t->done = 1;
    feed_result_free(page);
}

/* With a store frozen (SIGSTOP: the socket accepts, nothing answers), the
 * loop must keep turning: a 10 ms timer on the same loop keeps firing. */
static void frozen(int store)
{
    const char *name = store ? "Redis" : "PostgreSQL";
    feed_config cfg;
    loop l;
    struct event *ev;
    struct timeval ten = { 0, 10 * 1000 };
    timed cached[20], past, health;
    double t0;
    int served = 0;

    tu_insert_rows(pg, 6000 + store, 500, tu_score_pairs, tu_id_seq);
    tu_config(&cfg);
    cfg.max_len = 100;
    cfg.pg_timeout_ms = 1000;
    cfg.redis_timeout_ms = 300;
    loop_open(&l, 0, &cfg);
    memset(&past, 0, sizeof past);
    feed_async_page(l.a, 6000 + store, FEED_FIRST, 0, 20, on_timed, &past);   /* warm */
    while (!past.done)
        loop_once(&l);
    ev = event_new(l.base, -1, EV_PERSIST, tick, NULL);
    event_add(ev, &ten);
    fault_inject(store ? "redis-freeze" : "pg-freeze");
    ticks = 0;
    t0 = now_ms();
    memset(cached, 0, sizeof cached);
    memset(&past, 0, sizeof past);
    past.start = now_ms();
    /* A page past the cache needs SQL; the first pages need only Redis. */
    feed_async_page(l.a, 6000 + store, 300, 200, 20, on_timed, &past);
    for (int i = 0; i < 20; i++) {
        cached[i].start = now_ms();
        feed_async_page(l.a, 6000 + store, FEED_FIRST, 0, 20, on_timed, &cached[i]);
    }
    memset(&health, 0, sizeof health);
    health.start = now_ms();
    if (store)      /* PostgreSQL's would wait its turn behind the page's statement */
        feed_async_health(l.a, on_timed_health, &health);
    while (now_ms() - t0 < 1600)
        loop_once(&l);
    fault_inject(store ? "redis-thaw" : "pg-thaw");
    for (int i = 0; i < 20; i++)
        served += cached[i].done && cached[i].rc == FEED_OK;

    ok(ticks >= 60, "%s frozen: a 10 ms timer on the same loop kept firing (%d times in 1.6 s)",
       name, ticks);
    if (!store) {
        is_int(served, 20, "  PostgreSQL frozen: 20 cached pages completed");
        ok(cached[19].done && cached[19].source == FEED_SOURCE_CACHE &&
           cached[19].end - cached[19].start < 500,
           "  from the cache, at once (%.1f ms)", cached[19].end - cached[19].start);
        ok(past.done && past.rc != FEED_OK && past.end - past.start <= 1000 + 300,
           "  the page that needs SQL ended with an error within pg_timeout_ms (%s, %.0f ms)",
           feed_strerror(past.rc), past.end - past.start);
    } else {
        is_int(served, 20, "  Redis frozen: 20 first pages completed, from SQL");
        ok(cached[0].done && cached[0].source == FEED_SOURCE_DB &&
           cached[0].end - cached[0].start < 300 + 500,
           "  from SQL once redis_timeout_ms passed (%.0f ms)", cached[0].end - cached[0].start);
        ok(past.done && past.rc == FEED_OK && past.source == FEED_SOURCE_DB,
           "  the page past the cache too");
        ok(health.done && health.rc == FEED_EREDIS && !health.h.redis_up && health.h.pg_up &&
           health.end - health.start < 300 + 500,
           "  feed_async_health: FEED_EREDIS, Redis down and PostgreSQL up, once "
           "redis_timeout_ms passed (%.0f ms: %s)", health.end - health.start, health.h.redis_msg);
        ok(health.retry_after > 0 && health.retry_after <= cfg.retry_ms,
           "  feed_async_retry_after_ms then: %u ms until Redis is tried again (retry_ms %u)",
           health.retry_after, cfg.retry_ms);
    }
    event_free(ev);
    loop_close(&l);
}

int main(void)
{
    tu_plain_redis_only("t_async");
    fault_setup();
    pg = tu_begin(&r);
    concurrent_walks(0);
    concurrent_walks(1);
    hooks_and_walks();
    healthy();
    merged_walks();
    bad_arguments();
    one_write();
    close_pending(0);
    close_pending(1);
    close_from_callback(0);
    close_from_callback(1);
    killed_in_flight();
    frozen(0);
    frozen(1);
    redisFree(r);
    PQfinish(pg);
    return tap_done();
}
