/* http.c -- one request from its first line to its logged response.
 *
 * Every answer is JSON (the page and /metrics aside), errors included: the
 * request line and headers are checked here against limits well below
 * libmicrohttpd's connection memory (main.c), so that an over-long URL or
 * header block gets our JSON 414 or 431 and not the library's own HTML
 * page, which it sends only past that memory.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server.h"

#define MAX_URI      8192    /* request target, query included */
#define MAX_HEADERS 16384    /* all header lines together */

const unsigned status_codes[N_STATUS - 1] = {
    200, 201, 204, 400, 404, 405, 409, 413, 414, 431, 500, 503
};
/* Request latency histogram bounds, in microseconds. */
const int64_t bucket_us[N_BUCKETS] = {
    100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000,
    1000000, 2500000
};

int64_t now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* A non-negative decimal integer, digits only (no sign, no spaces), at most
 * max. Returns 0 on success. */
int parse_u64(const char *s, uint64_t max, uint64_t *out)
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

int parse_i64_nonneg(const char *s, int64_t *out)
{
    uint64_t v;

    if (parse_u64(s, INT64_MAX, &v) != 0)
        return -1;
    *out = (int64_t)v;
    return 0;
}

void sb_printf(sbuf *b, const char *fmt, ...)
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

const char *source_name(feed_source s)
{
    switch (s) {
    case FEED_SOURCE_CACHE:   return "cache";
    case FEED_SOURCE_REBUILD: return "rebuild";
    default:                  return "db";
    }
}

json_t *id_json(int64_t id)
{
    char buf[24];

    snprintf(buf, sizeof buf, "%" PRId64, id);
    return json_string(buf);
}

unsigned status_of(int rc)
{
    switch (rc) {
    case FEED_EINVAL:
    case FEED_ERANGE:       return 400;
    case FEED_EUNAVAILABLE:
    case FEED_EPG:          return 503;   /* the page needed SQL, and SQL was down */
    default:                return 500;
    }
}

/* ---- the log and the counters ---- */

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
            feed_stats s;
            feed_stats_get(w->feed, &s);
            for (size_t i = 0; i < feed_stats_count(); i++)
                w->c.stats[i] = feed_stats_value(&s, i);
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

/* ---- responses ---- */

/* CORS: a front end on another origin may read every answer, errors too. */
static void add_cors(struct MHD_Response *resp)
{
    if (!opt.cors_origin)
        return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", opt.cors_origin);
    if (strcmp(opt.cors_origin, "*") != 0)
        MHD_add_response_header(resp, "Vary", "Origin");
    MHD_add_response_header(resp, "Access-Control-Expose-Headers", "Location, Retry-After");
}

enum MHD_Result respond(ARGS, unsigned status, const char *ctype, char *body, size_t len,
                        const char *const *extra)
{
    struct MHD_Response *resp;
    enum MHD_Result ret;

    /* body is malloc'd (jansson and sbuf both use malloc): MHD frees it. */
    resp = body ? MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE)
                : MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    if (ctype)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    add_cors(resp);
    for (size_t i = 0; extra && extra[i]; i += 2)
        MHD_add_response_header(resp, extra[i], extra[i + 1]);
    ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    rq->done = 1;
    account(this_worker(), rq, method, url, status);
    return ret;
}

/* Steals obj. */
enum MHD_Result respond_json(ARGS, unsigned status, json_t *obj, const char *const *extra)
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
    return respond(PASS, status, "application/json", text, len + 1, extra);
}

enum MHD_Result respond_error(ARGS, unsigned status, const char *fmt, ...)
{
    static const char *const retry[] = { "Retry-After", "1", NULL };
    char msg[400];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (status >= 500 && !rq->err[0])   /* keep a more detailed reason */
        snprintf(rq->err, sizeof rq->err, "%s", msg);
    return respond_json(PASS, status, json_pack("{s:s}", "error", msg),
                        status == 503 ? retry : NULL);
}

/* ---- query parameters ---- */

typedef struct query_check {
    const char *const *allowed;
    unsigned           seen;      /* bit i: allowed[i] was given */
    char               bad[80];   /* the first problem */
} query_check;

static enum MHD_Result query_one(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value)
{
    query_check *q = cls;
    size_t i;

    (void)kind;
    (void)value;
    for (i = 0; q->allowed[i] && strcmp(q->allowed[i], key) != 0; i++)
        ;
    if (!q->allowed[i])
        snprintf(q->bad, sizeof q->bad, "unknown query parameter \"%.40s\"", key);
    else if (q->seen & (1u << i))
        snprintf(q->bad, sizeof q->bad, "query parameter \"%s\" given more than once", key);
    else
        q->seen |= 1u << i;
    return q->bad[0] ? MHD_NO : MHD_YES;
}

enum MHD_Result check_query(ARGS, const char *const *allowed, int *answered)
{
    static const char *const none[] = { NULL };
    query_check q = { allowed ? allowed : none, 0, "" };

    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, query_one, &q);
    *answered = q.bad[0] != '\0';
    return *answered ? respond_error(PASS, 400, "%s", q.bad) : MHD_YES;
}

/* ---- libmicrohttpd's hooks ---- */

/* The first line is in: the request starts here, with the target's length
 * as sent (the url the handler gets has lost its query). */
void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    request *rq = calloc(1, sizeof *rq);

    (void)cls;
    (void)c;
    if (rq) {
        rq->start_us = now_us();
        rq->uri_len = strlen(uri);
    }
    return rq;
}

static enum MHD_Result header_size(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    (void)kind;
    *(size_t *)cls += strlen(key) + (value ? strlen(value) : 0) + 4;   /* ": ", CRLF */
    return MHD_YES;
}

/* Before any body: the limits on the request line, headers and body size. */
static enum MHD_Result on_headers(ARGS)
{
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
    size_t headers = 0;
    uint64_t len;

    if (rq->uri_len > MAX_URI)
        return respond_error(PASS, 414, "request target over %d bytes", MAX_URI);
    MHD_get_connection_values(c, MHD_HEADER_KIND, header_size, &headers);
    if (headers > MAX_HEADERS)
        return respond_error(PASS, 431, "request headers over %d bytes", MAX_HEADERS);
    /* Refuse a declared oversize body before it is sent (a client that sent
     * "Expect: 100-continue" then never sends it). */
    if (cl && parse_u64(cl, UINT64_MAX, &len) == 0 && len > opt.max_body)
        return respond_error(PASS, 413, "request body over %zu bytes", opt.max_body);
    return MHD_YES;
}

enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                           const char *method, const char *version,
                           const char *upload_data, size_t *upload_data_size,
                           void **con_cls)
{
    request *rq = *con_cls;

    (void)cls;
    (void)version;
    if (!rq)   /* on_uri ran out of memory */
        return MHD_NO;
    if (!rq->started) {   /* the headers are in: no body yet */
        rq->started = 1;
        rq->route = route_of(url);
        return on_headers(PASS);
    }
    if (rq->done)   /* answered early (413, 414, 431): discard what still arrives */
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
        return respond_error(PASS, 413, "request body over %zu bytes", opt.max_body);
    return dispatch(PASS);
}

void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
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
