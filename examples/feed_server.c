/* feed_server.c -- a small HTTP/JSON feed service on feedcache.
 *
 *   GET    /users/{uid}/feed?limit=N&cursor=TOKEN   one page of uid's feed
 *   POST   /users/{uid}/items        {"id":..,"score":..}   new row, then feed_on_insert
 *   PUT    /users/{uid}/items        {"id":..,"score":..}   new score, then feed_on_insert
 *   PUT    /users/{uid}/items/{id}   {"score":..}           the same, id in the path
 *   DELETE /users/{uid}/items/{id}                           row gone, then feed_on_delete
 *   POST   /items/{id}/fanout        {"score":..,"uids":[..]} one row per uid, then feed_fanout
 *   GET    /metrics                  Prometheus text
 *   GET    /healthz                  whether Redis and PostgreSQL answer
 *
 * Threads: libmicrohttpd runs a pool of --threads worker threads, each with
 * its own event loop; a request is handled start to end by one of them. A
 * feedcache handle is single-threaded, so each worker thread owns one (made
 * on its first request) plus one libpq connection for the write
 * transactions and one hiredis connection for /healthz. The workers are
 * listed globally (under a mutex) so that /metrics can sum their counters
 * and shutdown can close them; each worker copies its handle's feed_stats
 * into a snapshot under its own lock after every request, so no thread ever
 * reads another's handle.
 *
 * Writes: the row changes in a PostgreSQL transaction; the hook runs after
 * COMMIT. When a hook fails (Redis down or frozen), PostgreSQL has the row
 * but the cached copy may lack it, so the uid goes into a "dirty" set: until
 * feed_invalidate() succeeds for it, its pages are read straight from
 * PostgreSQL by this server (source "db"), never from the stale cache.
 * Every request of the feed and write routes first retries a few
 * invalidations. (The set lives in this process: a restart forgets it, and
 * the TTL bounds how long a stale copy can then live.)
 *
 * Ids are JSON strings of decimal digits on output, because ids may exceed
 * 2^53 and JavaScript-style clients would round JSON numbers that large;
 * on input an id is a JSON integer or such a string. Scores are JSON
 * integers within +/-(2^53-1), exact in every JSON client.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <hiredis/hiredis.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <microhttpd.h>

#include "feedcache.h"

#define DEFAULT_LIMIT   20
#define RETRY_OPEN_MS   1000     /* least time between two feed_open / PQconnect tries per worker */
#define DRAIN_BATCH     16       /* dirty feeds retried per request */

/* ------------------------------------------------------------------------
 * Options
 * ------------------------------------------------------------------------ */

typedef struct options {
    const char *bind;
    unsigned    port;
    unsigned    threads;
    size_t      max_body;
    size_t      max_fanout;
    int         quiet;
    feed_config cfg;
} options;

static options opt;

/* ------------------------------------------------------------------------
 * Small helpers
 * ------------------------------------------------------------------------ */

static int64_t now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* A non-negative decimal integer, digits only (no sign, no spaces), at most
 * max. Returns 0 on success. */
