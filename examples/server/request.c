/* request.c -- one request from its target to its logged answer, whatever
 * carries it.
 *
 * Every answer is JSON (the page and /metrics aside), errors included. The
 * target and headers are checked here against limits well below what the
 * transports accept (libmicrohttpd's connection memory, evhttp's header
 * bound: mhd.c, evhttp.c), so that an over-long URL or header block gets
 * our JSON 414 or 431 and not the HTTP library's own HTML page.
 *
 * Both transports hand over the target as sent; it is parsed here, once for
 * both: the path %-decoded, the query split at '&' and '=' with '+' read as
 * a space, as libmicrohttpd reads it.
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
#define MAX_HDRS        16   /* name/value pairs of one answer */

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

json_t *id_json(int64_t id)
{
    char buf[24];

    snprintf(buf, sizeof buf, "%" PRId64, id);
    return json_string(buf);
}

/* ---- the target ---- */

static int hex(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* %XX in place (an invalid escape stays as it is); plus: '+' is a space. */
static void decode(char *s, int plus)
{
    char *out = s;

    for (; *s; s++) {
        if (*s == '%' && hex(s[1]) >= 0 && hex(s[2]) >= 0) {
            *out++ = (char)(hex(s[1]) * 16 + hex(s[2]));
            s += 2;
        } else {
            *out++ = plus && *s == '+' ? ' ' : *s;
        }
    }
    *out = '\0';
}

/* "a=1&b&&c=" -> (a, 1), (b, NULL), (c, ""): empty pieces are no parameter. */
static void split_query(request *rq)
{
    char *p = rq->query;

    while (p) {
        char *amp = strchr(p, '&'), *eq;
        if (amp)
            *amp = '\0';
        if (*p) {
            if (rq->nq == MAX_QUERY) {
                rq->too_many_q = 1;
                return;
            }
            if ((eq = strchr(p, '=')) != NULL) {
                *eq = '\0';
                decode(eq + 1, 1);
            }
            decode(p, 1);
            rq->qkey[rq->nq] = p;
            rq->qval[rq->nq++] = eq ? eq + 1 : NULL;
        }
        p = amp ? amp + 1 : NULL;
    }
}

int request_begin(request *rq, const transport *t, void *conn, worker *w,
                  const char *method, const char *target, size_t len)
{
    const char *q = memchr(target, '?', len);
    size_t plen = q ? (size_t)(q - target) : len;

    rq->t = t;
    rq->conn = conn;
    rq->w = w;
    rq->method = method;
    rq->target_len = len;
    if (!(rq->path = malloc(plen + 1)))
        return -1;
    memcpy(rq->path, target, plen);
    rq->path[plen] = '\0';
    decode(rq->path, 0);
    rq->route = route_of(rq->path);
    if (q) {
        if (!(rq->query = malloc(len - plen)))
            return -1;
        memcpy(rq->query, q + 1, len - plen - 1);
        rq->query[len - plen - 1] = '\0';
        split_query(rq);
    }
    return 0;
}

void request_free(request *rq)
{
    free(rq->path);
    free(rq->query);
    free(rq->body);
    free(rq->uids);
    free(rq->arr);
    free(rq->mutes);
    free(rq->seen);
}

int request_limits(request *rq, size_t headers_len, const char *content_length)
{
    uint64_t len;

    if (rq->target_len > MAX_URI)
        return respond_error(rq, 414, "request target over %d bytes", MAX_URI), 1;
    if (headers_len > MAX_HEADERS)
        return respond_error(rq, 431, "request headers over %d bytes", MAX_HEADERS), 1;
    /* Refuse a declared oversize body before it is sent (a client that sent
     * "Expect: 100-continue" then never sends it). */
    if (content_length && parse_u64(content_length, UINT64_MAX, &len) == 0 && len > opt.max_body)
        return respond_error(rq, 413, "request body over %zu bytes", opt.max_body), 1;
    return 0;
}

int request_body(request *rq, const char *data, size_t n)
{
    if (rq->too_large || rq->len + n > opt.max_body) {
        rq->too_large = 1;   /* keep reading, answer 413 at the end */
        return 0;
    }
    if (rq->len + n > rq->cap) {
        size_t cap = rq->cap ? rq->cap : 1024;
        while (cap < rq->len + n)
            cap *= 2;
        char *p = realloc(rq->body, cap);
        if (!p)
            return -1;
        rq->body = p;
        rq->cap = cap;
    }
    memcpy(rq->body + rq->len, data, n);
    rq->len += n;
    return 0;
}

void request_run(request *rq)
{
    if (rq->too_large)
        respond_error(rq, 413, "request body over %zu bytes", opt.max_body);
    else
        dispatch(rq);
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
static void account(request *rq, unsigned status)
{
    worker *w = rq->w;
    int64_t us = now_us() - rq->start_us;
    size_t b = 0;

    if (us < 0)
        us = 0;
    while (b < N_BUCKETS && us > bucket_us[b])
        b++;
    if (w) {
        feed_stats s;
        pthread_mutex_lock(&w->lock);
        if (w->ops->stats(w->be, &s) == 0)
            for (size_t i = 0; i < feed_stats_count(); i++)
                w->c.stats[i] = feed_stats_value(&s, i);
        w->c.requests[rq->route][status_slot(status)]++;
        w->c.buckets[b]++;
        w->c.latency_count++;
        w->c.latency_sum_us += (uint64_t)us;
        pthread_mutex_unlock(&w->lock);
    }
    if (!opt.quiet) {
        sbuf line = { 0 };
        log_safe(&line, rq->method, 16);
        sb_printf(&line, " ");
        log_safe(&line, rq->path ? rq->path : "", 512);
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

/* ---- answers ---- */

void respond(request *rq, unsigned status, const char *ctype, char *body, size_t len,
             const char *const *extra)
{
    const char *h[2 * MAX_HDRS + 1];
    char timing[48];
    size_t n = 0;

    /* The time this server took (the standard Server-Timing header), so a
     * page shows it apart from the browser's round trip, which queueing in
     * a loaded browser or network can make far longer. */
    snprintf(timing, sizeof timing, "app;dur=%.3f", (double)(now_us() - rq->start_us) / 1000.0);
    h[n++] = "Server-Timing";
    h[n++] = timing;
    if (ctype) {
        h[n++] = "Content-Type";
        h[n++] = ctype;
    }
    h[n++] = "Cache-Control";
    h[n++] = "no-store";
    /* CORS: a front end on another origin may read every answer, errors too. */
    if (opt.cors_origin) {
        h[n++] = "Access-Control-Allow-Origin";
        h[n++] = opt.cors_origin;
        if (strcmp(opt.cors_origin, "*") != 0) {
            h[n++] = "Vary";
            h[n++] = "Origin";
        }
        h[n++] = "Access-Control-Expose-Headers";
        h[n++] = "Location, Retry-After, Server-Timing";
    }
    for (size_t i = 0; extra && extra[i] && n + 2 <= 2 * MAX_HDRS; i += 2) {
        h[n++] = extra[i];
        h[n++] = extra[i + 1];
    }
    h[n] = NULL;
    rq->done = 1;
    account(rq, status);
    rq->t->send(rq, status, h, body, len);   /* rq may be gone now */
}

/* Steals obj. */
void respond_json(request *rq, unsigned status, json_t *obj, const char *const *extra)
{
    char *text = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    size_t len;

    json_decref(obj);
    if (!text) {   /* out of memory: a fixed body still tells the client */
        static const char oom[] = "{\"error\":\"out of memory\"}";
        if ((text = malloc(sizeof oom)) != NULL)
            memcpy(text, oom, sizeof oom);
        status = 500;
    }
    len = text ? strlen(text) : 0;
    if (text)
        text[len++] = '\n';   /* json_dumps leaves room for the NUL: use it for a newline */
    respond(rq, status, "application/json", text, len, extra);
}

/* Seconds a client should wait before asking again after a 503: until the
 * worker's handle tries the store it lost again (feed_retry_after_ms),
 * rounded up, and at least 1. */
static unsigned retry_after_s(const request *rq)
{
    uint32_t ms = rq->w ? rq->w->ops->retry_after(rq->w->be) : 0;

    return ms ? (ms + 999) / 1000 : 1;
}

void respond_error(request *rq, unsigned status, const char *fmt, ...)
{
    char msg[400], after[12];
    const char *const retry[] = { "Retry-After", after, NULL };
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (status >= 500 && !rq->err[0])   /* keep a more detailed reason */
        snprintf(rq->err, sizeof rq->err, "%s", msg);
    if (status == 503)
        snprintf(after, sizeof after, "%u", retry_after_s(rq));
    respond_json(rq, status, json_pack("{s:s}", "error", msg), status == 503 ? retry : NULL);
}

/* ---- query parameters ---- */

int check_query(request *rq, const char *const *allowed)
{
    static const char *const none[] = { NULL };
    unsigned seen = 0;   /* bit i: allowed[i] was given */

    if (!allowed)
        allowed = none;
    if (rq->too_many_q)
        return respond_error(rq, 400, "more than %d query parameters", MAX_QUERY), 1;
    for (size_t k = 0; k < rq->nq; k++) {
        size_t i;
        for (i = 0; allowed[i] && strcmp(allowed[i], rq->qkey[k]) != 0; i++)
            ;
        if (!allowed[i])
            return respond_error(rq, 400, "unknown query parameter \"%.40s\"", rq->qkey[k]), 1;
        if (seen & (1u << i))
            return respond_error(rq, 400, "query parameter \"%s\" given more than once",
                                 rq->qkey[k]), 1;
        seen |= 1u << i;
    }
    return 0;
}

int query_get(const request *rq, const char *key, const char **val)
{
    for (size_t k = 0; k < rq->nq; k++)
        if (strcmp(rq->qkey[k], key) == 0) {
            *val = rq->qval[k];
            return 1;
        }
    return 0;
}
