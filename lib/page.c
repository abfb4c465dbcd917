/* page.c -- the read path: feed_page.
 *
 * One call, in order:
 *   1. A plain read (one round trip, no script: "Plain reads" below) whose
 *      reply proves the page; when it cannot (absent key, a cursor that
 *      moved far), page.lua (one more round trip): the page, or a miss.
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
    int64_t rank;           /* the caller's rank hint for the cursor, or -1 */
    size_t  limit;
    int64_t next_rank;      /* out: the rank hint for the next cursor, or -1 */
} page_req;

/* What the cache said, by a plain read or by page.lua. */
typedef struct cache_answer {
    int       hit;
    int       ended;        /* hit: the end marker was reached */
    int       leased;       /* miss: we hold the lease and must rebuild */
    int       plain;        /* hit: proven from a plain read, no script */
    int64_t   rank0;        /* hit: rank of rows.items[0] in that snapshot; -1 unknown */
    feed_rows rows;         /* hit: up to limit + 1 items after the cursor */
    char      token[33];
} cache_answer;

static int bad_reply(feed *f, const char *why)
{
    f->stats.redis_errors++;
    return feed__error(f, FEED_EREDIS, "Redis page read: unexpected reply: %s", why);
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

/* The feed item of the pair at element i; FEED_OK or not a feedcache item. */
static int pair_item(const redisReply *r, size_t i, feed_item *it)
{
    const redisReply *m = r->element[i], *s = r->element[i + 1];

    if (!is_str(m) || !is_str(s) ||
        feed__member_decode(m->str, m->len, &it->id) != FEED_OK ||
        feed__parse_score(s->str, s->len, &it->score) != FEED_OK)
        return FEED_EINVAL;
    return FEED_OK;
}

/* The n pairs of r from element `from` on are the entries that follow the
 * cursor, in order: they become a->rows, a last pair that is the end marker
 * becomes a->ended. Every item is checked. */
static int take_rows(feed *f, const redisReply *r, size_t from, size_t n,
                     const page_req *q, cache_answer *a)
{
    if (n > 0 && is_end_marker(r, from + 2 * n - 2)) {
        a->ended = 1;
        n--;
    }
    if (n + a->ended > q->limit + 1)
        return bad_reply(f, "item count");
    a->rows.items = malloc((n + 1) * sizeof *a->rows.items);
    if (!a->rows.items)
        return feed__error(f, FEED_ENOMEM, "out of memory for %zu items", n);
    for (size_t i = 0; i < n; i++) {
        feed_item *it = &a->rows.items[i];
        if (pair_item(r, from + 2 * i, it) != FEED_OK) {
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
    a->hit = 1;
    return FEED_OK;
}

/* page.lua answers a hit with the ZREVRANGE reply itself, {member, score,
 * ...}, and a miss with an integer, 1 = we hold the lease (bench/: the
 * script returns at once, no status added in Lua). So the two facts the
 * script used to add are read here: after a cursor, a first pair that is the
 * cursor item at the cursor's score is the seek's check, not part of the
 * page, and is dropped; a last pair that is the end marker means the page is
 * complete without SQL. After a cursor one integer follows the pairs: the
 * rank of the first pair (absent when there is none). */
static int parse_answer(feed *f, const redisReply *r, const page_req *q,
                        cache_answer *a)
{
    size_t n, elements, first = 0;
    int64_t rank = q->first ? 0 : -1;

    if (is_int(r)) {
        if (r->integer != 0 && r->integer != 1)
            return bad_reply(f, "a miss that is neither 0 nor 1");
        a->leased = r->integer == 1;
        return FEED_OK;
    }
    if (r->type != REDIS_REPLY_ARRAY)
        return bad_reply(f, "not {member, score, ...}");
    elements = r->elements;
    if (!q->first && elements % 2 == 1) {
        const redisReply *last = r->element[elements - 1];
        if (!is_int(last) || last->integer < 0)
            return bad_reply(f, "not {member, score, ..., rank}");
        rank = last->integer;
        elements--;
    }
    if (elements % 2 != 0)
        return bad_reply(f, "not {member, score, ...}");
    n = elements / 2;
    if (!q->first && n > 0) {
        feed_item c;
        if (pair_item(r, 0, &c) == FEED_OK && c.id == q->id && c.score == q->score) {
            first = 2;
            n--;
            if (rank >= 0)
                rank++;
        }
    }
    a->rank0 = rank;
    return take_rows(f, r, first, n, q, a);
}

static int ask_script(feed *f, const page_req *q, cache_answer *a)
{
    char want[21], score[21], member[FEED_MEMBER_MAX];
    const char *argv[9];
    size_t lens[9];
    redisReply *r;
    int rc;

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

/* ---- Plain reads -------------------------------------------------------
 *
 * Most pages need no script. One plain command's reply is one atomic
 * snapshot of the zset, and what page.lua returns is a function of that
 * snapshot: the first limit + 1 entries strictly after the cursor, the end
 * marker counted among them. So a plain reply that provably contains those
 * entries, or all of them when fewer exist, gives the very page page.lua
 * would, and everything after (end marker, short cache, has_more) is decided
 * by the same code. A reply that proves nothing costs a round trip, and
 * page.lua then answers as before (plain_fallbacks counts those):
 *
 *   first page     ZREVRANGE key 0 limit WITHSCORES: rank 0 has nothing
 *                  above it. Empty: the key is absent (a cached feed is never
 *                  an empty set: an empty feed holds the end marker), and
 *                  page.lua takes the lease.
 *   rank hint      the handle saw where the first entry after this cursor
 *                  sat (FEED_HINTS entries): ZREVRANGE from SLACK_UP ranks
 *                  above it to f->hint_slack below the last one needed. The
 *                  reply proves itself when an entry that is not after the
 *                  cursor is followed by one that is (or the read started at
 *                  rank 0): that second entry is the first after the cursor,
 *                  whatever moved meanwhile, the cursor item included. So a
 *                  few inserts or deletes above, or a deleted or rescored
 *                  cursor item, still read plainly.
 *   no hint        ZREVRANGEBYSCORE key <score> -inf WITHSCORES LIMIT 0
 *                  limit+2: every entry at or below the cursor's score, so
 *                  those not after the cursor are the cursor item and ties
 *                  of higher id, first. Skipped here; the rest proves itself
 *                  when limit+1 entries remain or the reply reached the
 *                  set's bottom. A long run of ties falls back.
 *
 * TTL refresh: what page.lua promises, on first pages only: right after a
 * first page, at least half the TTL is left. page.lua reads PTTL on every
 * first page and PEXPIREs when less than half is left. Here a PTTL rides in
 * the same round trip as the ZREVRANGE, and a PEXPIRE follows in a second
 * round trip when less than half is left; both only when the handle does not
 * already know the answer: a PTTL of P read at time t means the key lives
 * until t + P at least (only rebuilds and refreshes set a TTL, always the
 * full one for the kind of copy, and a key deleted and cached again gets a
 * later one), so the next checks can wait until t + P - TTL/2. A copy that
 * turned empty or stopped being empty meanwhile changed its TTL rule (a
 * delete that empties a feed gives it the short empty_ttl): the handle
 * asks again at once (ttl_recheck). A handle reading a feed thus
 * sends one PTTL per TTL/2 or so, a PEXPIRE about as often, and a plain
 * first page is one command. (This assumes every handle on the key prefix
 * uses the same ttl_seconds, and no one else shortens the TTL.) */

/* Ranks read above a hinted page (the entry that proves the page: the
 * cursor item, usually), and below it: f->hint_slack, at least SLACK_DOWN
 * (one insert above the cursor between two pages). A handle that sees its
 * pages move down between reads (writes landing on top of the feed it
 * walks) reads twice as far as the last move, up to SLACK_MAX, and comes
 * back to SLACK_DOWN a rank per page once they stop. */
#define SLACK_UP   1
#define SLACK_DOWN 1
#define SLACK_MAX  16

/* A hinted read found the first entry after the cursor moved rank ranks
 * down (negative: up) from the hint. */
static void slack_saw(feed *f, int64_t moved)
{
    if (moved > 0)
        f->hint_slack = moved * 2 < SLACK_MAX ? (int)moved * 2 : SLACK_MAX;
    else if (f->hint_slack > SLACK_DOWN)
        f->hint_slack--;
}

/* Hints live in sets of two: a page puts its cursor's hint and then its
 * next cursor's, and the second evicts the older entry of its set, never
 * the one just put, so a walk keeps both whatever they hash to. */
static struct feed_hint *hint_set(feed *f, int64_t uid, int64_t score, int64_t id)
{
    uint64_t h = (uint64_t)uid * 0x9E3779B97F4A7C15ULL ^ (uint64_t)score * 0xC2B2AE3D27D4EB4FULL ^
                 (uint64_t)id * 0x165667B19E3779F9ULL;

    return &f->hints[(h >> 32) % (FEED_HINTS / 2) * 2];
}

static int hint_is(const struct feed_hint *h, int64_t uid, int64_t score, int64_t id)
{
    return h->used && h->uid == uid && h->score == score && h->id == id;
}

/* The rank hint for uid's cursor, or -1. */
static int64_t hint_get(feed *f, int64_t uid, int64_t score, int64_t id)
{
    struct feed_hint *h = hint_set(f, uid, score, id);

    return hint_is(&h[0], uid, score, id) ? h[0].rank
         : hint_is(&h[1], uid, score, id) ? h[1].rank : -1;
}

static void hint_put(feed *f, int64_t uid, int64_t score, int64_t id, int64_t rank)
{
    struct feed_hint *h = hint_set(f, uid, score, id);

    if (!hint_is(&h[0], uid, score, id) &&
        (hint_is(&h[1], uid, score, id) || h[1].used < h[0].used))
        h++;
    *h = (struct feed_hint){ uid, score, id, rank, ++f->hint_clock };
}

/* Is the pair at element i after the cursor? 1 yes, 0 no, -1 not an entry
 * of ours. The end marker is after every cursor. */
static int pair_after(const redisReply *r, size_t i, const page_req *q)
{
    feed_item it;

    if (is_end_marker(r, i))
        return 1;
    if (pair_item(r, i, &it) != FEED_OK)
        return -1;
    return feed__item_after(it, q->score, q->id);
}

/* FEED_OK with a hit in *a, PLAIN_NO when the reply proves nothing (page.lua
 * must answer), or an error code. */
#define PLAIN_NO 1

static int read_plain_reply(feed *f, const redisReply *r, const page_req *q,
                            int64_t hint, int64_t start, size_t asked, cache_answer *a)
{
    size_t npairs, j = 0, avail, want = q->limit + 1;
    int rc;

    if (r->type != REDIS_REPLY_ARRAY || r->elements % 2 != 0 || r->elements == 0)
        return PLAIN_NO;   /* absent, an error reply, or not ours: page.lua tells */
    npairs = r->elements / 2;
    if (!q->first) {
        int after = 0;
        while (j < npairs && (after = pair_after(r, 2 * j, q)) == 0)
            j++;
        if (after < 0)
            return PLAIN_NO;
        /* By rank, the first entry after the cursor is proven only by an
         * entry before it that is not after the cursor, or by rank 0. */
        if (start > 0 && j == 0)
            return PLAIN_NO;
        if (hint >= 0)
            slack_saw(f, start + (int64_t)j - hint);
    }
    avail = npairs - j;
    if (avail < want && npairs == asked)
        return PLAIN_NO;   /* neither limit+1 entries nor the set's bottom */
    rc = take_rows(f, r, 2 * j, avail < want ? avail : want, q, a);
    if (rc != FEED_OK)
        return rc;
    a->plain = 1;
    a->rank0 = start >= 0 ? start + (int64_t)j : -1;
    return FEED_OK;
}

static struct feed_ttl_seen *ttl_seen(feed *f, int64_t uid)
{
    return &f->ttl_seen[((uint64_t)uid * 0x9E3779B97F4A7C15ULL >> 32) % FEED_HINTS];
}

/* The TTL of a copy (ms; 0 = none): a feed known to be empty has its own. */
static const char *ttl_text(const feed *f, int empty)
{
    return empty ? f->empty_ttl_ms : f->ttl_ms;
}

/* Must this first page of uid ask for the TTL? Not when no copy expires,
 * nor while the handle knows it need not. */
static int ttl_check_due(feed *f, int64_t uid, int64_t now)
{
    const struct feed_ttl_seen *t = ttl_seen(f, uid);

    if (strcmp(f->ttl_ms, "0") == 0 && strcmp(f->empty_ttl_ms, "0") == 0)
        return 0;
    return !(t->uid == uid && t->fresh_until > now);
}

static int refresh_ttl(feed *f, const char *ttl)
{
    const char *argv[3] = { "PEXPIRE", f->key, ttl };
    const char **av = argv;
    size_t lens[3] = { 7, strlen(f->key), strlen(ttl) };
    const size_t *lv = lens;
    int argc = 3;
    redisReply *r;

    /* A failure loses nothing: the next first page tries again. */
    if (feed__redis_commands(f, 1, &argc, &av, &lv, &r) != FEED_OK)
        return 0;
    argc = is_int(r) && r->integer == 1;
    freeReplyObject(r);
    return argc;
}

/* A PTTL read at now said pttl of uid's copy, empty or not: refresh the TTL
 * if less than half is left, and remember until when no check is needed. */
static void ttl_after_check(feed *f, int64_t uid, int64_t now, long long pttl, int empty)
{
    struct feed_ttl_seen *t = ttl_seen(f, uid);
    const char *text = ttl_text(f, empty);
    long long ttl = atoll(text);

    if (pttl == -2)
        return;                 /* gone meanwhile: the next read rebuilds it */
    if (ttl == 0) {
        pttl = INT64_MAX / 2;   /* this kind of copy never expires */
    } else if (pttl < ttl / 2) {   /* -1 (no TTL) included, as page.lua does */
        if (!refresh_ttl(f, text))
            return;
        pttl = ttl;
    }
    t->uid = uid;
    t->fresh_until = now + (pttl - ttl / 2);
    t->empty = empty;
}

/* The first page's copy turned empty or stopped being empty since the
 * handle last checked: its TTL rule changed (a delete that empties a feed
 * gives it the short TTL), so what the handle knew is void; ask now. */
static void ttl_recheck(feed *f, int64_t uid, int64_t now, int empty)
{
    const char *argv[2] = { "PTTL", f->key };
    const char **av = argv;
    size_t lens[2] = { 4, strlen(f->key) };
    const size_t *lv = lens;
    int argc = 2;
    redisReply *r;

    if (feed__redis_commands(f, 1, &argc, &av, &lv, &r) != FEED_OK)
        return;
    if (is_int(r))
        ttl_after_check(f, uid, now, r->integer, empty);
    freeReplyObject(r);
}

/* A hint that says: the cache was short of this cursor's page (the page
 * came from SQL), so a plain read would most likely only find that out
 * again; page.lua goes first, one round trip, as before plain reads. */
#define HINT_PAST_CACHE (-2)

/* hint: the rank hint for q's cursor, or -1. */
static int ask_plain(feed *f, const page_req *q, int64_t hint, cache_answer *a)
{
    char from[24], to[24], score[24], count[24];
    const char *cmd[8], *pttl[2] = { "PTTL", f->key };
    size_t lens[8], plens[2] = { 4, strlen(f->key) };
    const char **argv[2] = { cmd, pttl };
    const size_t *const lensv[2] = { lens, plens };
    int argc[2] = { 5, 2 }, rc;
    size_t n = 1, asked;
    int64_t start = -1, now = 0;
    redisReply *replies[2];

    cmd[1] = f->key;
    if (q->first || (start = hint) >= 0) {
        int64_t stop = start + (int64_t)q->limit +
                       (f->hint_slack > SLACK_DOWN ? f->hint_slack : SLACK_DOWN);
        if (q->first) {
            start = 0;
            stop = (int64_t)q->limit;
            now = feed__now_ms();
            n = ttl_check_due(f, q->uid, now) ? 2 : 1;
        } else {
            start = start > SLACK_UP ? start - SLACK_UP : 0;
        }
        cmd[0] = "ZREVRANGE";
        feed__i64_to_str(start, from);
        feed__i64_to_str(stop, to);
        cmd[2] = from;
        cmd[3] = to;
        cmd[4] = "WITHSCORES";
        asked = (size_t)(stop - start + 1);
    } else {
        cmd[0] = "ZREVRANGEBYSCORE";
        feed__i64_to_str(q->score, score);
        cmd[2] = score;
        cmd[3] = "-inf";
        cmd[4] = "WITHSCORES";
        cmd[5] = "LIMIT";
        cmd[6] = "0";
        asked = q->limit + 2;
        feed__i64_to_str((int64_t)asked, count);
        cmd[7] = count;
        argc[0] = 8;
    }
    for (int i = 0; i < argc[0]; i++)
        lens[i] = strlen(cmd[i]);
    rc = feed__redis_commands(f, n, argc, argv, lensv, replies);
    if (rc != FEED_OK)
        return rc;
    rc = read_plain_reply(f, replies[0], q, q->first ? -1 : hint, start, asked, a);
    if (rc == FEED_OK && q->first) {
        int empty = a->ended && a->rows.count == 0;
        const struct feed_ttl_seen *t = ttl_seen(f, q->uid);
        if (n == 2 && is_int(replies[1]))
            ttl_after_check(f, q->uid, now, replies[1]->integer, empty);
        else if (n == 1 && t->uid == q->uid && t->empty != empty)
            ttl_recheck(f, q->uid, now, empty);
    }
    for (size_t i = 0; i < n; i++)
        freeReplyObject(replies[i]);
    return rc;
}

/* The cache's answer: by a plain read when its reply proves the page, else
 * by page.lua (a miss, a lease, a cursor that moved too far). The rank
 * hint is the caller's (feed_page_ranked: it came with the page that handed
 * out this cursor, so it is the latest word on it), else the handle's own;
 * the reply proves either alike. */
static int ask_cache(feed *f, const page_req *q, cache_answer *a)
{
    int rc;
    int64_t hint = q->first ? -1 : q->rank >= 0 ? q->rank : hint_get(f, q->uid, q->score, q->id);

    memset(a, 0, sizeof *a);
    a->rank0 = -1;
    if (hint != HINT_PAST_CACHE) {
        rc = ask_plain(f, q, hint, a);
        if (rc != PLAIN_NO)
            return rc;
        f->stats.plain_fallbacks++;
    }
    return ask_script(f, q, a);
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
    if (rc == FEED_OK)
        rc = answer(f, out, rows.items, rows.count, q->limit, FEED_SOURCE_DB);
    rc = feed__db_outcome(f, rc, redis_failed, redis_msg);
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
static int answer_by_rebuild(feed *f, page_req *q, const char *token,
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
    if (complete || avail > q->limit) {
        rc = answer(f, out, rows.items + start, avail, q->limit,
                    installed ? FEED_SOURCE_REBUILD : FEED_SOURCE_DB);
        if (rc == FEED_OK && installed && out->has_more) {   /* rows are ranks 0.. */
            q->next_rank = (int64_t)(start + out->count);
            hint_put(f, q->uid, out->next_score, out->next_id, q->next_rank);
        }
        if (installed) {   /* with the full TTL: no check needed for TTL/2 */
            int empty = complete && rows.count == 0;
            ttl_after_check(f, q->uid, feed__now_ms(), atoll(ttl_text(f, empty)), empty);
        }
    } else
        rc = answer_from_db(f, q, out, !installed && rc == FEED_EREDIS);
    feed__rows_free(&rows);
    return rc;
}

/* Count how the page was served, and remember where the next one starts:
 * the entry after out's last item sits at rank0 + count, and the entry
 * after the cursor at rank0 (a cursor page.lua had to seek gets a hint
 * too, and one whose entries moved a rank or two gets the new rank: the
 * next call with it reads plainly). */
static void served_from_cache(feed *f, page_req *q, const cache_answer *a,
                              const feed_result *out)
{
    if (a->plain)
        f->stats.plain_pages++;
    else
        f->stats.script_pages++;
    if (a->rank0 < 0)
        return;
    if (!q->first)
        hint_put(f, q->uid, q->score, q->id, a->rank0);
    if (out->has_more) {
        q->next_rank = a->rank0 + (int64_t)out->count;
        hint_put(f, q->uid, out->next_score, out->next_id, q->next_rank);
    }
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
    return feed_page_ranked(f, uid, last_score, last_id, -1, limit, out, NULL);
}

static int page_at(feed *f, page_req *q, feed_result *out);

int feed_page_ranked(feed *f, int64_t uid, int64_t last_score, int64_t last_id,
                     int64_t rank, size_t limit, feed_result *out, int64_t *next_rank)
{
    page_req q = { uid, last_score == FEED_FIRST, last_score, last_id, -1, limit, -1 };
    int rc;

    if (next_rank)
        *next_rank = -1;
    if (out)
        memset(out, 0, sizeof *out);
    if (!f)
        return FEED_EINVAL;
    feed__clear_error(f);
    if ((rc = check_args(f, last_score, last_id, limit, out)) != FEED_OK)
        return rc;
    if (rank < -1)
        return feed__error(f, FEED_EINVAL, "feed_page_ranked: rank %lld is below -1",
                           (long long)rank);
    /* No rank of a cached copy (at most max_len items, then the end marker)
     * lies past max_len: such a hint could only miss. */
    if (!q.first && rank <= (int64_t)f->cfg.max_len)
        q.rank = rank;
    feed__set_keys(f, uid);
    rc = page_at(f, &q, out);
    if (rc == FEED_OK && out->has_more && next_rank)
        *next_rank = q.next_rank;
    return rc;
}

/* feed_page, arguments checked. */
static int page_at(feed *f, page_req *q, feed_result *out)
{
    int64_t deadline = 0, pause = 1, uid = q->uid;
    size_t limit = q->limit;
    int rc;

    for (;;) {
        cache_answer a;
        int64_t now;

        rc = ask_cache(f, q, &a);
        if (rc == FEED_ENOMEM)
            return rc;
        if (rc != FEED_OK)
            return answer_from_db(f, q, out, 1);
        if (a.hit) {
            if (a.rows.count > limit || a.ended) {
                rc = answer(f, out, a.rows.items, a.rows.count, limit, FEED_SOURCE_CACHE);
                if (rc == FEED_OK)
                    served_from_cache(f, q, &a, out);
            } else {
                rc = answer_from_db(f, q, out, 0);   /* the cache is short */
                if (rc == FEED_OK && out->has_more)   /* and so it stays, likely */
                    hint_put(f, uid, out->next_score, out->next_id, HINT_PAST_CACHE);
            }
            feed__rows_free(&a.rows);
            return rc;
        }
        if (a.leased)
            return answer_by_rebuild(f, q, a.token, out);

        /* Another handle is rebuilding: its result will serve us too. */
        now = feed__now_ms();
        if (deadline == 0) {
            f->stats.lease_waits++;
            deadline = now + f->cfg.lease_wait_ms;
        }
        if (now >= deadline)
            return answer_from_db(f, q, out, 0);
        sleep_ms(pause < deadline - now ? pause : deadline - now);
        pause *= 2;
    }
}
