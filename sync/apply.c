/* apply.c -- from pgoutput messages to the set of feeds a batch of
 * committed transactions touched (see apply.h). No I/O here: the program
 * (feedcache_sync.c) applies a batch; tests feed messages in directly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apply.h"

void sa_init(sync_apply *a, const char *schema, const char *table,
             const char *owner_column)
{
    memset(a, 0, sizeof *a);
    a->schema = schema;
    a->table = table;
    a->owner_column = owner_column;
}

void sa_authors(sync_apply *a, const char *schema, const char *table, const char *column)
{
    a->author_schema = schema;
    a->author_table = table;
    a->author_column = column;
}

void sa_free(sync_apply *a)
{
    free(a->rels);
    free(a->batch.uids);
    free(a->batch.authors);
    free(a->batch.xids);
    memset(a, 0, sizeof *a);
}

void sa_done(sync_apply *a)
{
    a->batch.nuids = a->batch.nauthors = a->batch.nxids = a->batch.txns = 0;
    a->batch.truncate = a->batch.truncate_authors = 0;
}

void sa_reset(sync_apply *a)
{
    sa_done(a);
    a->nrels = 0;
    a->in_txn = 0;
}

int sa_pending(const sync_apply *a)
{
    return a->batch.txns > 0;
}

static int error(sync_apply *a, const char *fmt, const char *s1, const char *s2)
{
    snprintf(a->err, sizeof a->err, fmt, s1, s2);
    return -1;
}

static int grow(void **p, size_t *cap, size_t need, size_t size)
{
    size_t c = *cap ? *cap : 64;
    void *q;

    if (need <= *cap)
        return 0;
    while (c < need)
        c *= 2;
    if (!(q = realloc(*p, c * size)))
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

static sync_rel *find_rel(sync_apply *a, uint32_t relid)
{
    for (size_t i = 0; i < a->nrels; i++)
        if (a->rels[i].relid == relid)
            return &a->rels[i];
    return NULL;
}

static const char *table_of(const sync_apply *a, const sync_rel *r)
{
    return r->ours == SA_AUTHORS ? a->author_table : a->table;
}

static const char *column_of(const sync_apply *a, const sync_rel *r)
{
    return r->ours == SA_AUTHORS ? a->author_column : a->owner_column;
}

static int is_table(const pgo_msg *m, const char *schema, const char *table)
{
    return table && strcmp(m->relname, table) == 0 && (!schema || strcmp(m->nspname, schema) == 0);
}

/* A Relation message: is it one of our tables, where is its owner column,
 * and will updates and deletes say which feed they touched? They carry the
 * old row's replica identity columns only: the owner must be one of them
 * (it is with the default key (uid, id)), or the identity must be FULL. */
static int relation(sync_apply *a, const pgo_msg *m)
{
    sync_rel *r = find_rel(a, m->relid);

    if (!r) {
        if (grow((void **)&a->rels, &a->cap_rels, a->nrels + 1, sizeof *a->rels) != 0)
            return error(a, "%s%s", "out of memory", "");
        r = &a->rels[a->nrels++];
    }
    r->relid = m->relid;
    r->ours = is_table(m, a->schema, a->table) ? SA_FEEDS
            : is_table(m, a->author_schema, a->author_table) ? SA_AUTHORS : SA_NONE;
    r->owner_col = -1;
    if (!r->ours)
        return 0;
    for (uint16_t i = 0; i < m->ncols; i++)
        if (strcmp(m->cols[i].name, column_of(a, r)) == 0)
            r->owner_col = i;
    if (r->owner_col < 0)
        return error(a, "table \"%s\" has no column \"%s\" in the replication stream",
                     table_of(a, r), column_of(a, r));
    if (m->replident != 'f' && !(m->cols[r->owner_col].flags & 1)) {
        r->owner_col = -1;   /* unusable: its changes are errors too */
        return error(a, "table \"%s\": the owner column \"%s\" is not part of the replica "
                     "identity, so a delete or an owner change would not say which feed it "
                     "left; make the primary key include it, or ALTER TABLE ... REPLICA "
                     "IDENTITY FULL", table_of(a, r), column_of(a, r));
    }
    return 0;
}

static int add_uid(sync_apply *a, const sync_rel *r, int64_t uid)
{
    sync_batch *b = &a->batch;
    int64_t **list = r->ours == SA_AUTHORS ? &b->authors : &b->uids;
    size_t *n = r->ours == SA_AUTHORS ? &b->nauthors : &b->nuids;
    size_t *cap = r->ours == SA_AUTHORS ? &b->cap_authors : &b->cap_uids;

    if (grow((void **)list, cap, *n + 1, sizeof **list) != 0)
        return error(a, "%s%s", "out of memory", "");
    (*list)[(*n)++] = uid;
    a->touched = 1;
    return 0;
}

