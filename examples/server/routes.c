/* routes.c -- which route a request names, and the read routes: a page of a
 * feed, the items newer than a cursor, a page of a merged timeline,
 * /healthz, and the HTML page. Each is one backend operation (one library
 * call) whose completion turns its result into JSON.
 *
 * Ids are JSON strings of decimal digits on output, because ids may exceed
 * 2^53 and JavaScript-style clients would round JSON numbers that large;
 * scores are JSON integers within +/-(2^53-1), exact in every JSON client.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

#define DEFAULT_LIMIT 20
#define MAX_SEGS      5

const char *const route_names[R_COUNT] = {
    "/", "/users/{uid}/feed", "/users/{uid}/feed/newer", "/users/{uid}/timeline",
    "/users/{uid}/items", "/users/{uid}/items/{id}", "/authors/{author}/posts",
    "/authors/{author}/posts/{id}", "/items/{id}/fanout", "/users/{uid}/mutes",
    "/users/{uid}/mutes/{author}", "/metrics", "/healthz", "unknown"
};

#define READ_METHODS "GET, HEAD, OPTIONS"
/* The methods of each route; OPTIONS is always allowed (CORS preflight). */
static const char *const route_allow[R_COUNT] = {
    READ_METHODS, READ_METHODS, READ_METHODS, READ_METHODS,  /* page, feed, newer, timeline */
    "POST, PUT, OPTIONS", "PUT, DELETE, OPTIONS",            /* a feed's items */
    "POST, PUT, OPTIONS", "PUT, DELETE, OPTIONS",            /* an author's posts */
    "POST, OPTIONS",                                         /* fanout */
    READ_METHODS, "POST, DELETE, OPTIONS",                   /* a viewer's mutes */
    READ_METHODS, READ_METHODS, NULL                         /* metrics, healthz */
};

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

static enum route classify(const char *url, char *buf, size_t buflen, char **seg)
{
    int n = split_path(url, buf, buflen, seg);

    if (n == 0)
        return R_PAGE;
    if (n == 1 && strcmp(seg[0], "metrics") == 0)
        return R_METRICS;
    if (n == 1 && strcmp(seg[0], "healthz") == 0)
        return R_HEALTHZ;
    if (n >= 3 && strcmp(seg[0], "users") == 0) {
        if (n == 3 && strcmp(seg[2], "feed") == 0)
            return R_FEED;
        if (n == 4 && strcmp(seg[2], "feed") == 0 && strcmp(seg[3], "newer") == 0)
            return R_NEWER;
        if (n == 3 && strcmp(seg[2], "timeline") == 0)
            return R_TIMELINE;
        if (n == 3 && strcmp(seg[2], "items") == 0)
            return R_ITEMS;
        if (n == 4 && strcmp(seg[2], "items") == 0)
            return R_ITEM;
        if (n == 3 && strcmp(seg[2], "mutes") == 0)
            return R_MUTES;
        if (n == 4 && strcmp(seg[2], "mutes") == 0)
            return R_MUTE;
    }
    if (n >= 3 && strcmp(seg[0], "authors") == 0 && strcmp(seg[2], "posts") == 0) {
        if (n == 3)
            return R_POSTS;
        if (n == 4)
            return R_POST;
    }
    if (n == 3 && strcmp(seg[0], "items") == 0 && strcmp(seg[2], "fanout") == 0)
        return R_FANOUT;
    return R_UNKNOWN;
}

enum route route_of(const char *path)
{
    char buf[512];
    char *seg[MAX_SEGS];

    return classify(path, buf, sizeof buf, seg);
}

static int method_allowed(const char *allow, const char *method)
{
    const char *m = strcmp(method, "HEAD") == 0 ? "GET" : method;
    size_t ml = strlen(m);

    for (const char *p = allow; (p = strstr(p, m)) != NULL; p += ml)
        if ((p == allow || p[-1] == ' ') && (p[ml] == '\0' || p[ml] == ','))
            return 1;
    return 0;
}

/* ---- the read routes ---- */

