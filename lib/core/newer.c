/* newer.c -- pull-to-refresh: the items just above a cursor.
 *
 * One request, in order:
 *   1. newer.lua (one round trip): the items above the cursor, ascending, if
 *      the cached copy covers them (it is complete, or the cursor sorts at or
 *      above its lowest item: the copy is an exact prefix of the feed, so
 *      everything above such a cursor is cached).
 *   2. Not covered, or Redis failed: one keyset query for the rows above the
 *      cursor, ascending (feedcache_before), on the primary: a lagging
 *      replica would miss exactly the newest writes.
 * Either way up to limit + 1 items come back closest-first: limit of them are
 * the answer, the extra one says newer items remain. The answer is reversed
 * to newest first, like every page. Nothing is rebuilt here: a feed that is
 * not cached is the next page request's to rebuild.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

enum { N_START, N_CACHE, N_SQL, N_DONE };

struct feed_newer_op {
    feed_op      op;
    int64_t      uid;
    feed_item    cursor;
    size_t       limit;
    feed_result *out;
    int          covered, bad, nomem, redis_failed;
    feed_rows    rows;
    char        *key;
    const char  *argv[7];
    size_t       lens[7];
    char         want[21], score[21], member[FEED_MEMBER_MAX];
    char         keys[96];
    char         redis_msg[FEED_ERRMSG];
};

/* A reply that is not newer.lua's answer (what: "unexpected reply: " and
 * why, or Redis's error text): SQL answers instead. */
static void bad_reply(feed_newer_op *n, const char *what, const char *why)
{
    n->op.c->stats.redis_errors++;
    n->bad = 1;
    feed__msg(n->op.err, FEED_EREDIS, "Redis newer.lua: %s%s", what, why);
}

/* newer.lua's answer: 0 (not covered) or {member, score, ...} ascending
 * from the cursor, whose own pair may lead. Every item is checked (a
 * decodable member and score, strictly above the cursor, ascending): a
 * reply that is not exactly that is an error, and SQL answers instead. */
static void newer_reply(void *arg, size_t i, const redisReply *r)
{
    feed_newer_op *n = arg;
    size_t count, first = 0;
    feed_item it;

    (void)i;
    n->covered = 0;
    if (r->type == REDIS_REPLY_INTEGER && r->integer == 0)
        return;
    if (r->type == REDIS_REPLY_ERROR) {
        bad_reply(n, "", r->str);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements % 2 != 0) {
        bad_reply(n, "unexpected reply: ", "not 0 nor {member, score, ...}");
        return;
    }
    count = r->elements / 2;
    if (count > 0 && feed__reply_pair(r, 0, &it) == FEED_OK && it.id == n->cursor.id &&
        it.score == n->cursor.score) {
        first = 2;          /* the seek's check of the cursor item */
        count--;
    }
    if (count > n->limit + 1) {
        bad_reply(n, "unexpected reply: ", "item count");
        return;
    }
    if (!(n->rows.items = malloc((count + 1) * sizeof *n->rows.items))) {
        n->bad = n->nomem = 1;
        feed__msg(n->op.err, FEED_ENOMEM, "out of memory for %zu items", count);
        return;
    }
    for (size_t k = 0; k < count; k++) {
        feed_item *x = &n->rows.items[k];
        feed_item prev = k > 0 ? x[-1] : n->cursor;
        const char *why = feed__reply_pair(r, first + 2 * k, x) != FEED_OK
                        ? "member or score is not a feedcache item"
                        : !feed__item_after(prev, x->score, x->id)   /* x above prev */
                        ? "items out of order or not above the cursor" : NULL;
        if (why) {
            feed__rows_free(&n->rows);
            bad_reply(n, "unexpected reply: ", why);
            return;
        }
    }
    n->rows.count = count;
    n->covered = 1;
}

static int newer_build(void *arg, size_t i, const char ***argv, const size_t **lens)
{
    feed_newer_op *n = arg;

    (void)i;
    *argv = n->argv;
    *lens = n->lens;
    return 7;
}

/* rows: up to limit + 1 items ascending from the cursor. The first limit
 * are the answer, newest first. */
static int answer(feed_newer_op *n, const feed_rows *rows, feed_source source)
{
    feed_core *c = n->op.c;
    feed_result *out = n->out;
    size_t count = rows->count < n->limit ? rows->count : n->limit;

    out->items = malloc((count + 1) * sizeof *out->items);
    if (!out->items)
        return feed__msg(n->op.err, FEED_ENOMEM, "out of memory for %zu items", count);
    for (size_t i = 0; i < count; i++)
        out->items[i] = rows->items[count - 1 - i];
    feed__page_served(c, out, rows->count, n->limit, source);
    /* The cursor to keep, has_more or not: the newest item the caller now
     * holds, which is the given cursor when nothing is newer. */
    out->next_score = count ? out->items[0].score : n->cursor.score;
    out->next_id = count ? out->items[0].id : n->cursor.id;
    return FEED_OK;
}

