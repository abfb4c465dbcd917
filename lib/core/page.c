/* page.c -- the read path: a page request, feed_page and its async twin.
 *
 * One request, in order (the states below):
 *   PLAIN    a plain read (one round trip, no script: "Plain reads") whose
 *            reply proves the page;
 *   SCRIPT   when it cannot (absent key, a cursor that moved far), page.lua
 *            (one more round trip): the page, or a miss;
 *   hit      the cache answers when it returned limit + 1 items (so
 *            has_more is known) or reached the end marker; otherwise the
 *            cache is short of the page and a keyset query answers (SQL);
 *   REBUILD  a miss, and page.lua gave us the lease: rebuild (rebuild.c)
 *            and cut the page from the rows it read;
 *   WAIT     a miss while another handle holds the lease: ask again after a
 *            growing pause (a wake-up, never a sleep here), for at most
 *            lease_wait_ms, then a keyset query;
 *   SQL      Redis failed anywhere: a keyset query. PostgreSQL is the truth;
 *            the cache is only ever a shortcut to it.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

enum {
    P_START, P_PLAIN, P_TTL_REFRESH, P_TTL_RECHECK, P_SCRIPT, P_WAIT, P_REBUILD, P_SQL,
    P_DONE
};

/* What the cache said, by a plain read or by page.lua. */
typedef struct cache_answer {
    int       hit;
    int       ended;        /* hit: the end marker was reached */
    int       leased;       /* miss: we hold the lease and must rebuild */
    int       plain;        /* hit: proven from a plain read, no script */
    int       bad;          /* the reply was not what it must be (message set) */
    int       nomem;
    int64_t   rank0;        /* hit: rank of rows.items[0] in that snapshot; -1 unknown */
    feed_rows rows;         /* hit: up to limit + 1 items after the cursor */
} cache_answer;

#define KEY_INLINE 96

struct feed_page_op {
    feed_op      op;
    int64_t      uid;
    int          first;         /* first page: no cursor */
    int64_t      score, id;     /* the cursor otherwise */
    int64_t      rank;          /* the caller's rank hint for the cursor, or -1 */
    size_t       limit;
    int64_t      next_rank;     /* out: the rank hint for the next cursor, or -1 */
    feed_result *out;

    cache_answer a;
    int64_t      hint;          /* the rank hint used by the plain read */
    int64_t      start;         /* the rank the plain read started at; -1 by score */
    size_t       asked;         /* entries it asked for */
    size_t       ncmds;         /* its commands: the read, and PTTL or not */
    int          nargs, nargs2; /* argc of argv, argv2 */
    int          ttl_empty;     /* the first page's copy held only the end marker */
    long long    pttl;          /* PTTL's answer, when asked */
    int          pttl_seen;
    int64_t      read_ms;       /* when the first page was read (TTL bookkeeping) */
    feed_wait    wait;          /* for another handle's rebuild */
    int          redis_failed;  /* Redis could not answer: SQL failing is unavailable */
    char         token[33];
    char        *key, *lease_key;
    char         keys[2 * KEY_INLINE];

    /* The commands of the current batch. */
    const char  *argv[FEED_PAGE_SCRIPT_ARGS];
    size_t       lens[FEED_PAGE_SCRIPT_ARGS];
    const char  *argv2[3];
    size_t       lens2[3];
    char         num[4][24];
    char         member[FEED_MEMBER_MAX];

    const feed_rider *rider;    /* one command more in the first plain read */
    size_t       rider_at;      /* its index in that batch */

    feed_rebuild rb;
    feed_sqlpage sp;
    /* Why Redis failed, for the page PostgreSQL answers (ask_db, its one
     * writer, runs after any rebuild has ended); while a rebuild runs it
     * is op.kept. */
    char         redis_msg[FEED_ERRMSG];
};

static int bad_reply(feed_page_op *p, const char *why)
{
    p->op.c->stats.redis_errors++;
    p->a.bad = 1;
    return feed__msg(p->op.err, FEED_EREDIS, "Redis page read: unexpected reply: %s", why);
}

static int is_int(const redisReply *r)
{
    return r->type == REDIS_REPLY_INTEGER;
}