/* ?limit=N&cursor=TOKEN, both optional unless cursor_required: the cursor
 * (*score, *id; FEED_FIRST without one), and the rank where its page ended
 * when the token carries it (*rank; -1 when it does not). rank NULL: the
 * route's tokens carry none (a merged timeline's), and one that does is
 * refused. Returns 1 when a 400 was queued. */
static int page_args(request *rq, int cursor_required, size_t *limit, int64_t *score,
                     int64_t *id, int64_t *rank)
{
    static const char *const allowed[] = { "limit", "cursor", NULL };
    const char *limit_s = NULL, *cursor = NULL;
    uint64_t lim = DEFAULT_LIMIT < opt.cfg.max_page ? DEFAULT_LIMIT : opt.cfg.max_page;

    if (check_query(rq, allowed))
        return 1;
    *score = FEED_FIRST;
    *id = 0;
    if (rank)
        *rank = -1;
    if (query_get(rq, "limit", &limit_s) &&
        (parse_u64(limit_s, UINT32_MAX, &lim) != 0 || lim < 1 || lim > opt.cfg.max_page))
        return respond_error(rq, 400, "limit must be an integer in 1..%u", opt.cfg.max_page), 1;
    if (query_get(rq, "cursor", &cursor)) {
        if ((rank ? feed_cursor_decode_ranked(cursor ? cursor : "", score, id, rank)
                  : feed_cursor_decode(cursor ? cursor : "", score, id)) != FEED_OK)
            return respond_error(rq, 400, "malformed cursor: pass a cursor of an earlier "
                                 "answer as it came%s", cursor_required ? "" :
                                 ", or omit cursor for the first page"), 1;
    } else if (cursor_required) {
        return respond_error(rq, 400, "cursor is required: the cursor of the newest item "
                             "the client holds"), 1;
    }
    *limit = (size_t)lim;
    return 0;
}

static int seen_by_id(const void *x, const void *y)
{
    int64_t a = ((const seen_author *)x)->id, b = ((const seen_author *)y)->id;

    return (a > b) - (a < b);
}

/* The author the filter's predicate saw for id: a JSON string, or null
 * (unknown: a NULL in the author column). rq->seen is sorted by id. */
static json_t *author_json(const request *rq, int64_t id)
{
    seen_author key = { id, 0 };
    const seen_author *s = bsearch(&key, rq->seen, rq->nseen, sizeof *s, seen_by_id);

    return s && s->author != INT64_MIN ? id_json(s->author) : json_null();
}

/* {"items":[...], "next_cursor": TOKEN or null, "source": ...} plus, when
 * has_more_key, "has_more". The token carries next_rank (-1: none). On a
 * filtered read (rq->seen) each item carries its "author" and the answer
 * "muted", how many authors the viewer mutes. Frees res. */
static void page_json(request *rq, feed_result *res, int64_t next_rank,
                      const char *has_more_key)
{
    json_t *items = json_array(), *obj = json_object();
    char token[FEED_CURSOR_SIZE];
    int ok;

    rq->source = feed_source_name(res->source);
    if (rq->seen)
        qsort(rq->seen, rq->nseen, sizeof *rq->seen, seen_by_id);
    /* jansson functions given NULL return NULL or -1: one check at the end
     * catches any allocation failure. */
    for (size_t i = 0; items && i < res->count; i++) {
        json_t *it = json_pack("{s:o,s:I}", "id", id_json(res->items[i].id),
                               "score", (json_int_t)res->items[i].score);
        if (it && rq->seen && json_object_set_new(it, "author",
                                                  author_json(rq, res->items[i].id)) != 0) {
            json_decref(it);
            break;
        }
        if (json_array_append_new(items, it) != 0)
            break;
    }
    ok = items && obj && json_array_size(items) == res->count && !rq->seen_failed &&
         json_object_set(obj, "items", items) == 0;
    if (res->has_more || has_more_key)
        ok = ok && feed_cursor_encode_ranked(res->next_score, res->next_id, next_rank, token,
                                             sizeof token) == FEED_OK &&
             json_object_set_new(obj, "next_cursor", json_string(token)) == 0;
    else
        ok = ok && json_object_set_new(obj, "next_cursor", json_null()) == 0;
    if (has_more_key)
        ok = ok && json_object_set_new(obj, has_more_key, json_boolean(res->has_more)) == 0;
    ok = ok && json_object_set_new(obj, "source", json_string(rq->source)) == 0;
    if (rq->seen)
        ok = ok && json_object_set_new(obj, "muted", json_integer((json_int_t)rq->nmutes)) == 0;
    json_decref(items);
    feed_result_free(res);
    if (!ok) {
        json_decref(obj);
        respond_error(rq, 500, "out of memory");
        return;
    }
    respond_json(rq, 200, obj, NULL);
}

