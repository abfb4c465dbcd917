/* rebuild.c -- fill a feed's cache from SQL, under a lease.
 *
 * One query reads the top max_len + 1 rows. At most max_len back means the
 * whole feed: the end marker goes in. More means the feed is longer than the
 * cache: max_len rows go in, without the marker. The install is one round
 * trip: the rows are staged with a plain ZADD, then one call of
 * lua/rebuild.lua swaps them in only if the caller's lease is still current;
 * every write hook deletes the lease, so rows read before a write committed
 * can never overwrite it. The rows stay with the caller, who cuts the page
 * that missed from them: no second read.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Text for "score member" pairs of n rows: 21 bytes a score, then a member. */
#define PAIR_TEXT (21 + FEED_MEMBER_MAX)

/* One round trip: ZADD the rows into a staging set named after the token
 * (with the end marker when they are the whole feed), give it a TTL so a
 * client that dies here leaves nothing behind for long, then rebuild.lua,
 * which swaps it in only if the lease is still ours. */
static int install(feed *f, const char *token, const feed_rows *rows,
                   int complete, int *installed)
{
    size_t n = complete ? rows->count : f->cfg.max_len;
    size_t zargc = 2 + 2 * n + (complete ? 2 : 0), a = 0;
    const char **zargv = malloc(zargc * sizeof *zargv);
    size_t *zlens = malloc(zargc * sizeof *zlens);
    char *text = malloc(n * PAIR_TEXT + 1);
    char *staged = malloc(f->key_cap + sizeof ":stage:" + 32);
    redisReply *r = NULL;
    int rc = FEED_OK;

    if (!zargv || !zlens || !text || !staged) {
        rc = feed__error(f, FEED_ENOMEM, "out of memory installing %zu rows", n);
        goto out;
    }
    sprintf(staged, "%s:stage:%s", f->key, token);
    zargv[a] = "ZADD";
    zlens[a++] = 4;
    zargv[a] = staged;
    zlens[a++] = strlen(staged);
    for (size_t i = 0; i < n; i++) {
        char *score = text + i * PAIR_TEXT, *member = score + 21;
        zlens[a] = feed__i64_to_str(rows->items[i].score, score);
        zargv[a++] = score;
        zlens[a] = feed__member_encode(rows->items[i].id, member);
        zargv[a++] = member;
    }
    if (complete) {   /* the end marker: the set holds the whole feed */
        zargv[a] = "-inf";
        zlens[a++] = 4;
        zargv[a] = FEED_END_MEMBER;
        zlens[a++] = strlen(FEED_END_MEMBER);
    }
    {
        const char *expire[3] = { "PEXPIRE", staged, f->lease_ms };
        const char **cargv[2] = { zargv, expire };
        const int cargc[2] = { (int)zargc, 3 };
        const size_t *clens[2] = { zlens, NULL };
        /* A feed known to be empty gets its own, short TTL (empty_ttl_seconds):
         * probes for uids that do not exist must not fill Redis. */
        const char *ttl = complete && rows->count == 0 ? f->empty_ttl_ms : f->ttl_ms;
        const char *argv[5] = { f->key, f->lease_key, staged, token, ttl };
        r = feed__redis_script_after(f, 2, cargc, cargv, clens, FEED_SCRIPT_REBUILD,
                                     3, 5, argv, NULL);
    }
    if (!r) {
        rc = FEED_EREDIS;
    } else if (r->type != REDIS_REPLY_INTEGER) {
        f->stats.redis_errors++;
        rc = feed__error(f, FEED_EREDIS, "Redis rebuild.lua: unexpected reply type %d", r->type);
    } else if (r->integer == 1) {
        *installed = 1;
        f->stats.rebuilds++;
    }
out:
    freeReplyObject(r);
    free(zargv);
    free(zlens);
    free(text);
    free(staged);
    return rc;
}

/* The SQL read failed: let the next reader try at once rather than wait out
 * lease_ms. Best effort, and without a token check: if the lease already
 * passed to someone else, their install fails and their page is still
 * answered, so deleting it costs nothing worse than a later miss. */
static void release_lease(feed *f)
{
    char msg[sizeof f->errmsg];
    const char *argv[2] = { "DEL", f->lease_key };

    snprintf(msg, sizeof msg, "%s", f->errmsg);   /* keep the SQL error */
    freeReplyObject(feed__redis_command(f, 2, argv, NULL));
    snprintf(f->errmsg, sizeof f->errmsg, "%s", msg);
}

/* Read the feed's top rows into *rows and install them if token is still the
 * feed's lease. feed__set_keys(f, uid) must have been called.
 *
 * Returns the SQL error if the read failed (rows empty). Otherwise rows hold
 * the top min(count, max_len + 1) rows of the feed, *installed says whether
 * they went into Redis, and the return value is FEED_OK or the Redis error
 * (the rows are still good then). */
int feed__rebuild(feed *f, int64_t uid, const char *token, feed_rows *rows,
                  int *installed)
{
    int rc;

    *installed = 0;
    /* From the primary, never the replica: a replica may not yet have
     * replayed a write whose hook already ran (and cancelled the lease), and
     * rows read from it would install a copy missing that write. */
    rc = feed__pg_top(f, uid, (size_t)f->cfg.max_len + 1, rows);
    if (rc != FEED_OK) {
        release_lease(f);
        return rc;
    }
    if (f->test_before_install)
        f->test_before_install(f, uid, f->test_arg);
    return install(f, token, rows, rows->count <= f->cfg.max_len, installed);
}
