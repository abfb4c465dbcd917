/* sim_pg.c -- PostgreSQL's side in memory for the simulation (sim.h).
 *
 * Each owner of each table keeps the list of its states: (version, rows)
 * for every commit that changed it. A statement at version v reads the
 * last state at or before v, so a page can be checked against every state
 * the tables went through while it was being served, and a replica is the
 * same tables at an older version.
 */
#include "sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

typedef struct simpg_state {
    uint64_t   version;
    simpg_row *rows;
    size_t     n;
} simpg_state;

typedef struct simpg_owner {
    int          table;
    int64_t      owner;
    simpg_state *states;        /* ascending versions */
    size_t       nstates;
} simpg_owner;

struct simpg {
    simpg_owner *o;
    size_t       n;
    uint64_t     version;
};

static const simpg_row simpg_none[1];

simpg *simpg_new(void) { return calloc(1, sizeof(simpg)); }

void simpg_free(simpg *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++) {
        for (size_t j = 0; j < p->o[i].nstates; j++)
            free(p->o[i].states[j].rows);
        free(p->o[i].states);
    }
    free(p->o);
    free(p);
}

uint64_t simpg_version(const simpg *p) { return p->version; }

static simpg_owner *simpg_owner_of(const simpg *p, int table, int64_t owner)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->o[i].table == table && p->o[i].owner == owner)
            return &p->o[i];
    return NULL;
}

static const simpg_state *simpg_at(const simpg_owner *o, uint64_t v)
{
    const simpg_state *s = NULL;

    for (size_t j = 0; o && j < o->nstates && o->states[j].version <= v; j++)
        s = &o->states[j];
    return s;
}

const simpg_row *simpg_rows(const simpg *p, int table, int64_t owner, uint64_t v, size_t *n)
{
    const simpg_state *s = simpg_at(simpg_owner_of(p, table, owner), v);

    *n = s ? s->n : 0;
    return s ? s->rows : simpg_none;
}

/* (a) before (b) in (score DESC, id DESC)? */
static int simpg_before(int64_t as, int64_t ai, int64_t bs, int64_t bi)
{
    return as > bs || (as == bs && ai > bi);
}

/* A new state of owner: its last rows without id, plus (score, id) when
 * add. */
static uint64_t simpg_commit(simpg *p, int table, int64_t owner, int add, int64_t score,
                             int64_t id)
{
    simpg_owner *o = simpg_owner_of(p, table, owner);
    const simpg_state *last;
    simpg_state *more;
    simpg_row *rows;
    size_t n = 0;

    if (!o) {
        simpg_owner *grown = realloc(p->o, (p->n + 1) * sizeof *grown);
        if (!grown)
            return 0;
        p->o = grown;
        o = &p->o[p->n++];
        *o = (simpg_owner){ table, owner, NULL, 0 };
    }
    last = o->nstates ? &o->states[o->nstates - 1] : NULL;
    rows = malloc(((last ? last->n : 0) + 1) * sizeof *rows);
    more = realloc(o->states, (o->nstates + 1) * sizeof *more);
    if (!rows || !more) {
        free(rows);
        if (more)
            o->states = more;
        return 0;
    }
    o->states = more;
    last = o->nstates ? &o->states[o->nstates - 1] : NULL;
    for (size_t i = 0; last && i < last->n; i++) {
        if (last->rows[i].id == id)
            continue;
        rows[n++] = last->rows[i];
    }
    if (add) {
        size_t at = 0;
        while (at < n && simpg_before(rows[at].score, rows[at].id, score, id))
            at++;
        memmove(&rows[at + 1], &rows[at], (n - at) * sizeof *rows);
        rows[at] = (simpg_row){ score, id };
        n++;
    }
    o->states[o->nstates++] = (simpg_state){ ++p->version, rows, n };
    return p->version;
}