/* The n pairs of r from element `from` on are the entries that follow the
 * cursor, in order: they become a->rows, a last pair that is the end marker
 * becomes a->ended. Every item is checked. */
static int take_rows(feed_page_op *p, const redisReply *r, size_t from, size_t n)
{
    cache_answer *a = &p->a;

    if (n > 0 && feed__reply_end(r, from + 2 * n - 2)) {
        a->ended = 1;
        n--;
    }
    if (n + a->ended > p->limit + 1)
        return bad_reply(p, "item count");
    a->rows.items = malloc((n + 1) * sizeof *a->rows.items);
    if (!a->rows.items) {
        a->bad = a->nomem = 1;
        return feed__msg(p->op.err, FEED_ENOMEM, "out of memory for %zu items", n);
    }
    for (size_t i = 0; i < n; i++) {
        feed_item *it = &a->rows.items[i];
        if (feed__reply_pair(r, from + 2 * i, it) != FEED_OK) {
            feed__rows_free(&a->rows);
            return bad_reply(p, "member or score is not a feedcache item");
        }
        /* Never serve a page out of order or from before the cursor, even
         * if the server says so (a broken script, a foreign writer, a
         * hostile server): an unexpected reply, and SQL answers instead
         * (tests/fuzz/fuzz_session.c sends such replies). */
        if (i > 0 ? !feed__item_after(*it, it[-1].score, it[-1].id)
                  : !p->first && !feed__item_after(*it, p->score, p->id)) {
            feed__rows_free(&a->rows);
            return bad_reply(p, "items out of order or not after the cursor");
        }
    }
    a->rows.count = n;
    a->hit = 1;
    return FEED_OK;
}

/* page.lua answers a hit with the ZREVRANGE reply itself, {member, score,
 * ...}, and a miss with an integer, 1 = we hold the lease (the script
 * returns at once, no status added in Lua). So two facts the script
 * could have added are read here instead: after a cursor, a first pair that is the
 * cursor item at the cursor's score is the seek's check, not part of the
 * page, and is dropped; a last pair that is the end marker means the page
 * is complete without SQL. After a cursor one integer follows the pairs:
 * the rank of the first pair (absent when there is none). */
