/* wait.c -- the replica check that rides with a command, in the same
 * pipeline on the same connection (redis.c sends it; this file says what it
 * is and what its reply means).
 *
 * Hooks (f->in_hook) with redis_wait_replicas = n > 0 are followed by WAIT n
 * timeout: a hook succeeds only when n replicas hold its write, so a
 * failover to one of them cannot lose it. Too few acknowledgements set
 * f->wait_short: the hook fails and its feed goes on the repair list
 * (hooks.c), whose DEL is WAITed too (redis.c, repair).
 *
 * Reads under Sentinel with n > 0 are followed by ROLE, and their answer is
 * used only while the node still has n replicas attached. SENTINEL FAILOVER
 * promotes the replica and leaves the old primary a primary for seconds,
 * until the Sentinels reconfigure it; its replica link, though, closes at
 * the promotion. Handles that write move to the new primary (their WAIT
 * fails); a handle that only reads would otherwise go on serving the old
 * primary's copies, which miss those writes (t_ha_failover, reader_case).
 *
 * On a Redis Cluster (cluster_io.c) the WAIT rides each node's pipeline:
 * one per node and pass, after the commands applied there, so a fan-out
 * over many slots pays one WAIT per node, not one per slot. Too few
 * acknowledgements fail the call the same way; the connection stays (the
 * node answered), and the slot map is asked again, since a primary short
 * of replicas may be the one being replaced. Reads on a cluster carry no
 * ROLE: a demoted node answers MOVED by itself.
 *
 * Either check falling short under Sentinel drops the connection, and the
 * Sentinels are asked again after retry_ms (not at once: with no replica at
 * all, every call would reconnect). A -READONLY reply (the node was
 * demoted) asks again at once.
 */
#include <string.h>

#include "internal.h"

static int wait_on(const feed *f)
{
    return f->in_hook && f->cfg.redis_wait_replicas > 0;
}

static int role_on(const feed *f)
{
    return !f->in_hook && f->cfg.redis_sentinels && f->cfg.redis_wait_replicas > 0;
}

int feed__check_on(const feed *f)
{
    return wait_on(f) || role_on(f);
}

int feed__wait_append(feed *f, redisContext *c)
{
    return redisAppendCommand(c, "WAIT %u %u", f->cfg.redis_wait_replicas,
                              f->cfg.redis_wait_timeout_ms);
}

int feed__check_append(feed *f, redisContext *c)
{
    return wait_on(f) ? feed__wait_append(f, c) : redisAppendCommand(c, "ROLE");
}

/* The connection broke reading the check's reply: f->redis is dropped if
 * it is c; another connection (a cluster node's) is the caller's to drop. */
static int lost(feed *f, redisContext *c, const char *what)
{
    f->stats.redis_errors++;
    feed__error(f, FEED_EUNAVAILABLE, "Redis %s: %s", what,
                c->errstr[0] ? c->errstr : "connection lost");
    if (c == f->redis) {
        feed__redis_drop(f);
        f->redis_attempt_ms = feed__now_ms();
    }
    return FEED_EUNAVAILABLE;
}

/* Under Sentinel (never with a cluster: c is f->redis), a primary short of
 * replicas may have been replaced. */
static int short_of_replicas(feed *f)
{
    f->wait_short = 1;
    f->stats.redis_errors++;
    if (f->cfg.redis_sentinels) {
        feed__redis_drop(f);
        f->redis_attempt_ms = feed__now_ms();
    }
    return FEED_EREDIS;
}

int feed__wait_read(feed *f, redisContext *c)
{
    redisReply *r = NULL;

    if (redisGetReply(c, (void **)&r) != REDIS_OK)
        return lost(f, c, "WAIT");
    if (r->type == REDIS_REPLY_INTEGER && r->integer >= (long long)f->cfg.redis_wait_replicas) {
        freeReplyObject(r);
        return FEED_OK;
    }
    f->stats.wait_failures++;
    if (r->type == REDIS_REPLY_INTEGER)
        feed__error(f, FEED_EREDIS, "Redis WAIT: %lld of %u replicas acknowledged the write "
                    "within %u ms", r->integer, f->cfg.redis_wait_replicas,
                    f->cfg.redis_wait_timeout_ms);
    else
        feed__error(f, FEED_EREDIS, "Redis WAIT: %s",
                    r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    freeReplyObject(r);
    return short_of_replicas(f);
}

static int role_read(feed *f, redisContext *c)
{
    redisReply *r = NULL;
    size_t have;

    if (redisGetReply(c, (void **)&r) != REDIS_OK)
        return lost(f, c, "ROLE");
    /* A primary answers ["master", offset, [[ip, port, offset], ...]]. */
    have = r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
           r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "master") == 0 &&
           r->element[2]->type == REDIS_REPLY_ARRAY ? r->element[2]->elements : 0;
    freeReplyObject(r);
    if (have >= f->cfg.redis_wait_replicas)
        return FEED_OK;
    feed__error(f, FEED_EREDIS, "Redis primary has %zu of %u replicas attached: it may have "
                "been replaced; the Sentinels are asked again in retry_ms", have,
                f->cfg.redis_wait_replicas);
    return short_of_replicas(f);
}

int feed__check_read(feed *f, redisContext *c)
{
    return wait_on(f) ? feed__wait_read(f, c) : role_on(f) ? role_read(f, c) : FEED_OK;
}

/* On a cluster the check rides each node's pipeline, but a pass whose
 * commands were all sent elsewhere (MOVED, ASK, TRYAGAIN: nothing applied
 * here) gives its answer no meaning; a demoted node even refuses WAIT. It
 * is read, to keep the connection in step, and dropped. */
int feed__check_skip(feed *f, redisContext *c)
{
    redisReply *r = NULL;

    if (redisGetReply(c, (void **)&r) != REDIS_OK)
        return lost(f, c, "WAIT");
    freeReplyObject(r);
    return FEED_OK;
}

void feed__demote(feed *f)
{
    f->stats.failovers++;
    feed__redis_drop(f);
    f->redis_attempt_ms = 0;
}

void feed__if_demoted(feed *f, const redisReply *r)
{
    if (f->redis && feed__is_readonly(r))
        feed__demote(f);
}