/* A library error as HTTP: the caller's mistake 400, a store down 503
 * (Retry-After), anything else (a store refusing, out of memory) 500. */
static void library_error(request *rq, int rc, const char *errmsg)
{
    feed_kind kind = rq->w->ops->kind(rq->w->be, rc);
    unsigned st = kind == FEED_KIND_INPUT ? 400 : kind == FEED_KIND_RETRY ? 503 : 500;

    snprintf(rq->err, sizeof rq->err, "%s", errmsg);
    respond_error(rq, st, "%s", st >= 500 ? feed_strerror(rc) : rq->err);
}

static void feed_done(request *rq, int rc, feed_result *res, int64_t next_rank,
                      const char *errmsg)
{
    if (rc != FEED_OK) {
        library_error(rq, rc, errmsg);
        return;
    }
    page_json(rq, res, next_rank, rq->newer ? "has_more" : NULL);
}

/* ---- reads filtered by the viewer's mutes (--item-author-column) ---- */

/* The filter's predicate: it hides nothing (the muted authors are the
 * filter's hide_authors, never seen here) and records each item's author,
 * which the answer shows so that a client can offer to mute it. */
static int record_author(void *arg, int64_t score, int64_t id, int64_t author)
{
    request *rq = arg;

    (void)score;
    if (rq->nseen == rq->capseen) {
        size_t cap = rq->capseen ? 2 * rq->capseen : 64;
        seen_author *s = realloc(rq->seen, cap * sizeof *s);
        if (!s) {
            rq->seen_failed = 1;        /* the answer becomes a 500 */
            return 1;
        }
        rq->seen = s;
        rq->capseen = cap;
    }
    rq->seen[rq->nseen++] = (seen_author){ id, author };
    return 1;
}

/* The mutes are in rq->mutes: one filtered call. The next_cursor of a
 * filtered feed page carries no rank: there is no ranked filtered call. */
static void filtered_read(request *rq)
{
    feed_filter f = { rq->mutes, rq->nmutes, record_author, rq };

    if (!(rq->seen = malloc(64 * sizeof *rq->seen))) {
        respond_error(rq, 500, "out of memory");
        return;
    }
    rq->capseen = 64;
    rq->w->ops->filtered(rq->w->be, rq, rq->kind, rq->uid, opt.merge_authors, opt.n_merge,
                         rq->score, rq->id, rq->limit, &f, feed_done);
}

/* Read uid's mutes, then the filtered call of kind after (score, id). */
static void filtered(request *rq, int kind, int64_t uid, int64_t score, int64_t id,
                     size_t limit)
{
    rq->kind = kind;
    rq->score = score;
    rq->id = id;
    rq->limit = limit;
    mutes_read(rq, uid, filtered_read);
}

/* GET /users/{uid}/feed?limit=N&cursor=TOKEN: one feed_page_ranked (with
 * --item-author-column: the viewer's mutes, then feed_page_filtered). The
 * next page's token carries the rank where this page ended: whichever
 * worker (handle) serves it reads it as cheaply as the handle that served
 * this one (README "Performance"); the rank is a hint the library proves.
 * GET /users/{uid}/feed/newer?cursor=TOKEN&limit=N (newer): pull-to-refresh,
 * one feed_page_newer. Items newest first; next_cursor is the cursor to pass
 * next time (the newest item returned, or the given one when none is
 * newer); has_more says that still newer items exist: call again at once. */
