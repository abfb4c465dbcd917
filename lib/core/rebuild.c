/* rebuild.c -- fill a feed's cache from SQL rows, under a lease.
 *
 * The rows are the top max_len + 1 of the feed, read from the primary
 * (sql.c says why). At most max_len of them means the whole feed: the end
 * marker goes in. More means the feed is longer than the cache: max_len
 * rows go in, without the marker. The install is one round trip: the rows
 * are staged with a plain ZADD (which Redis parses far faster than a script
 * receives arguments) into a set named after the lease token, with a TTL so
 * that a client that dies here leaves nothing behind for long, then one
 * call of lua/rebuild.lua swaps them in only if the caller's lease is still
 * current; every write hook deletes the lease, so rows read before a write
 * committed can never overwrite it. The rows stay with the caller, who cuts
 * the page that missed from them: no second read.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

/* Text for "score member" pairs: 21 bytes a score, then a member. */
#define PAIR_TEXT (21 + FEED_MEMBER_MAX)

void feed__install_free(feed_install *in)
{
    free(in->argv);
    free(in->lens);
    free(in->text);
    free(in->staged);
    in->argv = NULL;
    in->lens = NULL;
    in->text = NULL;
    in->staged = NULL;
}

int feed__install_prepare(feed_install *in, feed_core *c, const char *key,
                          const char *lease_key, const char *token, const feed_rows *rows,
                          char *err)
{
    int complete = rows->count <= c->cfg.max_len;
    size_t n = complete ? rows->count : c->cfg.max_len, a = 0;

    memset(in, 0, sizeof *in);
    in->zargc = 2 + 2 * n + (complete ? 2 : 0);
    in->argv = malloc(in->zargc * sizeof *in->argv);
    in->lens = malloc(in->zargc * sizeof *in->lens);
    in->text = malloc(n * PAIR_TEXT + 1);
    in->staged = malloc(c->key_cap + sizeof ":stage:" + 32);
    if (!in->argv || !in->lens || !in->text || !in->staged) {
        feed__install_free(in);
        return feed__msg(err, FEED_ENOMEM, "out of memory installing %zu rows", n);
    }
    sprintf(in->staged, "%s:stage:%s", key, token);
    in->argv[a] = "ZADD";
    in->lens[a++] = 4;
    in->argv[a] = in->staged;
    in->lens[a++] = strlen(in->staged);
    for (size_t i = 0; i < n; i++) {
        char *score = in->text + i * PAIR_TEXT, *member = score + 21;
        in->lens[a] = feed__i64_to_str(rows->items[i].score, score);
        in->argv[a++] = score;
        in->lens[a] = feed__member_encode(rows->items[i].id, member);
        in->argv[a++] = member;
    }
    if (complete) {   /* the end marker: the set holds the whole feed */
        in->argv[a] = "-inf";
        in->lens[a++] = 4;
        in->argv[a] = FEED_END_MEMBER;
        in->lens[a++] = strlen(FEED_END_MEMBER);
    }
    in->expire[0] = "PEXPIRE";
    in->expire[1] = in->staged;
    in->expire[2] = c->lease_ms;
    /* A feed known to be empty gets its own, short TTL (empty_ttl_seconds):
     * probes for uids that do not exist must not fill Redis. */
    in->script[0] = "EVALSHA";
    in->script[1] = c->sha[FEED_SCRIPT_REBUILD];
    in->script[2] = "3";
    in->script[3] = key;
    in->script[4] = lease_key;
    in->script[5] = in->staged;
    in->script[6] = token;
    in->script[7] = complete && rows->count == 0 ? c->empty_ttl_ms : c->ttl_ms;
    for (int i = 0; i < 3; i++)
        in->expire_lens[i] = strlen(in->expire[i]);
    for (int i = 0; i < 8; i++)
        in->script_lens[i] = strlen(in->script[i]);
    return FEED_OK;
}

/* The install's three commands: ZADD staged, PEXPIRE staged, rebuild.lua. */
int feed__install_build(feed_install *in, size_t i, const char ***argv, const size_t **lens)
{
    switch (i) {
    case 0:
        *argv = in->argv;
        *lens = in->lens;
        return (int)in->zargc;
    case 1:
        *argv = in->expire;
        *lens = in->expire_lens;
        return 3;
    default:
        *argv = in->script;
        *lens = in->script_lens;
        return 8;
    }
}

/* An error reply to the staging fails the install, the script's reply
 * then dropped. */
void feed__install_reply(feed_install *in, feed_core *c, size_t i, const redisReply *r,
                         char *err)
{
    if (in->failed)
        return;
    if (r->type == REDIS_REPLY_ERROR) {
        c->stats.redis_errors++;
        feed__msg(err, FEED_EREDIS, "Redis %s: %s", i == 0 ? "ZADD" : i == 1 ? "PEXPIRE"
                  : "rebuild.lua", r->str);
        in->failed = 1;
    } else if (i == 2) {
        if (r->type != REDIS_REPLY_INTEGER) {
            c->stats.redis_errors++;
            feed__msg(err, FEED_EREDIS, "Redis rebuild.lua: unexpected reply type %d", r->type);
            in->failed = 1;
        } else if (r->integer == 1) {
            in->installed = 1;
        }
    }
}

/* FEED_OK (installed or not), or FEED_EREDIS. */
int feed__install_result(feed_install *in, feed_core *c, int redis_rc)
{
    if (redis_rc != FEED_OK || in->failed)
        return FEED_EREDIS;
    if (in->installed)
        c->stats.rebuilds++;
    return FEED_OK;
}
