/* server.h -- what the files of the example service share.
 *
 *   main.c     options, the libmicrohttpd daemon, start and stop
 *   http.c     one request: limits, query parameters, CORS, JSON replies,
 *              the request log and its counters
 *   routes.c   which route a request names, and the read routes (feed,
 *              newer, healthz, the HTML page)
 *   writes.c   the write routes: a PostgreSQL transaction, then the hook
 *   metrics.c  GET /metrics (Prometheus text)
 *   page.html  the page GET / serves, embedded at build time (tools/embed.c)
 *
 * Threads: libmicrohttpd runs a pool of --threads worker threads; a request
 * is handled start to end by one of them. A feedcache handle is
 * single-threaded, so each worker thread owns one, plus one libpq connection
 * for the write transactions.
 */
#ifndef FEED_SERVER_H
#define FEED_SERVER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <libpq-fe.h>
#include <microhttpd.h>

#include "feedcache.h"

typedef struct options {
    const char *bind;
    unsigned    port;
    unsigned    threads;
    size_t      max_body;
    size_t      max_fanout;
    const char *cors_origin;     /* NULL: no CORS headers */
    int         quiet;
    feed_config cfg;
} options;

extern options opt;

/* ---- routes (routes.c) ---- */
enum route {
    R_PAGE, R_FEED, R_NEWER, R_ITEMS, R_ITEM, R_FANOUT, R_METRICS, R_HEALTHZ,
    R_UNKNOWN, R_COUNT
};
extern const char *const route_names[R_COUNT];
enum route route_of(const char *url);

/* ---- per-thread state and counters ---- */

/* The statuses this server sends; anything else is counted as "other". */
#define N_STATUS   13
#define N_BUCKETS  14
extern const unsigned status_codes[N_STATUS - 1];
extern const int64_t  bucket_us[N_BUCKETS];

typedef struct counters {
    uint64_t *stats;                      /* feed_stats_count() values of the handle */
    uint64_t  requests[R_COUNT][N_STATUS];
    uint64_t  buckets[N_BUCKETS + 1];     /* the last is +Inf; not cumulative here */
    uint64_t  latency_count;
    uint64_t  latency_sum_us;
    uint64_t  hook_failures;              /* hooks that failed after a commit */
    uint64_t  invalidations;              /* copies dropped after a failed hook */
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
} worker;

extern pthread_mutex_t workers_lock;
extern worker *workers;                   /* every worker, for /metrics */

worker *this_worker(void);                /* NULL when out of memory */
feed   *worker_feed(worker *w);           /* NULL while no store answers */
PGconn *worker_pg(worker *w, int force);
void    workers_close(void);

/* ---- one request (http.c) ---- */
typedef struct request {
    int64_t     start_us;
    size_t      uri_len;         /* the request target as sent, query included */
    char       *body;
    size_t      len, cap;
    int         started;         /* the handler has seen the headers */
    int         too_large;
    int         done;            /* a response was queued */
    enum route  route;
    const char *source;          /* for the log: cache, rebuild, db or NULL */
    char        err[512];        /* for the log of a 5xx: the detail */
} request;

#define ARGS struct MHD_Connection *c, request *rq, const char *method, const char *url
#define PASS c, rq, method, url

/* A growable text buffer; on allocation failure it stays truncated and
 * sets failed. */
typedef struct sbuf {
    char  *data;
    size_t len, cap;
    int    failed;
} sbuf;
void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

int64_t now_us(void);
int parse_u64(const char *s, uint64_t max, uint64_t *out);
int parse_i64_nonneg(const char *s, int64_t *out);

/* Queue a response; body is malloc'd and handed over. extra headers are
 * name/value pairs, NULL-ended (or NULL). */
enum MHD_Result respond(ARGS, unsigned status, const char *ctype, char *body, size_t len,
                        const char *const *extra);
enum MHD_Result respond_json(ARGS, unsigned status, json_t *obj, const char *const *extra);
enum MHD_Result respond_error(ARGS, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* The query parameters are exactly among allowed (NULL-ended), each at most
 * once; else a 400 has been queued and *answered is set. */
enum MHD_Result check_query(ARGS, const char *const *allowed, int *answered);

/* A FEED_E* code as an HTTP status: 503 when a store was needed and down. */
unsigned status_of(int rc);
const char *source_name(feed_source s);
json_t *id_json(int64_t id);

/* ---- handlers ---- */
enum MHD_Result dispatch(ARGS);                                     /* routes.c */
enum MHD_Result put_item(ARGS, worker *w, int64_t uid, int64_t path_id, int create);
enum MHD_Result delete_item(ARGS, worker *w, int64_t uid, int64_t id);
enum MHD_Result fanout(ARGS, worker *w, int64_t id);                /* writes.c */
int  writes_init(void);    /* the write statements on opt.cfg's table; -1: out of memory */
void writes_free(void);
enum MHD_Result get_metrics(ARGS);                                  /* metrics.c */

/* Request hooks for libmicrohttpd (http.c). */
void *on_uri(void *cls, const char *uri, struct MHD_Connection *c);
enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                           const char *method, const char *version,
                           const char *upload_data, size_t *upload_data_size,
                           void **con_cls);
void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                  enum MHD_RequestTerminationCode toe);

/* The embedded page (build/examples/page_html.c). */
extern const char feed_server_page[];

#endif /* FEED_SERVER_H */