static void parse_answer(feed_page_op *p, const redisReply *r)
{
    cache_answer *a = &p->a;
    size_t n, elements, first = 0;
    int64_t rank = p->first ? 0 : -1;

    if (is_int(r)) {
        if (r->integer != 0 && r->integer != 1) {
            bad_reply(p, "a miss that is neither 0 nor 1");
            return;
        }
        a->leased = r->integer == 1;
        return;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        p->op.c->stats.redis_errors++;
        a->bad = 1;
        feed__msg(p->op.err, FEED_EREDIS, "Redis page.lua: %s", r->str);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY) {
        bad_reply(p, "not {member, score, ...}");
        return;
    }
    elements = r->elements;
    if (!p->first && elements % 2 == 1) {
        const redisReply *last = r->element[elements - 1];
        if (!is_int(last) || last->integer < 0) {
            bad_reply(p, "not {member, score, ..., rank}");
            return;
        }
        rank = last->integer;
        elements--;
    }
    if (elements % 2 != 0) {
        bad_reply(p, "not {member, score, ...}");
        return;
    }
    n = elements / 2;
    if (!p->first && n > 0) {
        feed_item c;
        if (feed__reply_pair(r, 0, &c) == FEED_OK && c.id == p->id && c.score == p->score) {
            first = 2;
            n--;
            if (rank >= 0)
                rank++;
        }
    }
    a->rank0 = rank;
    take_rows(p, r, first, n);
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
 *                  above it to hint_slack below the last one needed. The
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
 * A first page's PTTL rides in the plain read's round trip when the
 * handle does not know it need not (rebuild.c, "TTL refresh"). */

/* Ranks read above a hinted page (the entry that proves the page: the
 * cursor item, usually), and below it: hint_slack, at least SLACK_DOWN
 * (one insert above the cursor between two pages). A handle that sees its
 * pages move down between reads (writes landing on top of the feed it
 * walks) reads twice as far as the last move, up to SLACK_MAX, and comes
 * back to SLACK_DOWN a rank per page once they stop. */
#define SLACK_UP   1
#define SLACK_DOWN 1
#define SLACK_MAX  16

/* A hinted read found the first entry after the cursor moved rank ranks
 * down (negative: up) from the hint. */
static void slack_saw(feed_core *c, int64_t moved)
{
    if (moved > 0)
        c->hint_slack = moved * 2 < SLACK_MAX ? (int)moved * 2 : SLACK_MAX;
    else if (c->hint_slack > SLACK_DOWN)
        c->hint_slack--;
}

/* Hints live in sets of two: a page puts its cursor's hint and then its
 * next cursor's, and the second evicts the older entry of its set, never
 * the one just put, so a walk keeps both whatever they hash to. */
static struct feed_hint *hint_set(feed_core *c, int64_t uid, int64_t score, int64_t id)
{
    uint64_t h = (uint64_t)uid * 0x9E3779B97F4A7C15ULL ^ (uint64_t)score * 0xC2B2AE3D27D4EB4FULL ^
                 (uint64_t)id * 0x165667B19E3779F9ULL;

    return &c->hints[(h >> 32) % (FEED_HINTS / 2) * 2];
}

static int hint_is(const struct feed_hint *h, int64_t uid, int64_t score, int64_t id)
{
    return h->used && h->uid == uid && h->score == score && h->id == id;
}

/* The rank hint for uid's cursor, or -1. */
static int64_t hint_get(feed_core *c, int64_t uid, int64_t score, int64_t id)
{
    struct feed_hint *h = hint_set(c, uid, score, id);

    return hint_is(&h[0], uid, score, id) ? h[0].rank
         : hint_is(&h[1], uid, score, id) ? h[1].rank : -1;
}

static void hint_put(feed_core *c, int64_t uid, int64_t score, int64_t id, int64_t rank)
{
    struct feed_hint *h = hint_set(c, uid, score, id);

    if (!hint_is(&h[0], uid, score, id) &&
        (hint_is(&h[1], uid, score, id) || h[1].used < h[0].used))
        h++;
    *h = (struct feed_hint){ uid, score, id, rank, ++c->hint_clock };
}

/* Is the pair at element i after the cursor? 1 yes, 0 no, -1 not an entry
 * of ours. The end marker is after every cursor. */
static int pair_after(const redisReply *r, size_t i, const feed_page_op *p)
{
    feed_item it;

    if (feed__reply_end(r, i))
        return 1;
    if (feed__reply_pair(r, i, &it) != FEED_OK)
        return -1;
    return feed__item_after(it, p->score, p->id);
}

/* A plain read's reply: a hit in p->a, or nothing (page.lua must answer),
 * or a->bad. */
static void read_plain_reply(feed_page_op *p, const redisReply *r)
{
    size_t npairs, j = 0, avail, want = p->limit + 1;

    if (r->type != REDIS_REPLY_ARRAY || r->elements % 2 != 0 || r->elements == 0)
        return;     /* absent, an error reply, or not ours: page.lua tells */
    npairs = r->elements / 2;
    if (!p->first) {
        int after = 0;
        while (j < npairs && (after = pair_after(r, 2 * j, p)) == 0)
            j++;
        if (after < 0)
            return;
        /* By rank, the first entry after the cursor is proven only by an
         * entry before it that is not after the cursor, or by rank 0. */
        if (p->start > 0 && j == 0)
            return;
        if (p->hint >= 0)
            slack_saw(p->op.c, p->start + (int64_t)j - p->hint);
    }
    avail = npairs - j;
    if (avail < want && npairs == p->asked)
        return;     /* neither limit+1 entries nor the set's bottom */
    if (take_rows(p, r, 2 * j, avail < want ? avail : want) != FEED_OK)
        return;
    p->a.plain = 1;
    p->a.rank0 = p->start >= 0 ? p->start + (int64_t)j : -1;
}

/* ---- Building the batches ---------------------------------------------- */

static int batch_build(void *arg, size_t i, const char ***argv, const size_t **lens)
{
    feed_page_op *p = arg;

    if (p->rider && p->op.state == P_PLAIN && i == p->rider_at)
        return p->rider->build(p->rider->arg, argv, lens);
    if (i == 0) {
        *argv = p->argv;
        *lens = p->lens;
        return p->nargs;
    }
    *argv = p->argv2;
    *lens = p->lens2;
    return p->nargs2;
}

static void batch_reply(void *arg, size_t i, const redisReply *r);

static enum feed_want ask_redis(feed_page_op *p, int state, size_t n)
{
    if (p->rider && state == P_PLAIN)
        p->rider_at = n++;
    p->op.state = state;
    p->op.batch = (feed_batch){ .n = n, .flags = 0, .arg = p, .build = batch_build,
                                .reply = batch_reply };
    if (p->op.c->topo.cluster)
        p->op.batch.slot = feed__uid_slot(p->uid);
    return FEED_W_REDIS;
}

/* The lease's key, named when first needed (most pages never do). */
static const char *lease_key(feed_page_op *p)
{
    if (!p->lease_key[0]) {
        size_t n = strlen(p->key);
        memcpy(p->lease_key, p->key, n);
        memcpy(p->lease_key + n, ":lease", sizeof ":lease");
    }
    return p->lease_key;
}

/* argv[0 .. argc) = v, their lengths in lens. */
static int page_args(const char **argv, size_t *lens, int argc, const char *const *v)
{
    for (int i = 0; i < argc; i++) {
        argv[i] = v[i];
        lens[i] = strlen(v[i]);
    }
    return argc;
}

/* The plain read (and PTTL) for the cursor, by p->hint (its rank, or -1). */
static enum feed_want ask_plain(feed_page_op *p, int64_t now)
{
    feed_core *c = p->op.c;
    int64_t start = p->first ? 0 : p->hint, stop;

    p->ncmds = 1;
    p->start = -1;
    p->pttl_seen = 0;
    if (start < 0) {
        p->asked = p->limit + 2;
        feed__i64_to_str(p->score, p->num[0]);
        feed__i64_to_str((int64_t)p->asked, p->num[1]);
        p->nargs = page_args(p->argv, p->lens, 8, (const char *[]){
            "ZREVRANGEBYSCORE", p->key, p->num[0], "-inf", "WITHSCORES", "LIMIT", "0", p->num[1] });
        return ask_redis(p, P_PLAIN, 1);
    }
    stop = start + (int64_t)p->limit + (c->hint_slack > SLACK_DOWN ? c->hint_slack : SLACK_DOWN);
    if (p->first) {
        stop = (int64_t)p->limit;
        p->read_ms = now;
        if (feed__ttl_due(c, FEED_FAM_FEED, p->uid, now)) {
            p->nargs2 = page_args(p->argv2, p->lens2, 2, (const char *[]){ "PTTL", p->key });
            p->ncmds = 2;
        }
    } else {
        start = start > SLACK_UP ? start - SLACK_UP : 0;
    }
    feed__i64_to_str(start, p->num[0]);
    feed__i64_to_str(stop, p->num[1]);
    p->nargs = page_args(p->argv, p->lens, 5, (const char *[]){ "ZREVRANGE", p->key, p->num[0],
                                                                p->num[1], "WITHSCORES" });
    p->start = start;
    p->asked = (size_t)(stop - start + 1);
    return ask_redis(p, P_PLAIN, p->ncmds);
}

/* page.lua's call (lua/page.lua): the keys, how many, the cursor (score
 * NULL: a first page), a lease token, the lease's and (first pages only)
 * the TTLs. argv and lens hold 12; returns argc. */
int feed__page_script(const feed_core *c, const char **argv, size_t *lens, const char *key,
                      const char *lease, const char *want, const char *score,
                      const char *member, size_t member_len, const char *token)
{
    page_args(argv, lens, FEED_PAGE_SCRIPT_ARGS,
              (const char *[]){ "EVALSHA", c->sha[FEED_SCRIPT_PAGE], "2", key, lease, want,
                                score ? score : "", score ? member : "", token, c->lease_ms,
                                c->ttl_ms, c->empty_ttl_ms, c->grant_ms });
    lens[7] = score ? member_len : 0;       /* a member may hold any byte */
    return FEED_PAGE_SCRIPT_ARGS;
}

static enum feed_want ask_script(feed_page_op *p)
{
    feed_core *c = p->op.c;
    size_t mlen = 0;

    feed__lease_token(c->token_seed, &c->token_seq, p->token);
    feed__i64_to_str((int64_t)p->limit + 1, p->num[2]);
    if (!p->first) {
        feed__i64_to_str(p->score, p->num[3]);
        mlen = feed__member_encode(p->id, p->member);
    }
    p->nargs = feed__page_script(c, p->argv, p->lens, p->key, lease_key(p), p->num[2],
                                 p->first ? NULL : p->num[3], p->member, mlen, p->token);
    return ask_redis(p, P_SCRIPT, 1);
}

static void batch_reply(void *arg, size_t i, const redisReply *r)
{
    feed_page_op *p = arg;

    if (p->rider && p->op.state == P_PLAIN && i == p->rider_at)
        p->rider->reply(p->rider->arg, r);
    else if (p->op.state == P_SCRIPT)
        parse_answer(p, r);
    else if (p->op.state == P_PLAIN && i == 0)
        read_plain_reply(p, r);
    else if (p->op.state == P_TTL_REFRESH)
        p->pttl_seen = is_int(r) && r->integer == 1;
    else if (is_int(r)) {       /* PTTL: the plain read's second command, or alone */
        p->pttl = r->integer;
        p->pttl_seen = 1;
    }
}

/* ---- Answers ------------------------------------------------------------ */

/* Fill *out from items, of which avail follow the cursor in order; the
 * caller knows that nothing follows them unless avail > limit. */
static int answer(feed_page_op *p, const feed_item *items, size_t avail, feed_source source)
{
    size_t count = avail < p->limit ? avail : p->limit;

    p->out->items = malloc((count + 1) * sizeof *p->out->items);
    if (!p->out->items)
        return feed__msg(p->op.err, FEED_ENOMEM, "out of memory for %zu items", count);
    memcpy(p->out->items, items, count * sizeof *items);
    feed__page_served(p->op.c, p->out, avail, p->limit, source);
    /* A cursor of zeros is a position (after score 0, id 0), but seldom
     * meant as one: a zero-initialised struct passed for "first page".
     * Served as asked; the message says so when it found nothing. */
    if (count == 0 && !p->first && p->score == 0 && p->id == 0 && !p->op.err[0])
        feed__msg(p->op.err, FEED_OK, "cursor (0, 0) asks for the items after score 0, id 0"
                  " (none here), not the first page: a first page is last_score = FEED_FIRST");
    return FEED_OK;
}

void feed__page_served(feed_core *c, feed_result *out, size_t avail, size_t limit,
                       feed_source source)
{
    out->count = avail < limit ? avail : limit;
    out->has_more = avail > limit;
    if (out->has_more) {
        out->next_score = out->items[out->count - 1].score;
        out->next_id = out->items[out->count - 1].id;
    }
    out->source = source;
    c->stats.pages++;
    if (source == FEED_SOURCE_CACHE)
        c->stats.cache_pages++;
    else if (source == FEED_SOURCE_DB)
        c->stats.db_pages++;
}

static enum feed_want finish(feed_page_op *p, int rc)
{
    p->op.rc = rc;
    p->op.state = P_DONE;
    return FEED_W_DONE;
}

/* The page by a keyset query. redis_failed: Redis could not answer either,
 * so a PostgreSQL failure makes the feed unavailable. Never installed in
 * the cache: the replica may answer it. */
static enum feed_want ask_db(feed_page_op *p, int redis_failed, int64_t now)
{
    int64_t params[4] = { p->uid, p->score, p->id, (int64_t)p->limit + 1 };
    int rc;

    p->redis_failed = redis_failed;
    feed__msg_keep(p->redis_msg, p->op.err);
    if (p->first) {
        params[1] = (int64_t)p->limit + 1;
        feed__sqlpage_begin(&p->sp, FEED_SQL_TOP, p->uid, params, 2);
    } else {
        feed__sqlpage_begin(&p->sp, FEED_SQL_AFTER, p->uid, params, 4);
    }
    p->op.state = P_SQL;
    if (feed__sqlpage_step(&p->sp, &p->op, now, &rc) == FEED_W_SQL)
        return FEED_W_SQL;
    return finish(p, rc);
}

/* The keyset query answered. */
static enum feed_want answered_by_db(feed_page_op *p, int rc)
{
    feed_rows *rows = &p->op.sql.rows;

    if (rc == FEED_OK)
        rc = answer(p, rows->items, rows->count, FEED_SOURCE_DB);
    rc = feed__db_outcome(p->op.c, p->op.err, rc, p->redis_failed, p->redis_msg);
    if (rc == FEED_OK && p->a.hit && p->out->has_more)   /* the cache is short, and so it stays, likely */
        hint_put(p->op.c, p->uid, p->out->next_score, p->out->next_id, -2);
    feed__rows_free(rows);
    return finish(p, rc);
}

/* Count how the page was served, and remember where the next one starts:
 * the entry after out's last item sits at rank0 + count, and the entry
 * after the cursor at rank0 (a cursor page.lua had to seek gets a hint
 * too, and one whose entries moved a rank or two gets the new rank: the
 * next call with it reads plainly). */
static void served_from_cache(feed_page_op *p)
{
    feed_core *c = p->op.c;
    const feed_result *out = p->out;

    if (p->a.plain)
        c->stats.plain_pages++;
    else
        c->stats.script_pages++;
    if (p->a.rank0 < 0)
        return;
    if (!p->first)
        hint_put(c, p->uid, p->score, p->id, p->a.rank0);
    if (out->has_more) {
        p->next_rank = p->a.rank0 + (int64_t)out->count;
        hint_put(c, p->uid, out->next_score, out->next_id, p->next_rank);
    }
}

/* A hit: the cache answers when it reached far enough; else SQL. */
static enum feed_want hit(feed_page_op *p, int64_t now)
{
    cache_answer *a = &p->a;
    int rc;

    if (a->rows.count > p->limit || a->ended) {
        rc = answer(p, a->rows.items, a->rows.count, FEED_SOURCE_CACHE);
        if (rc == FEED_OK)
            served_from_cache(p);
        if (rc == FEED_OK && p->wait.deadline)
            p->op.c->stats.lease_waits_served++;    /* another's rebuild served it */
        return finish(p, rc);
    }
    return ask_db(p, 0, now);   /* the cache is short */
}

static enum feed_want ttl_checked(feed_page_op *p, int64_t now);

/* A one-command batch on uid's key: PEXPIRE or PTTL. */
static enum feed_want ask_one(feed_page_op *p, int state, const char *cmd, const char *arg)
{
    p->nargs = page_args(p->argv, p->lens, arg ? 3 : 2, (const char *[]){ cmd, p->key, arg });
    p->pttl_seen = 0;
    return ask_redis(p, state, 1);
}

/* The plain read's answer: the page, or page.lua; for a first page, the
 * TTL bookkeeping first (rebuild.c, "TTL refresh"). */
static enum feed_want plain_done(feed_page_op *p, int64_t now)
{
    feed_core *c = p->op.c;
    int empty;

    if (p->op.redis_rc == FEED_ENOMEM || p->a.nomem)
        return finish(p, FEED_ENOMEM);
    if (p->op.redis_rc != FEED_OK || p->a.bad)
        return ask_db(p, 1, now);
    if (!p->a.hit) {
        c->stats.plain_fallbacks++;
        return ask_script(p);
    }
    if (!p->first)
        return hit(p, now);
    empty = p->a.ended && p->a.rows.count == 0;
    p->ttl_empty = empty;
    if (p->ncmds == 2 && p->pttl_seen)
        return ttl_checked(p, now);
    if (p->ncmds == 1 && feed__ttl_turned(c, FEED_FAM_FEED, p->uid, empty))
        /* The copy turned empty or stopped being empty since the handle
         * last checked: its TTL rule changed, so what it knew is void. */
        return ask_one(p, P_TTL_RECHECK, "PTTL", NULL);
    return hit(p, now);
}

/* A PTTL read at p->read_ms said pttl of uid's copy: refresh the TTL if
 * less than half is left, else the handle remembers it. */
static enum feed_want ttl_checked(feed_page_op *p, int64_t now)
{
    feed_core *c = p->op.c;

    if (feed__ttl_checked(c, FEED_FAM_FEED, p->uid, p->read_ms, p->pttl, p->ttl_empty))
        return ask_one(p, P_TTL_REFRESH, "PEXPIRE", feed__ttl_text(c, p->ttl_empty));
    return hit(p, now);
}

/* We held the lease and rebuilt (rebuild.c): cut the page from the rows
 * read. Those rows are the top of the feed; when they are the whole feed,
 * or reach past the page, they answer it exactly. */
static enum feed_want rebuilt(feed_page_op *p, int rc, int64_t now)
{
    feed_core *c = p->op.c;
    feed_rows *rows = &p->op.sql.rows;
    int installed = p->rb.one.in.installed;
    int complete = rows->count <= c->cfg.max_len;
    size_t start = feed__rows_after(rows, &(feed_cursor_q){ p->first, p->score, p->id, 0 });
    size_t avail = rows->count - start;

    if (complete || avail > p->limit) {
        rc = answer(p, rows->items + start, avail, installed ? FEED_SOURCE_REBUILD : FEED_SOURCE_DB);
        if (rc == FEED_OK && installed && p->out->has_more) {   /* rows are ranks 0.. */
            p->next_rank = (int64_t)(start + p->out->count);
            hint_put(c, p->uid, p->out->next_score, p->out->next_id, p->next_rank);
        }
        feed__rows_free(rows);
        return finish(p, rc);
    }
    feed__rows_free(rows);
    return ask_db(p, !installed && rc == FEED_EREDIS, now);
}

/* Another handle holds the lease: its rebuild will serve us too. Ask again
 * after a pause that doubles, until lease_wait_ms has passed. */
static enum feed_want lease_busy(feed_page_op *p, int64_t now)
{
    if (!feed__lease_wait(&p->op, &p->wait, FEED_FAM_FEED, p->uid, now))
        return ask_db(p, 0, now);
    p->op.state = P_WAIT;
    return FEED_W_WAKE;
}

static void reset_answer(feed_page_op *p)
{
    feed__rows_free(&p->a.rows);
    memset(&p->a, 0, sizeof p->a);
    p->a.rank0 = -1;
}

/* The cache's answer, asked afresh: by a plain read when its reply proves
 * the page, else by page.lua (a miss, a lease, a cursor that moved too
 * far). The rank hint is the caller's (feed_page_ranked: it came with the
 * page that handed out this cursor, so it is the latest word on it), else
 * the handle's own; the reply proves either alike. A hint of -2 says the
 * cache was short of this cursor's page last time (it came from SQL), so a
 * plain read would most likely only find that out again: page.lua goes
 * first. */
static enum feed_want ask_cache(feed_page_op *p, int64_t now)
{
    reset_answer(p);
    p->hint = p->first ? -1 : p->rank >= 0 ? p->rank : hint_get(p->op.c, p->uid, p->score, p->id);
    if (p->hint == -2)
        return ask_script(p);
    return ask_plain(p, now);
}

static enum feed_want page_step(feed_op *op, int64_t now)
{
    feed_page_op *p = (feed_page_op *)op;
    feed_core *c = op->c;
    enum feed_want want;
    int rc;

    switch (op->state) {
    case P_START:
        return ask_cache(p, now);
    case P_PLAIN:
        p->rider = NULL;        /* it rode once; its reply is in */
        return plain_done(p, now);
    case P_TTL_REFRESH:
        if (op->redis_rc == FEED_OK && p->pttl_seen)   /* refreshed: the full TTL */
            feed__ttl_full(c, FEED_FAM_FEED, p->uid, p->read_ms, p->ttl_empty);
        return hit(p, now);     /* a failure loses nothing: the next first page tries again */
    case P_TTL_RECHECK:
        if (op->redis_rc == FEED_OK && p->pttl_seen)
            return ttl_checked(p, now);
        return hit(p, now);
    case P_SCRIPT:
        if (op->redis_rc == FEED_ENOMEM || p->a.nomem)
            return finish(p, FEED_ENOMEM);
        if (op->redis_rc != FEED_OK || p->a.bad)
            return ask_db(p, 1, now);
        if (p->a.hit)
            return hit(p, now);
        if (!p->a.leased)
            return lease_busy(p, now);
        op->state = P_REBUILD;
        return feed__rebuild_one(&p->rb, op, 0, c->topo.cluster ? feed__uid_slot(p->uid) : 0,
                                 FEED_FAM_FEED, p->uid, p->key, lease_key(p), p->token);
    case P_WAIT:
        return ask_cache(p, now);
    case P_REBUILD:
        if ((want = feed__rebuild_step(&p->rb, now, &rc)) != FEED_W_DONE)
            return want;
        if (p->rb.state != FEED_RB_INSTALL)
            return finish(p, rc);   /* the read failed, or no memory to install */
        return rebuilt(p, rc, now);
    case P_SQL:
        if (feed__sqlpage_step(&p->sp, op, now, &rc) == FEED_W_SQL)
            return FEED_W_SQL;
        return answered_by_db(p, rc);
    default:
        return FEED_W_DONE;
    }
}

static void page_free(feed_op *op)
{
    feed_page_op *p = (feed_page_op *)op;

    feed__rows_free(&p->a.rows);
    feed__rows_free(&op->sql.rows);
    feed__rebuild_free(&p->rb);
    feed__sqlpage_end(&p->sp);
    if (p->key != p->keys)
        free(p->key);
    p->key = NULL;
}

size_t feed__page_op_size(void)
{
    return sizeof(feed_page_op);
}

/* A page request, arguments checked by the caller (feed__page_check). */
int feed__page_init(feed_page_op *p, feed_core *c, char *err, int64_t uid, int64_t last_score,
                    int64_t last_id, int64_t rank, size_t limit, feed_result *out)
{
    p->op.c = c;
    p->op.err = err;
    p->op.kept = p->redis_msg;
    p->op.step = page_step;
    p->op.free = page_free;
    p->op.state = P_START;
    p->op.rc = FEED_OK;
    p->op.reads = 1;
    p->op.deadline = 0;
    p->op.shed = 0;
    p->op.sql.rows.items = NULL;
    p->op.sql.rows.count = 0;
    p->uid = uid;
    p->first = last_score == FEED_FIRST;
    p->score = last_score;
    p->id = last_id;
    /* No rank of a cached copy (at most max_len items, then the end marker)
     * lies past max_len: such a hint could only miss. */
    p->rank = !p->first && rank <= (int64_t)c->cfg.max_len ? rank : -1;
    p->limit = limit;
    p->next_rank = -1;
    p->out = out;
    p->wait = (feed_wait){ 0, 1 };
    p->a.rows.items = NULL;
    p->a.rows.count = 0;
    p->rb.n = 0;
    p->sp.why = NULL;
    p->rider = NULL;
    if (c->key_cap <= KEY_INLINE) {
        p->key = p->keys;
        p->lease_key = p->keys + KEY_INLINE;
    } else {
        if ((p->key = malloc(2 * c->key_cap)) == NULL)
            return feed__msg(err, FEED_ENOMEM, "out of memory for a page request");
        p->lease_key = p->key + c->key_cap;
    }
    feed__family_keys(c->key_base[FEED_FAM_FEED], uid, p->key, NULL);
    p->lease_key[0] = '\0';
    return FEED_OK;
}

void feed__page_ride(feed_page_op *p, const feed_rider *rider)
{
    p->rider = rider;
}

int64_t feed__page_next_rank(const feed_page_op *p)
{
    return p->next_rank;
}

/* The checks every page call makes on its arguments (the async API before
 * accepting a request). */
int feed__page_check(const feed_core *c, char *err, const char *fn, int64_t last_score,
                     int64_t last_id, int64_t rank, size_t limit, const feed_result *out)
{
    if (!out)
        return feed__msg(err, FEED_EINVAL, "%s: out is NULL", fn);
    if (limit == 0 || limit > c->cfg.max_page)
        return feed__msg(err, FEED_EINVAL, "%s: limit %zu is outside 1..%u%s", fn, limit,
                         c->cfg.max_page, limit > (size_t)INT64_MAX
                         ? " (a negative number converted to size_t?)" : "");
    if (rank < -1)
        return feed__msg(err, FEED_EINVAL, "feed_page_ranked: rank %lld is below -1",
                         (long long)rank);
    if (last_score == FEED_FIRST)
        return FEED_OK;
    if (!feed__score_ok(last_score))
        return feed__msg(err, FEED_ERANGE, "%s: cursor score %lld is outside +/-(2^53-1)", fn,
                         (long long)last_score);
    if (last_id < 0)
        return feed__msg(err, FEED_EINVAL, "%s: cursor id %lld is negative", fn,
                         (long long)last_id);
    return FEED_OK;
}
