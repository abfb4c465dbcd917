/* connect.c -- a handle's first connects, as feed_open makes them: Redis
 * (node 0 connected and set up; on a cluster the slot map asked of a seed),
 * then PostgreSQL's primary, then its replica when one is configured. The
 * blocking open waits for it and judges the outcome (lib/api/feed.c); the
 * async open starts it on the loop and lets later requests find the
 * connections made.
 *
 * A replica that does not answer is tried again later (pages use the
 * primary meanwhile); one that answers and refuses is a configuration
 * error, reported like the primary's. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

typedef struct connect_op {
    feed_op              op;
    feed_connect_result *out;
    char                 err[FEED_ERRMSG];
} connect_op;

static enum feed_want connect_step(feed_op *op, int64_t now)
{
    connect_op *k = (connect_op *)op;
    feed_connect_result *out = k->out;

    (void)now;
    switch (op->state++) {
    case 0:
        op->batch = (feed_batch){ .n = 0, .flags = FEED_B_MAP };
        return FEED_W_REDIS;
    case 1:
        out->redis_rc = op->redis_rc;
        feed__msg_keep(out->redis_msg, k->err);
        k->err[0] = '\0';
        feed__sql_ask(op, -1, FEED_PG_PRIMARY, 0, NULL, 0);     /* -1: connect only */
        return FEED_W_SQL;
    case 2:
        out->pg_rc = op->sql_rc;
        feed__msg_keep(out->pg_msg, k->err);
        if (!op->c->cfg.pg_replica_conninfo || out->pg_rc == FEED_ENOMEM)
            break;
        k->err[0] = '\0';
        op->sql.server = FEED_PG_REPLICA;
        return FEED_W_SQL;
    case 3:
        if (op->sql_rc == FEED_EPG || op->sql_rc == FEED_ENOMEM || op->sql_rc == FEED_ERANGE) {
            out->pg_rc = op->sql_rc;
            feed__msg_keep(out->pg_msg, k->err);
        }
    }
    op->state = 4;
    op->rc = FEED_OK;
    return FEED_W_DONE;
}

static void connect_free(feed_op *op)
{
    free(op);
}

feed_op *feed__connect_op(feed_core *c, feed_connect_result *out, int *rc)
{
    connect_op *k = calloc(1, sizeof *k);

    if (!k) {
        *rc = FEED_ENOMEM;
        return NULL;
    }
    k->op.c = c;
    k->op.err = k->err;
    k->op.step = connect_step;
    k->op.free = connect_free;
    k->out = out;
    memset(out, 0, sizeof *out);
    *rc = FEED_OK;
    return &k->op;
}
