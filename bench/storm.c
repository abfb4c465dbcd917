/* storm.c -- section "storm": a cold cache under an open-loop load.
 *
 * One process, one libevent loop thread, 32 workers: 32 feed_async handles
 * (each its own Redis and PostgreSQL connection), or 32 workers of the
 * control, a plain cache-aside reader written here with hiredis async and
 * libpq (no lease, no budget, no deadline). Requests come at a fixed rate
 * whatever the replies (open loop), and a request's latency counts from
 * the time it was scheduled, not the time the loop got to it: uids drawn
 * Zipf(0.99) over 20,000 feeds of 50-200 rows (table storm_entry, loaded
 * here), 75% first pages, 25% next pages from the cursor of a page served
 * before.
 *
 *   1. The warm maximum: pages/s of a closed loop (1,024 in flight) on a
 *      warm cache, for feedcache and for the control, then feedcache's
 *      open-loop ramp up to its knee (warm_max): the rate the runs take
 *      their fractions of.
 *   2. Runs: a reader at a fraction of feedcache's warm maximum, every
 *      feed cached first (a closed loop over all 20,000 first pages), an
 *      open-loop warm-up, then at t = 0 a trigger: FLUSHALL ASYNC (the
 *      runbook's advice), a plain FLUSHALL, or an empty restart of Redis
 *      (SIGKILL, restarted empty on the same port: the restart fence
 *      trips). Per second: offered, served, shed (FEED_EBUSY), the hit
 *      rate against an ideal cache's (one that fills on the first miss of
 *      a feed), p50 / p99, the handles' counters (statements, rebuilds,
 *      refused installs, lease waits served, deadlines) and the most
 *      PostgreSQL statements in flight, sampled from pg_stat_activity
 *      every 100 ms on a connection of its own.
 *
 * Every page either reader serves is checked against the data set (its
 * rows follow from uid and rank, see storm_score), so a wrong page ends
 * the bench: a fast page that is wrong is no page. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <hiredis/async.h>
#include <hiredis/adapters/libevent.h>

#include "bench.h"
#include "storm.h"
#include "feedcache_libevent.h"

#define NWORK        32          /* handles (workers) of one process */
#define NFEEDS       20000
#define ZIPF_S       0.99
#define FIRST_SHARE  0.75        /* first pages; the rest are next pages */
#define CURSORS      4096        /* recent cursors a next page is drawn from */
#define MAX_INFLIGHT 200000      /* past this the generator drops requests */
#define WARM_FLIGHT  1024        /* closed loops: requests kept in flight */
#define TICK_US      1000        /* the generator's timer */
#define STATS_MS     100         /* counters and pg_stat_activity sampled this often */
#define P99_HOLD_S   5           /* "p99 back": this many seconds in a row under 2x steady */
#define DRAIN_S      7           /* after the window: > request_timeout_ms, load still on */
#define RAMP_S       4           /* the warm maximum: seconds per open-loop step */
#define RAMP_P99_MS  25.0        /* ... which keeps up: all served, p99 under this and
                                    under 3x the first step's */
#define SCORE0       1700000000000LL
#define PLAIN_TTL    604800      /* the control's EXPIRE, feedcache's default TTL */
#define PLAIN_TOP    1000        /* the control fills this many rows, as max_len */

/* ------------------------------------------------------------ data set */

/* uid's feed has storm_len(uid) rows, rank k holding (storm_score(uid, k),
 * storm_id(uid, k)): scores fall with rank and are unique within a feed,
 * so a page can be checked without asking SQL, and the control's
 * ZREVRANGEBYSCORE with an exclusive bound is exact. */
static int64_t storm_len(int64_t uid)
{
    return 50 + (uid * 2654435761LL) % 151;
}

static int64_t storm_score(int64_t uid, int64_t k)
{
    return SCORE0 - 1000 * k - uid % 7;
}

static int64_t storm_id(int64_t uid, int64_t k)
{
    return uid * 1000 + k;
}

/* storm_load: the table storm_entry, 20,000 feeds, loaded unless it holds
 * them already (a second run of the section against the same servers). */
static void storm_load(PGconn *pg)
{
    long long want = 0, have;
    char sql[512];
    PGresult *res;

    for (int64_t u = 1; u <= NFEEDS; u++)
        want += storm_len(u);
    res = b_sql(pg, "SELECT to_regclass('storm_entry') IS NOT NULL");
    have = strcmp(PQgetvalue(res, 0, 0), "t") == 0 ? b_sql_int(pg, "SELECT count(*) FROM storm_entry")
                                                   : -1;
    PQclear(res);
    if (have == want)
        return;
    note("storm: loading %lld rows for %d feeds (storm_entry)", want, NFEEDS);
    PQclear(b_sql(pg, "DROP TABLE IF EXISTS storm_entry"));
    PQclear(b_sql(pg, "CREATE TABLE storm_entry (uid bigint NOT NULL, score bigint NOT NULL,"
                      " id bigint NOT NULL)"));
    snprintf(sql, sizeof sql,
             "INSERT INTO storm_entry (uid, score, id)"
             " SELECT u, %lld - 1000 * k - u %% 7, u * 1000 + k"
             " FROM generate_series(1, %d) AS u,"
             " LATERAL generate_series(0, 49 + (u::bigint * 2654435761) %% 151) AS k",
             (long long)SCORE0, NFEEDS);
    PQclear(b_sql(pg, sql));
    /* the key and the keyset index feed_open checks for (docs/schema.md),
     * made after the rows: faster than kept up row by row */
    PQclear(b_sql(pg, "ALTER TABLE storm_entry ADD PRIMARY KEY (uid, id)"));
    PQclear(b_sql(pg, "CREATE INDEX storm_entry_page ON storm_entry (uid, score DESC, id DESC)"));
    PQclear(b_sql(pg, "VACUUM ANALYZE storm_entry"));
    if (b_sql_int(pg, "SELECT count(*) FROM storm_entry") != want)
        die("storm_entry: not %lld rows after loading", want);
}

/* ------------------------------------------------------------ a run */

typedef enum { K_FEED, K_PLAIN } kind;
typedef enum { T_NONE, T_FLUSH_ASYNC, T_FLUSH, T_RESTART } trigger;

static const char *const kind_name[] = { "feedcache", "control (plain cache-aside)" };
static const char *const trig_name[] = { "none", "FLUSHALL ASYNC", "FLUSHALL",
                                         "empty restart" };

/* One second of a run. Requests count in the second they were scheduled
 * in (offered ... unfinished, lat); completions and counters in the
 * second they happened in (done_*, the rest). */
typedef struct sec {
    uint32_t offered, ok, shed, failed, dropped, unfinished, ideal_hits, late;
    samples  lat_ms;
    uint32_t done_ok, done_cache, done_shed;
    uint64_t sql, rebuilds, refused, lease_served, deadlines, shed_ctr, redis_errors;
    int      pg_active;          /* most statements active in a sample (pg_stat_activity) */
} sec;

typedef struct run run;

/* A request, from its schedule to its callback. */
typedef struct req {
    run         *r;
    struct req  *next;          /* the control: its worker's PostgreSQL line */
    uint64_t     sched_ns;
    int64_t      uid, k0;       /* the page must start at rank k0 */
    int64_t      last_score, last_id;
    int          bucket;        /* its sec, by schedule; nsec: not recorded */
    int          worker, top;   /* the control: the statement it waits for */
} req;

/* A worker of the control: one Redis, one PostgreSQL connection. */
typedef struct pworker {
    run               *r;
    redisAsyncContext *ac;      /* NULL while down (reconnect pending) */
    struct event      *reconnect;
    PGconn            *pg;
    struct event      *pg_ev;
    req               *head, *tail, *cur;  /* queued; the statement in flight */
    PGresult          *res;
} pworker;

typedef struct cursor { int64_t uid, k; } cursor;

