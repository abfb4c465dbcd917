/* page.c -- the read path: feed_page.
 *
 * One call, in order:
 *   1. page.lua (one round trip): the page from the cache, or a miss.
 *   2. Hit: the cache answers when it returned limit + 1 items (so has_more
 *      is known) or reached the end marker. Otherwise the cache is short of
 *      the page and a keyset query answers.
 *   3. Miss, and page.lua gave us the lease: rebuild from SQL (rebuild.c)
 *      and cut the page from the same rows.
 *   4. Miss while another handle holds the lease: ask again with a growing
 *      pause, for at most lease_wait_ms, then a keyset query.
 *   5. Redis failed anywhere: a keyset query. PostgreSQL is the truth; the
 *      cache is only ever a shortcut to it.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

typedef struct page_req {
    int64_t uid;
    int     first;          /* first page: no cursor */
    int64_t score, id;      /* the cursor otherwise */
    size_t  limit;
} page_req;

/* What page.lua said. */
typedef struct cache_answer {
    int       hit;
    int       ended;        /* hit: the end marker was reached */
    int       leased;       /* miss: we hold the lease and must rebuild */
    feed_rows rows;         /* hit: up to limit + 1 items after the cursor */
    char      token[33];
} cache_answer;

static int bad_reply(feed *f, const char *why)
{
    f->stats.redis_errors++;
    return feed__error(f, FEED_EREDIS, "Redis page.lua: unexpected reply: %s", why);
}

static int is_int(const redisReply *r)
{
    return r->type == REDIS_REPLY_INTEGER;
}

static int is_str(const redisReply *r)
{
    return r->type == REDIS_REPLY_STRING;
}

/* The pair at element i is the end marker: member "end", score "-inf". */
static int is_end_marker(const redisReply *r, size_t i)
{
    const redisReply *m = r->element[i], *s = r->element[i + 1];

    return is_str(m) && is_str(s) && m->len == strlen(FEED_END_MEMBER) &&
           memcmp(m->str, FEED_END_MEMBER, m->len) == 0 &&
           s->len == 4 && memcmp(s->str, "-inf", 4) == 0;
}

/* page.lua answers a hit with the ZREVRANGE reply itself, {member, score,
 * ...}, and a miss with an integer, 1 = we hold the lease (bench/: the
 * script returns at once, no status added in Lua). So the two facts the
 * script used to add are read here: after a cursor, a first pair that is the
 * cursor item at the cursor's score is the seek's check, not part of the
 * page, and is dropped; a last pair that is the end marker means the page is
 * complete without SQL. Everything else is checked element by element. */
static int parse_answer(feed *f, const redisReply *r, const page_req *q,
                        cache_answer *a)
{
    size_t n, first = 0;

    if (is_int(r)) {
        if (r->integer != 0 && r->integer != 1)
            return bad_reply(f, "a miss that is neither 0 nor 1");
        a->leased = r->integer == 1;
        return FEED_OK;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements % 2 != 0)
        return bad_reply(f, "not {member, score, ...}");
    a->hit = 1;
    n = r->elements / 2;
    if (n > 0 && is_end_marker(r, r->elements - 2)) {
        a->ended = 1;
        n--;
    }
    if (!q->first && n > 0) {
        const redisReply *m = r->element[0], *s = r->element[1];
        int64_t id, score;
        if (is_str(m) && is_str(s) &&
            feed__member_decode(m->str, m->len, &id) == FEED_OK && id == q->id &&
            feed__parse_score(s->str, s->len, &score) == FEED_OK && score == q->score) {
            first = 2;
            n--;
        }
    }
    if (n + a->ended > q->limit + 1)
        return bad_reply(f, "item count");
    a->rows.items = malloc((n + 1) * sizeof *a->rows.items);
    if (!a->rows.items)
        return feed__error(f, FEED_ENOMEM, "out of memory for %zu items", n);
    for (size_t i = 0; i < n; i++) {
        const redisReply *m = r->element[first + 2 * i], *s = r->element[first + 1 + 2 * i];
        feed_item *it = &a->rows.items[i];
        if (!is_str(m) || !is_str(s) ||
            feed__member_decode(m->str, m->len, &it->id) != FEED_OK ||
            feed__parse_score(s->str, s->len, &it->score) != FEED_OK) {
            feed__rows_free(&a->rows);
            return bad_reply(f, "member or score is not a feedcache item");
        }
        /* Never serve a page out of order or from before the cursor, even
         * if the server says so (a broken script, a foreign writer, a
         * hostile server): an unexpected reply, and SQL answers instead.
         * Found by tests/fuzz/fuzz_session.c. */
        if (i > 0 ? !feed__item_after(*it, it[-1].score, it[-1].id)
                  : !q->first && !feed__item_after(*it, q->score, q->id)) {
            feed__rows_free(&a->rows);
            return bad_reply(f, "items out of order or not after the cursor");
        }
    }
    a->rows.count = n;
    return FEED_OK;
}