static void get_feed(request *rq, int64_t uid, int newer)
{
    const backend_ops *be = rq->w->ops;
    size_t limit = 0;
    int64_t score, id, rank;

    if (page_args(rq, newer, &limit, &score, &id, &rank))
        return;
    rq->newer = newer;
    if (opt.cfg.item_author_column)
        filtered(rq, newer ? FILTER_NEWER : FILTER_PAGE, uid, score, id, limit);
    else if (newer)
        be->newer(rq->w->be, rq, uid, score, id, limit, feed_done);
    else
        be->page(rq->w->be, rq, uid, score, id, rank, limit, feed_done);
}

/* GET /users/{uid}/timeline?limit=N&cursor=TOKEN: uid's feed merged with
 * the posts of the authors of --merge-authors, one feed_page_merged (with
 * --item-author-column: the viewer's mutes, then feed_page_merged_filtered):
 * SQL's UNION of the two, each (score, id) once, newest first. The cursor is the
 * (score, id) pair alone: a merged page hands out no rank. */
static void get_timeline(request *rq, int64_t uid)
{
    size_t limit = 0;
    int64_t score, id;

    if (page_args(rq, 0, &limit, &score, &id, NULL))
        return;
    if (opt.cfg.item_author_column)
        filtered(rq, FILTER_MERGED, uid, score, id, limit);
    else
            rq->w->ops->merged(rq->w->be, rq, uid, opt.merge_authors, opt.n_merge, score, id,
                           limit, feed_done);
}

/* GET / (?uid=N&limit=N&view=timeline&autoscroll=1&mute_first=1 are read by the page's
 * script). */
static void get_page(request *rq)
{
    static const char *const allowed[] = { "uid", "limit", "view", "autoscroll", "mute_first",
                                           NULL };
    static const char *const csp[] = {
        "Content-Security-Policy",
        "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'", NULL
    };
    size_t len = strlen(feed_server_page);
    char *body;

    if (check_query(rq, allowed))
        return;
    if (!(body = malloc(len))) {
        respond_error(rq, 500, "out of memory");
        return;
    }
    memcpy(body, feed_server_page, len);
    respond(rq, 200, "text/html; charset=utf-8", body, len, csp);
}

static void health_done_cb(request *rq, const feed_health_info *h, const char *errmsg)
{
    int redis_ok = h && h->redis_up, pg_ok = h && h->pg_up;

    if (h)
        snprintf(rq->err, sizeof rq->err, "%.250s%s%.250s", h->redis_msg,
                 h->redis_msg[0] && h->pg_msg[0] ? "; " : "", h->pg_msg);
    else
        snprintf(rq->err, sizeof rq->err, "no health check: %s", errmsg);
    respond_json(rq, redis_ok || pg_ok ? 200 : 503,
                 json_pack("{s:s,s:s,s:s}",
                           "status", redis_ok && pg_ok ? "ok" : redis_ok || pg_ok ? "degraded" : "down",
                           "redis", redis_ok ? "up" : "down",
                           "postgres", pg_ok ? "up" : "down"),
                 NULL);
}

/* GET /healthz: whether each store answers now (feed_health: a PING, one
 * read of the feed table). 200 while one does. */
static void get_healthz(request *rq)
{
    if (!check_query(rq, NULL))
        rq->w->ops->health(rq->w->be, rq, health_done_cb);
}

/* ---- dispatch ---- */

#define ID_TEXT "must be a non-negative integer (decimal digits, at most 9223372036854775807)"

/* OPTIONS: what the route takes, and the CORS preflight answer. */
static void preflight(request *rq, const char *allow)
{
    const char *const hdrs[] = {
        "Allow", allow,
        "Access-Control-Allow-Methods", allow,
        "Access-Control-Allow-Headers", "Content-Type",
        "Access-Control-Max-Age", "600", NULL
    };
    const char *const plain[] = { "Allow", allow, NULL };

    respond(rq, 204, NULL, NULL, 0, opt.cors_origin ? hdrs : plain);
}

/* The routes that need the authors' table (--author-table). */
static int merge_route(enum route r)
{
    return r == R_TIMELINE || r == R_POSTS || r == R_POST;
}

