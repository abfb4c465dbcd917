/* t_format.c -- a copy written in another key format is never read.
 *
 * The key format (FEED_KEY_VERSION) is part of every key name, so a library
 * never reads what another version wrote: the old copies, members as 19
 * zero-padded digits under "feed:{uid}" (format 1) and "feed:2:{uid}"
 * (format 2), are simply not there for this one.
 * An upgrade costs a cold cache, never a wrong page. Each check below plants
 * a copy that would give wrong pages if it were read (ids SQL does not
 * have, an end marker claiming the feed is complete), then walks the feed
 * against SQL and runs every hook. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "tap.h"
#include "testutil.h"

static PGconn *pg;
static redisContext *r;

static int64_t score_of(size_t i) { return 1000 + (int64_t)(i / 3); }   /* ties */
static int64_t id_of(size_t i) { return 100 + (int64_t)i; }

/* A DUMP of key, or "" when it does not exist; malloc'd, *len set. */
static char *dump(const char *key, size_t *len)
{
    redisReply *rep = tu_redis_cmd(r, "DUMP %s", key);
    char *s = malloc(rep->type == REDIS_REPLY_STRING ? rep->len + 1 : 1);

    *len = 0;
    if (rep->type == REDIS_REPLY_STRING) {
        memcpy(s, rep->str, rep->len);
        *len = rep->len;
    }
    freeReplyObject(rep);
    return s;
}

static int same_dump(const char *key, const char *want, size_t want_len)
{
    size_t len;
    char *got = dump(key, &len);
    int same = len == want_len && memcmp(got, want, len) == 0;

    free(got);
    return same;
}

/* An old format's copy of uid under its key name, old_key (a lease beside
 * it): 19-digit members of ids SQL does not hold, with higher scores, and
 * the end marker. Read, it would put ids 1..5 on top of every page and end
 * the feed there. Format 1 named it "feed:{uid}", format 2 "feed:2:{uid}"
 * (keys that said nothing of the table). */
static void plant_old_copy(const char *old_key)
{
    freeReplyObject(tu_redis_cmd(r, "DEL %s", old_key));
    for (int id = 1; id <= 5; id++)
        freeReplyObject(tu_redis_cmd(r, "ZADD %s %d %019d", old_key, 5000 + id, id));
    freeReplyObject(tu_redis_cmd(r, "ZADD %s -inf end", old_key));
    freeReplyObject(tu_redis_cmd(r, "SET %s:lease old-token", old_key));
}

static void old_copy_ignored(void)
{
    feed *f = tu_open_settled(NULL);   /* the fence must not drop what we plant */
    tu_walk_info info;
    int64_t uid = 30;
    char old_key[2][64], old_lease[2][64], *before[2], *lease_before[2];
    size_t before_len[2], lease_len[2];
    int same = 1;

    snprintf(old_key[0], sizeof old_key[0], "feed:{%lld}", (long long)uid);
    snprintf(old_key[1], sizeof old_key[1], "feed:2:{%lld}", (long long)uid);
    tu_insert_rows(pg, uid, 40, score_of, id_of);
    for (int k = 0; k < 2; k++) {
        snprintf(old_lease[k], sizeof old_lease[k], "%s:lease", old_key[k]);
        plant_old_copy(old_key[k]);
        before[k] = dump(old_key[k], &before_len[k]);
        lease_before[k] = dump(old_lease[k], &lease_len[k]);
    }

    ok(tu_walk_equals_sql(f, pg, uid, 7, &info), "old-format copies under the old names:"
       " the walk equals SQL (%s)", info.why);
    ok(info.sources[FEED_SOURCE_REBUILD] == 1, "  the first page rebuilt: a cold cache");
    ok(tu_walk_equals_sql(f, pg, uid, 7, &info) &&
       info.sources[FEED_SOURCE_CACHE] == (int)info.pages,
       "  then every page comes from the new copy, equal to SQL");

    tu_insert(pg, uid, 9000, 7);
    is_int(feed_on_insert(f, uid, 9000, 7), FEED_OK, "insert hook");
    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = %lld AND id = 101", (long long)uid);
    is_int(feed_on_delete(f, uid, 101), FEED_OK, "delete hook");
    tu_insert(pg, uid, 9001, 8);
    is_int(feed_fanout(f, &uid, 1, 9001, 8), FEED_OK, "fan-out");
    ok(tu_walk_equals_sql(f, pg, uid, 7, &info) &&
       info.sources[FEED_SOURCE_CACHE] == (int)info.pages,
       "  walks still equal SQL, from the cache (%s)", info.why);
    is_int(feed_reload(f, uid), FEED_OK, "reload");
    ok(tu_walk_equals_sql(f, pg, uid, 7, &info), "  walks equal SQL");
    is_int(feed_invalidate(f, uid), FEED_OK, "invalidate");
    ok(tu_walk_equals_sql(f, pg, uid, 7, &info) && info.sources[FEED_SOURCE_REBUILD] == 1,
       "  the next walk rebuilds, equal to SQL");
    for (int k = 0; k < 2; k++) {
        same &= same_dump(old_key[k], before[k], before_len[k]) &&
                same_dump(old_lease[k], lease_before[k], lease_len[k]);
        free(before[k]);
        free(lease_before[k]);
    }
    ok(same, "pages and hooks left the old copies and their leases as they were");
    feed_close(f);
}

