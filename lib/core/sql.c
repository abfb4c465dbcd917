/* sql.c -- which PostgreSQL server reads what.
 *
 * Rebuilds read the primary, always, so that a rebuild never installs rows
 * from a replica that has not yet replayed a write whose hook already ran.
 * Pages past the cache may read the replica (pg_replica_conninfo): its rows
 * never reach the cache. When it cannot answer (down, frozen, refusing, a
 * recovery conflict) the primary does. With pg_replica_max_lag_ms the
 * replica answers only while it is proven to have replayed what the
 * primary had written that long before:
 *
 * A probe is the primary's WAL insert position L, asked for at probe_ms:
 * every transaction that had committed by then wrote its commit record
 * below L. Once the replica has replayed past L, it shows all of them, so
 * until probe_ms + max every page it answers shows every write committed at
 * least max ms before the page: the bound. The window opens when L was
 * asked for, not when the replica said it had replayed it: that answer may
 * come long after (a slow connect, a paused client) and says nothing of
 * what the primary committed meanwhile. Each probe is checked twice: at
 * once (an idle replica passes), and again at the next probe, by when a
 * replica that streams with a lag below max/4 has replayed it; a busy
 * primary thus still keeps the replica usable. Probes run only when the
 * window has closed, at most once per max/4 ms: two small statements each.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

enum { SP_START, SP_PROBED_PRIMARY, SP_PROBED_REPLICA, SP_REPLICA, SP_PRIMARY, SP_DONE };

void feed__sql_ask(feed_op *op, int stmt, int server, int64_t uid, const int64_t *params,
                   int nparams)
{
    feed_sql *q = &op->sql;

    q->stmt = stmt;
    q->server = server;
    q->uid = uid;
    q->nparams = nparams;
    for (int i = 0; i < nparams; i++)
        q->params[i] = params[i];
    q->rows.items = NULL;
    q->rows.count = 0;
}

void feed__sqlpage_begin(feed_sqlpage *sp, int stmt, int64_t uid, const int64_t *params,
                         int nparams)
{
    sp->state = SP_START;
    sp->stmt = stmt;
    sp->uid = uid;
    sp->nparams = nparams;
    for (int i = 0; i < nparams; i++)
        sp->params[i] = params[i];
    sp->why = NULL;     /* a page's why is freed by the step that ends it */
}

void feed__sqlpage_end(feed_sqlpage *sp)
{
    free(sp->why);
    sp->why = NULL;
}

static enum feed_want read_on(feed_sqlpage *sp, feed_op *op, int server, int state)
{
    feed__sql_ask(op, sp->stmt, server, sp->uid, sp->params, sp->nparams);
    sp->state = state;
    return FEED_W_SQL;
}

/* The page on the replica when it is fresh, else on the primary. */
static enum feed_want read_fresh(feed_sqlpage *sp, feed_op *op, int fresh)
{
    if (fresh)
        return read_on(sp, op, FEED_PG_REPLICA, SP_REPLICA);
    op->c->stats.replica_lagging++;
    return read_on(sp, op, FEED_PG_PRIMARY, SP_PRIMARY);
}

/* The page on the replica when it is proven fresh now, else on the
 * primary; or first a probe, when one is due. */
static enum feed_want read_start(feed_sqlpage *sp, feed_op *op, int64_t now)
{
    feed_core *c = op->c;
    int64_t max = c->cfg.pg_replica_max_lag_ms;

    if (max == 0 || now < c->replica_fresh_until)
        return read_fresh(sp, op, 1);
    if (now - c->replica_tried_ms < max / 4 + 1)
        return read_fresh(sp, op, 0);
    c->replica_tried_ms = now;
    sp->asked_ms = now;     /* before L is read: every commit until now is below it */
    feed__sql_ask(op, FEED_SQL_PROBE_PRIMARY, FEED_PG_PRIMARY, sp->uid, NULL, 0);
    sp->state = SP_PROBED_PRIMARY;
    return FEED_W_SQL;
}

enum feed_want feed__sqlpage_step(feed_sqlpage *sp, feed_op *op, int64_t now, int *rc)
{
    feed_core *c = op->c;
    feed_sql *q = &op->sql;
    char pg_msg[FEED_ERRMSG];

    switch (sp->state) {
    case SP_START:
        if (!c->cfg.pg_replica_conninfo)
            return read_on(sp, op, FEED_PG_PRIMARY, SP_PRIMARY);
        return read_start(sp, op, now);
    case SP_PROBED_PRIMARY:
        if (op->sql_rc != FEED_OK)
            return read_fresh(sp, op, 0);
        /* Ask of the replica this L (text[0]) and the last probe's. */
        snprintf(q->text[1], sizeof q->text[1], "%s",
                 c->replica_probe_ms ? c->replica_probe_lsn : q->text[0]);
        snprintf(c->replica_probe_lsn, sizeof c->replica_probe_lsn, "%s", q->text[0]);
        sp->probe_ms = c->replica_probe_ms;
        c->replica_probe_ms = sp->asked_ms;
        feed__sql_ask(op, FEED_SQL_PROBE_REPLICA, FEED_PG_REPLICA, sp->uid, NULL, 0);
        sp->state = SP_PROBED_REPLICA;
        return FEED_W_SQL;
    case SP_PROBED_REPLICA:
        /* NULL (not in recovery: not a replica) proves nothing. */
        if (op->sql_rc == FEED_OK) {
            if (strcmp(q->text[0], "t") == 0)
                c->replica_fresh_until = sp->asked_ms + c->cfg.pg_replica_max_lag_ms;
            else if (sp->probe_ms && strcmp(q->text[1], "t") == 0)
                c->replica_fresh_until = sp->probe_ms + c->cfg.pg_replica_max_lag_ms;
        }
        return read_fresh(sp, op, now < c->replica_fresh_until);
    case SP_REPLICA:
        if (op->sql_rc == FEED_OK || op->sql_rc == FEED_ENOMEM || op->sql_rc == FEED_ERANGE) {
            *rc = op->sql_rc;   /* the primary holds the same rows: ERANGE there too */
            sp->state = SP_DONE;
            return FEED_W_DONE;
        }
        c->stats.replica_fallbacks++;
        /* Without the memory to keep why, the page still comes, with the
         * primary's word alone. */
        if ((sp->why = malloc(FEED_ERRMSG)) != NULL)
            feed__msg_keep(sp->why, op->err);
        return read_on(sp, op, FEED_PG_PRIMARY, SP_PRIMARY);
    case SP_PRIMARY:
        *rc = op->sql_rc;
        if (sp->why && sp->why[0] && *rc == FEED_OK) {
            feed__msg_keep(op->err, sp->why);   /* keep why not by the replica */
        } else if (sp->why && sp->why[0] && *rc != FEED_ENOMEM) {
            feed__msg_keep(pg_msg, op->err);
            feed__msg(op->err, *rc, "%s; %s", sp->why, pg_msg);
        }
        feed__sqlpage_end(sp);
        sp->state = SP_DONE;
        return FEED_W_DONE;
    default:
        *rc = FEED_EPG;
        return FEED_W_DONE;
    }
}