static enum feed_want done(feed_newer_op *n, int rc)
{
    n->op.rc = rc;
    n->op.state = N_DONE;
    return FEED_W_DONE;
}

/* The keyset query. redis_failed: Redis could not answer either, so a
 * PostgreSQL failure makes the feed unavailable; a success keeps the Redis
 * error in the message (degraded, not failed). */
static enum feed_want ask_db(feed_newer_op *n, int redis_failed)
{
    n->redis_failed = redis_failed;
    feed__msg_keep(n->redis_msg, n->op.err);
    feed__sql_ask(&n->op, FEED_SQL_BEFORE, FEED_PG_PRIMARY, n->uid,
                  (int64_t[]){ n->uid, n->cursor.score, n->cursor.id, (int64_t)n->limit + 1 }, 4);
    n->op.state = N_SQL;
    return FEED_W_SQL;
}

static enum feed_want newer_step(feed_op *op, int64_t now)
{
    feed_newer_op *n = (feed_newer_op *)op;
    feed_core *c = op->c;
    int rc;

    (void)now;
    switch (op->state) {
    case N_START:
        n->argv[0] = "EVALSHA";
        n->argv[1] = c->sha[FEED_SCRIPT_NEWER];
        n->argv[2] = "1";
        n->argv[3] = n->key;
        n->argv[4] = n->want;
        n->argv[5] = n->score;
        n->argv[6] = n->member;
        n->lens[0] = 7;
        n->lens[1] = 40;
        n->lens[2] = 1;
        n->lens[3] = strlen(n->key);
        n->lens[4] = feed__i64_to_str((int64_t)n->limit + 1, n->want);
        n->lens[5] = feed__i64_to_str(n->cursor.score, n->score);
        n->lens[6] = feed__member_encode(n->cursor.id, n->member);
        op->state = N_CACHE;
        op->batch = (feed_batch){ .n = 1, .slot = c->topo.cluster ? feed__uid_slot(n->uid) : 0,
                                  .arg = n, .build = newer_build, .reply = newer_reply };
        return FEED_W_REDIS;
    case N_CACHE:
        if (op->redis_rc == FEED_ENOMEM || n->nomem)
            return done(n, FEED_ENOMEM);
        if (op->redis_rc != FEED_OK || n->bad)
            return ask_db(n, 1);
        if (!n->covered)
            return ask_db(n, 0);
        rc = answer(n, &n->rows, FEED_SOURCE_CACHE);
        feed__rows_free(&n->rows);
        return done(n, rc);
    case N_SQL:
        rc = op->sql_rc;
        if (rc == FEED_OK)
            rc = answer(n, &op->sql.rows, FEED_SOURCE_DB);
        rc = feed__db_outcome(op->c, op->err, rc, n->redis_failed, n->redis_msg);
        feed__rows_free(&op->sql.rows);
        return done(n, rc);
    default:
        return FEED_W_DONE;
    }
}

static void newer_free(feed_op *op)
{
    feed_newer_op *n = (feed_newer_op *)op;

    feed__rows_free(&n->rows);
    feed__rows_free(&op->sql.rows);
    if (n->key != n->keys)
        free(n->key);
    n->key = NULL;
}

size_t feed__newer_op_size(void)
{
    return sizeof(feed_newer_op);
}

/* A page's checks, except that the cursor cannot be FEED_FIRST (out of
 * range: nothing is newer than "the top"). */
int feed__newer_check(const feed_core *c, char *err, const char *fn, int64_t score, int64_t id,
                      size_t limit, const feed_result *out)
{
    int rc = feed__page_check(c, err, fn, score, id, -1, limit, out);

    if (rc == FEED_OK && score == FEED_FIRST)
        return feed__msg(err, FEED_ERANGE, "%s: FEED_FIRST is no cursor here: pull-to-refresh"
                         " asks for what is newer than an item the client holds; pass that"
                         " item's (score, id)", fn);
    return rc;
}

int feed__newer_init(feed_newer_op *n, feed_core *c, char *err, int64_t uid, int64_t score,
                     int64_t id, size_t limit, feed_result *out)
{
    memset(n, 0, offsetof(feed_newer_op, redis_msg));
    n->op.c = c;
    n->op.err = err;
    n->op.reads = 1;
    n->op.deadline = 0;
    n->op.shed = 0;
    n->op.step = newer_step;
    n->op.free = newer_free;
    n->uid = uid;
    n->cursor.score = score;
    n->cursor.id = id;
    n->limit = limit;
    n->out = out;
    if (c->key_cap <= sizeof n->keys)
        n->key = n->keys;
    else if (!(n->key = malloc(c->key_cap)))
        return feed__msg(err, FEED_ENOMEM, "out of memory for a request");
    feed__family_keys(c->key_base[FEED_FAM_FEED], uid, n->key, NULL);
    return FEED_OK;
}
