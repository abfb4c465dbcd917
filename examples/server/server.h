/* server.h -- the example service's transport-neutral core, and the
 * interfaces its two adapters fill in.
 *
 * Two servers serve the same HTTP API from these files:
 *
 *   feed_server          worker threads: libmicrohttpd (mhd.c) over the
 *                        blocking backend (backend_sync.c)
 *   feed_server_evhttp   event loops: libevent's evhttp (evhttp.c) over the
 *                        loop backend (backend_loop.c, pg_async.c)
 *
 * and share everything that does not depend on how bytes move:
 *
 *   request.c   one request: its target, limits and query parameters; the
 *               responses (JSON, errors, CORS); the log and the counters
 *   routes.c    which route a request names; the read routes
 *   writes.c    the write routes (a feed's items, an author's posts): JSON
 *               bodies, the SQL, commit then hook
 *   metrics.c   GET /metrics (Prometheus text)
 *   options.c   flags and environment, shared by both servers
 *   policy.c    what the application decides around the library, kept apart
 *   page.html   the page GET / serves, embedded at build time
 *
 * Continuation style. A handler checks its request, starts one backend
 * operation with a completion function, and returns. The completion renders
 * the answer, or starts the next operation (a write: the transaction, then
 * the hook, then maybe dropping copies). A backend may call the completion
 * before the start call returns (the blocking backend always does) or later
 * from its event loop, so the rule is: after starting an operation a handler
 * touches nothing of the request; and after respond*() nobody does, since
 * the transport may free the request once it has queued the answer.
 */
#ifndef FEED_SERVER_H
#define FEED_SERVER_H

#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <jansson.h>

#include "feedcache.h"

typedef struct options {
    const char *bind;
    unsigned    port;
    unsigned    threads;         /* worker threads, or event loops */
    size_t      max_body;
    size_t      max_fanout;
    const char *cors_origin;     /* NULL: no CORS headers */
    int         quiet;
    feed_config cfg;             /* cfg.author_table: --author-table, NULL without */
    int64_t     merge_authors[FEED_MERGE_MAX];   /* --merge-authors: merged into every timeline */
    size_t      n_merge;
} options;

extern options     opt;
extern const char *progname;     /* "feed_server", "feed_server_evhttp": log prefix */

/* ---- start and stop, both mains (options.c) ---- */

/* Read the flags and environment into opt (exit status 2 on a bad one;
 * threads_help says what --threads counts), check the stores
 * (policy_probe), prepare the write statements, block SIGINT and SIGTERM
 * for every thread to come and ignore SIGPIPE. 0, or the exit status. */
int server_start(int argc, char **argv, const char *threads_help, sigset_t *sigs);
/* --bind and --port as a socket address; its length. Exit status 2 when
 * --bind is no IPv4 or IPv6 address. */
socklen_t server_address(struct sockaddr_storage *ss);
/* Print "listening on PORT" on stdout and the banner on stderr (workers:
 * what --threads counts), then wait for SIGINT or SIGTERM and log it. */
void server_wait(sigset_t *sigs, unsigned port, const char *workers);

/* ---- routes (routes.c) ---- */
enum route {
    R_PAGE, R_FEED, R_NEWER, R_TIMELINE, R_ITEMS, R_ITEM, R_POSTS, R_POST, R_FANOUT,
    R_MUTES, R_MUTE, R_METRICS, R_HEALTHZ, R_UNKNOWN, R_COUNT
};
extern const char *const route_names[R_COUNT];
enum route route_of(const char *path);

/* ---- counters, per worker (a thread or a loop) ---- */

/* The statuses this server sends; anything else is counted as "other". */
#define N_STATUS   13
#define N_BUCKETS  14
extern const unsigned status_codes[N_STATUS - 1];
extern const int64_t  bucket_us[N_BUCKETS];

typedef struct counters {
    uint64_t *stats;                      /* feed_stats_value() of the handle */
    uint64_t  requests[R_COUNT][N_STATUS];
    uint64_t  buckets[N_BUCKETS + 1];     /* the last is +Inf; not cumulative here */
    uint64_t  latency_count;
    uint64_t  latency_sum_us;
    uint64_t  hook_failures;              /* hooks that failed after a commit */
    uint64_t  invalidations;              /* copies dropped after a failed hook */
} counters;

typedef struct backend_ops backend_ops;

/* One per worker thread (feed_server) or event loop (feed_server_evhttp):
 * its backend state (feedcache handle, write connection) is used by that
 * thread only; its counters are read by /metrics from any thread. */
typedef struct worker {
    struct worker     *next;
    pthread_mutex_t    lock;             /* guards c */
    counters           c;
    const backend_ops *ops;
    void              *be;               /* the backend's state */
} worker;

/* A new worker over ops and be, registered for /metrics; NULL when out of
 * memory. */