uint64_t simpg_upsert(simpg *p, int table, int64_t owner, int64_t score, int64_t id)
{
    return simpg_commit(p, table, owner, 1, score, id);
}

uint64_t simpg_delete(simpg *p, int table, int64_t owner, int64_t id)
{
    return simpg_commit(p, table, owner, 0, 0, id);
}

/* Up to limit rows of owner strictly after (score, id) (first: from the
 * top), descending, into *out (malloc'd). */
static int simpg_after(const simpg *p, int table, int64_t owner, uint64_t v, int first,
                       int64_t score, int64_t id, int64_t limit, feed_rows *out)
{
    size_t n;
    const simpg_row *rows = simpg_rows(p, table, owner, v, &n);

    out->count = 0;
    out->items = malloc((n + 1) * sizeof *out->items);
    if (!out->items)
        return FEED_ENOMEM;
    for (size_t i = 0; i < n && (int64_t)out->count < limit; i++)
        if (first || simpg_before(score, id, rows[i].score, rows[i].id))
            out->items[out->count++] = (feed_item){ rows[i].score, rows[i].id };
    return FEED_OK;
}

int simpg_answer(const simpg *p, struct feed_sql *q, uint64_t v, uint64_t lsn, uint64_t replayed)
{
    const int64_t *a = q->params;
    size_t n;
    const simpg_row *rows;

    switch (q->stmt) {
    case FEED_SQL_TOP:
        return simpg_after(p, SIMPG_FEED, a[0], v, 1, 0, 0, a[1], &q->rows);
    case FEED_SQL_AFTER:
        return simpg_after(p, SIMPG_FEED, a[0], v, 0, a[1], a[2], a[3], &q->rows);
    case FEED_SQL_BEFORE:                       /* ascending: closest first */
        rows = simpg_rows(p, SIMPG_FEED, a[0], v, &n);
        q->rows.count = 0;
        q->rows.items = malloc((n + 1) * sizeof *q->rows.items);
        if (!q->rows.items)
            return FEED_ENOMEM;
        for (size_t i = n; i-- > 0 && (int64_t)q->rows.count < a[3];)
            if (simpg_before(rows[i].score, rows[i].id, a[1], a[2]))
                q->rows.items[q->rows.count++] = (feed_item){ rows[i].score, rows[i].id };
        return FEED_OK;
    case FEED_SQL_MERGE: {
        int first = a[1] == INT64_MAX;
        for (size_t k = 0; k <= q->nauthors; k++)
            q->tagged[k] = (feed_rows){ NULL, 0 };
        for (size_t k = 0; k <= q->nauthors; k++) {
            int rc;
            if (k == 0 && !q->with_feed) {
                q->tagged[0].items = malloc(sizeof *q->tagged[0].items);
                rc = q->tagged[0].items ? FEED_OK : FEED_ENOMEM;
            } else {
                rc = simpg_after(p, k ? SIMPG_AUTHORS : SIMPG_FEED,
                                 k ? q->authors[k - 1] : a[0], v, first, a[1], a[2], a[3],
                                 &q->tagged[k]);
            }
            if (rc != FEED_OK) {
                for (size_t j = 0; j <= q->nauthors; j++)
                    feed__rows_free(&q->tagged[j]);
                return rc;
            }
        }
        return FEED_OK;
    }
    case FEED_SQL_PROBE_PRIMARY:
        snprintf(q->text[0], sizeof q->text[0], "0/%llX", (unsigned long long)lsn);
        return FEED_OK;
    case FEED_SQL_PROBE_REPLICA: {
        /* Has the replica replayed $1 (and $2)? "t" / "f" each. */
        for (int i = 0; i < 2; i++) {
            unsigned long long at = 0;
            int known = sscanf(q->text[i], "0/%llX", &at) == 1;
            snprintf(q->text[i], sizeof q->text[i], "%s", known && at <= replayed ? "t" : "f");
        }
        return FEED_OK;
    }
    default:
        return FEED_EINVAL;
    }
}