struct run {
    kind               k;
    trigger            t;
    double             frac, rate;         /* of the warm maximum; pages/s offered */
    int                warm_s, secs, nsec;  /* seconds before / after the trigger */
    int                drain_s;            /* load on after the window, not recorded */
    struct event_base *base;
    feed_async        *fa[NWORK];
    pworker            pw[NWORK];
    feed_config        cfg;
    /* the schedule */
    uint64_t           t0_ns, trig_ns, end_ns, stop_ns;
    uint64_t           issued;
    size_t             inflight, next_worker;
    int                closing;
    struct event      *gen, *tick;
    /* closed loops (prewarm, warm maximum) */
    int                closed;             /* 1: every callback starts the next */
    int64_t            prewarm_next;       /* > 0: first pages of uids in order */
    uint64_t           closed_ok, closed_from_ns, closed_stop_ns;
    /* the mix */
    uint64_t           rng;
    cursor             cur[CURSORS];
    size_t             ncur;
    unsigned char      seen[NFEEDS + 1];   /* the ideal cache: feeds asked since t = 0 */
    int                armed;
    /* what happened */
    sec               *s;                  /* nsec + 1: the last holds what is not recorded */
    feed_stats         prev;
    char               why[256];           /* the first failure other than a shed */
    double             trig_ms;            /* how long the trigger took */
    double             max_ms;             /* slowest page served after the trigger */
    double             lag_ms;             /* the generator's worst lag (issued - scheduled)
                                              in the window after the trigger */
    uint64_t           plain_sql, plain_fills, plain_redis_errors;
    atomic_int         sampling;
    redisContext      *tc;                 /* the trigger's connection */
    pid_t              rpid;
};

static double zipf_cdf[NFEEDS];

static void zipf_init(void)
{
    double sum = 0;

    for (int i = 0; i < NFEEDS; i++)
        sum += 1.0 / pow(i + 1, ZIPF_S);
    for (int i = 0; i < NFEEDS; i++)
        zipf_cdf[i] = (i ? zipf_cdf[i - 1] : 0) + 1.0 / pow(i + 1, ZIPF_S) / sum;
    zipf_cdf[NFEEDS - 1] = 1.0;
}