void dispatch(request *rq)
{
    char buf[512];
    char *seg[MAX_SEGS];
    int64_t uid = 0, id = -1;
    const char *allow, *method = rq->method;
    enum route r;

    if (!rq->w) {
        respond_error(rq, 500, "out of memory");
        return;
    }
    r = rq->route = classify(rq->path, buf, sizeof buf, seg);
    if (r == R_UNKNOWN) {
        respond_error(rq, 404, "no such endpoint; see GET /, GET /users/{uid}/feed, "
                      "GET /users/{uid}/feed/newer, GET /users/{uid}/timeline, "
                      "POST|PUT /users/{uid}/items, PUT|DELETE /users/{uid}/items/{id}, "
                      "POST|PUT /authors/{author}/posts, PUT|DELETE /authors/{author}/posts/{id}, "
                      "POST /items/{id}/fanout, GET /users/{uid}/mutes, "
                      "POST|DELETE /users/{uid}/mutes/{author}, GET /metrics, GET /healthz");
        return;
    }
    /* Without an author column nothing can be muted. */
    if ((r == R_MUTES || r == R_MUTE) && !opt.cfg.item_author_column) {
        respond_error(rq, 404, "no mutes here: the service was started without "
                      "--item-author-column (the feed table's column naming each item's "
                      "author)");
        return;
    }
    /* Without the authors' table these routes do not exist here. */
    if (merge_route(r) && !opt.cfg.author_table) {
        respond_error(rq, 404, "no timelines or authors' posts here: the service was started "
                      "without --author-table (the table of the authors' posts)");
        return;
    }
    allow = route_allow[r];
    if (!method_allowed(allow, method)) {
        const char *const hdr[] = { "Allow", allow, NULL };
        char msg[120];
        snprintf(msg, sizeof msg, "method not allowed here; allowed: %s", allow);
        respond_json(rq, 405, json_pack("{s:s}", "error", msg), hdr);
        return;
    }
    if (strcmp(method, "OPTIONS") == 0) {
        preflight(rq, allow);
        return;
    }
    if (((r >= R_FEED && r <= R_POST) || r == R_MUTES || r == R_MUTE) &&
        parse_i64_nonneg(seg[1], &uid) != 0) {
        respond_error(rq, 400, "%s " ID_TEXT,
                      r == R_POSTS || r == R_POST ? "author id" : "uid");
        return;
    }
    if (((r == R_ITEM || r == R_POST) && parse_i64_nonneg(seg[3], &id) != 0) ||
        (r == R_FANOUT && parse_i64_nonneg(seg[1], &id) != 0)) {
        respond_error(rq, 400, "%s id " ID_TEXT, r == R_POST ? "post" : "item");
        return;
    }
    if (r == R_MUTE && parse_i64_nonneg(seg[3], &id) != 0) {
        respond_error(rq, 400, "author id " ID_TEXT);
        return;
    }
    /* Writes and /metrics take no query. */
    if (((r >= R_ITEMS && r <= R_MUTE) || r == R_METRICS) && check_query(rq, NULL))
        return;
    rq->author = r == R_POSTS || r == R_POST;

    switch (r) {
    case R_PAGE:     get_page(rq); break;
    case R_METRICS:  get_metrics(rq); break;
    case R_HEALTHZ:  get_healthz(rq); break;
    case R_FEED:     get_feed(rq, uid, 0); break;
    case R_NEWER:    get_feed(rq, uid, 1); break;
    case R_TIMELINE: get_timeline(rq, uid); break;
    case R_ITEMS:
    case R_POSTS:    put_item(rq, uid, -1, strcmp(method, "POST") == 0); break;
    case R_ITEM:
    case R_POST:
        if (strcmp(method, "DELETE") == 0)
            delete_item(rq, uid, id);
        else
            put_item(rq, uid, id, 0);
        break;
    case R_FANOUT:   fanout(rq, id); break;
    case R_MUTES:    mutes_route(rq, uid, -1); break;
    case R_MUTE:     mutes_route(rq, uid, id); break;
    default:         respond_error(rq, 500, "unreachable");
    }
}