worker *worker_new(const backend_ops *ops, void *be);
/* Sum every worker's counters into *sum (sum->stats: nstats values). */
size_t  workers_sum(counters *sum, size_t nstats);
/* Close every worker's backend (ops->close) and free them; once the
 * transport has stopped. */
void    workers_close(void);

/* ---- one request (request.c) ---- */
typedef struct request request;

typedef struct transport {
    /* Queue the answer: status, headers as name/value pairs (NULL-ended),
     * the body (malloc'd and handed over; NULL: none). The request is the
     * transport's again afterwards: it may free it at once. */
    void (*send)(request *rq, unsigned status, const char *const *headers,
                 char *body, size_t len);
} transport;

#define MAX_QUERY 16     /* query parameters read; more is a 400 */

/* An item's author, as the filter's predicate saw it (routes.c). */
typedef struct seen_author { int64_t id, author; } seen_author;

struct request {
    /* Set by the transport (request_begin). */
    const transport *t;
    void            *conn;          /* the transport's own */
    worker          *w;
    int64_t          start_us;
    const char      *method;        /* valid until the answer is queued */
    size_t           target_len;    /* the request target as sent, query included */
    char            *path;          /* the target's path, %-decoded */
    char            *query;         /* its decoded query parameters, NUL-separated */
    size_t           nq;
    int              too_many_q;
    const char      *qkey[MAX_QUERY], *qval[MAX_QUERY];   /* qval NULL: no '=' */
    char            *body;
    size_t           len, cap;
    int              too_large;
    int              done;          /* an answer was queued */
    /* The log's and the counters'. */
    enum route       route;
    const char      *source;        /* cache, rebuild, db or NULL */
    char             err[512];      /* for the log of a 5xx: the detail */
    /* A route's state between its operations. */
    int64_t          uid, id, score;   /* uid: the author of an author's post */
    int              newer, create, tx;
    int              author;        /* a write to an author's posts (author_table) */
    const char      *what, *cache;
    int64_t         *uids;
    size_t           n;
    char             param[4][24];  /* the statement's parameters */
    char            *arr;           /* a fan-out's uids: a PostgreSQL array literal */
    const char      *params[4];
    /* A read filtered by the viewer's mutes (--item-author-column). */
    int              kind;          /* FILTER_PAGE, _NEWER, _MERGED */
    size_t           limit;
    int64_t         *mutes;         /* the viewer's muted authors, read per request */
    size_t           nmutes;
    seen_author     *seen;          /* what the predicate saw: the page's authors */
    size_t           nseen, capseen;
    int              seen_failed;   /* out of memory while recording */
    void           (*after_mutes)(request *rq);   /* mutes_read's continuation */
};

/* Fill in the transport's part and parse target (length len, as sent:
 * path and query). 0, or -1 when out of memory (nothing to free then but
 * what request_free frees). */
int  request_begin(request *rq, const transport *t, void *conn, worker *w,
                   const char *method, const char *target, size_t len);
/* Free what the request holds (not rq itself). */
void request_free(request *rq);
/* Before any body: the limits on the target, the headers (headers_len:
 * every "name: value\r\n" together) and a declared body length (NULL:
 * none). Returns 1 when an answer (414, 431, 413) was queued. */
int  request_limits(request *rq, size_t headers_len, const char *content_length);
/* Append body bytes; past opt.max_body they are dropped and the request
 * answered 413 at the end. -1: out of memory. */
int  request_body(request *rq, const char *data, size_t n);
/* The body is complete: answer (dispatch, or 413). */
void request_run(request *rq);

/* Queue the answer; body is malloc'd and handed over. extra headers are
 * name/value pairs, NULL-ended (or NULL). */
void respond(request *rq, unsigned status, const char *ctype, char *body, size_t len,
             const char *const *extra);