static double rnd(run *r)   /* xorshift64*, [0, 1) */
{
    r->rng ^= r->rng >> 12;
    r->rng ^= r->rng << 25;
    r->rng ^= r->rng >> 27;
    return (double)((r->rng * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}

static int64_t zipf_uid(run *r)
{
    double u = rnd(r);
    size_t lo = 0, hi = NFEEDS - 1;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (zipf_cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (int64_t)lo + 1;
}

/* The second of t: by the run's clock, nsec (not recorded) outside it. */
static int sec_of(const run *r, uint64_t t)
{
    uint64_t i;

    if (t < r->t0_ns || r->t0_ns == 0)
        return r->nsec;
    i = (t - r->t0_ns) / 1000000000u;
    return i < (uint64_t)r->nsec ? (int)i : r->nsec;
}

/* ------------------------------------------------------------ completion */

enum { O_CACHE, O_OTHER, O_SHED, O_FAIL, O_CANCEL };

/* check_page: the page served for q against the data set; ends the bench
 * when it is not the page SQL holds. */
static void check_page(const req *q, const feed_item *it, size_t n, int has_more)
{
    int64_t len = storm_len(q->uid), want = len - q->k0 < PAGE_LIMIT ? len - q->k0 : PAGE_LIMIT;

    if ((int64_t)n != want || has_more != (q->k0 + want < len))
        die("storm: uid %lld from rank %lld: %zu items, has_more %d (want %lld of %lld)",
            (long long)q->uid, (long long)q->k0, n, has_more, (long long)want, (long long)len);
    for (size_t i = 0; i < n; i++)
        if (it[i].score != storm_score(q->uid, q->k0 + (int64_t)i) ||
            it[i].id != storm_id(q->uid, q->k0 + (int64_t)i))
            die("storm: uid %lld from rank %lld: item %zu is wrong", (long long)q->uid,
                (long long)q->k0, i);
}

static void issue_next(run *r);

/* finish: q's outcome into the run's seconds, then q is gone. */
static void finish(req *q, int outcome, const feed_item *it, size_t n, int has_more,
                   const char *why)
{
    run *r = q->r;
    uint64_t now = now_ns();
    sec *s = &r->s[q->bucket], *w = &r->s[sec_of(r, now)];
    double ms = (double)(now - q->sched_ns) / 1e6;

    if (outcome == O_CACHE || outcome == O_OTHER) {
        check_page(q, it, n, has_more);
        s->ok++;
        sm_add(&s->lat_ms, ms);
        if (ms > (double)r->cfg.request_timeout_ms)
            s->late++;
        if (q->sched_ns >= r->trig_ns && ms > r->max_ms && q->bucket < r->nsec)
            r->max_ms = ms;
        w->done_ok++;
        w->done_cache += outcome == O_CACHE;
        if (has_more) {   /* a cursor a later next page may start from */
            cursor *c = &r->cur[r->ncur++ % CURSORS];
            c->uid = q->uid;
            c->k = q->k0 + (int64_t)n - 1;
        }
        r->closed_ok += r->closed && now >= r->closed_from_ns && now < r->closed_stop_ns;
    } else if (outcome == O_SHED) {
        s->shed++;
        w->done_shed++;
    } else if (outcome == O_FAIL) {
        s->failed++;
        if (!r->why[0])
            snprintf(r->why, sizeof r->why, "%s", why);
    } else {
        /* cancelled at the end: its latency is at least this (censored) */
        s->unfinished++;
        sm_add(&s->lat_ms, ms);
    }
    r->inflight--;
    free(q);
    if (r->closed && !r->closing)
        issue_next(r);
}

/* ------------------------------------------------------------ feedcache */

static void feed_cb(feed_async *a, int rc, feed_result *page, void *arg)
{
    req *q = arg;

    if (rc == FEED_OK) {
        finish(q, page->source == FEED_SOURCE_CACHE ? O_CACHE : O_OTHER, page->items,
               page->count, page->has_more, NULL);
        feed_result_free(page);
    } else if (rc == FEED_EBUSY) {
        finish(q, O_SHED, NULL, 0, 0, NULL);
    } else if (rc == FEED_ECANCELED) {
        finish(q, O_CANCEL, NULL, 0, 0, NULL);
    } else {
        char why[256];
        snprintf(why, sizeof why, "%s: %s", feed_strerror(rc), feed_async_errmsg(a));
        finish(q, O_FAIL, NULL, 0, 0, why);
    }
}

static void feed_start(run *r, req *q)
{
    feed_async *a = r->fa[q->worker];
    int rc = feed_async_page(a, q->uid, q->last_score, q->last_id, PAGE_LIMIT, feed_cb, q);

    if (rc != FEED_OK)
        die("feed_async_page: %s: %s", feed_strerror(rc), feed_async_errmsg(a));
}

/* ------------------------------------------------------------ the control */

static void pw_connect(pworker *w);

static void pw_reconnect(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    pw_connect(arg);
}

/* Redis went away (or never came): try again in 100 ms, as a plain client
 * with a reconnect loop would; meanwhile pages come from SQL. */
static void pw_down(pworker *w)
{
    struct timeval tv = { 0, 100000 };

    w->ac = NULL;
    if (!w->r->closing && event_add(w->reconnect, &tv) != 0)
        die("event_add failed");
}

static void pw_connected(const redisAsyncContext *ac, int status)
{
    if (status != REDIS_OK)
        pw_down(ac->data);
}

static void pw_disconnected(const redisAsyncContext *ac, int status)
{
    (void)status;
    pw_down(ac->data);
}

static void pw_connect(pworker *w)
{
    redisAsyncContext *ac = redisAsyncConnect(env_or("FEED_REDIS_HOST", "127.0.0.1"),
                                              atoi(env_or("FEED_REDIS_PORT", "6379")));

    if (!ac)
        die("redisAsyncConnect: out of memory");
    if (ac->err) {   /* refused at once: the same path as a later failure */
        redisAsyncFree(ac);
        pw_down(w);
        return;
    }
    ac->data = w;
    if (redisLibeventAttach(ac, w->r->base) != REDIS_OK ||
        redisAsyncSetConnectCallback(ac, pw_connected) != REDIS_OK ||
        redisAsyncSetDisconnectCallback(ac, pw_disconnected) != REDIS_OK)
        die("hiredis: attaching to libevent failed");
    w->ac = ac;
}

static void pw_send(pworker *w)
{
    req *q = w->head;
    char uid[24], score[24], id[24], lim[8];
    const char *p[4] = { uid, score, id, lim };
    int ok;

    if (w->cur || !q)
        return;
    w->head = q->next;
    if (!w->head)
        w->tail = NULL;
    w->cur = q;
    snprintf(uid, sizeof uid, "%lld", (long long)q->uid);
    snprintf(score, sizeof score, "%lld", (long long)q->last_score);
    snprintf(id, sizeof id, "%lld", (long long)q->last_id);
    snprintf(lim, sizeof lim, "%d", PAGE_LIMIT + 1);
    ok = q->top ? PQsendQueryPrepared(w->pg, "top", 1, p, NULL, NULL, 0)
                : PQsendQueryPrepared(w->pg, "page", 4, p, NULL, NULL, 0);
    if (!ok)
        die("control: PQsendQueryPrepared: %s", PQerrorMessage(w->pg));
    w->r->plain_sql++;
    w->r->s[sec_of(w->r, now_ns())].sql++;
}

/* The control's SQL: a miss reads the feed's top rows (and fills the
 * cache with them); a page while Redis fails reads the keyset page. Each
 * worker runs one statement at a time, the rest wait in its line,
 * however long it grows: that is the plain pattern. */
static void pw_sql(pworker *w, req *q, int top)
{
    q->top = top;
    q->next = NULL;
    if (w->tail)
        w->tail->next = q;
    else
        w->head = q;
    w->tail = q;
    pw_send(w);
}

/* The rows of a result as items, at most cap. */
static size_t rows_of(PGresult *res, feed_item *it, size_t cap)
{
    size_t n = (size_t)PQntuples(res);

    n = n < cap ? n : cap;
    for (size_t i = 0; i < n; i++) {
        it[i].score = strtoll(PQgetvalue(res, (int)i, 0), NULL, 10);
        it[i].id = strtoll(PQgetvalue(res, (int)i, 1), NULL, 10);
    }
    return n;
}

/* Fill the cache from the top rows: ZADD of every row and the end marker,
 * EXPIRE, pipelined; no lease, so every miss of a feed fills it again. */
static void pw_fill(pworker *w, const req *q, const feed_item *it, size_t n)
{
    size_t argc = 2 + 2 * (n + 1);
    const char **argv = malloc(argc * sizeof *argv);
    size_t *lens = malloc(argc * sizeof *lens);
    char (*num)[2][24] = malloc((n + 1) * sizeof *num), key[48], ttl[16];

    if (!argv || !lens || !num)
        die("out of memory");
    snprintf(key, sizeof key, "stormplain:{%lld}", (long long)q->uid);
    argv[0] = "ZADD";
    argv[1] = key;
    for (size_t i = 0; i <= n; i++) {
        if (i == n) {
            snprintf(num[i][0], 24, "-inf");
            snprintf(num[i][1], 24, "end");
        } else {
            snprintf(num[i][0], 24, "%lld", (long long)it[i].score);
            snprintf(num[i][1], 24, "%lld", (long long)it[i].id);
        }
        argv[2 + 2 * i] = num[i][0];
        argv[3 + 2 * i] = num[i][1];
    }
    for (size_t i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    snprintf(ttl, sizeof ttl, "%d", PLAIN_TTL);
    /* A context going down refuses both: the next reader misses again. */
    if (redisAsyncCommandArgv(w->ac, NULL, NULL, (int)argc, argv, lens) == REDIS_OK) {
        if (redisAsyncCommand(w->ac, NULL, NULL, "EXPIRE %s %s", key, ttl) != REDIS_OK)
            w->r->plain_redis_errors++;
        w->r->plain_fills++;
        w->r->s[sec_of(w->r, now_ns())].rebuilds++;
    }
    free(argv);
    free(lens);
    free(num);
}

static void pw_result(pworker *w, req *q, PGresult *res)
{
    feed_item it[PLAIN_TOP + 1];
    size_t n;

    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        die("control: SQL failed: %s", PQresultErrorMessage(res));
    if (q->top) {
        size_t from = (size_t)q->k0, cnt;
        n = rows_of(res, it, PLAIN_TOP + 1);
        if (w->ac)
            pw_fill(w, q, it, n);
        cnt = n > from ? n - from : 0;
        cnt = cnt < PAGE_LIMIT ? cnt : PAGE_LIMIT;
        finish(q, O_OTHER, it + from, cnt, from + cnt < n, NULL);
    } else {
        n = rows_of(res, it, PAGE_LIMIT + 1);
        finish(q, O_OTHER, it, n < PAGE_LIMIT ? n : PAGE_LIMIT, n > PAGE_LIMIT, NULL);
    }
}

static void pw_readable(evutil_socket_t fd, short what, void *arg)
{
    pworker *w = arg;

    (void)fd;
    (void)what;
    if (!PQconsumeInput(w->pg))
        die("control: PostgreSQL: %s", PQerrorMessage(w->pg));
    while (w->cur && !PQisBusy(w->pg)) {
        PGresult *res = PQgetResult(w->pg);
        if (res) {
            if (w->res)
                PQclear(w->res);
            w->res = res;
            continue;
        }
        {   /* the statement is over */
            req *q = w->cur;
            PGresult *done = w->res;
            w->cur = NULL;
            w->res = NULL;
            if (!done)
                die("control: a statement without a result");
            pw_result(w, q, done);
            PQclear(done);
        }
        pw_send(w);
    }
}

/* The reply of the page's ZREVRANGEBYSCORE: the page when the cache holds
 * it (LIMIT + 1 entries, or the end marker); a miss otherwise. */
static void pw_reply(redisAsyncContext *ac, void *reply, void *priv)
{
    redisReply *rep = reply;
    req *q = priv;
    pworker *w = &q->r->pw[q->worker];
    feed_item it[PAGE_LIMIT + 1];
    size_t n = 0;
    int end = 0;

    (void)ac;
    if (q->r->closing) {
        finish(q, O_CANCEL, NULL, 0, 0, NULL);
        return;
    }
    if (!rep || rep->type != REDIS_REPLY_ARRAY) {   /* Redis failed: the page from SQL */
        q->r->plain_redis_errors++;
        q->r->s[sec_of(q->r, now_ns())].redis_errors++;
        pw_sql(w, q, 0);
        return;
    }
    for (size_t i = 0; i + 1 < rep->elements && n <= PAGE_LIMIT; i += 2) {
        const redisReply *m = rep->element[i], *s = rep->element[i + 1];
        if (m->len == 3 && memcmp(m->str, "end", 3) == 0) {
            end = 1;
            break;
        }
        it[n].id = strtoll(m->str, NULL, 10);
        it[n].score = strtoll(s->str, NULL, 10);
        n++;
    }
    if (n > PAGE_LIMIT || end)
        finish(q, O_CACHE, it, n > PAGE_LIMIT ? PAGE_LIMIT : n, n > PAGE_LIMIT, NULL);
    else
        pw_sql(w, q, 1);   /* a miss */
}

static void plain_start(run *r, req *q)
{
    pworker *w = &r->pw[q->worker];
    char key[48], max[24];

    snprintf(key, sizeof key, "stormplain:{%lld}", (long long)q->uid);
    if (q->last_score == FEED_FIRST)
        snprintf(max, sizeof max, "+inf");
    else
        snprintf(max, sizeof max, "(%lld", (long long)q->last_score);
    if (!w->ac || redisAsyncCommand(w->ac, pw_reply, q, "ZREVRANGEBYSCORE %s %s -inf WITHSCORES"
                                    " LIMIT 0 %d", key, max, PAGE_LIMIT + 1) != REDIS_OK) {
        r->plain_redis_errors++;
        r->s[sec_of(r, now_ns())].redis_errors++;
        pw_sql(w, q, 0);
    }
}

static void plain_open(run *r)
{
    for (int i = 0; i < NWORK; i++) {
        pworker *w = &r->pw[i];
        int fd;
        PGresult *res;
        memset(w, 0, sizeof *w);
        w->r = r;
        w->pg = b_pg();
        res = PQprepare(w->pg, "top", "SELECT score, id FROM storm_entry WHERE uid = $1"
                        " ORDER BY score DESC, id DESC LIMIT 1000", 1, NULL);
        if (PQresultStatus(res) != PGRES_COMMAND_OK)
            die("control: PREPARE: %s", PQerrorMessage(w->pg));
        PQclear(res);
        res = PQprepare(w->pg, "page", "SELECT score, id FROM storm_entry WHERE uid = $1"
                        " AND (score, id) < ($2, $3) ORDER BY score DESC, id DESC LIMIT $4",
                        4, NULL);
        if (PQresultStatus(res) != PGRES_COMMAND_OK)
            die("control: PREPARE: %s", PQerrorMessage(w->pg));
        PQclear(res);
        if ((fd = PQsocket(w->pg)) < 0)
            die("control: no PostgreSQL socket");
        if (!(w->pg_ev = event_new(r->base, fd, EV_READ | EV_PERSIST, pw_readable, w)) ||
            event_add(w->pg_ev, NULL) != 0 ||
            !(w->reconnect = evtimer_new(r->base, pw_reconnect, w)))
            die("event_new failed");
        pw_connect(w);
    }
}

static void plain_close(run *r)
{
    for (int i = 0; i < NWORK; i++) {
        pworker *w = &r->pw[i];
        if (w->ac)
            redisAsyncFree(w->ac);   /* pending replies come back NULL: cancelled */
        w->ac = NULL;
        if (w->cur)
            finish(w->cur, O_CANCEL, NULL, 0, 0, NULL);
        while (w->head) {
            req *q = w->head;
            w->head = q->next;
            finish(q, O_CANCEL, NULL, 0, 0, NULL);
        }
        if (w->res)
            PQclear(w->res);
        event_free(w->pg_ev);
        event_free(w->reconnect);
        PQfinish(w->pg);
    }
}

/* ------------------------------------------------------------ the load */

/* issue: one request scheduled at sched, of uid from rank k0 (k0 < 0: a
 * first page or a next page, drawn from the mix). */
static void issue(run *r, uint64_t sched, int64_t uid, int64_t k0)
{
    req *q;
    int b = sec_of(r, sched);
    sec *s = &r->s[b];

    if (k0 < 0) {
        if (r->ncur > 0 && rnd(r) >= FIRST_SHARE) {
            const cursor *c = &r->cur[(size_t)(rnd(r) * (double)(r->ncur < CURSORS ? r->ncur
                                                                                   : CURSORS))];
            uid = c->uid;
            k0 = c->k + 1;
        } else {
            uid = zipf_uid(r);
            k0 = 0;
        }
    }
    s->offered++;
    r->issued++;   /* the schedule moves on, whether the request goes or is dropped */
    if (r->t0_ns && sched >= r->trig_ns && b < r->nsec) {   /* the loop behind its schedule */
        double lag = (double)(now_ns() - sched) / 1e6;
        r->lag_ms = lag > r->lag_ms ? lag : r->lag_ms;
    }
    if (sched >= r->trig_ns && !r->armed) {   /* t = 0: the ideal cache is empty too */
        memset(r->seen, 0, sizeof r->seen);
        r->armed = 1;
    }
    s->ideal_hits += r->armed ? r->seen[uid] : 1;
    r->seen[uid] = 1;
    if (r->inflight >= MAX_INFLIGHT) {
        s->dropped++;
        return;
    }
    if (!(q = calloc(1, sizeof *q)))
        die("out of memory");
    q->r = r;
    q->sched_ns = sched;
    q->uid = uid;
    q->k0 = k0;
    q->last_score = k0 ? storm_score(uid, k0 - 1) : FEED_FIRST;
    q->last_id = k0 ? storm_id(uid, k0 - 1) : 0;
    q->bucket = b;
    q->worker = (int)(r->next_worker++ % NWORK);
    r->inflight++;
    if (r->k == K_FEED)
        feed_start(r, q);
    else
        plain_start(r, q);
}

/* The closed loops' next request: the next uid's first page while
 * prewarming, else one of the mix, until closed_stop_ns. */
static void issue_next(run *r)
{
    uint64_t now = now_ns();

    if (r->prewarm_next > 0) {
        if (r->prewarm_next <= NFEEDS)
            issue(r, now, r->prewarm_next++, 0);
    } else if (now < r->closed_stop_ns) {
        issue(r, now, 0, -1);
    }
}

/* The open loop: every request due by now, each at its own scheduled
 * time, however late the loop got here. */
static void gen_tick(evutil_socket_t fd, short what, void *arg)
{
    run *r = arg;
    uint64_t now = now_ns(), due;

    (void)fd;
    (void)what;
    if (now < r->t0_ns)
        return;
    if (now > r->stop_ns)
        now = r->stop_ns;
    due = (uint64_t)((double)(now - r->t0_ns) / 1e9 * r->rate);
    while (r->issued < due)
        issue(r, r->t0_ns + (uint64_t)((double)r->issued / r->rate * 1e9), 0, -1);
}

/* Counters of the handles (feedcache) into the second they moved in. */
static void stats_tick(evutil_socket_t fd, short what, void *arg)
{
    run *r = arg;
    feed_stats sum, one;
    sec *s = &r->s[sec_of(r, now_ns())];

    (void)fd;
    (void)what;
    if (r->k != K_FEED)
        return;
    memset(&sum, 0, sizeof sum);
    for (int i = 0; i < NWORK; i++) {
        feed_async_stats_get(r->fa[i], &one);
        sum.sql_queries += one.sql_queries;
        sum.rebuilds += one.rebuilds;
        sum.installs_refused += one.installs_refused;
        sum.lease_waits_served += one.lease_waits_served;
        sum.deadlines_missed += one.deadlines_missed;
        sum.shed += one.shed;
        sum.redis_errors += one.redis_errors;
    }
    s->sql += sum.sql_queries - r->prev.sql_queries;
    s->rebuilds += sum.rebuilds - r->prev.rebuilds;
    s->refused += sum.installs_refused - r->prev.installs_refused;
    s->lease_served += sum.lease_waits_served - r->prev.lease_waits_served;
    s->deadlines += sum.deadlines_missed - r->prev.deadlines_missed;
    s->shed_ctr += sum.shed - r->prev.shed;
    s->redis_errors += sum.redis_errors - r->prev.redis_errors;
    r->prev = sum;
    if (getenv("BENCH_STORM_DEBUG")) {   /* every counter's delta, for a look inside */
        static feed_stats last;
        static const run *last_run;
        feed_stats all;
        if (last_run != r)
            memset(&last, 0, sizeof last);
        last_run = r;
        memset(&all, 0, sizeof all);
        for (int i = 0; i < NWORK; i++) {
            feed_async_stats_get(r->fa[i], &one);
            for (size_t f = 0; f < feed_stats_count(); f++)
                ((uint64_t *)&all)[f] += feed_stats_value(&one, f);
        }
        fprintf(stderr, "%.1f inflight=%zu", r->t0_ns ? ((double)now_ns() - (double)r->trig_ns) / 1e9 : 0.0,
                r->inflight);
        for (size_t f = 0; f < feed_stats_count(); f++)
            if (feed_stats_value(&all, f) != feed_stats_value(&last, f))
                fprintf(stderr, " %s=%llu", feed_stats_name(f),
                        (unsigned long long)(feed_stats_value(&all, f) - feed_stats_value(&last, f)));
        fprintf(stderr, "\n");
        last = all;
    }
}

/* ------------------------------------------------------------ servers */

/* Gone, or a zombie no one reaps (PID 1 in a container may not). */
static int pid_gone(pid_t pid)
{
    char path[64], buf[256], *p;
    FILE *fp;
    size_t n;

    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    if (!(fp = fopen(path, "r")))
        return 1;
    n = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    p = strrchr(buf, ')');
    return p && p[1] == ' ' && p[2] == 'Z';
}

/* The trigger, on a thread of its own at trig_ns, so that the loop goes on
 * meanwhile: the flush on a connection of its own, or Redis killed and
 * started again, empty (no save, no AOF: tools/servers.sh), on its port. */
static void *trigger_run(void *arg)
{
    run *r = arg;
    uint64_t now = now_ns(), t;

    if (r->trig_ns > now)
        sleep_s((double)(r->trig_ns - now) / 1e9);
    t = now_ns();
    if (r->t == T_FLUSH_ASYNC || r->t == T_FLUSH) {
        b_cmd_ok(r->tc, r->t == T_FLUSH ? "FLUSHALL" : "FLUSHALL ASYNC");
    } else if (r->t == T_RESTART) {
        if (kill(r->rpid, SIGKILL) != 0)
            die("kill Redis (pid %ld): %s", (long)r->rpid, strerror(errno));
        for (int i = 0; i < 500 && !pid_gone(r->rpid); i++)
            sleep_s(0.01);
        if (!pid_gone(r->rpid))
            die("Redis (pid %ld) did not die", (long)r->rpid);
        if (b_servers("redis-start") != 0)
            die("tools/servers.sh redis-start failed");
    }
    r->trig_ms = (double)(now_ns() - t) / 1e6;
    return NULL;
}

/* PostgreSQL statements in flight: the active client backends of the
 * bench's database but this one, every STATS_MS, the most per second. A
 * sample, so a burst between two can be missed. */
static void *sampler_run(void *arg)
{
    run *r = arg;
    PGconn *pg = b_pg();

    while (atomic_load(&r->sampling)) {
        long long n = b_sql_int(pg, "SELECT count(*) FROM pg_stat_activity WHERE datname ="
                                " current_database() AND state = 'active' AND backend_type ="
                                " 'client backend' AND pid <> pg_backend_pid()");
        sec *s = &r->s[sec_of(r, now_ns())];
        if (n > s->pg_active)
            s->pg_active = (int)n;
        sleep_s(STATS_MS / 1000.0);
    }
    PQfinish(pg);
    return NULL;
}

/* ------------------------------------------------------------ runs */

static void run_open(run *r)
{
    struct timeval every = { 0, STATS_MS * 1000 };

    if (!(r->base = event_base_new()))
        die("event_base_new failed");
    if (r->k == K_FEED) {
        feed_config dflt;
        feed_config_init(&dflt);
        b_config(&r->cfg, "storm", 1000);
        r->cfg.table = "storm_entry";
        /* b_config's 30 s are for 100,000-row installs; the storm runs on
         * the library's own defaults */
        r->cfg.redis_timeout_ms = dflt.redis_timeout_ms;
        for (int i = 0; i < NWORK; i++)
            if (feed_async_open_libevent(&r->fa[i], &r->cfg, r->base) != FEED_OK)
                die("feed_async_open_libevent: %s", feed_async_errmsg(NULL));
    } else {
        feed_config_init(&r->cfg);   /* request_timeout_ms: the threshold reported */
        plain_open(r);
    }
    r->s = calloc((size_t)r->nsec + 1, sizeof *r->s);
    if (!r->s)
        die("out of memory");
    if (!(r->tick = event_new(r->base, -1, EV_PERSIST, stats_tick, r)) ||
        event_add(r->tick, &every) != 0)
        die("event_new failed");
}

static void run_close(run *r)
{
    r->closing = 1;
    if (r->k == K_FEED)
        for (int i = 0; i < NWORK; i++)
            feed_async_close(r->fa[i]);
    else
        plain_close(r);
    if (r->inflight)
        die("storm: %zu requests never called back", r->inflight);
    event_free(r->tick);
    event_base_free(r->base);
    r->base = NULL;
}

/* A closed loop of WARM_FLIGHT requests: every first page once (prewarm),
 * or the mix for secs (then the pages/s served after the first second). */
static double closed_loop(run *r, int prewarm, double secs)
{
    uint64_t t0 = now_ns();

    r->closed = 1;
    r->closed_ok = 0;
    r->prewarm_next = prewarm ? 1 : 0;
    r->closed_from_ns = t0 + 1000000000u;
    r->closed_stop_ns = r->closed_from_ns + (uint64_t)(secs * 1e9);
    for (int i = 0; i < WARM_FLIGHT; i++)
        issue_next(r);
    while (r->inflight > 0)
        event_base_loop(r->base, EVLOOP_ONCE);
    r->closed = 0;
    r->prewarm_next = 0;
    return prewarm ? 0 : (double)r->closed_ok / secs;
}

/* The closed loop's figure: pages/s on a warm cache, WARM_FLIGHT in flight. */
static double closed_max(kind k, double secs)
{
    run r;
    double rate;

    memset(&r, 0, sizeof r);
    r.k = k;
    r.rng = 0x9e3779b97f4a7c15ULL;
    r.nsec = 1;
    run_open(&r);
    closed_loop(&r, 1, 0);
    /* t0 stays 0: nothing is recorded but the count */
    rate = closed_loop(&r, 0, secs);
    run_close(&r);
    free(r.s);
    return rate;
}

static void run_one(run *r);

/* Did an open-loop step of RAMP_S seconds at rate keep up on a warm cache:
 * every request scheduled after its first second served, p99 (from the
 * schedule) under RAMP_P99_MS? Its p99 into *p99. */
static int ramp_step(kind k, double rate, double bar, double *p99)
{
    run r;
    samples lat = { 0 };
    uint64_t off = 0, ok = 0;

    memset(&r, 0, sizeof r);
    r.k = k;
    r.t = T_NONE;
    r.rate = rate;
    r.warm_s = 0;
    r.secs = RAMP_S;
    r.nsec = RAMP_S;
    r.drain_s = 1;
    run_one(&r);
    for (int i = 1; i < r.nsec; i++) {
        off += r.s[i].offered;
        ok += r.s[i].ok;
        for (size_t j = 0; j < r.s[i].lat_ms.n; j++)
            sm_add(&lat, r.s[i].lat_ms.v[j]);
    }
    *p99 = sm_pct(&lat, 99);
    sm_free(&lat);
    for (int i = 0; i <= r.nsec; i++)
        sm_free(&r.s[i].lat_ms);
    free(r.s);
    return off > 0 && ok == off && *p99 < bar;
}

/* feedcache's warm maximum: the highest rate of an open-loop ramp (steps
 * of a tenth of the closed loop's figure, from two tenths) that kept up.
 * The closed loop pipelines WARM_FLIGHT / NWORK requests per connection;
 * an open loop at the same rate sends a few per turn, so it carries less,
 * and it is the open loop the runs offer. Each step into ramp (its rate
 * and p99), at most 10. */
static double warm_max(double closed, double ramp[][2], int *nramp)
{
    double best = 0, bar = RAMP_P99_MS;

    *nramp = 0;
    for (int tenth = 2; tenth <= 10; tenth++) {
        double rate = closed * tenth / 10, p99;
        int ok = ramp_step(K_FEED, rate, bar, &p99);
        if (tenth == 2 && ok && 3 * p99 < bar)   /* the knee: p99 3x the light load's */
            bar = 3 * p99;
        ramp[*nramp][0] = rate;
        ramp[(*nramp)++][1] = p99;
        note("storm: open loop at %.0f pages/s, warm: p99 %.1f ms%s", rate, p99,
             ok ? "" : ": behind");
        if (!ok)
            break;
        best = rate;
    }
    if (best == 0)
        die("storm: an open loop at %.0f pages/s, a fifth of the closed loop's, did not keep up",
            closed / 5);
    return best;
}

/* One run: prewarm, the open loop from t0, the trigger at warm_s, the
 * window to warm_s + secs, DRAIN_S more with the load still on (requests
 * scheduled then are not recorded), then close: whatever is still in
 * flight is cancelled and counted unfinished. */
static void run_one(run *r)
{
    struct timeval tick = { 0, TICK_US };
    pthread_t trig, samp;

    r->rng = 0x2545f4914f6cdd1dULL ^ (uint64_t)(r->frac * 1000) ^ ((uint64_t)r->t << 20) ^
             ((uint64_t)r->k << 30);
    run_open(r);
    closed_loop(r, 1, 0);
    r->tc = b_redis();
    r->rpid = redis_pid(r->tc);
    r->t0_ns = now_ns() + 100000000u;
    r->trig_ns = r->t0_ns + (uint64_t)r->warm_s * 1000000000u;
    r->end_ns = r->trig_ns + (uint64_t)r->secs * 1000000000u;
    r->stop_ns = r->end_ns + (uint64_t)r->drain_s * 1000000000u;
    r->issued = 0;
    /* counters from here on; the prewarm's ideal cache forgotten */
    stats_tick(-1, 0, r);
    for (int i = 0; i <= r->nsec; i++)
        sm_free(&r->s[i].lat_ms);
    memset(r->s, 0, ((size_t)r->nsec + 1) * sizeof *r->s);
    r->armed = 0;
    r->max_ms = 0;
    r->lag_ms = 0;
    atomic_store(&r->sampling, 1);
    if (pthread_create(&samp, NULL, sampler_run, r) != 0)
        die("pthread_create failed");
    if (r->t != T_NONE && pthread_create(&trig, NULL, trigger_run, r) != 0)
        die("pthread_create failed");
    if (!(r->gen = event_new(r->base, -1, EV_PERSIST, gen_tick, r)) ||
        event_add(r->gen, &tick) != 0)
        die("event_new failed");
    while (now_ns() < r->stop_ns)
        event_base_loop(r->base, EVLOOP_ONCE);
    event_free(r->gen);
    if (r->t != T_NONE)
        pthread_join(trig, NULL);
    atomic_store(&r->sampling, 0);
    pthread_join(samp, NULL);
    stats_tick(-1, 0, r);
    run_close(r);
    redisFree(r->tc);
}

/* ------------------------------------------------------------ report */

typedef struct derived {
    double steady_p99, peak_p99, hit_end, ideal_end, shed10, served;
    int    recovered;            /* second, or -1 */
    int    hit_back;             /* ... the hit rate alone, or -1 */
    int    p99_back;             /* first second of P99_HOLD_S under 2x steady p99, or -1 */
    int    p99_over;             /* seconds over 2x steady p99 after those */
    uint64_t shed_after, late, rebuilds, refused, offered, unfinished, dropped, failed;
    int    no_install_s;         /* seconds with misses and not one install */
    int    pg_max;
} derived;

static double hit_of(const sec *s)
{
    return s->done_ok ? (double)s->done_cache / (double)s->done_ok : 0;
}

static double ideal_of(const sec *s)
{
    return s->offered ? (double)s->ideal_hits / (double)s->offered : 1;
}

static derived derive(const run *r)
{
    derived d;
    samples steady = { 0 };
    uint64_t cache = 0, ok = 0, ideal = 0, off = 0, shed = 0, off10 = 0;

    memset(&d, 0, sizeof d);
    for (int i = 2; i < r->warm_s; i++)   /* the first two: the loop finding its pace */
        for (size_t j = 0; j < r->s[i].lat_ms.n; j++)
            sm_add(&steady, r->s[i].lat_ms.v[j]);
    d.steady_p99 = sm_pct(&steady, 99);
    sm_free(&steady);
    d.recovered = -1;
    for (int t = r->secs - 1; t >= 0; t--) {
        const sec *s = &r->s[r->warm_s + t];
        double p99 = sm_pct(&s->lat_ms, 99);
        if (!(s->done_ok > 0 && hit_of(s) >= ideal_of(s) - 0.05 && p99 < 2 * d.steady_p99))
            break;
        d.recovered = t;
    }
    d.hit_back = -1;
    for (int t = r->secs - 1; t >= 0; t--) {
        const sec *s = &r->s[r->warm_s + t];
        if (!(s->done_ok > 0 && hit_of(s) >= ideal_of(s) - 0.05))
            break;
        d.hit_back = t;
    }
    d.p99_back = -1;
    for (int t = 0, held = 0; t < r->secs; t++) {
        const sec *s = &r->s[r->warm_s + t];
        double p99 = sm_pct(&s->lat_ms, 99);
        if (p99 > d.peak_p99)
            d.peak_p99 = p99;
        if (d.p99_back >= 0)
            d.p99_over += p99 >= 2 * d.steady_p99;
        else if (p99 >= 2 * d.steady_p99)
            held = 0;
        else if (++held == P99_HOLD_S)
            d.p99_back = t + 1 - P99_HOLD_S;
        if (t >= r->secs - 10) {
            cache += s->done_cache;
            ok += s->done_ok;
            ideal += s->ideal_hits;
            off += s->offered;
        }
        if (t < 10) {
            shed += s->shed + s->dropped;
            off10 += s->offered;
        }
        if (d.recovered >= 0 && t >= d.recovered)
            d.shed_after += s->shed + s->dropped;
        d.late += s->late;
        d.rebuilds += s->rebuilds;
        d.refused += s->refused;
        d.offered += s->offered;
        d.served += s->ok;
        d.unfinished += s->unfinished;
        d.dropped += s->dropped;
        d.failed += s->failed;
        if (s->done_ok > s->done_cache + 100 && s->rebuilds == 0)
            d.no_install_s++;
    }
    for (int i = 0; i < r->nsec; i++)
        d.pg_max = r->s[i].pg_active > d.pg_max ? r->s[i].pg_active : d.pg_max;
    d.hit_end = ok ? (double)cache / (double)ok : 0;
    d.ideal_end = off ? (double)ideal / (double)off : 0;
    d.shed10 = off10 ? (double)shed / (double)off10 : 0;
    d.served = d.offered ? d.served / (double)d.offered : 0;
    return d;
}

static const char *ms_txt(double ms)
{
    static char b[8][32];   /* a table row holds up to 8 of them */
    static int n;
    char *o = b[n++ % 8];

    if (isnan(ms))
        snprintf(o, 32, "n/a");
    else if (ms >= 1000)
        snprintf(o, 32, "%.2f s", ms / 1000);
    else
        snprintf(o, 32, "%s ms", NUM(ms));
    return o;
}

/* The table of one run's seconds, and its block of storm.dat. */
static void report_seconds(FILE *md, FILE *dat, const run *r, const char *name)
{
    fprintf(md, "\n<details><summary>%s: every second</summary>\n\n"
            "| t (s) | offered | served | shed | hit rate | ideal | p50 | p99 | SQL statements |"
            " rebuilds installed%s | installs refused | lease waits served | deadlines missed |"
            " PostgreSQL statements in flight (sampled max) |\n"
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
            " ---: | ---: |\n", name, r->k == K_PLAIN ? " (fills)" : "");
    fprintf(dat, "\"%s\" hit ideal p99_ms\n", name);
    for (int i = 0; i < r->nsec; i++) {
        const sec *s = &r->s[i];
        double p50 = sm_pct(&s->lat_ms, 50), p99 = sm_pct(&s->lat_ms, 99);
        int t = i - r->warm_s;
        if (r->k == K_FEED)
            fprintf(md, "| %d | %u | %u | %u | %.3f | %.3f | %s | %s | %llu | %llu | %llu | %llu |"
                    " %llu | %d |\n", t, s->offered, s->done_ok, s->done_shed, hit_of(s),
                    ideal_of(s), ms_txt(p50), ms_txt(p99), (unsigned long long)s->sql,
                    (unsigned long long)s->rebuilds, (unsigned long long)s->refused,
                    (unsigned long long)s->lease_served, (unsigned long long)s->deadlines,
                    s->pg_active);
        else
            fprintf(md, "| %d | %u | %u | %u | %.3f | %.3f | %s | %s | %llu | %llu | - | - | - |"
                    " %d |\n", t, s->offered, s->done_ok, s->done_shed, hit_of(s), ideal_of(s),
                    ms_txt(p50), ms_txt(p99), (unsigned long long)s->sql,
                    (unsigned long long)s->rebuilds, s->pg_active);
        fprintf(dat, "%d %.4f %.4f %.3f\n", t, hit_of(s), ideal_of(s), isnan(p99) ? 0 : p99);
    }
    fprintf(dat, "\n\n");
    fprintf(md, "\n</details>\n");
}

/* ------------------------------------------------------------ section */

typedef struct plan { kind k; double frac; trigger t; } plan;

void section_storm(void)
{
    int quick = getenv("BENCH_QUICK") != NULL;
    static const plan full[] = {
        { K_FEED, 0.50, T_FLUSH_ASYNC }, { K_FEED, 0.50, T_RESTART }, { K_FEED, 0.50, T_FLUSH },
        { K_PLAIN, 0.50, T_FLUSH_ASYNC }, { K_PLAIN, 0.50, T_RESTART }, { K_PLAIN, 0.50, T_FLUSH },
        { K_FEED, 0.75, T_FLUSH_ASYNC }, { K_FEED, 0.75, T_RESTART },
        { K_PLAIN, 0.75, T_FLUSH_ASYNC }, { K_PLAIN, 0.75, T_RESTART },
        { K_FEED, 0.90, T_FLUSH_ASYNC }, { K_FEED, 0.90, T_RESTART },
        { K_PLAIN, 0.90, T_FLUSH_ASYNC }, { K_PLAIN, 0.90, T_RESTART },
    };
    static const plan short_[] = {
        { K_FEED, 0.50, T_FLUSH_ASYNC }, { K_FEED, 0.50, T_RESTART },
        { K_PLAIN, 0.50, T_FLUSH_ASYNC }, { K_PLAIN, 0.50, T_RESTART },
        { K_FEED, 0.75, T_FLUSH_ASYNC }, { K_FEED, 0.75, T_RESTART },
        { K_PLAIN, 0.75, T_FLUSH_ASYNC }, { K_PLAIN, 0.75, T_RESTART },
    };
    const plan *pl = quick ? short_ : full;
    size_t np = quick ? sizeof short_ / sizeof *short_ : sizeof full / sizeof *full,
           runs = (size_t)atoi(env_or("BENCH_STORM_RUNS", "0"));
    /* BENCH_STORM_SECS and BENCH_STORM_RUNS (the first N runs of the plan)
     * shorten it further, for trying the section out */
    int warm_s = quick ? 5 : 10, secs = atoi(env_or("BENCH_STORM_SECS", quick ? "25" : "60"));
    double wsecs = quick ? 2 : 5, max_feed, max_plain, closed_feed, ramp[10][2];
    int nramp;
    char ramp_txt[1024] = "";
    PGconn *pg = b_pg();
    FILE *md = out_section("storm"), *dat = out_data("storm"), *rows, *detail;
    char *rows_buf = NULL, *detail_buf = NULL;
    size_t rows_len = 0, detail_len = 0;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    feed_config dflt;
    unsigned budget;
    int ok_runs = 0, feed_runs = 0, plain_rec = 0, plain_runs = 0, over_budget = 0;

    if (b_servers("status") != 0) {
        fprintf(md, "## A cold cache under load (section \"storm\")\n\nNot measured: no"
                " `FEED_SERVERS` / `FEED_SERVERS_DIR` (bench/run.sh sets them).\n");
        out_summary("storm_recover", "a cold cache under an open-loop load recovers", "report",
                    "MISS", "not measured (no servers folder)");
        fclose(md);
        fclose(dat);
        PQfinish(pg);
        return;
    }
    if (runs > 0 && runs < np)
        np = runs;
    if (secs < 10)
        die("BENCH_STORM_SECS: at least 10, not %d", secs);
    /* A write to a Redis that was just killed raises SIGPIPE: the control's
     * hiredis adapter writes with write(2), and the default action ends the
     * process (the library guards its own writes, lib/io/redis_async.c). A
     * server program ignores it, so does this. */
    if (signal(SIGPIPE, SIG_IGN) == SIG_ERR)
        die("signal(SIGPIPE): %s", strerror(errno));
    feed_config_init(&dflt);
    budget = dflt.pg_budget ? dflt.pg_budget : cpus > 1 ? 4 * (unsigned)cpus : 4;
    zipf_init();
    storm_load(pg);
    PQfinish(pg);
    if (!(rows = open_memstream(&rows_buf, &rows_len)) ||
        !(detail = open_memstream(&detail_buf, &detail_len)))
        die("open_memstream: %s", strerror(errno));

    note("storm: closed loop, feedcache");
    closed_feed = closed_max(K_FEED, wsecs);
    note("storm: closed loop, feedcache: %.0f pages/s; the control", closed_feed);
    max_plain = closed_max(K_PLAIN, wsecs);
    note("storm: closed loop, control: %.0f pages/s; feedcache's open-loop ramp", max_plain);
    /* BENCH_STORM_MAX: a warm maximum given, no ramp (trying the section out) */
    if (atof(env_or("BENCH_STORM_MAX", "0")) > 0) {
        max_feed = atof(env_or("BENCH_STORM_MAX", "0"));
        nramp = 0;
        snprintf(ramp_txt, sizeof ramp_txt, "not run: BENCH_STORM_MAX gave the maximum");
    } else {
        max_feed = warm_max(closed_feed, ramp, &nramp);
    }
    note("storm: warm maximum, feedcache: %.0f pages/s", max_feed);
    for (int i = 0, o = 0; i < nramp && o < (int)sizeof ramp_txt; i++)
        o += snprintf(ramp_txt + o, sizeof ramp_txt - (size_t)o, "%s%s/s: p99 %s%s",
                      i ? ", " : "", NUM(ramp[i][0]), ms_txt(ramp[i][1]),
                      ramp[i][0] > max_feed ? " (behind)" : "");

    for (size_t i = 0; i < np; i++) {
        run r;
        derived d;
        char name[128], rec[32], back[32], p99b[48];
        memset(&r, 0, sizeof r);
        r.k = pl[i].k;
        r.t = pl[i].t;
        r.frac = pl[i].frac;
        r.rate = pl[i].frac * max_feed;
        r.warm_s = warm_s;
        r.secs = secs;
        r.nsec = warm_s + secs;
        r.drain_s = DRAIN_S;
        snprintf(name, sizeof name, "%s, %.0f%%, %s", r.k == K_FEED ? "feedcache" : "control",
                 r.frac * 100, trig_name[r.t]);
        note("storm: %s (%.0f pages/s)", name, r.rate);
        run_one(&r);
        d = derive(&r);
        note("storm: %s: steady p99 %.1f ms, peak %.1f ms, recovered at %d s, p99 back at %d s"
             " (%d later seconds over 2x), hit at end %.3f (ideal %.3f), shed in the first 10 s"
             " %.3f", name, d.steady_p99, d.peak_p99, d.recovered, d.p99_back, d.p99_over,
             d.hit_end, d.ideal_end, d.shed10);
        if (d.recovered >= 0)
            snprintf(rec, sizeof rec, "%d s", d.recovered);
        else
            snprintf(rec, sizeof rec, "**never**");
        if (d.hit_back >= 0)
            snprintf(back, sizeof back, "%d s", d.hit_back);
        else
            snprintf(back, sizeof back, "never");
        if (d.p99_back >= 0)
            snprintf(p99b, sizeof p99b, "%d s (%d)", d.p99_back, d.p99_over);
        else
            snprintf(p99b, sizeof p99b, "never");
        fprintf(rows, "| %s | %.0f%% (%s/s) | %s (%s) | %s | %s | %s | %s | %s | %.3f (%.3f) | %.1f%% | %llu |"
                " %llu (max %s) | %s | %llu / %llu | %d | %d / %u | %.1f%% | %llu |\n",
                kind_name[r.k], r.frac * 100, NUM(r.rate), trig_name[r.t], ms_txt(r.trig_ms),
                ms_txt(d.steady_p99), ms_txt(d.peak_p99),
                rec, back, p99b, d.hit_end, d.ideal_end,
                100 * d.shed10, (unsigned long long)d.shed_after, (unsigned long long)d.late,
                ms_txt(r.max_ms), ms_txt(r.lag_ms), (unsigned long long)d.rebuilds, (unsigned long long)d.refused,
                d.no_install_s, d.pg_max, budget, 100 * d.served,
                (unsigned long long)(d.unfinished + d.failed + d.dropped));
        report_seconds(detail, dat, &r, name);
        if (r.why[0])
            fprintf(detail, "\nThe first failure other than a shed: `%s`\n", r.why);
        if (r.k == K_FEED) {
            feed_runs++;
            ok_runs += d.recovered >= 0 && d.recovered <= (r.frac > 0.8 ? 30 : 15) &&
                       d.late == 0 && (r.frac > 0.8 || d.shed_after == 0);
            over_budget += d.pg_max > (int)budget;
        } else {
            plain_runs++;
            plain_rec += d.recovered >= 0;
        }
        for (int s = 0; s <= r.nsec; s++)
            sm_free(&r.s[s].lat_ms);
        free(r.s);
    }
    fclose(rows);
    fclose(detail);

    fprintf(md, "## A cold cache under load: flush and empty restart (section \"storm\")\n\n"
            "One process, one libevent loop thread, %d workers: %d `feed_async` handles (each"
            " its own Redis and PostgreSQL connection; the library's defaults:"
            " `request_timeout_ms` %u, `pg_budget` %u in effect (%ld CPUs), `lease_ms` %u,"
            " `redis_timeout_ms` %u, the restart fence on), or %d workers of the control, a"
            " plain cache-aside reader written in bench/storm.c with hiredis async and libpq:"
            " `ZREVRANGEBYSCORE` with `LIMIT` on the user's key; on a miss the feed's top %d"
            " rows from SQL, a `ZADD` (with an end marker) + `EXPIRE` pipeline to fill, the page"
            " from the rows; the page from SQL while Redis fails; one statement at a time per"
            " worker, the rest queued without bound; no lease, budget or deadline.\n\n"
            "The load is open: requests at a fixed rate whatever the replies, latency counted"
            " from each request's scheduled time. uids Zipf(%.2f) over %s feeds of 50-200 rows"
            " (table `storm_entry`, key prefix `storm`; the control's keys `stormplain:{uid}`),"
            " %.0f%% first pages, the rest next pages from the cursor of a page served before;"
            " %d items a page; every page checked against the data. The generator drops"
            " requests past %s in flight (counted with the failures).\n\n"
            "**Warm maximum.** A closed loop (%d in flight, warm cache, %.0f s after a"
            " second's start): feedcache %s pages/s, the control %s pages/s. That loop"
            " pipelines %d requests per connection; an open loop at the same rate sends a few"
            " per turn of the loop and carries less, so feedcache's warm maximum is the"
            " highest step of an open-loop ramp (tenths of the closed loop's figure, %d s"
            " each, warm) that kept up (every request served, p99 from the schedule under"
            " %.0f ms and under 3x the first step's): %s. **Warm maximum: %s pages/s**; each run offers a fraction of it:"
            " feedcache's: every feed cached first, %d s of load, then at t = 0 the trigger"
            " (on a thread of its own: `FLUSHALL ASYNC`, `FLUSHALL`, or Redis killed with"
            " SIGKILL and started again empty on its port), %d s recorded, %d s more with the"
            " load still on (not recorded), then whatever is still in flight is cancelled and"
            " counted unfinished (its latency so far enters its second's percentiles as a"
            " lower bound). *Generator behind*: how late the loop issued a request after its"
            " scheduled time (the loop is the library's thread too: time a request waits there"
            " before the call counts in its latency, which the library's deadline cannot"
            " see).\n\n"
            "Per second: p50 / p99 of the requests scheduled in it; hit rate = cached pages /"
            " pages served in it; the ideal cache's = the share of requests of that second"
            " whose feed was asked for since t = 0 (a cache that fills a feed on its first"
            " miss: every feed fits in one rebuild); counters are the handles' `feed_stats`"
            " deltas. **Recovered at**: the first second from which, to the end of the"
            " window, the hit rate stays within 5 points of the ideal and p99 < 2x the steady"
            " p99 (seconds 2 to %d before the trigger, pooled); *hit rate back at*: the same"
            " for the hit rate alone (a steady p99 of a few ms makes the first test trip on"
            " one noisy second of a shared machine); *p99 back at*: the first second of %d in"
            " a row with p99 < 2x the steady p99 (the queue the trigger left is drained),"
            " with the count of later seconds over it. PostgreSQL statements in"
            " flight: active client backends of the database in `pg_stat_activity`, sampled"
            " every %d ms on a connection of its own (a sample: bursts between two are"
            " missed), against `pg_budget`.\n\n"
            "| reader | offered | trigger (took) | steady p99 | p99 peak | recovered at |"
            " hit rate back at | p99 back at (later seconds over 2x) |"
            " hit rate, last 10 s (ideal) | shed, first 10 s | shed after recovery |"
            " pages > %u ms (slowest) | generator behind, most | rebuilds installed / installs refused | seconds with"
            " misses and no install | PostgreSQL in flight, max / budget | served | unfinished"
            " or failed |\n"
            "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
            " ---: | ---: | ---: | ---: | ---: |\n",
            NWORK, NWORK, dflt.request_timeout_ms, budget, cpus, dflt.lease_ms,
            dflt.redis_timeout_ms, NWORK, PLAIN_TOP, ZIPF_S, NUM(NFEEDS), FIRST_SHARE * 100,
            PAGE_LIMIT, NUM(MAX_INFLIGHT), WARM_FLIGHT, wsecs, NUM(closed_feed), NUM(max_plain),
            WARM_FLIGHT / NWORK, RAMP_S, RAMP_P99_MS, ramp_txt, NUM(max_feed), warm_s, secs, DRAIN_S, warm_s, P99_HOLD_S, STATS_MS, dflt.request_timeout_ms);
    fwrite(rows_buf, 1, rows_len, md);
    fprintf(md, "\nThe control's rebuilds are its fills (`ZADD` pipelines sent); it has no"
            " installs to refuse. Shed counts `FEED_EBUSY` and requests the generator"
            " dropped.\n\n<!-- storm.png -->\n");
    fwrite(detail_buf, 1, detail_len, md);
    out_summary("storm_recover", "a cold cache under an open-loop load (flush, empty restart):"
                " feedcache recovered (within 15 s at 50-75%, 30 s at 90% of the warm maximum;"
                " no page past the deadline; no shed after recovery at 50-75%)", "every run",
                verdict(ok_runs == feed_runs), "%d of %d runs; the control recovered in %d of %d",
                ok_runs, feed_runs, plain_rec, plain_runs);
    out_summary("storm_budget", "PostgreSQL statements in flight during the storms (sampled"
                " pg_stat_activity) vs pg_budget", "<= budget", verdict(over_budget == 0),
                "%d of %d runs over %u", over_budget, feed_runs, budget);
    free(rows_buf);
    free(detail_buf);
    fclose(md);
    fclose(dat);
}
