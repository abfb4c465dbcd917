/* rebuild.c -- fill a feed's cache from SQL, under a lease.
 *
 * One query reads the top max_len + 1 rows. At most max_len back means the
 * whole feed: the end marker goes in. More means the feed is longer than the
 * cache: max_len rows go in, without the marker. The install is one
 * MULTI/EXEC transaction that runs only if the caller's lease is still
 * current; every write hook deletes the lease, so rows read before a write
 * committed can never overwrite it. The rows stay with the caller, who cuts
 * the page that missed from them: no second read.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Text for "score member" pairs of n rows: 21 bytes a score, 20 a member. */
#define PAIR_TEXT (21 + FEED_MEMBER_LEN + 1)

/* The connection failed under the install: keep the reason, drop it. */
static int lost(feed *f, const char *what)
{
    f->stats.redis_errors++;
    feed__error(f, FEED_EREDIS, "Redis rebuild %s: %s", what,
                f->redis->errstr[0] ? f->redis->errstr : "connection lost");
    feed__redis_drop(f);
    return FEED_EREDIS;
}

/* n commands in one round trip on the connection as it is. Not redis.c's
 * calls, which reconnect and retry: a transaction (WATCH ... EXEC) must not
 * go on over a new connection, which has lost its WATCH. Fills replies[0..n)
 * (error replies included) and returns FEED_OK, or returns FEED_EREDIS with
 * the connection dropped and no replies. */
static int pipeline(feed *f, size_t n, const int *argc, const char **const *argv,
                    const size_t *const *lens, redisReply **replies)
{
    for (size_t i = 0; i < n; i++)
        replies[i] = NULL;
    if (!f->redis) {
        f->stats.redis_errors++;
        return feed__error(f, FEED_EREDIS, "Redis rebuild: connection lost");
    }
    for (size_t i = 0; i < n; i++)
        if (redisAppendCommandArgv(f->redis, argc[i], argv[i], lens[i]) != REDIS_OK)
            return lost(f, argv[i][0]);   /* part of it may be buffered: drop */
    f->stats.redis_calls++;
    for (size_t i = 0; i < n; i++) {
        if (redisGetReply(f->redis, (void **)&replies[i]) != REDIS_OK) {
            for (size_t k = 0; k < i; k++) {
                freeReplyObject(replies[k]);
                replies[k] = NULL;
            }
            return lost(f, argv[i][0]);
        }
    }
    return FEED_OK;
}

/* Best effort: forget a WATCH that no EXEC followed. */
static void unwatch(feed *f)
{
    const char *argv[1] = { "UNWATCH" };

    if (f->redis)
        freeReplyObject(feed__redis_command(f, 1, argv, NULL));
}

