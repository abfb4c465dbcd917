/* newer.c -- pull-to-refresh: feed_page_newer, the items just above a cursor.
 *
 * One call, in order:
 *   1. newer.lua (one round trip): the items above the cursor, ascending, if
 *      the cached copy covers them (it is complete, or the cursor sorts at or
 *      above its lowest item: the copy is an exact prefix of the feed, so
 *      everything above such a cursor is cached).
 *   2. Not covered, or Redis failed: one keyset query for the rows above the
 *      cursor, ascending (pg.c, feedcache_before).
 * Either way up to limit + 1 items come back closest-first: limit of them are
 * the answer, the extra one says newer items remain. The answer is reversed
 * to newest first, like every page. Nothing is rebuilt here: a feed that is
 * not cached is the next feed_page's to rebuild.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static int bad_reply(feed *f, const char *why)
{
    f->stats.redis_errors++;
    return feed__error(f, FEED_EREDIS, "Redis newer.lua: unexpected reply: %s", why);
}

/* Is a strictly above b in (score DESC, id DESC) order? */
static int above(feed_item a, feed_item b)
{
    return feed__item_after(b, a.score, a.id);
}

/* newer.lua's answer: 0 (not covered: *covered = 0) or {member, score, ...}
 * ascending from the cursor, whose own pair may lead. Every item is checked
 * (a decodable member and score, strictly above the cursor, ascending): a
 * reply that is not exactly that is an error, and SQL answers instead. */
static int parse_newer(feed *f, const redisReply *r, feed_item cursor,
                       size_t limit, int *covered, feed_rows *rows)
{
    size_t n, first = 0;

    *covered = 0;
    if (r->type == REDIS_REPLY_INTEGER && r->integer == 0)
        return FEED_OK;
    if (r->type != REDIS_REPLY_ARRAY || r->elements % 2 != 0)
        return bad_reply(f, "not 0 nor {member, score, ...}");
    n = r->elements / 2;
    if (n > 0) {
        const redisReply *m = r->element[0], *s = r->element[1];
        feed_item it;
        if (m->type == REDIS_REPLY_STRING && s->type == REDIS_REPLY_STRING &&
            feed__member_decode(m->str, m->len, &it.id) == FEED_OK &&
            feed__parse_score(s->str, s->len, &it.score) == FEED_OK &&
            it.id == cursor.id && it.score == cursor.score) {
            first = 2;          /* the seek's check of the cursor item */
            n--;
        }
    }
    if (n > limit + 1)
        return bad_reply(f, "item count");
    rows->items = malloc((n + 1) * sizeof *rows->items);
    if (!rows->items)
        return feed__error(f, FEED_ENOMEM, "out of memory for %zu items", n);
    for (size_t i = 0; i < n; i++) {
        const redisReply *m = r->element[first + 2 * i], *s = r->element[first + 2 * i + 1];
        feed_item *it = &rows->items[i];
        if (m->type != REDIS_REPLY_STRING || s->type != REDIS_REPLY_STRING ||
            feed__member_decode(m->str, m->len, &it->id) != FEED_OK ||
            feed__parse_score(s->str, s->len, &it->score) != FEED_OK) {
            feed__rows_free(rows);
            return bad_reply(f, "member or score is not a feedcache item");
        }
        if (!above(*it, i > 0 ? it[-1] : cursor)) {
            feed__rows_free(rows);
            return bad_reply(f, "items out of order or not above the cursor");
        }
    }
    rows->count = n;
    *covered = 1;
    return FEED_OK;
}

static int ask_cache(feed *f, feed_item cursor, size_t limit, int *covered,
                     feed_rows *rows)
{
    char want[21], score[21], member[FEED_MEMBER_MAX];
    const char *argv[4] = { f->key, want, score, member };
    size_t lens[4];
    redisReply *r;
    int rc;

    lens[0] = strlen(f->key);
    lens[1] = feed__i64_to_str((int64_t)limit + 1, want);
    lens[2] = feed__i64_to_str(cursor.score, score);
    lens[3] = feed__member_encode(cursor.id, member);
    r = feed__redis_script(f, FEED_SCRIPT_NEWER, 1, 4, argv, lens);
    if (!r)
        return FEED_EREDIS;
    rc = parse_newer(f, r, cursor, limit, covered, rows);
    freeReplyObject(r);
    return rc;
}

/* rows: up to limit + 1 items ascending from the cursor. The first limit
 * are the answer, newest first. */
static int answer(feed *f, feed_result *out, const feed_rows *rows,
                  size_t limit, feed_source source)
{
    size_t count = rows->count < limit ? rows->count : limit;

    out->items = malloc((count + 1) * sizeof *out->items);
    if (!out->items)
        return feed__error(f, FEED_ENOMEM, "out of memory for %zu items", count);
    for (size_t i = 0; i < count; i++)
        out->items[i] = rows->items[count - 1 - i];
    out->count = count;
    out->has_more = rows->count > limit;
    if (out->has_more) {
        out->next_score = out->items[0].score;
        out->next_id = out->items[0].id;
    }
    out->source = source;
    f->stats.pages++;
    if (source == FEED_SOURCE_CACHE)
        f->stats.cache_pages++;
    else
        f->stats.db_pages++;
    return FEED_OK;
}

/* The keyset query. redis_failed: Redis could not answer either, so a
 * PostgreSQL failure makes the feed unavailable; a success keeps the Redis
 * error in the message (degraded, not failed). */
static int answer_from_db(feed *f, int64_t uid, feed_item cursor, size_t limit,
                          feed_result *out, int redis_failed)
{
    char redis_msg[sizeof f->errmsg];
    feed_rows rows;
    int rc;

    snprintf(redis_msg, sizeof redis_msg, "%s", f->errmsg);
    rc = feed__pg_before(f, uid, cursor.score, cursor.id, limit + 1, &rows);
    if (rc == FEED_OK)
        rc = answer(f, out, &rows, limit, FEED_SOURCE_DB);
    rc = feed__db_outcome(f, rc, redis_failed, redis_msg);
    feed__rows_free(&rows);
    return rc;
}

int feed_page_newer(feed *f, int64_t uid, int64_t score, int64_t id,
                    size_t limit, feed_result *out)
{
    feed_item cursor = { score, id };
    feed_rows rows = { NULL, 0 };
    int covered, rc;

    if (out)
        memset(out, 0, sizeof *out);
    if (!f)
        return FEED_EINVAL;
    feed__clear_error(f);
    if (!out)
        return feed__error(f, FEED_EINVAL, "feed_page_newer: out is NULL");
    if (limit == 0 || limit > f->cfg.max_page)
        return feed__error(f, FEED_EINVAL, "feed_page_newer: limit %zu is outside 1..%u",
                           limit, f->cfg.max_page);
    if (!feed__score_ok(score))
        return feed__error(f, FEED_ERANGE, "feed_page_newer: cursor score %lld is outside"
                           " +/-(2^53-1)", (long long)score);
    if (id < 0)
        return feed__error(f, FEED_EINVAL, "feed_page_newer: cursor id %lld is negative",
                           (long long)id);
    feed__set_keys(f, uid);

    rc = ask_cache(f, cursor, limit, &covered, &rows);
    if (rc == FEED_ENOMEM)
        return rc;
    if (rc != FEED_OK)
        return answer_from_db(f, uid, cursor, limit, out, 1);
    if (!covered)
        return answer_from_db(f, uid, cursor, limit, out, 0);
    rc = answer(f, out, &rows, limit, FEED_SOURCE_CACHE);
    feed__rows_free(&rows);
    return rc;
}
