/* health.c -- feed_health: is each store answering, for health checks.
 *
 * feed_open succeeds with one store down (pages then come from the other),
 * so a wrong port can go unnoticed; this call makes each store's state
 * visible. It goes through the same paths as every other call: a dropped
 * connection is retried at most once per retry_ms (redis.c, pg.c), so a
 * health endpoint polled in a loop cannot start a connect storm, and each
 * check is bounded by its store's timeout.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* The handle's message, cut to a field of feed_health_info. */
static void take_msg(char *dst, size_t cap, const feed *f)
{
    size_t len = strnlen(f->errmsg, cap - 1);

    memcpy(dst, f->errmsg, len);
    dst[len] = '\0';
}

static void check_redis(feed *f, feed_health_info *out)
{
    const char *argv[1] = { "PING" };
    redisReply *r = feed__redis_command(f, 1, argv, NULL);

    if (r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0)
        out->redis_up = 1;
    else if (r)
        snprintf(out->redis_msg, sizeof out->redis_msg,
                 "Redis PING: unexpected reply (type %d)", r->type);
    else
        take_msg(out->redis_msg, sizeof out->redis_msg, f);
    freeReplyObject(r);
}

/* A cluster is up when every primary of its slot map answers: a PING by
 * the usual path first (it sets the transport up, under retry_ms, and runs
 * pending repairs), then one to each primary (cluster_io.c). */
static void check_cluster(feed *f, feed_health_info *out)
{
    size_t up, total;

    check_redis(f, out);
    if (!f->cluster)
        return;             /* not even a slot map: check_redis said why */
    feed__clear_error(f);
    out->redis_msg[0] = '\0';
    out->redis_up = feed__cluster_ping(f, &up, &total) == FEED_OK;
    if (!out->redis_up)
        take_msg(out->redis_msg, sizeof out->redis_msg, f);
}

/* One read of the feed table through the prepared statement every page
 * uses: a server that answers but lost the table or the rights is down for
 * feedcache. A row out of range is still an answer. */
static void check_pg(feed *f, feed_health_info *out)
{
    feed_rows rows;
    int rc = feed__pg_top(f, 0, 1, &rows);

    feed__rows_free(&rows);
    if (rc == FEED_OK || rc == FEED_ERANGE)
        out->pg_up = 1;
    else
        take_msg(out->pg_msg, sizeof out->pg_msg, f);
}

int feed_health(feed *f, feed_health_info *out)
{
    if (!f)
        return FEED_EINVAL;
    feed__clear_error(f);
    if (!out)
        return feed__error(f, FEED_EINVAL, "feed_health: out is NULL");
    memset(out, 0, sizeof *out);
    if (f->cfg.redis_cluster)
        check_cluster(f, out);
    else
        check_redis(f, out);
    check_pg(f, out);
    feed__error(f, FEED_OK, "%s%s%s", out->redis_msg,
                *out->redis_msg && *out->pg_msg ? "; " : "", out->pg_msg);
    if (!out->redis_up && !out->pg_up)
        return FEED_EUNAVAILABLE;
    if (!out->redis_up)
        return FEED_EREDIS;
    return out->pg_up ? FEED_OK : FEED_EPG;
}