/* The owner in a tuple: text, a decimal integer. NULL: the row belongs to
 * no feed (a nullable owner column), nothing to do. */
static int owner_of(sync_apply *a, const sync_rel *r, const pgo_tuple *t, int required)
{
    const pgo_value *v;
    int64_t uid;

    if (r->owner_col >= t->ncols)
        return required ? error(a, "a change to \"%s\" lacks the column \"%s\"",
                                table_of(a, r), column_of(a, r)) : 0;
    v = &t->cols[r->owner_col];
    if (v->kind == 'n' || (v->kind == 'u' && !required))
        return 0;
    if (pgo_value_i64(v, &uid) != 0)
        return error(a, "a change to \"%s\": column \"%s\" is not a 64-bit integer",
                     table_of(a, r), column_of(a, r));
    return add_uid(a, r, uid);
}

static int change(sync_apply *a, const pgo_msg *m)
{
    sync_rel *r = find_rel(a, m->relid);

    if (!r)
        return error(a, "%s%s", "a change names a relation the stream never described", "");
    if (!r->ours)
        return 0;
    if (r->owner_col < 0)
        return error(a, "a change to \"%s\", which cannot be followed (see above)%s",
                     table_of(a, r), "");
    if (!a->in_txn)
        return error(a, "%s%s", "a change outside a transaction", "");
    a->changes++;
    switch (m->kind) {
    case 'I':
        return owner_of(a, r, &m->new_tuple, 1);
    case 'U':   /* an owner change names both feeds: the old in the old key */
        if (owner_of(a, r, &m->new_tuple, 1) != 0)
            return -1;
        return m->old_kind ? owner_of(a, r, &m->old_tuple, 0) : 0;
    default:    /* 'D' */
        return owner_of(a, r, &m->old_tuple, 1);
    }
}

static int on_truncate(sync_apply *a, const pgo_msg *m)
{
    for (uint32_t i = 0; i < m->nrels; i++) {
        sync_rel *r = find_rel(a, pgo_truncate_relid(m, i));
        if (r && r->ours) {
            if (r->ours == SA_AUTHORS)
                a->batch.truncate_authors = 1;
            else
                a->batch.truncate = 1;
            a->touched = 1;
            a->changes++;
        }
    }
    return 0;
}

int sa_message(sync_apply *a, const pgo_msg *m)
{
    sync_batch *b = &a->batch;

    switch (m->kind) {
    case 'B':
        if (a->in_txn)
            return error(a, "%s%s", "Begin inside a transaction", "");
        a->in_txn = 1;
        a->xid = m->xid;
        a->touched = 0;
        return 0;
    case 'C':
        if (!a->in_txn)
            return error(a, "%s%s", "Commit outside a transaction", "");
        a->in_txn = 0;
        if (a->touched) {
            if (grow((void **)&b->xids, &b->cap_xids, b->nxids + 1, sizeof *b->xids) != 0)
                return error(a, "%s%s", "out of memory", "");
            b->xids[b->nxids++] = a->xid;
        }
        b->txns++;
        b->end_lsn = m->end_lsn;
        b->commit_ts = m->commit_ts;
        a->txns++;
        return 0;
    case 'R':
        return relation(a, m);
    case 'I':
    case 'U':
    case 'D':
        return change(a, m);
    case 'T':
        return on_truncate(a, m);
    default:    /* Origin, Type, Message: nothing to apply */
        return 0;
    }
}

static int cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;

    return (a > b) - (a < b);
}

/* Sort v[0..*n) and drop repeats. */
static void unique(int64_t *v, size_t *n)
{
    size_t k = 0;

    if (*n == 0)
        return;     /* v may still be NULL: qsort wants an array */
    qsort(v, *n, sizeof *v, cmp_i64);
    for (size_t i = 0; i < *n; i++)
        if (k == 0 || v[k - 1] != v[i])
            v[k++] = v[i];
    *n = k;
}

void sa_unique(sync_apply *a, size_t *n)
{
    unique(a->batch.uids, &a->batch.nuids);
    *n = a->batch.nuids;
}

void sa_unique_authors(sync_apply *a, size_t *n)
{
    unique(a->batch.authors, &a->batch.nauthors);
    *n = a->batch.nauthors;
}