void respond_json(request *rq, unsigned status, json_t *obj, const char *const *extra);
void respond_error(request *rq, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The query parameters are exactly among allowed (NULL-ended; NULL: none),
 * each at most once; else a 400 has been queued and 1 is returned. */
int check_query(request *rq, const char *const *allowed);
/* The value of parameter key: 1 when given (*val NULL when it had no '='). */
int query_get(const request *rq, const char *key, const char **val);

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
json_t *id_json(int64_t id);

/* ---- the backend: the library and PostgreSQL, behind completions ---- */

/* The outcome of a write transaction: BEGIN; one statement; COMMIT. */
enum tx_result {
    TX_OK,
    TX_CONFLICT,     /* unique violation: the row exists */
    TX_DOWN,         /* PostgreSQL unreachable; nothing committed */
    TX_UNKNOWN,      /* the connection broke during COMMIT: it may have committed */
    TX_FAILED        /* any other error; nothing committed */
};
typedef struct tx_outcome {
    enum tx_result res;
    uint64_t       rows;           /* rows the statement changed */
    const char    *first;          /* the first row's first column, or NULL */
    const char    *err;            /* the detail when res != TX_OK */
} tx_outcome;

/* Completions: each is called exactly once per operation started. errmsg
 * is the detail of a failure, valid during the call. */
typedef void page_done(request *rq, int rc, feed_result *page, int64_t next_rank,
                       const char *errmsg);               /* owns *page on FEED_OK */
typedef void health_done(request *rq, const feed_health_info *h, const char *errmsg);
                                                          /* h NULL: no check made */
typedef void hook_done(request *rq, int rc, const char *errmsg);
typedef void tx_done(request *rq, const tx_outcome *tx);

/* Which filtered call (backend_ops.filtered). */
enum { FILTER_PAGE, FILTER_NEWER, FILTER_MERGED };

/* The operations, each on a backend state be (worker.be). */
struct backend_ops {
    /* feed_page_ranked */
    void (*page)(void *be, request *rq, int64_t uid, int64_t score, int64_t id,
                 int64_t rank, size_t limit, page_done *done);
    /* feed_page_newer */
    void (*newer)(void *be, request *rq, int64_t uid, int64_t score, int64_t id,
                  size_t limit, page_done *done);
    /* feed_health */
    void (*health)(void *be, request *rq, health_done *done);
    /* feed_page_merged: uid's feed merged with n authors' posts */
    void (*merged)(void *be, request *rq, int64_t uid, const int64_t *authors, size_t n,
                   int64_t score, int64_t id, size_t limit, page_done *done);
    /* feed_page_filtered (FILTER_PAGE), feed_page_newer_filtered (FILTER_NEWER),
     * feed_page_merged_filtered (FILTER_MERGED, with the n authors merged);
     * filter and authors stay valid until done is called. */
    void (*filtered)(void *be, request *rq, int kind, int64_t uid, const int64_t *authors,
                     size_t n, int64_t score, int64_t id, size_t limit,
                     const feed_filter *filter, page_done *done);
    /* feed_on_insert, feed_on_delete, feed_fanout */
    void (*on_insert)(void *be, request *rq, int64_t uid, int64_t score, int64_t id,
                      hook_done *done);
    void (*on_delete)(void *be, request *rq, int64_t uid, int64_t id, hook_done *done);
    void (*fanout)(void *be, request *rq, const int64_t *uids, size_t n, int64_t score,
                   int64_t id, hook_done *done);
    /* After a failed hook, or a commit whose outcome is unknown: the write
     * protocol's last step, feed_on_unknown_write (FEED_OK: every copy
     * dropped; else the library's repair list has them). */
    void (*drop)(void *be, request *rq, const int64_t *uids, size_t n, hook_done *done);
    /* feed_author_on_insert, feed_author_on_delete */
    void (*author_on_insert)(void *be, request *rq, int64_t author, int64_t score, int64_t id,
                             hook_done *done);
    void (*author_on_delete)(void *be, request *rq, int64_t author, int64_t id,
                             hook_done *done);
    /* The same for authors' copies: feed_author_on_unknown_write. */
    void (*author_drop)(void *be, request *rq, const int64_t *authors, size_t n,
                        hook_done *done);
    /* BEGIN; sql with params; COMMIT, on the worker's write connection.
     * params stay valid until done is called. */
    void (*tx)(void *be, request *rq, const char *sql, int nparams,
               const char *const *params, tx_done *done);
    /* The handle's counters; 0 when *out was filled. Under the worker's lock,
     * on the worker's thread. */
    int  (*stats)(void *be, feed_stats *out);
    /* feed_retry_after_ms: ms until the handle tries a lost store again. */
    uint32_t (*retry_after)(void *be);
    /* feed_error_kind of a code this backend's handle just returned: call it
     * from the completion, before the next operation. */
    feed_kind (*kind)(void *be, int rc);
    /* Free the state, once the transport has stopped. */
    void (*close)(void *be);
};

/* ---- handlers ---- */
void dispatch(request *rq);                                   /* routes.c */
/* The item routes, on a feed or (rq->author set) on an author's posts. */
void put_item(request *rq, int64_t uid, int64_t path_id, int create);   /* writes.c */
void delete_item(request *rq, int64_t uid, int64_t id);
void fanout(request *rq, int64_t id);
/* GET /users/{uid}/mutes, POST|DELETE /users/{uid}/mutes/{author}. */
void mutes_route(request *rq, int64_t uid, int64_t author);
/* Read uid's muted authors into rq->mutes, rq->nmutes (one SQL statement),
 * then call next; when the read fails the error is answered instead. */
void mutes_read(request *rq, int64_t uid, void (*next)(request *rq));
int  writes_init(void);    /* the write statements on opt.cfg's tables; -1: out of memory */
void writes_free(void);
void get_metrics(request *rq);                                /* metrics.c */

/* The embedded page (build/examples/page_html.c). */
extern const char feed_server_page[];

#include "policy.h"

#endif /* FEED_SERVER_H */