static int ask_cache(feed *f, const page_req *q, cache_answer *a)
{
    char want[21], score[21], member[FEED_MEMBER_MAX];
    const char *argv[9];
    size_t lens[9];
    redisReply *r;
    int rc;

    memset(a, 0, sizeof *a);
    feed__lease_token(f, a->token);
    feed__i64_to_str((int64_t)q->limit + 1, want);
    if (q->first) {
        score[0] = member[0] = '\0';
        lens[4] = 0;
    } else {
        feed__i64_to_str(q->score, score);
        lens[4] = feed__member_encode(q->id, member);
    }
    argv[0] = f->key;
    argv[1] = f->lease_key;
    argv[2] = want;
    argv[3] = score;
    argv[4] = member;
    argv[5] = a->token;
    argv[6] = f->lease_ms;
    argv[7] = f->ttl_ms;    /* read on first pages only: not sent after a cursor */
    argv[8] = f->empty_ttl_ms;
    for (int i = 0; i < 9; i++)
        if (i != 4)
            lens[i] = strlen(argv[i]);
    r = feed__redis_script(f, FEED_SCRIPT_PAGE, 2, q->first ? 9 : 7, argv, lens);
    if (!r)
        return FEED_EREDIS;
    rc = parse_answer(f, r, q, a);
    freeReplyObject(r);
    return rc;
}

/* Fill *out from items, of which avail follow the cursor in order; the
 * caller knows that nothing follows them unless avail > limit. */
static int answer(feed *f, feed_result *out, const feed_item *items,
                  size_t avail, size_t limit, feed_source source)
{
    size_t count = avail < limit ? avail : limit;

    out->items = malloc((count + 1) * sizeof *out->items);
    if (!out->items)
        return feed__error(f, FEED_ENOMEM, "out of memory for %zu items", count);
    memcpy(out->items, items, count * sizeof *items);
    out->count = count;
    out->has_more = avail > limit;
    if (out->has_more) {
        out->next_score = items[count - 1].score;
        out->next_id = items[count - 1].id;
    }
    out->source = source;
    f->stats.pages++;
    if (source == FEED_SOURCE_CACHE)
        f->stats.cache_pages++;
    else if (source == FEED_SOURCE_DB)
        f->stats.db_pages++;
    return FEED_OK;
}

/* The page by a keyset query. redis_failed: Redis could not answer either,
 * so a PostgreSQL failure makes the feed unavailable. */
static int answer_from_db(feed *f, const page_req *q, feed_result *out,
                          int redis_failed)
{
    char redis_msg[sizeof f->errmsg];
    feed_rows rows;
    int rc;

    snprintf(redis_msg, sizeof redis_msg, "%s", f->errmsg);
    /* Never installed in the cache: the replica may answer it. */
    rc = feed__pg_page(f, q->uid, q->first, q->score, q->id, q->limit + 1, &rows);
    if (rc == FEED_OK) {
        rc = answer(f, out, rows.items, rows.count, q->limit, FEED_SOURCE_DB);
        /* Degraded but answered: keep why Redis was not used. */
        if (rc == FEED_OK && redis_failed)
            snprintf(f->errmsg, sizeof f->errmsg, "%s", redis_msg);
    } else if (rc == FEED_EPG && redis_failed) {
        char pg_msg[sizeof f->errmsg];
        snprintf(pg_msg, sizeof pg_msg, "%s", f->errmsg);
        rc = feed__error(f, FEED_EUNAVAILABLE, "%s; %s", redis_msg, pg_msg);
    }
    feed__rows_free(&rows);
    return rc;
}

