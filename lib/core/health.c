/* health.c -- feed_health: is each store answering, for health checks.
 *
 * feed_open succeeds with one store down (pages then come from the other),
 * so a wrong port can go unnoticed; this request makes each store's state
 * visible. It goes through the same paths as every other request: a
 * dropped connection is retried at most once per retry_ms, so a health
 * endpoint polled in a loop cannot start a connect storm, and each check is
 * bounded by its store's timeout. A cluster is up when every primary of its
 * slot map answers: a PING by the usual path first (it sets the transport
 * up, under retry_ms, and runs pending repairs), then one to each primary,
 * every node at once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

enum { HEALTH_START, HEALTH_PING, HEALTH_MAPPED, HEALTH_PRIMARIES, HEALTH_PG, HEALTH_DONE };

typedef struct health_op {
    feed_op           op;
    feed_health_info *out;
    int               pong;         /* the last PING answered PONG */
    int              *targets;
    size_t            ntargets, up;
    char              why[FEED_ERRMSG];    /* the first primary that failed */
} health_op;

static int health_node_of(void *arg, size_t i)
{
    return ((health_op *)arg)->targets[i];
}

/* Why primary i failed, kept when it is the first (also the batch's lost). */
static void health_first_why(void *arg, size_t i, const char *msg)
{
    health_op *h = arg;
    const feed_node *n = h->op.c->topo.nodes[h->targets[i]];
    char addr[sizeof n->addr.host + 8];

    if (h->why[0])
        return;
    snprintf(addr, sizeof addr, "%s:%d", n->addr.host, n->addr.port);
    if (strstr(msg, addr))
        feed__msg_keep_n(h->why, sizeof h->why, msg);
    else
        snprintf(h->why, sizeof h->why, "%.260s: %.240s", addr, msg);
}

static int health_build(void *arg, size_t i, const char ***argv, const size_t **lens)
{
    static const char *ping[1] = { "PING" };
    static const size_t ping_len[1] = { 4 };

    (void)arg;
    (void)i;
    *argv = ping;
    *lens = ping_len;
    return 1;
}

static void health_reply(void *arg, size_t i, const redisReply *r)
{
    health_op *h = arg;
    int ok = r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;

    if (h->op.state == HEALTH_PING) {
        h->pong = ok;
        if (!ok)
            snprintf(h->out->redis_msg, sizeof h->out->redis_msg,
                     "Redis PING: unexpected reply (type %d)", r->type);
        return;
    }
    if (ok) {
        h->up++;
        return;
    }
    h->op.c->stats.redis_errors++;
    health_first_why(h, i, r->type == REDIS_REPLY_ERROR ? r->str : "PING: unexpected reply");
}

static enum feed_want health_ask_pg(health_op *h)
{
    /* One read of the feed table through the prepared statement every
     * page uses: a server that answers but lost the table or the rights
     * is down for feedcache. A row out of range is still an answer. */
    h->op.err[0] = '\0';
    feed__sql_ask(&h->op, FEED_SQL_TOP, FEED_PG_PRIMARY, 0, (int64_t[]){ 0, 1 }, 2);
    h->op.state = HEALTH_PG;
    return FEED_W_SQL;
}

static enum feed_want health_step(feed_op *op, int64_t now)
{
    health_op *h = (health_op *)op;
    feed_core *c = op->c;
    feed_health_info *out = h->out;

    (void)now;
    switch (op->state) {
    case HEALTH_START:
        op->state = HEALTH_PING;
        op->batch = (feed_batch){ .n = 1, .slot = 0, .arg = h, .build = health_build,
                                  .reply = health_reply };
        return FEED_W_REDIS;
    case HEALTH_PING:
        out->redis_up = op->redis_rc == FEED_OK && h->pong;
        if (op->redis_rc != FEED_OK)
            feed__msg_keep_n(out->redis_msg, sizeof out->redis_msg, op->err);
        if (!c->topo.cluster)
            return health_ask_pg(h);
        op->state = HEALTH_MAPPED;      /* the primaries by a map asked afresh */
        op->batch = (feed_batch){ .n = 0, .flags = FEED_B_MAP, .arg = h };
        return FEED_W_REDIS;
    case HEALTH_MAPPED:
        if (!(h->targets = feed__map_primaries(&c->topo, &h->ntargets))) {
            op->rc = feed__msg(op->err, FEED_ENOMEM, "out of memory for a health check");
            op->state = HEALTH_DONE;
            return FEED_W_DONE;
        }
        if (h->ntargets == 0) {
            char why[FEED_ERRMSG];
            feed__msg_keep(why, out->redis_msg[0] ? out->redis_msg : op->err);
            out->redis_up = 0;
            feed__msg(op->err, FEED_EREDIS, "Redis Cluster: no primary known (%.400s)", why);
            feed__msg_keep_n(out->redis_msg, sizeof out->redis_msg, op->err);
            return health_ask_pg(h);
        }
        out->redis_msg[0] = '\0';
        op->err[0] = '\0';
        op->state = HEALTH_PRIMARIES;
        op->batch = (feed_batch){ .n = h->ntargets, .flags = FEED_B_NODE, .arg = h,
                                  .build = health_build, .reply = health_reply,
                                  .node_of = health_node_of, .lost = health_first_why };
        return FEED_W_REDIS;
    case HEALTH_PRIMARIES:
        out->redis_up = h->up == h->ntargets;
        if (!out->redis_up)
            feed__msg(op->err, FEED_EREDIS, "Redis Cluster: %zu of %zu primaries answered PING; "
                      "%s", h->up, h->ntargets, h->why);
        if (!out->redis_up)
            feed__msg_keep_n(out->redis_msg, sizeof out->redis_msg, op->err);
        return health_ask_pg(h);
    case HEALTH_PG:
        feed__rows_free(&op->sql.rows);
        if (op->sql_rc == FEED_OK || op->sql_rc == FEED_ERANGE)
            out->pg_up = 1;
        else
            feed__msg_keep_n(out->pg_msg, sizeof out->pg_msg, op->err);
        out->pg_refused = !out->pg_up && op->sql.refused;
        for (size_t i = 0; !out->redis_up && i < c->topo.nnodes; i++)
            out->redis_refused |= c->topo.nodes[i]->state == FEED_NODE_DOWN &&
                                  c->topo.nodes[i]->refused;
        feed__msg(op->err, FEED_OK, "%s%s%s", out->redis_msg,
                  *out->redis_msg && *out->pg_msg ? "; " : "", out->pg_msg);
        op->rc = !out->redis_up && !out->pg_up ? FEED_EUNAVAILABLE
               : !out->redis_up ? FEED_EREDIS : out->pg_up ? FEED_OK : FEED_EPG;
        op->state = HEALTH_DONE;
        return FEED_W_DONE;
    default:
        return FEED_W_DONE;
    }
}

static void health_free(feed_op *op)
{
    health_op *h = (health_op *)op;

    feed__rows_free(&op->sql.rows);
    free(h->targets);
    free(h);
}

feed_op *feed__health_op(feed_core *c, char *err, feed_health_info *out, int *rc)
{
    health_op *h = calloc(1, sizeof *h);

    if (!h) {
        *rc = feed__msg(err, FEED_ENOMEM, "out of memory for a health check");
        return NULL;
    }
    memset(out, 0, sizeof *out);
    h->op.c = c;
    h->op.err = err;
    h->op.step = health_step;
    h->op.free = health_free;
    h->out = out;
    *rc = FEED_OK;
    return &h->op;
}
