/* rebuild.c -- fill a feed's cache from SQL, under a lease.
 *
 * One query reads the top max_len + 1 rows. At most max_len back means the
 * whole feed: the end marker goes in. More means the feed is longer than the
 * cache: max_len rows go in, without the marker. The install is one script
 * call that first checks the caller's lease is still current; every write
 * hook deletes the lease, so rows read before a write committed can never
 * overwrite it. The rows stay with the caller, who cuts the page that missed
 * from them: no second read.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Text for "score member" pairs of n rows: 21 bytes a score, 20 a member. */
#define PAIR_TEXT (21 + FEED_MEMBER_LEN + 1)

static int install(feed *f, const char *token, const feed_rows *rows,
                   int complete, int *installed)
{
    size_t n = complete ? rows->count : f->cfg.max_len;
    size_t argc = 5 + 2 * n;
    const char **argv = malloc(argc * sizeof *argv);
    size_t *lens = malloc(argc * sizeof *lens);
    char *text = malloc(n * PAIR_TEXT + 1);
    redisReply *r = NULL;
    int rc = FEED_OK;

    if (!argv || !lens || !text) {
        rc = feed__error(f, FEED_ENOMEM, "out of memory installing %zu rows", n);
        goto out;
    }
    argv[0] = f->key;
    argv[1] = f->lease_key;
    argv[2] = token;
    argv[3] = f->ttl_ms;
    argv[4] = complete ? "1" : "0";
    for (size_t i = 0; i < 5; i++)
        lens[i] = strlen(argv[i]);
    for (size_t i = 0; i < n; i++) {
        char *score = text + i * PAIR_TEXT, *member = score + 21;
        lens[5 + 2 * i] = feed__i64_to_str(rows->items[i].score, score);
        argv[5 + 2 * i] = score;
        feed__member_encode(rows->items[i].id, member);
        argv[6 + 2 * i] = member;
        lens[6 + 2 * i] = FEED_MEMBER_LEN;
    }
    r = feed__redis_script(f, FEED_SCRIPT_REBUILD, 2, (int)argc, argv, lens);
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
    free(argv);
    free(lens);
    free(text);
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
    rc = feed__pg_top(f, uid, (size_t)f->cfg.max_len + 1, rows);
    if (rc != FEED_OK) {
        release_lease(f);
        return rc;
    }
    if (f->test_before_install)
        f->test_before_install(f, uid, f->test_arg);
    return install(f, token, rows, rows->count <= f->cfg.max_len, installed);
}