/* Index of the first row strictly after the cursor (rows are in order). */
static size_t first_after(const feed_rows *rows, const page_req *q)
{
    size_t lo = 0, hi = rows->count;

    if (q->first)
        return 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (feed__item_after(rows->items[mid], q->score, q->id))
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* We hold the lease: rebuild, then cut the page from the rows read. Those
 * rows are the top of the feed; when they are the whole feed, or reach past
 * the page, they answer it exactly. */
static int answer_by_rebuild(feed *f, const page_req *q, const char *token,
                             feed_result *out)
{
    feed_rows rows;
    int installed, rc, complete;
    size_t start, avail;

    rc = feed__rebuild(f, q->uid, token, &rows, &installed);
    if (rc != FEED_OK && rc != FEED_EREDIS)
        return rc;   /* SQL failed; the lease lapses by itself in lease_ms */
    complete = rows.count <= f->cfg.max_len;
    start = first_after(&rows, q);
    avail = rows.count - start;
    if (complete || avail > q->limit)
        rc = answer(f, out, rows.items + start, avail, q->limit,
                    installed ? FEED_SOURCE_REBUILD : FEED_SOURCE_DB);
    else
        rc = answer_from_db(f, q, out, !installed && rc == FEED_EREDIS);
    feed__rows_free(&rows);
    return rc;
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };

    nanosleep(&ts, NULL);
}

static int check_args(feed *f, int64_t last_score, int64_t last_id,
                      size_t limit, feed_result *out)
{
    if (!out)
        return feed__error(f, FEED_EINVAL, "feed_page: out is NULL");
    if (limit == 0 || limit > f->cfg.max_page)
        return feed__error(f, FEED_EINVAL, "feed_page: limit %zu is outside 1..%u",
                           limit, f->cfg.max_page);
    if (last_score == FEED_FIRST)
        return FEED_OK;
    if (!feed__score_ok(last_score))
        return feed__error(f, FEED_ERANGE, "feed_page: cursor score %lld is outside"
                           " +/-(2^53-1)", (long long)last_score);
    if (last_id < 0)
        return feed__error(f, FEED_EINVAL, "feed_page: cursor id %lld is negative",
                           (long long)last_id);
    return FEED_OK;
}

int feed_page(feed *f, int64_t uid, int64_t last_score, int64_t last_id,
              size_t limit, feed_result *out)
{
    page_req q = { uid, last_score == FEED_FIRST, last_score, last_id, limit };
    int64_t deadline = 0, pause = 1;
    int rc;

    if (out)
        memset(out, 0, sizeof *out);
    if (!f)
        return FEED_EINVAL;
    feed__clear_error(f);
    if ((rc = check_args(f, last_score, last_id, limit, out)) != FEED_OK)
        return rc;
    feed__set_keys(f, uid);

    for (;;) {
        cache_answer a;
        int64_t now;

        rc = ask_cache(f, &q, &a);
        if (rc == FEED_ENOMEM)
            return rc;
        if (rc != FEED_OK)
            return answer_from_db(f, &q, out, 1);
        if (a.hit) {
            if (a.rows.count > limit || a.ended)
                rc = answer(f, out, a.rows.items, a.rows.count, limit, FEED_SOURCE_CACHE);
            else
                rc = answer_from_db(f, &q, out, 0);   /* the cache is short */
            feed__rows_free(&a.rows);
            return rc;
        }
        if (a.leased)
            return answer_by_rebuild(f, &q, a.token, out);

        /* Another handle is rebuilding: its result will serve us too. */
        now = feed__now_ms();
        if (deadline == 0) {
            f->stats.lease_waits++;
            deadline = now + f->cfg.lease_wait_ms;
        }
        if (now >= deadline)
            return answer_from_db(f, &q, out, 0);
        sleep_ms(pause < deadline - now ? pause : deadline - now);
        pause *= 2;
    }
}