static int refused(feed *f, const redisReply *r, const char *what)
{
    f->stats.redis_errors++;
    return feed__error(f, FEED_EREDIS, "Redis rebuild %s: %s", what,
                       r && r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
}

/* The install, in two round trips:
 *   WATCH lease, GET lease        is the lease still ours?
 *   MULTI, DEL feed lease, ZADD feed score member ... [-inf end],
 *   [PEXPIRE feed ttl], EXEC      replace the set, drop the lease
 * EXEC does nothing when the lease changed after the WATCH (a write hook
 * deleted it, it expired, another reader took it), so the check and the
 * install are one atomic step, as if the check ran inside the transaction.
 * Both round trips use one connection (pipeline() never reconnects): a new
 * connection would have lost the WATCH.
 *
 * Why not a Lua script (this was lua/rebuild.lua): a script receives its
 * arguments as a Lua table, and building that table costs about 0.35 us per
 * argument on the bench machine (a script that only returns took 70 ms with
 * 100,000 items), before the script runs a line; a plain ZADD of all the
 * pairs parses them once. Against the common reload script, server time
 * went from 1.9x / 1.6x / 1.5x faster for 1,000 / 10,000 / 100,000 items
 * to 2.2x - 2.6x (bench/results/latest.md, "Installing a rebuild"). */
static int install(feed *f, const char *token, const feed_rows *rows,
                   int complete, int *installed)
{
    size_t n = complete ? rows->count : f->cfg.max_len;
    size_t zargc = 2 + 2 * n + (complete ? 2 : 0), a = 0;
    const char **zargv = malloc(zargc * sizeof *zargv);
    size_t *zlens = malloc(zargc * sizeof *zlens);
    char *text = malloc(n * PAIR_TEXT + 1);
    int ttl = strcmp(f->ttl_ms, "0") != 0;
    redisReply *rep[5] = { NULL, NULL, NULL, NULL, NULL };
    size_t nrep = 0;
    int rc = FEED_OK;

    if (!zargv || !zlens || !text) {
        rc = feed__error(f, FEED_ENOMEM, "out of memory installing %zu rows", n);
        goto out;
    }
    zargv[a] = "ZADD";
    zlens[a++] = 4;
    zargv[a] = f->key;
    zlens[a++] = strlen(f->key);
    for (size_t i = 0; i < n; i++) {
        char *score = text + i * PAIR_TEXT, *member = score + 21;
        zlens[a] = feed__i64_to_str(rows->items[i].score, score);
        zargv[a++] = score;
        feed__member_encode(rows->items[i].id, member);
        zlens[a] = FEED_MEMBER_LEN;
        zargv[a++] = member;
    }
    if (complete) {   /* the end marker: the set holds the whole feed */
        zargv[a] = "-inf";
        zlens[a++] = 4;
        zargv[a] = FEED_END_MEMBER;
        zlens[a++] = strlen(FEED_END_MEMBER);
    }

    /* Round trip 1: WATCH first, so that any change from now on voids EXEC. */
    if ((rc = feed__redis_ready(f)) != FEED_OK) {
        rc = FEED_EREDIS;
        goto out;
    }
    {
        const char *watch[2] = { "WATCH", f->lease_key }, *get[2] = { "GET", f->lease_key };
        const char **argv[2] = { watch, get };
        const int argc[2] = { 2, 2 };
        const size_t *lens[2] = { NULL, NULL };
        nrep = 2;
        rc = pipeline(f, 2, argc, argv, lens, rep);
    }
    if (rc != FEED_OK)
        goto out;
    if (rep[0]->type == REDIS_REPLY_ERROR || rep[1]->type == REDIS_REPLY_ERROR) {
        rc = refused(f, rep[0]->type == REDIS_REPLY_ERROR ? rep[0] : rep[1], "WATCH/GET");
        unwatch(f);
        goto out;
    }
    if (rep[1]->type != REDIS_REPLY_STRING || strcmp(rep[1]->str, token) != 0) {
        unwatch(f);   /* the lease is gone: a write came, or another reader */
        goto out;
    }
    freeReplyObject(rep[0]);
    freeReplyObject(rep[1]);
    rep[0] = rep[1] = NULL;

    /* Round trip 2: the transaction. */
    {
        const char *multi[1] = { "MULTI" }, *exec[1] = { "EXEC" };
        const char *del[3] = { "DEL", f->key, f->lease_key };
        const char *expire[3] = { "PEXPIRE", f->key, f->ttl_ms };
        const char **argv[5] = { multi, del, zargv, expire, exec };
        int argc[5] = { 1, 3, (int)zargc, 3, 1 };
        const size_t *lens[5] = { NULL, NULL, zlens, NULL, NULL };
        if (!ttl) {   /* no PEXPIRE */
            argv[3] = exec;
            argc[3] = 1;
        }
        nrep = ttl ? 5 : 4;
        rc = pipeline(f, nrep, argc, argv, lens, rep);
    }
    if (rc != FEED_OK)
        goto out;
    for (size_t i = 0; i + 1 < nrep; i++)   /* MULTI: OK; each command: QUEUED */
        if (rep[i]->type != REDIS_REPLY_STATUS) {
            rc = refused(f, rep[i], "MULTI");
            goto out;
        }
    if (rep[nrep - 1]->type == REDIS_REPLY_NIL)
        goto out;   /* EXEC did nothing: the lease changed after the WATCH */
    if (rep[nrep - 1]->type != REDIS_REPLY_ARRAY || rep[nrep - 1]->elements != nrep - 2) {
        rc = refused(f, rep[nrep - 1], "EXEC");
        goto out;
    }
    for (size_t i = 0; i < rep[nrep - 1]->elements; i++)
        if (rep[nrep - 1]->element[i]->type == REDIS_REPLY_ERROR) {
            rc = refused(f, rep[nrep - 1]->element[i], "EXEC");
            goto out;
        }
    *installed = 1;
    f->stats.rebuilds++;
out:
    for (size_t i = 0; i < 5; i++)
        freeReplyObject(rep[i]);
    free(zargv);
    free(zlens);
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