static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;

    if (!s || !*s)
        return -1;
    for (; *s; s++) {
        unsigned d;
        if (*s < '0' || *s > '9')
            return -1;
        d = (unsigned)(*s - '0');
        if (v > (max - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

static int parse_i64_nonneg(const char *s, int64_t *out)
{
    uint64_t v;

    if (parse_u64(s, INT64_MAX, &v) != 0)
        return -1;
    *out = (int64_t)v;
    return 0;
}

/* A growable text buffer; on allocation failure it stays truncated and
 * sets failed. */
typedef struct sbuf {
    char  *data;
    size_t len, cap;
    int    failed;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (b->failed)
        return;
    for (;;) {
        size_t room = b->cap - b->len;
        va_start(ap, fmt);
        n = vsnprintf(b->data ? b->data + b->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if ((size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap - b->len <= (size_t)n)
            cap *= 2;
        char *p = realloc(b->data, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->data = p;
        b->cap = cap;
    }
}

/* ------------------------------------------------------------------------
 * The dirty set: uids whose write hook failed after the row committed.
 * Open addressing, linear probing, backward-shift deletion. Each entry
 * carries the sequence number of its latest marking, so an invalidation
 * that ran before a newer failed hook does not clear the newer one.
 * ------------------------------------------------------------------------ */

static struct {
    pthread_mutex_t lock;
    uint64_t       *keys;     /* uid + 1; 0 = empty slot */
    uint64_t       *seqs;
    size_t          cap, count;
    uint64_t        next_seq;
} dirty = { .lock = PTHREAD_MUTEX_INITIALIZER };
static atomic_size_t dirty_count;   /* read without the lock: "anything to do?" */

static size_t dirty_hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (size_t)k;
}

static size_t dirty_find(uint64_t key)   /* lock held, cap > 0: slot of key or empty slot */
{
    size_t mask = dirty.cap - 1, i = dirty_hash(key) & mask;

    while (dirty.keys[i] != 0 && dirty.keys[i] != key)
        i = (i + 1) & mask;
    return i;
}

static int dirty_grow(void)   /* lock held */
{
    size_t old_cap = dirty.cap, cap = old_cap ? old_cap * 2 : 64;
    uint64_t *old_keys = dirty.keys, *old_seqs = dirty.seqs;
    uint64_t *keys = calloc(cap, sizeof *keys), *seqs = calloc(cap, sizeof *seqs);

    if (!keys || !seqs) {
        free(keys);
        free(seqs);
        return -1;
    }
    dirty.keys = keys;
    dirty.seqs = seqs;
    dirty.cap = cap;
    for (size_t i = 0; i < old_cap; i++) {
        if (old_keys[i]) {
            size_t j = dirty_find(old_keys[i]);
            dirty.keys[j] = old_keys[i];
            dirty.seqs[j] = old_seqs[i];
        }
    }
    free(old_keys);
    free(old_seqs);
    return 0;
}

/* Returns 0, or -1 when out of memory (logged by the caller). */
static int dirty_mark(int64_t uid)
{
    uint64_t key = (uint64_t)uid + 1;
    int rc = 0;

    pthread_mutex_lock(&dirty.lock);
    if ((dirty.count + 1) * 2 > dirty.cap && dirty_grow() != 0) {
        rc = -1;
    } else {
        size_t i = dirty_find(key);
        if (!dirty.keys[i]) {
            dirty.keys[i] = key;
            dirty.count++;
            atomic_store(&dirty_count, dirty.count);
        }
        dirty.seqs[i] = ++dirty.next_seq;
    }
    pthread_mutex_unlock(&dirty.lock);
    return rc;
}

static int dirty_lookup(int64_t uid, uint64_t *seq)
{
    uint64_t key = (uint64_t)uid + 1;
    int found = 0;

    if (atomic_load(&dirty_count) == 0)
        return 0;
    pthread_mutex_lock(&dirty.lock);
    if (dirty.cap) {
        size_t i = dirty_find(key);
        if (dirty.keys[i]) {
            found = 1;
            *seq = dirty.seqs[i];
        }
    }
    pthread_mutex_unlock(&dirty.lock);
    return found;
}

/* Remove uid if its latest marking is still seq. */
static void dirty_clear_if(int64_t uid, uint64_t seq)
{
    uint64_t key = (uint64_t)uid + 1;

    pthread_mutex_lock(&dirty.lock);
    if (dirty.cap) {
        size_t mask = dirty.cap - 1, i = dirty_find(key), j = i;
        if (dirty.keys[i] && dirty.seqs[i] == seq) {
            for (;;) {   /* backward shift: keep every probe chain unbroken */
                j = (j + 1) & mask;
                if (!dirty.keys[j])
                    break;
                size_t home = dirty_hash(dirty.keys[j]) & mask;
                int between = i <= j ? (i < home && home <= j) : (i < home || home <= j);
                if (between)
                    continue;
                dirty.keys[i] = dirty.keys[j];
                dirty.seqs[i] = dirty.seqs[j];
                i = j;
            }
            dirty.keys[i] = 0;
            dirty.count--;
            atomic_store(&dirty_count, dirty.count);
        }
    }
    pthread_mutex_unlock(&dirty.lock);
}

/* Copy up to max entries, starting at a moving position so that one feed
 * that cannot be invalidated does not starve the others. */
static size_t dirty_sample(int64_t *uids, uint64_t *seqs, size_t max)
{
    static size_t start;
    size_t n = 0;

    pthread_mutex_lock(&dirty.lock);
    for (size_t k = 0; k < dirty.cap && n < max; k++) {
        size_t i = (start + k) & (dirty.cap - 1);
        if (dirty.keys[i]) {
            uids[n] = (int64_t)(dirty.keys[i] - 1);
            seqs[n++] = dirty.seqs[i];
        }
    }
    if (dirty.cap)
        start = (start + max) & (dirty.cap - 1);
    pthread_mutex_unlock(&dirty.lock);
    return n;
}

/* ------------------------------------------------------------------------
 * Workers: one per libmicrohttpd thread
 * ------------------------------------------------------------------------ */

enum route {
    R_FEED, R_ITEMS, R_ITEM, R_FANOUT, R_METRICS, R_HEALTHZ, R_UNKNOWN, R_COUNT
};
static const char *const route_names[R_COUNT] = {
    "/users/{uid}/feed", "/users/{uid}/items", "/users/{uid}/items/{id}",
    "/items/{id}/fanout", "/metrics", "/healthz", "unknown"
};

/* The statuses this server sends; anything else is counted as "other". */
static const unsigned status_codes[] = { 200, 201, 400, 404, 405, 409, 413, 500, 503 };
#define N_STATUS (sizeof status_codes / sizeof status_codes[0] + 1)

/* Request latency histogram bounds, in microseconds. */
static const int64_t bucket_us[] = {
    100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000,
    1000000, 2500000
};
#define N_BUCKETS (sizeof bucket_us / sizeof bucket_us[0])

typedef struct counters {
    feed_stats stats;                     /* snapshot of the handle's feed_stats */
    uint64_t   requests[R_COUNT][N_STATUS];
    uint64_t   buckets[N_BUCKETS + 1];    /* the last is +Inf; not cumulative here */
    uint64_t   latency_count;
    uint64_t   latency_sum_us;
    uint64_t   hook_failures;             /* hooks that failed after a commit */
    uint64_t   bypass_pages;              /* pages of dirty feeds read by this server from SQL */
    uint64_t   invalidations;             /* dirty feeds repaired */
} counters;

typedef struct worker {
    struct worker  *next;
    pthread_mutex_t lock;                 /* guards c */
    counters        c;
    /* Used by the owning thread only (and by main after the daemon stopped). */
    feed           *feed;
    int64_t         feed_attempt_us;
    PGconn         *pg;
    int64_t         pg_attempt_us;
    redisContext   *redis;                /* /healthz only */
} worker;

static pthread_mutex_t workers_lock = PTHREAD_MUTEX_INITIALIZER;
static worker *workers;
static _Thread_local worker *self;

static void stats_add(feed_stats *a, const feed_stats *b)
{
    a->pages += b->pages;
    a->cache_pages += b->cache_pages;
    a->rebuilds += b->rebuilds;
    a->db_pages += b->db_pages;
    a->sql_queries += b->sql_queries;
    a->redis_calls += b->redis_calls;
    a->lease_waits += b->lease_waits;
    a->redis_errors += b->redis_errors;
    a->pg_errors += b->pg_errors;
}

static feed *worker_feed(worker *w);

static worker *this_worker(void)
{
    worker *w;

    if (self)
        return self;
    w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    pthread_mutex_init(&w->lock, NULL);
    pthread_mutex_lock(&workers_lock);
    w->next = workers;
    workers = w;
    pthread_mutex_unlock(&workers_lock);
    self = w;
    worker_feed(w);   /* open now: later counters then move by requests only */
    return w;
}

/* The worker's feedcache handle, opened on first use and, after a failed
 * open (both stores down), retried at most once per RETRY_OPEN_MS. */
static feed *worker_feed(worker *w)
{
    int64_t t = now_us();
    int rc;

    if (w->feed)
        return w->feed;
    if (w->feed_attempt_us && t - w->feed_attempt_us < RETRY_OPEN_MS * 1000)
        return NULL;
    w->feed_attempt_us = t;
    rc = feed_open(&w->feed, &opt.cfg);
    if (rc != FEED_OK)
        fprintf(stderr, "feed_server: feed_open: %s: %s\n", feed_strerror(rc), feed_errmsg(NULL));
    return w->feed;
}

/* The worker's libpq connection for writes, with the same retry pacing.
 * connect_timeout comes first so that one in the conninfo wins. */
static PGconn *pg_connect(void)
{
    const char *keys[] = { "connect_timeout", "dbname", NULL };
    const char *vals[] = { "3", opt.cfg.pg_conninfo, NULL };

    return PQconnectdbParams(keys, vals, 1);
}

static PGconn *worker_pg(worker *w, int force)
{
    int64_t t = now_us();

    if (w->pg && PQstatus(w->pg) == CONNECTION_OK)
        return w->pg;
    if (!force && w->pg_attempt_us && t - w->pg_attempt_us < RETRY_OPEN_MS * 1000)
        return NULL;
    w->pg_attempt_us = t;
    if (w->pg)
        PQreset(w->pg);
    else
        w->pg = pg_connect();
    return w->pg && PQstatus(w->pg) == CONNECTION_OK ? w->pg : NULL;
}

static void worker_close(worker *w)
{
    feed_close(w->feed);
    w->feed = NULL;
    if (w->pg)
        PQfinish(w->pg);
    w->pg = NULL;
    if (w->redis)
        redisFree(w->redis);
    w->redis = NULL;
}

/* ------------------------------------------------------------------------
 * Requests
 * ------------------------------------------------------------------------ */

typedef struct request {
    int64_t     start_us;
    char       *body;
    size_t      len, cap;
    int         too_large;
    int         done;            /* a response was queued */
    enum route  route;
    const char *source;          /* for the log: cache, rebuild, db or NULL */
    char        err[512];        /* for the log of a 5xx: the detail */
} request;

static size_t status_slot(unsigned status)
{
    for (size_t i = 0; i < N_STATUS - 1; i++)
        if (status_codes[i] == status)
            return i;
    return N_STATUS - 1;
}

/* Bytes that could forge or break a log line are shown as \xNN. */
static void log_safe(sbuf *b, const char *s, size_t max)
{
    for (size_t i = 0; s[i] && i < max; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x20 || ch >= 0x7f || ch == '\\' || ch == '"')
            sb_printf(b, "\\x%02x", ch);
        else
            sb_printf(b, "%c", ch);
    }
}

/* Count the request, log it, snapshot the handle's counters. */
static void account(worker *w, request *rq, const char *method, const char *url,
                    unsigned status)
{
    int64_t us = now_us() - rq->start_us;
    size_t b = 0;

    if (us < 0)
        us = 0;
    while (b < N_BUCKETS && us > bucket_us[b])
        b++;
    if (w) {
        pthread_mutex_lock(&w->lock);
        if (w->feed) {
            feed_stats_get(w->feed, &w->c.stats);
        }
        w->c.requests[rq->route][status_slot(status)]++;
        w->c.buckets[b]++;
        w->c.latency_count++;
        w->c.latency_sum_us += (uint64_t)us;
        pthread_mutex_unlock(&w->lock);
    }
    if (!opt.quiet) {
        sbuf line = { 0 };
        log_safe(&line, method, 16);
        sb_printf(&line, " ");
        log_safe(&line, url, 512);
        sb_printf(&line, " %u %s %" PRId64 "us", status, rq->source ? rq->source : "-", us);
        if (rq->err[0] && status >= 500) {
            sb_printf(&line, " \"");
            log_safe(&line, rq->err, sizeof rq->err);
            sb_printf(&line, "\"");
        }
        sb_printf(&line, "\n");
        if (!line.failed)
            fputs(line.data, stderr);   /* one call: lines of threads do not mix */
        free(line.data);
    }
}

static enum MHD_Result respond(struct MHD_Connection *c, request *rq, const char *method,
                               const char *url, unsigned status, const char *ctype,
                               char *body, size_t len, const char *extra_header,
                               const char *extra_value)
{
    struct MHD_Response *resp;
    enum MHD_Result ret;

    /* body is malloc'd (jansson and sbuf both use malloc): MHD frees it. */
    resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (extra_header)
        MHD_add_response_header(resp, extra_header, extra_value);
    ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    rq->done = 1;
    account(this_worker(), rq, method, url, status);
    return ret;
}

/* Steals obj. */
static enum MHD_Result respond_json(struct MHD_Connection *c, request *rq, const char *method,
                                    const char *url, unsigned status, json_t *obj,
                                    const char *extra_header, const char *extra_value)
{
    char *text = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    size_t len;

    json_decref(obj);
    if (!text) {   /* out of memory: a fixed body still tells the client */
        static const char oom[] = "{\"error\":\"out of memory\"}";
        text = malloc(sizeof oom);
        if (!text)
            return MHD_NO;
        memcpy(text, oom, sizeof oom);
        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
    }
    len = strlen(text);
    text[len] = '\n';   /* json_dumps leaves room for the NUL: use it for a newline */
    return respond(c, rq, method, url, status, "application/json", text, len + 1,
                   extra_header, extra_value);
}

static enum MHD_Result respond_error(struct MHD_Connection *c, request *rq, const char *method,
                                     const char *url, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static enum MHD_Result respond_error(struct MHD_Connection *c, request *rq, const char *method,
                                     const char *url, unsigned status, const char *fmt, ...)
{
    char msg[400];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (status >= 500 && !rq->err[0])   /* keep a more detailed reason */
        snprintf(rq->err, sizeof rq->err, "%s", msg);
    return respond_json(c, rq, method, url, status, json_pack("{s:s}", "error", msg),
                        status == 503 ? "Retry-After" : NULL, "1");
}

/* ------------------------------------------------------------------------
 * JSON input
 * ------------------------------------------------------------------------ */

#define ID_RULE "a non-negative integer (a JSON integer or a string of decimal digits, " \
                "at most 9223372036854775807)"

static int json_id(const json_t *v, int64_t *out)
{
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if (i < 0)
            return -1;
        *out = (int64_t)i;
        return 0;
    }
    if (json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v))
        return parse_i64_nonneg(json_string_value(v), out);
    return -1;
}

static int json_score(const json_t *v, int64_t *out)
{
    json_int_t i;

    if (!json_is_integer(v))
        return -1;
    i = json_integer_value(v);
    if (i < -FEED_SCORE_MAX || i > FEED_SCORE_MAX)
        return -1;
    *out = (int64_t)i;
    return 0;
}

/* The body as a JSON object whose keys are all in allowed (a NULL-ended
 * list). On error returns NULL and writes the message for a 400. */
static json_t *body_object(const request *rq, const char *const *allowed,
                           char *err, size_t errlen)
{
    json_error_t e;
    json_t *j;
    const char *key;
    json_t *val;

    if (rq->len == 0) {
        snprintf(err, errlen, "the request body must be a JSON object");
        return NULL;
    }
    j = json_loadb(rq->body, rq->len, JSON_REJECT_DUPLICATES, &e);
    if (!j) {
        snprintf(err, errlen, "malformed JSON: %s (line %d, column %d)", e.text, e.line, e.column);
        return NULL;
    }
    if (!json_is_object(j)) {
        snprintf(err, errlen, "the request body must be a JSON object");
        json_decref(j);
        return NULL;
    }
    json_object_foreach(j, key, val) {
        int known = 0;
        (void)val;
        for (size_t i = 0; allowed[i] && !known; i++)
            known = strcmp(key, allowed[i]) == 0;
        if (!known) {
            snprintf(err, errlen, "unknown field \"%.40s\"", key);
            json_decref(j);
            return NULL;
        }
    }
    return j;
}

/* ------------------------------------------------------------------------
 * PostgreSQL writes: BEGIN; one statement; COMMIT.
 * ------------------------------------------------------------------------ */

enum tx_result {
    TX_OK,
    TX_CONFLICT,     /* unique violation: the row exists */
    TX_DOWN,         /* PostgreSQL unreachable; nothing committed */
    TX_UNKNOWN,      /* the connection broke during COMMIT: it may have committed */
    TX_FAILED        /* any other error; nothing committed */
};

static void pg_message(PGconn *pg, const PGresult *r, char *err, size_t errlen)
{
    const char *m = r ? PQresultErrorMessage(r) : "";
    size_t len;

    if (!m || !*m)
        m = pg ? PQerrorMessage(pg) : "no connection";
    len = strlen(m);
    while (len > 0 && (m[len - 1] == '\n' || m[len - 1] == ' '))
        len--;
    snprintf(err, errlen, "PostgreSQL: %.*s", (int)len, m);
}

static int sqlstate_is(const PGresult *r, const char *state)
{
    const char *s = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;

    return s && strcmp(s, state) == 0;
}

static int conn_lost(PGconn *pg, const PGresult *r)
{
    const char *s = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;

    return PQstatus(pg) != CONNECTION_OK || (s && (strncmp(s, "08", 2) == 0 ||
                                                   strcmp(s, "57P01") == 0 ||
                                                   strcmp(s, "57P03") == 0));
}

static int command_ok(const PGresult *r)
{
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;

    return st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
}

/* A statement outside a transaction, or BEGIN: run it, and if the connection
 * turns out to be dead (a PostgreSQL restart since the last request), run it
 * once more on a fresh connection; nothing was done the first time. */
static PGresult *pg_exec_retry(worker *w, const char *sql, int nparams,
                               const char *const *params, char *err, size_t errlen,
                               int *down)
{
    *down = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        PGconn *pg = worker_pg(w, attempt > 0);
        PGresult *r;
        if (!pg) {
            *down = 1;
            pg_message(w->pg, NULL, err, errlen);
            return NULL;
        }
        r = PQexecParams(pg, sql, nparams, NULL, params, NULL, NULL, 0);
        if (command_ok(r))
            return r;
        pg_message(pg, r, err, errlen);
        if (!conn_lost(pg, r) || attempt > 0) {
            *down = conn_lost(pg, r);
            PQclear(r);
            return NULL;
        }
        PQclear(r);
    }
    *down = 1;
    return NULL;
}

static enum tx_result pg_write(worker *w, const char *sql, int nparams,
                               const char *const *params, PGresult **out,
                               char *err, size_t errlen)
{
    PGresult *r;
    PGconn *pg;
    int down;
    enum tx_result res;

    *out = NULL;
    r = pg_exec_retry(w, "BEGIN", 0, NULL, err, errlen, &down);
    if (!r)
        return down ? TX_DOWN : TX_FAILED;
    PQclear(r);
    pg = w->pg;
    /* ... the application's own work of the transaction would go here ... */
    r = PQexecParams(pg, sql, nparams, NULL, params, NULL, NULL, 0);
    if (!command_ok(r)) {
        pg_message(pg, r, err, errlen);
        res = sqlstate_is(r, "23505") ? TX_CONFLICT : conn_lost(pg, r) ? TX_DOWN : TX_FAILED;
        PQclear(r);
        if (PQstatus(pg) == CONNECTION_OK)
            PQclear(PQexec(pg, "ROLLBACK"));
        return res;
    }
    *out = r;
    r = PQexec(pg, "COMMIT");
    if (!command_ok(r)) {
        pg_message(pg, r, err, errlen);
        res = conn_lost(pg, r) ? TX_UNKNOWN : TX_FAILED;
        PQclear(r);
        PQclear(*out);
        *out = NULL;
        return res;
    }
    PQclear(r);
    return TX_OK;
}

/* A page read by this server from SQL: for a dirty feed, whose cached copy
 * may be stale. Same order and has_more rule as feed_page. */
static int sql_page(worker *w, int64_t uid, int first, int64_t score, int64_t id,
                    size_t limit, feed_result *out, char *err, size_t errlen)
{
    char p_uid[24], p_score[24], p_id[24], p_lim[24];
    const char *params[4];
    PGresult *r;
    int down, n;

    memset(out, 0, sizeof *out);
    snprintf(p_uid, sizeof p_uid, "%" PRId64, uid);
    snprintf(p_score, sizeof p_score, "%" PRId64, score);
    snprintf(p_id, sizeof p_id, "%" PRId64, id);
    snprintf(p_lim, sizeof p_lim, "%zu", limit + 1);
    if (first) {
        params[0] = p_uid;
        params[1] = p_lim;
        r = pg_exec_retry(w, "SELECT score, id FROM feed_entry WHERE uid = $1 "
                          "ORDER BY score DESC, id DESC LIMIT $2", 2, params, err, errlen, &down);
    } else {
        params[0] = p_uid;
        params[1] = p_score;
        params[2] = p_id;
        params[3] = p_lim;
        r = pg_exec_retry(w, "SELECT score, id FROM feed_entry WHERE uid = $1 "
                          "AND (score, id) < ($2, $3) ORDER BY score DESC, id DESC LIMIT $4",
                          4, params, err, errlen, &down);
    }
    if (!r)
        return down ? FEED_EUNAVAILABLE : FEED_EPG;
    n = PQntuples(r);
    out->items = malloc(((size_t)n + 1) * sizeof *out->items);
    if (!out->items) {
        PQclear(r);
        return FEED_ENOMEM;
    }
    for (int i = 0; i < n; i++) {
        if (parse_i64_nonneg(PQgetvalue(r, i, 1), &out->items[i].id) != 0 ||
            sscanf(PQgetvalue(r, i, 0), "%" SCNd64, &out->items[i].score) != 1) {
            PQclear(r);
            feed_result_free(out);
            snprintf(err, errlen, "unexpected row from PostgreSQL");
            return FEED_EPG;
        }
    }
    out->count = (size_t)n < limit ? (size_t)n : limit;
    out->has_more = (size_t)n > limit;
    if (out->has_more) {
        out->next_score = out->items[limit - 1].score;
        out->next_id = out->items[limit - 1].id;
    }
    out->source = FEED_SOURCE_DB;
    PQclear(r);
    return FEED_OK;
}

/* ------------------------------------------------------------------------
 * Keeping the cache honest after a failed hook
 * ------------------------------------------------------------------------ */

/* A write hook failed after its row committed: mark uid dirty. Its pages
 * then come from SQL until an invalidation succeeds (cache_trusted,
 * drain_dirty). No invalidation is tried here: the hook just failed, so the
 * next call on the handle would most likely fail too, doubling the wait. */
static void hook_failed_n(worker *w, const int64_t *uids, size_t n, const char *what,
                          const char *msg)
{
    if (n == 1)
        fprintf(stderr, "feed_server: %s for uid %" PRId64 " failed after commit: %s\n",
                what, uids[0], msg);
    else
        fprintf(stderr, "feed_server: %s for %zu feeds failed after commit: %s\n", what, n, msg);
    pthread_mutex_lock(&w->lock);
    w->c.hook_failures++;
    pthread_mutex_unlock(&w->lock);
    for (size_t i = 0; i < n; i++)
        if (dirty_mark(uids[i]) != 0)
            fprintf(stderr, "feed_server: out of memory marking uid %" PRId64 " dirty\n", uids[i]);
}

static void hook_failed(worker *w, int64_t uid, const char *what, const char *msg)
{
    hook_failed_n(w, &uid, 1, what, msg);
}

/* Drop the cached copy of a few dirty feeds; stop at the first failure
 * (Redis is still away). */
static void drain_dirty(worker *w)
{
    int64_t uids[DRAIN_BATCH];
    uint64_t seqs[DRAIN_BATCH];
    size_t n;

    if (atomic_load(&dirty_count) == 0 || !w->feed)
        return;
    n = dirty_sample(uids, seqs, DRAIN_BATCH);
    for (size_t i = 0; i < n; i++) {
        if (feed_invalidate(w->feed, uids[i]) != FEED_OK)
            return;
        dirty_clear_if(uids[i], seqs[i]);
        pthread_mutex_lock(&w->lock);
        w->c.invalidations++;
        pthread_mutex_unlock(&w->lock);
    }
}

/* May uid's page come from the cache? A dirty feed whose invalidation
 * fails again may not. */
static int cache_trusted(worker *w, int64_t uid)
{
    uint64_t seq;

    if (!dirty_lookup(uid, &seq))
        return 1;
    if (w->feed && feed_invalidate(w->feed, uid) == FEED_OK) {
        dirty_clear_if(uid, seq);
        pthread_mutex_lock(&w->lock);
        w->c.invalidations++;
        pthread_mutex_unlock(&w->lock);
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * Handlers
 * ------------------------------------------------------------------------ */

#define ARGS struct MHD_Connection *c, request *rq, const char *method, const char *url
#define PASS c, rq, method, url

static const char *source_name(feed_source s)
{
    switch (s) {
    case FEED_SOURCE_CACHE:   return "cache";
    case FEED_SOURCE_REBUILD: return "rebuild";
    default:                  return "db";
    }
}

static json_t *id_json(int64_t id)
{
    char buf[24];

    snprintf(buf, sizeof buf, "%" PRId64, id);
    return json_string(buf);
}

/* A store error as a status: 503 only when no store could answer. */
static unsigned status_of(int rc)
{
    switch (rc) {
    case FEED_EINVAL:
    case FEED_ERANGE:       return 400;
    case FEED_EUNAVAILABLE:
    case FEED_EPG:          return 503;   /* the page needed SQL, and SQL was down */
    default:                return 500;
    }
}

static enum MHD_Result get_feed(ARGS, worker *w, int64_t uid)
{
    const char *limit_s = NULL, *cursor = NULL;
    uint64_t limit = DEFAULT_LIMIT < opt.cfg.max_page ? DEFAULT_LIMIT : opt.cfg.max_page;
    int64_t score = FEED_FIRST, id = 0;
    feed_result res;
    feed *f;
    json_t *items, *obj;
    int rc, ok;

    if (MHD_lookup_connection_value_n(c, MHD_GET_ARGUMENT_KIND, "limit", 5, &limit_s, NULL) == MHD_YES &&
        (parse_u64(limit_s, UINT32_MAX, &limit) != 0 || limit < 1 || limit > opt.cfg.max_page))
        return respond_error(PASS, 400, "limit must be an integer in 1..%u", opt.cfg.max_page);
    if (MHD_lookup_connection_value_n(c, MHD_GET_ARGUMENT_KIND, "cursor", 6, &cursor, NULL) == MHD_YES &&
        feed_cursor_decode(cursor ? cursor : "", &score, &id) != FEED_OK)
        return respond_error(PASS, 400, "malformed cursor: pass next_cursor of the previous "
                             "page as it came, or omit cursor for the first page");

    f = worker_feed(w);
    drain_dirty(w);
    if (!cache_trusted(w, uid)) {
        rc = sql_page(w, uid, score == FEED_FIRST, score, id, (size_t)limit, &res,
                      rq->err, sizeof rq->err);
        if (rc == FEED_OK) {
            pthread_mutex_lock(&w->lock);
            w->c.bypass_pages++;
            pthread_mutex_unlock(&w->lock);
        }
    } else if (!f) {
        snprintf(rq->err, sizeof rq->err, "%s", feed_errmsg(NULL));
        rc = FEED_EUNAVAILABLE;
    } else {
        rc = feed_page(f, uid, score, id, (size_t)limit, &res);
        if (rc != FEED_OK)
            snprintf(rq->err, sizeof rq->err, "%s", feed_errmsg(f));
    }
    if (rc != FEED_OK) {
        unsigned st = status_of(rc);
        return respond_error(PASS, st, "%s", st >= 500 ? feed_strerror(rc) : rq->err);
    }

    rq->source = source_name(res.source);
    /* Built from the top down; jansson functions given NULL return NULL or
     * -1, so one check at the end catches any allocation failure. */
    items = json_array();
    for (size_t i = 0; items && i < res.count; i++)
        if (json_array_append_new(items, json_pack("{s:o,s:I}", "id", id_json(res.items[i].id),
                                                   "score", (json_int_t)res.items[i].score)) != 0)
            break;
    ok = items && json_array_size(items) == res.count;
    obj = json_object();
    if (obj && items && json_object_set(obj, "items", items) != 0)
        ok = 0;
    if (res.has_more) {
        char token[32];
        ok = ok && feed_cursor_encode(res.next_score, res.next_id, token, sizeof token) == FEED_OK &&
             json_object_set_new(obj, "next_cursor", json_string(token)) == 0;
    } else {
        ok = ok && json_object_set_new(obj, "next_cursor", json_null()) == 0;
    }
    ok = ok && json_object_set_new(obj, "source", json_string(rq->source)) == 0;
    json_decref(items);
    feed_result_free(&res);
    if (!ok || !obj) {
        json_decref(obj);
        return respond_error(PASS, 500, "out of memory");
    }
    return respond_json(PASS, 200, obj, NULL, NULL);
}

/* The answer to a write, after its commit. */
static json_t *write_reply(int64_t id, int64_t score, int cache_ok)
{
    return json_pack("{s:o,s:I,s:s}", "id", id_json(id), "score", (json_int_t)score,
                     "cache", cache_ok ? "ok" : "repair-pending");
}

static enum MHD_Result tx_error(ARGS, enum tx_result tx, const char *what)
{
    switch (tx) {
    case TX_CONFLICT:
        return respond_error(PASS, 409, "%s", what);
    case TX_DOWN:
        return respond_error(PASS, 503, "PostgreSQL is unavailable; nothing was written");
    case TX_UNKNOWN:
        return respond_error(PASS, 503, "PostgreSQL went away during COMMIT; the write may "
                             "or may not have happened");
    default:
        return respond_error(PASS, 500, "PostgreSQL refused the write");
    }
}

/* POST /users/{uid}/items, PUT /users/{uid}/items, PUT /users/{uid}/items/{id}:
 * path_id < 0 when the id is not in the path. */
static enum MHD_Result put_item(ARGS, worker *w, int64_t uid, int64_t path_id, int create)
{
    static const char *const allowed[] = { "id", "score", NULL };
    char err[300], p_uid[24], p_score[24], p_id[24], loc[80];
    const char *params[3] = { p_uid, p_score, p_id };
    int64_t id = path_id, score;
    json_t *body, *v;
    PGresult *r;
    enum tx_result tx;
    int cache_ok = 1, rc;
    feed *f;

    if (!(body = body_object(rq, allowed, err, sizeof err)))
        return respond_error(PASS, 400, "%s", err);
    if ((v = json_object_get(body, "id")) != NULL) {
        int64_t body_id;
        if (json_id(v, &body_id) != 0) {
            json_decref(body);
            return respond_error(PASS, 400, "id must be " ID_RULE);
        }
        if (path_id >= 0 && body_id != path_id) {
            json_decref(body);
            return respond_error(PASS, 400, "the id in the body differs from the id in the path");
        }
        id = body_id;
    } else if (path_id < 0) {
        json_decref(body);
        return respond_error(PASS, 400, "missing field \"id\"");
    }
    v = json_object_get(body, "score");
    rc = v ? json_score(v, &score) : -1;
    json_decref(body);
    if (!v)
        return respond_error(PASS, 400, "missing field \"score\"");
    if (rc != 0)
        return respond_error(PASS, 400, "score must be a JSON integer in "
                             "-9007199254740991..9007199254740991 (+/-(2^53-1))");

    f = worker_feed(w);
    drain_dirty(w);
    snprintf(p_uid, sizeof p_uid, "%" PRId64, uid);
    snprintf(p_score, sizeof p_score, "%" PRId64, score);
    snprintf(p_id, sizeof p_id, "%" PRId64, id);
    if (create)
        tx = pg_write(w, "INSERT INTO feed_entry (uid, score, id) VALUES ($1, $2, $3)",
                      3, params, &r, err, sizeof err);
    else
        tx = pg_write(w, "UPDATE feed_entry SET score = $2 WHERE uid = $1 AND id = $3",
                      3, params, &r, err, sizeof err);
    if (tx == TX_UNKNOWN)
        hook_failed(w, uid, create ? "insert" : "update", "commit outcome unknown");
    if (tx != TX_OK) {
        snprintf(rq->err, sizeof rq->err, "%s", err);
        return tx_error(PASS, tx, "an item with this id is already in the feed; "
                        "PUT changes its score");
    }
    rc = strcmp(PQcmdTuples(r), "0") == 0;
    PQclear(r);
    if (rc)   /* UPDATE of no row: committed a no-op, nothing to tell the cache */
        return respond_error(PASS, 404, "no item %" PRId64 " in the feed of user %" PRId64, id, uid);

    /* The row committed: now the cache. */
    rc = f ? feed_on_insert(f, uid, score, id) : FEED_EUNAVAILABLE;
    if (rc != FEED_OK)
    {
        hook_failed(w, uid, "feed_on_insert", f ? feed_errmsg(f) : "no handle");
        cache_ok = 0;
    }
    if (create) {
        snprintf(loc, sizeof loc, "/users/%" PRId64 "/items/%" PRId64, uid, id);
        return respond_json(PASS, 201, write_reply(id, score, cache_ok), "Location", loc);
    }
    return respond_json(PASS, 200, write_reply(id, score, cache_ok), NULL, NULL);
}

static enum MHD_Result delete_item(ARGS, worker *w, int64_t uid, int64_t id)
{
    char err[300], p_uid[24], p_id[24];
    const char *params[2] = { p_uid, p_id };
    int64_t score = 0;
    int cache_ok = 1, rc;
    enum tx_result tx;
    PGresult *r;
    feed *f;

    if (rq->len > 0)
        return respond_error(PASS, 400, "DELETE takes no request body");
    f = worker_feed(w);
    drain_dirty(w);
    snprintf(p_uid, sizeof p_uid, "%" PRId64, uid);
    snprintf(p_id, sizeof p_id, "%" PRId64, id);
    tx = pg_write(w, "DELETE FROM feed_entry WHERE uid = $1 AND id = $2 RETURNING score",
                  2, params, &r, err, sizeof err);
    if (tx == TX_UNKNOWN)
        hook_failed(w, uid, "delete", "commit outcome unknown");
    if (tx != TX_OK) {
        snprintf(rq->err, sizeof rq->err, "%s", err);
        return tx_error(PASS, tx, "conflict");
    }
    rc = PQntuples(r) == 1 && sscanf(PQgetvalue(r, 0, 0), "%" SCNd64, &score) == 1;
    PQclear(r);
    if (!rc)
        return respond_error(PASS, 404, "no item %" PRId64 " in the feed of user %" PRId64, id, uid);
    rc = f ? feed_on_delete(f, uid, id) : FEED_EUNAVAILABLE;
    if (rc != FEED_OK)
    {
        hook_failed(w, uid, "feed_on_delete", f ? feed_errmsg(f) : "no handle");
        cache_ok = 0;
    }
    return respond_json(PASS, 200, write_reply(id, score, cache_ok), NULL, NULL);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

static enum MHD_Result fanout(ARGS, worker *w, int64_t id)
{
    static const char *const allowed[] = { "score", "uids", NULL };
    char err[300], p_id[24], p_score[24];
    const char *params[3];
    json_t *body, *v, *uids_j;
    int64_t score, *uids = NULL;
    size_t n = 0, i;
    sbuf arr = { 0 };
    enum tx_result tx;
    PGresult *r;
    feed *f;
    int rc, cache_ok = 1;
    json_t *reply;

    if (!(body = body_object(rq, allowed, err, sizeof err)))
        return respond_error(PASS, 400, "%s", err);
    v = json_object_get(body, "score");
    uids_j = json_object_get(body, "uids");
    if (!v || json_score(v, &score) != 0) {
        json_decref(body);
        return respond_error(PASS, 400, v ? "score must be a JSON integer in "
                             "-9007199254740991..9007199254740991 (+/-(2^53-1))"
                             : "missing field \"score\"");
    }
    if (!json_is_array(uids_j) || json_array_size(uids_j) == 0 ||
        json_array_size(uids_j) > opt.max_fanout) {
        json_decref(body);
        return respond_error(PASS, 400, "uids must be an array of 1..%zu user ids", opt.max_fanout);
    }
    uids = malloc(json_array_size(uids_j) * sizeof *uids);
    if (!uids) {
        json_decref(body);
        return respond_error(PASS, 500, "out of memory");
    }
    json_array_foreach(uids_j, i, v) {
        if (json_id(v, &uids[n]) != 0) {
            json_decref(body);
            free(uids);
            return respond_error(PASS, 400, "uids[%zu] must be " ID_RULE, i);
        }
        n++;
    }
    json_decref(body);
    /* One row per user: a uid listed twice counts once. */
    qsort(uids, n, sizeof *uids, cmp_i64);
    {
        size_t m = 0;
        for (i = 0; i < n; i++)
            if (m == 0 || uids[i] != uids[m - 1])
                uids[m++] = uids[i];
        n = m;
    }
    sb_printf(&arr, "{");
    for (i = 0; i < n; i++)
        sb_printf(&arr, "%s%" PRId64, i ? "," : "", uids[i]);
    sb_printf(&arr, "}");
    if (arr.failed) {
        free(arr.data);
        free(uids);
        return respond_error(PASS, 500, "out of memory");
    }

    f = worker_feed(w);
    drain_dirty(w);
    snprintf(p_id, sizeof p_id, "%" PRId64, id);
    snprintf(p_score, sizeof p_score, "%" PRId64, score);
    params[0] = p_id;
    params[1] = p_score;
    params[2] = arr.data;
    /* An upsert: fanning the same item out again sets its score. */
    tx = pg_write(w, "INSERT INTO feed_entry (uid, score, id) "
                  "SELECT u, $2, $1 FROM unnest($3::bigint[]) AS u "
                  "ON CONFLICT (uid, id) DO UPDATE SET score = EXCLUDED.score",
                  3, params, &r, err, sizeof err);
    free(arr.data);
    if (tx == TX_UNKNOWN)
        hook_failed_n(w, uids, n, "fanout", "commit outcome unknown");
    if (tx != TX_OK) {
        free(uids);
        snprintf(rq->err, sizeof rq->err, "%s", err);
        return tx_error(PASS, tx, "conflict");
    }
    PQclear(r);
    rc = f ? feed_fanout(f, uids, n, score, id) : FEED_EUNAVAILABLE;
    if (rc != FEED_OK) {
        /* Some feeds may have been updated, others not: all are suspect. */
        char msg[sizeof err];
        snprintf(msg, sizeof msg, "%s", f ? feed_errmsg(f) : "no handle");
        hook_failed_n(w, uids, n, "feed_fanout", msg);
        cache_ok = 0;
    }
    free(uids);
    reply = write_reply(id, score, cache_ok);
    if (reply)
        json_object_set_new(reply, "users", json_integer((json_int_t)n));
    return respond_json(PASS, 200, reply, NULL, NULL);
}

static void metric(sbuf *b, const char *name, const char *type, const char *help)
{
    sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static enum MHD_Result get_metrics(ARGS)
{
    counters sum;
    size_t nworkers = 0;
    sbuf b = { 0 };
    uint64_t cum = 0;

    memset(&sum, 0, sizeof sum);
    pthread_mutex_lock(&workers_lock);
    for (worker *w = workers; w; w = w->next) {
        pthread_mutex_lock(&w->lock);
        stats_add(&sum.stats, &w->c.stats);
        for (size_t r = 0; r < R_COUNT; r++)
            for (size_t s = 0; s < N_STATUS; s++)
                sum.requests[r][s] += w->c.requests[r][s];
        for (size_t k = 0; k <= N_BUCKETS; k++)
            sum.buckets[k] += w->c.buckets[k];
        sum.latency_count += w->c.latency_count;
        sum.latency_sum_us += w->c.latency_sum_us;
        sum.hook_failures += w->c.hook_failures;
        sum.bypass_pages += w->c.bypass_pages;
        sum.invalidations += w->c.invalidations;
        pthread_mutex_unlock(&w->lock);
        nworkers++;
    }
    pthread_mutex_unlock(&workers_lock);

    metric(&b, "feedcache_pages_total", "counter", "Pages served by feed_page, by where they came from.");
    sb_printf(&b, "feedcache_pages_total{source=\"cache\"} %" PRIu64 "\n", sum.stats.cache_pages);
    sb_printf(&b, "feedcache_pages_total{source=\"rebuild\"} %" PRIu64 "\n",
              sum.stats.pages - sum.stats.cache_pages - sum.stats.db_pages);
    sb_printf(&b, "feedcache_pages_total{source=\"db\"} %" PRIu64 "\n", sum.stats.db_pages);
    metric(&b, "feedcache_rebuilds_total", "counter", "Feeds rebuilt from SQL and installed in Redis.");
    sb_printf(&b, "feedcache_rebuilds_total %" PRIu64 "\n", sum.stats.rebuilds);
    metric(&b, "feedcache_sql_queries_total", "counter", "Statements feedcache sent to PostgreSQL.");
    sb_printf(&b, "feedcache_sql_queries_total %" PRIu64 "\n", sum.stats.sql_queries);
    metric(&b, "feedcache_redis_calls_total", "counter", "Round trips feedcache made to Redis.");
    sb_printf(&b, "feedcache_redis_calls_total %" PRIu64 "\n", sum.stats.redis_calls);
    metric(&b, "feedcache_lease_waits_total", "counter", "Times a reader waited for another's rebuild.");
    sb_printf(&b, "feedcache_lease_waits_total %" PRIu64 "\n", sum.stats.lease_waits);
    metric(&b, "feedcache_errors_total", "counter", "Errors feedcache met, by store.");
    sb_printf(&b, "feedcache_errors_total{store=\"redis\"} %" PRIu64 "\n", sum.stats.redis_errors);
    sb_printf(&b, "feedcache_errors_total{store=\"postgres\"} %" PRIu64 "\n", sum.stats.pg_errors);
    metric(&b, "feed_server_hook_failures_total", "counter",
           "Write hooks that failed after their row committed.");
    sb_printf(&b, "feed_server_hook_failures_total %" PRIu64 "\n", sum.hook_failures);
    metric(&b, "feed_server_dirty_feeds", "gauge",
           "Feeds whose cached copy may be stale, read from SQL until invalidated.");
    sb_printf(&b, "feed_server_dirty_feeds %zu\n", (size_t)atomic_load(&dirty_count));
    metric(&b, "feed_server_dirty_pages_total", "counter",
           "Pages of dirty feeds this server read from SQL itself.");
    sb_printf(&b, "feed_server_dirty_pages_total %" PRIu64 "\n", sum.bypass_pages);
    metric(&b, "feed_server_invalidations_total", "counter", "Dirty feeds repaired by invalidation.");
    sb_printf(&b, "feed_server_invalidations_total %" PRIu64 "\n", sum.invalidations);
    metric(&b, "feed_server_workers", "gauge", "Worker threads that have served a request.");
    sb_printf(&b, "feed_server_workers %zu\n", nworkers);
    metric(&b, "feed_server_requests_total", "counter", "HTTP requests, by route and status.");
    for (size_t r = 0; r < R_COUNT; r++)
        for (size_t s = 0; s < N_STATUS; s++)
            if (sum.requests[r][s]) {
                if (s < N_STATUS - 1)
                    sb_printf(&b, "feed_server_requests_total{route=\"%s\",code=\"%u\"} %" PRIu64 "\n",
                              route_names[r], status_codes[s], sum.requests[r][s]);
                else
                    sb_printf(&b, "feed_server_requests_total{route=\"%s\",code=\"other\"} %" PRIu64 "\n",
                              route_names[r], sum.requests[r][s]);
            }
    metric(&b, "feed_server_request_duration_seconds", "histogram",
           "Time from a request's headers to its queued response (this scrape excluded).");
    for (size_t k = 0; k < N_BUCKETS; k++) {
        cum += sum.buckets[k];
        sb_printf(&b, "feed_server_request_duration_seconds_bucket{le=\"%g\"} %" PRIu64 "\n",
                  (double)bucket_us[k] / 1e6, cum);
    }
    cum += sum.buckets[N_BUCKETS];
    sb_printf(&b, "feed_server_request_duration_seconds_bucket{le=\"+Inf\"} %" PRIu64 "\n", cum);
    sb_printf(&b, "feed_server_request_duration_seconds_sum %.6f\n", (double)sum.latency_sum_us / 1e6);
    sb_printf(&b, "feed_server_request_duration_seconds_count %" PRIu64 "\n", sum.latency_count);
    if (b.failed) {
        free(b.data);
        return respond_error(PASS, 500, "out of memory");
    }
    return respond(PASS, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len, NULL, NULL);
}

static int redis_ping(worker *w)
{
    struct timeval tv = { 0, 250000 };
    redisReply *r;
    int ok;

    for (int attempt = 0; attempt < 2; attempt++) {
        if (!w->redis) {
            w->redis = redisConnectWithTimeout(opt.cfg.redis_host, opt.cfg.redis_port, tv);
            if (!w->redis)
                return 0;
            if (w->redis->err || redisSetTimeout(w->redis, tv) != REDIS_OK) {
                redisFree(w->redis);
                w->redis = NULL;
                return 0;
            }
            if (opt.cfg.redis_password) {
                r = opt.cfg.redis_user
                        ? redisCommand(w->redis, "AUTH %s %s", opt.cfg.redis_user, opt.cfg.redis_password)
                        : redisCommand(w->redis, "AUTH %s", opt.cfg.redis_password);
                ok = r && r->type != REDIS_REPLY_ERROR;
                if (r)
                    freeReplyObject(r);
                if (!ok) {
                    redisFree(w->redis);
                    w->redis = NULL;
                    return 0;
                }
            }
        }
        r = redisCommand(w->redis, "PING");
        ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
        if (r)
            freeReplyObject(r);
        if (ok)
            return 1;
        redisFree(w->redis);   /* a stale connection (Redis restarted): one fresh try */
        w->redis = NULL;
        if (attempt == 0 && !r)
            continue;
        return 0;
    }
    return 0;
}

static enum MHD_Result get_healthz(ARGS, worker *w)
{
    char err[300];
    int down, redis_up = redis_ping(w), pg_up;
    PGresult *r = pg_exec_retry(w, "SELECT 1", 0, NULL, err, sizeof err, &down);
    const char *status;

    pg_up = r != NULL;
    PQclear(r);
    status = redis_up && pg_up ? "ok" : redis_up || pg_up ? "degraded" : "down";
    if (!pg_up)
        snprintf(rq->err, sizeof rq->err, "%s", err);
    return respond_json(PASS, redis_up || pg_up ? 200 : 503,
                        json_pack("{s:s,s:s,s:s}", "status", status,
                                  "redis", redis_up ? "up" : "down",
                                  "postgres", pg_up ? "up" : "down"),
                        NULL, NULL);
}

/* ------------------------------------------------------------------------
 * Routing
 * ------------------------------------------------------------------------ */

#define MAX_SEGS 5

/* Split "/a/b/c" into segments; an empty segment (a double or trailing
 * slash) or too many make the path unknown. Returns the count, or -1. */
static int split_path(const char *url, char *buf, size_t buflen, char **segs)
{
    int n = 0;
    char *p;

    if (url[0] != '/' || strlen(url) >= buflen)
        return -1;
    strcpy(buf, url + 1);
    if (!buf[0])
        return 0;
    for (p = buf;;) {
        char *slash = strchr(p, '/');
        if (n == MAX_SEGS)
            return -1;
        segs[n++] = p;
        if (slash)
            *slash = '\0';
        if (!*p)
            return -1;
        if (!slash)
            return n;
        p = slash + 1;
    }
}

static int is_method(const char *m, const char *want)
{
    return strcmp(m, want) == 0;
}

/* Which route a path names (its segments in seg), and the methods it takes. */
static enum route classify(const char *url, char *buf, size_t buflen, char **seg,
                           const char **allow)
{
    int n = split_path(url, buf, buflen, seg);

    *allow = NULL;
    if (n == 1 && strcmp(seg[0], "metrics") == 0)
        return (*allow = "GET, HEAD", R_METRICS);
    if (n == 1 && strcmp(seg[0], "healthz") == 0)
        return (*allow = "GET, HEAD", R_HEALTHZ);
    if (n == 3 && strcmp(seg[0], "users") == 0 && strcmp(seg[2], "feed") == 0)
        return (*allow = "GET, HEAD", R_FEED);
    if (n == 3 && strcmp(seg[0], "users") == 0 && strcmp(seg[2], "items") == 0)
        return (*allow = "POST, PUT", R_ITEMS);
    if (n == 4 && strcmp(seg[0], "users") == 0 && strcmp(seg[2], "items") == 0)
        return (*allow = "PUT, DELETE", R_ITEM);
    if (n == 3 && strcmp(seg[0], "items") == 0 && strcmp(seg[2], "fanout") == 0)
        return (*allow = "POST", R_FANOUT);
    return R_UNKNOWN;
}

static enum MHD_Result dispatch(ARGS)
{
    char buf[512];
    char *seg[MAX_SEGS];
    const char *allow;
    int64_t uid = 0, id = -1;
    worker *w = this_worker();

    if (!w)
        return respond_error(PASS, 500, "out of memory");

    /* Which route, then which method, then the arguments. */
    rq->route = classify(url, buf, sizeof buf, seg, &allow);
    if (rq->route == R_UNKNOWN)
        return respond_error(PASS, 404, "no such endpoint; see GET /users/{uid}/feed, "
                             "POST|PUT /users/{uid}/items, PUT|DELETE /users/{uid}/items/{id}, "
                             "POST /items/{id}/fanout, GET /metrics, GET /healthz");
    {
        /* Is the method in the Allow list? */
        const char *m = is_method(method, "HEAD") ? "GET" : method;
        size_t ml = strlen(m);
        const char *p = allow;
        int found = 0;
        while ((p = strstr(p, m)) != NULL && !found) {
            found = (p == allow || p[-1] == ' ') && (p[ml] == '\0' || p[ml] == ',');
            p += ml;
        }
        if (!found) {
            char msg[120];
            snprintf(msg, sizeof msg, "method not allowed here; allowed: %s", allow);
            return respond_json(PASS, 405, json_pack("{s:s}", "error", msg), "Allow", allow);
        }
    }
    if (rq->route == R_FEED || rq->route == R_ITEMS || rq->route == R_ITEM) {
        if (parse_i64_nonneg(seg[1], &uid) != 0)
            return respond_error(PASS, 400, "uid must be a non-negative integer "
                                 "(decimal digits, at most 9223372036854775807)");
    }
    if (rq->route == R_ITEM && parse_i64_nonneg(seg[3], &id) != 0)
        return respond_error(PASS, 400, "item id must be a non-negative integer "
                             "(decimal digits, at most 9223372036854775807)");
    if (rq->route == R_FANOUT && parse_i64_nonneg(seg[1], &id) != 0)
        return respond_error(PASS, 400, "item id must be a non-negative integer "
                             "(decimal digits, at most 9223372036854775807)");

    switch (rq->route) {
    case R_METRICS: return get_metrics(PASS);
    case R_HEALTHZ: return get_healthz(PASS, w);
    case R_FEED:    return get_feed(PASS, w, uid);
    case R_ITEMS:   return put_item(PASS, w, uid, -1, is_method(method, "POST"));
    case R_ITEM:
        if (is_method(method, "DELETE"))
            return delete_item(PASS, w, uid, id);
        return put_item(PASS, w, uid, id, 0);
    case R_FANOUT:  return fanout(PASS, w, id);
    default:        return respond_error(PASS, 500, "unreachable");
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    request *rq = *con_cls;

    (void)cls;
    (void)version;
    if (!rq) {   /* the headers are in: no body yet */
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        uint64_t len;

        rq = calloc(1, sizeof *rq);
        if (!rq)
            return MHD_NO;
        rq->start_us = now_us();
        *con_cls = rq;
        {
            char buf[512];
            char *seg[MAX_SEGS];
            const char *allow;
            rq->route = classify(url, buf, sizeof buf, seg, &allow);
        }
        /* Refuse a declared oversize body before it is sent (a client that
         * sent "Expect: 100-continue" then never sends it). */
        if (cl && parse_u64(cl, UINT64_MAX, &len) == 0 && len > opt.max_body)
            return respond_error(c, rq, method, url, 413,
                                 "request body over %zu bytes", opt.max_body);
        return MHD_YES;
    }
    if (rq->done)   /* answered early (413): discard whatever still arrives */
        return (*upload_data_size = 0, MHD_YES);
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (rq->too_large || rq->len + n > opt.max_body) {
            rq->too_large = 1;   /* keep reading, answer 413 at the end */
            return MHD_YES;
        }
        if (rq->len + n > rq->cap) {
            size_t cap = rq->cap ? rq->cap : 1024;
            while (cap < rq->len + n)
                cap *= 2;
            char *p = realloc(rq->body, cap);
            if (!p)
                return MHD_NO;
            rq->body = p;
            rq->cap = cap;
        }
        memcpy(rq->body + rq->len, upload_data, n);
        rq->len += n;
        return MHD_YES;
    }
    if (rq->too_large)
        return respond_error(c, rq, method, url, 413, "request body over %zu bytes", opt.max_body);
    return dispatch(c, rq, method, url);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    request *rq = *con_cls;

    (void)cls;
    (void)c;
    (void)toe;
    if (rq) {
        free(rq->body);
        free(rq);
        *con_cls = NULL;
    }
}

/* ------------------------------------------------------------------------
 * Main
 * ------------------------------------------------------------------------ */

static void usage(FILE *out)
{
    fprintf(out,
"usage: feed_server [options]\n"
"  --port N            HTTP port (default $FEED_HTTP_PORT or 8080; 0 = any free port)\n"
"  --bind ADDR         listen address (default 127.0.0.1; 0.0.0.0 or :: for all)\n"
"  --redis-host H      (default $FEED_REDIS_HOST or 127.0.0.1)\n"
"  --redis-port N      (default $FEED_REDIS_PORT or 6379)\n"
"  --redis-user U      Redis ACL user (default none)\n"
"  --redis-password P  (default $FEED_REDIS_PASSWORD or none; prefer the variable)\n"
"  --pg CONNINFO       libpq connection string (default $FEED_PG_CONNINFO, else libpq's PG* defaults)\n"
"  --max-len N         most entries cached per feed (default 1000)\n"
"  --max-page N        largest limit accepted (default 100)\n"
"  --ttl SECONDS       cache TTL, 0 = none (default 604800)\n"
"  --threads N         worker threads, one feedcache handle each (default 4)\n"
"  --max-body BYTES    largest request body (default 1048576)\n"
"  --max-fanout N      most uids in one fan-out (default 10000)\n"
"  --quiet             no request log on stderr\n"
"Prints \"listening on PORT\" on stdout once it accepts connections; stops on SIGINT or SIGTERM.\n");
}

static uint64_t num_arg(const char *name, const char *s, uint64_t min, uint64_t max)
{
    uint64_t v;

    if (parse_u64(s, max, &v) != 0 || v < min) {
        fprintf(stderr, "feed_server: %s must be an integer in %" PRIu64 "..%" PRIu64 "\n",
                name, min, max);
        exit(2);
    }
    return v;
}

static void parse_options(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "port", required_argument, NULL, 'p' },
        { "bind", required_argument, NULL, 'b' },
        { "redis-host", required_argument, NULL, 'H' },
        { "redis-port", required_argument, NULL, 'P' },
        { "redis-user", required_argument, NULL, 'U' },
        { "redis-password", required_argument, NULL, 'W' },
        { "pg", required_argument, NULL, 'g' },
        { "max-len", required_argument, NULL, 'l' },
        { "max-page", required_argument, NULL, 'm' },
        { "ttl", required_argument, NULL, 't' },
        { "threads", required_argument, NULL, 'T' },
        { "max-body", required_argument, NULL, 'B' },
        { "max-fanout", required_argument, NULL, 'F' },
        { "quiet", no_argument, NULL, 'q' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    const char *e;
    int ch;

    feed_config_init(&opt.cfg);
    opt.bind = "127.0.0.1";
    opt.port = 8080;
    opt.threads = 4;
    opt.max_body = 1048576;
    opt.max_fanout = 10000;
    if ((e = getenv("FEED_HTTP_PORT")) && *e)
        opt.port = (unsigned)num_arg("FEED_HTTP_PORT", e, 0, 65535);
    if ((e = getenv("FEED_REDIS_HOST")) && *e)
        opt.cfg.redis_host = e;
    if ((e = getenv("FEED_REDIS_PORT")) && *e)
        opt.cfg.redis_port = (int)num_arg("FEED_REDIS_PORT", e, 1, 65535);
    if ((e = getenv("FEED_REDIS_PASSWORD")) && *e)
        opt.cfg.redis_password = e;
    if ((e = getenv("FEED_PG_CONNINFO")))
        opt.cfg.pg_conninfo = e;

    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'p': opt.port = (unsigned)num_arg("--port", optarg, 0, 65535); break;
        case 'b': opt.bind = optarg; break;
        case 'H': opt.cfg.redis_host = optarg; break;
        case 'P': opt.cfg.redis_port = (int)num_arg("--redis-port", optarg, 1, 65535); break;
        case 'U': opt.cfg.redis_user = optarg; break;
        case 'W': opt.cfg.redis_password = *optarg ? optarg : NULL; break;
        case 'g': opt.cfg.pg_conninfo = optarg; break;
        case 'l': opt.cfg.max_len = (uint32_t)num_arg("--max-len", optarg, 1, 10000000); break;
        case 'm': opt.cfg.max_page = (uint32_t)num_arg("--max-page", optarg, 1, 100000); break;
        case 't': opt.cfg.ttl_seconds = (uint32_t)num_arg("--ttl", optarg, 0, UINT32_MAX / 1000); break;
        case 'T': opt.threads = (unsigned)num_arg("--threads", optarg, 1, 1024); break;
        case 'B': opt.max_body = (size_t)num_arg("--max-body", optarg, 64, 1u << 30); break;
        case 'F': opt.max_fanout = (size_t)num_arg("--max-fanout", optarg, 1, 1000000); break;
        case 'q': opt.quiet = 1; break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); exit(2);
        }
    }
    if (optind < argc) {
        fprintf(stderr, "feed_server: unexpected argument \"%s\"\n", argv[optind]);
        usage(stderr);
        exit(2);
    }
}

int main(int argc, char **argv)
{
    struct sockaddr_in sin;
    struct sockaddr_in6 sin6;
    struct sockaddr *sa;
    struct MHD_Daemon *d;
    const union MHD_DaemonInfo *info;
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
    sigset_t sigs;
    feed *probe;
    int rc, sig;

    parse_options(argc, argv);

    /* Fail now on what retrying cannot fix (a bad config, a wrong password,
     * a missing table); start anyway when a store is merely down. */
    rc = feed_open(&probe, &opt.cfg);
    if (rc == FEED_EINVAL || rc == FEED_EREDIS || rc == FEED_EPG || rc == FEED_ENOMEM) {
        fprintf(stderr, "feed_server: %s: %s\n", feed_strerror(rc), feed_errmsg(NULL));
        return 1;
    }
    if (rc != FEED_OK)
        fprintf(stderr, "feed_server: starting without stores (%s); will retry\n", feed_errmsg(NULL));
    else if (*feed_errmsg(probe))
        fprintf(stderr, "feed_server: starting degraded: %s\n", feed_errmsg(probe));
    feed_close(probe);

    memset(&sin, 0, sizeof sin);
    memset(&sin6, 0, sizeof sin6);
    if (inet_pton(AF_INET, opt.bind, &sin.sin_addr) == 1) {
        sin.sin_family = AF_INET;
        sin.sin_port = htons((uint16_t)opt.port);
        sa = (struct sockaddr *)&sin;
    } else if (inet_pton(AF_INET6, opt.bind, &sin6.sin6_addr) == 1) {
        sin6.sin6_family = AF_INET6;
        sin6.sin6_port = htons((uint16_t)opt.port);
        sa = (struct sockaddr *)&sin6;
        flags |= MHD_USE_IPv6;
    } else {
        fprintf(stderr, "feed_server: --bind %s is not an IPv4 or IPv6 address\n", opt.bind);
        return 2;
    }

    /* Signals go to the main thread only: block them before any thread starts
     * (threads inherit the mask), then wait for them. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    d = MHD_start_daemon(flags, (uint16_t)opt.port, NULL, NULL, on_request, NULL,
                         MHD_OPTION_SOCK_ADDR, sa,
                         MHD_OPTION_THREAD_POOL_SIZE, (unsigned)opt.threads,
                         MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30,
                         MHD_OPTION_CONNECTION_LIMIT, (unsigned)1000,
                         MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "feed_server: cannot listen on %s port %u: %s\n", opt.bind, opt.port,
                strerror(errno));
        return 1;
    }
    info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    printf("listening on %u\n", info ? (unsigned)info->port : opt.port);
    fflush(stdout);
    fprintf(stderr, "feed_server: http://%s:%u/ (%u threads, Redis %s:%d, max_len %u, max_page %u)\n",
            opt.bind, info ? (unsigned)info->port : opt.port, opt.threads,
            opt.cfg.redis_host, opt.cfg.redis_port, opt.cfg.max_len, opt.cfg.max_page);

    do {
        if (sigwait(&sigs, &sig) != 0)
            sig = SIGTERM;
    } while (sig != SIGINT && sig != SIGTERM);

    fprintf(stderr, "feed_server: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    MHD_stop_daemon(d);   /* joins the workers: their handles are ours now */
    pthread_mutex_lock(&workers_lock);
    while (workers) {
        worker *w = workers;
        workers = w->next;
        worker_close(w);
        pthread_mutex_destroy(&w->lock);
        free(w);
    }
    pthread_mutex_unlock(&workers_lock);
    free(dirty.keys);
    free(dirty.seqs);
    return 0;
}