/* Members of every form in one feed (short ids, 8-byte ids, 19-digit ids),
 * tied on one score and across scores: walks in every page size agree with
 * SQL's (score DESC, id DESC), also after the cursor item is deleted (the
 * slow seeks compare members byte by byte in page.lua and newer.lua). */
static const int64_t mixed_ids[] = {
    0, 1, 9, 10, 127, 128, 99999, 123456, 99999999, 100000000, 4294967296LL,
    999999999999999999LL, 1000000000000000000LL, 1500000000000000000LL,
    9223372036854775806LL, 9223372036854775807LL
};
#define NMIXED (sizeof mixed_ids / sizeof *mixed_ids)

static int64_t mixed_score(size_t i) { return i < 3 * NMIXED ? 50 : (int64_t)i; }
static int64_t mixed_id(size_t i)
{
    /* Three rounds of every id, spread apart so each is unique. */
    int64_t base = mixed_ids[i % NMIXED];

    return base > INT64_MAX - 2 ? base - 2 * (int64_t)(i / NMIXED) : base + (int64_t)(i / NMIXED) * 2;
}

static void mixed_forms(void)
{
    feed *f = tu_open(NULL), *g;
    feed_config cfg;
    tu_walk_info info;
    int64_t uid = 31;
    int good = 1;

    tu_insert_rows(pg, uid, 3 * NMIXED + 5, mixed_score, mixed_id);
    for (size_t limit = 1; limit <= 8; limit++) {
        feed_invalidate(f, uid);
        good &= tu_walk_equals_sql(f, pg, uid, limit, &info) &&
                tu_walk_equals_sql(f, pg, uid, limit, &info) &&
                info.sources[FEED_SOURCE_CACHE] == (int)info.pages;
    }
    ok(good, "ids of every member form, tied and not: cached walks equal SQL (%s)", info.why);

    /* Cursors whose item is gone: each id of the tie group as a cursor
     * after deleting it from SQL and the cache, read both ways (page.lua
     * and newer.lua each binary-search the tie group by member bytes)
     * against a handle whose cache is too short to answer, so SQL does. */
    tu_config(&cfg);
    cfg.key_prefix = "format-nocache";
    cfg.max_len = 1;
    g = tu_open(&cfg);
    good = 1;
    for (size_t i = 0; i < 3 * NMIXED; i += 5) {
        int64_t id = mixed_id(i);
        tu_sql(pg, "DELETE FROM feed_entry WHERE uid = %lld AND id = %lld", (long long)uid,
               (long long)id);
        feed_on_delete(f, uid, id);
        for (int newer = 0; newer < 2; newer++) {
            feed_result res, want;
            int rc = newer ? feed_page_newer(f, uid, 50, id, 4, &res)
                           : feed_page(f, uid, 50, id, 4, &res);
            int wrc = newer ? feed_page_newer(g, uid, 50, id, 4, &want)
                            : feed_page(g, uid, 50, id, 4, &want);
            good &= rc == FEED_OK && wrc == FEED_OK && res.source == FEED_SOURCE_CACHE &&
                    want.source == FEED_SOURCE_DB && res.count == want.count;
            for (size_t k = 0; good && k < res.count; k++)
                good &= res.items[k].id == want.items[k].id &&
                        res.items[k].score == want.items[k].score;
            feed_result_free(&res);
            feed_result_free(&want);
        }
    }
    ok(good, "  a deleted cursor inside the tie group: pages and newer pages from the cache"
       " equal SQL's");
    feed_close(g);
    feed_close(f);
}

int main(void)
{
    pg = tu_begin(&r);
    old_copy_ignored();
    mixed_forms();
    PQfinish(pg);
    redisFree(r);
    return tap_done();
}
