/* bulk.c -- dropping cached copies in bulk: what a change log
 * (feedcache-sync) needs. One DEL of a feed's copy and lease is always safe:
 * an absent copy is rebuilt from SQL by the next read, and without its lease
 * a rebuild that read SQL before the change can never install. So these
 * requests are idempotent and commute with every hook, rebuild and with each
 * other: replaying them, late or twice, cannot make a copy wrong.
 *
 * feed_invalidate_all walks the keys of the prefix (key format and family):
 * SCAN, then DEL the keys of each reply. On a Redis Cluster each primary is
 * walked on its own connection and the keys of a reply are DELed there, one
 * DEL per key (they lie on many slots), in one trip per SCAN reply. A key
 * that left the node between its SCAN and its DEL (MOVED, ASK) is kept
 * aside and DELed after the walk, routed. SCAN promises the keys
 * that stay on one node while it runs, not keys that move from a node not
 * yet scanned to one already scanned: a slot migrating (resharding) or a
 * failover during the walk. So after the walk the map is asked again and
 * every primary says whether it has a slot migrating or importing (CLUSTER
 * NODES, its "myself" line: "[slot->-id]" / "[slot-<-id]"). Same map and
 * nothing migrating: no key changed node during the walk, so each one there
 * before the call was met on its node and dropped. Else the walk runs again
 * (MAX_WALKS in all, then FEED_EREDIS: call again once the resharding is
 * over). A primary that fails mid-walk fails the call (the caller calls
 * again once a replica has taken over).
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#define MAX_WALKS 3

/* ---- feed_invalidate_many ---------------------------------------------- */

typedef struct many_op {
    feed_op     op;
    int         fam;            /* enum feed_family */
    int64_t    *uids;
    size_t      n;
    char       *keys;           /* key, lease: key_cap bytes each */
    const char *argv[5];
    size_t      lens[5];
} many_op;

static int many_build(void *arg, size_t i, const char ***argv, const size_t **lens)
{
    many_op *m = arg;
    feed_core *c = m->op.c;
    char *key = m->keys, *lease = m->keys + c->key_cap;
    const char *words[5] = { "EVALSHA", c->sha[FEED_SCRIPT_INVALIDATE], "2", key, lease };

    feed__family_keys(c->key_base[m->fam], m->uids[i], key, lease);
    for (int k = 0; k < 5; k++) {
        m->argv[k] = words[k];
        m->lens[k] = k == 1 ? 40 : strlen(words[k]);    /* a SHA: 40 bytes, as in hooks.c */
    }
    *argv = m->argv;
    *lens = m->lens;
    return 5;
}

static enum feed_want many_step(feed_op *op, int64_t now)
{
    many_op *m = (many_op *)op;

    (void)now;
    if (op->state == 0) {
        op->state = 1;
        op->batch = (feed_batch){ .n = m->n, .flags = FEED_B_EACH, .arg = m,
                                  .build = many_build };
        return FEED_W_REDIS;
    }
    /* Which feeds were dropped is unknown: each goes on the process-wide
     * repair list, like the feed of a failed hook. */
    if (op->redis_rc == FEED_EREDIS)
        for (size_t i = 0; i < m->n; i++)
            feed__repair_remember(op->c, m->fam, m->uids[i]);
    op->rc = op->redis_rc;
    return FEED_W_DONE;
}

static void many_free(feed_op *op)
{
    many_op *m = (many_op *)op;

    free(m->uids);
    free(m->keys);
    free(m);
}

feed_op *feed__invalidate_many_op(feed_core *c, char *err, int fam, const int64_t *uids,
                                  size_t n, int *rc)
{
    many_op *m = calloc(1, sizeof *m);

    if (!m || !(m->uids = malloc((n ? n : 1) * sizeof *uids)) ||
        !(m->keys = malloc(2 * c->key_cap))) {
        if (m)
            free(m->uids);
        free(m);
        *rc = feed__msg(err, FEED_ENOMEM, "out of memory invalidating %zu feeds", n);
        return NULL;
    }
    memcpy(m->uids, uids, n * sizeof *uids);
    m->n = n;
    m->fam = fam;
    m->op.c = c;
    m->op.err = err;
    m->op.step = many_step;
    m->op.free = many_free;
    *rc = FEED_OK;
    return &m->op;
}

/* ---- feed_invalidate_all ----------------------------------------------- */

/* feed__keys_keep: the keys of the array reply arr that keep(arg, key)
 * says to keep, else all (each must then be a string), after verb, into k,
 * its last list freed first. FEED_OK, FEED_EINVAL (with keep NULL, a key
 * not a string), or FEED_ENOMEM; k holds what was kept until then. */
int feed__keys_keep(feed_keys *k, const char *verb, const redisReply *arr,
                    int (*keep)(const void *arg, const redisReply *key), const void *arg)
{
    feed__keys_free(k);
    k->keys = malloc((arr->elements + 1) * sizeof *k->keys);
    k->lens = malloc((arr->elements + 1) * sizeof *k->lens);
    if (!k->keys || !k->lens)
        return FEED_ENOMEM;
    k->keys[0] = (char *)verb;
    k->lens[0] = strlen(verb);
    k->n = 1;
    for (size_t i = 0; i < arr->elements; i++) {
        const redisReply *e = arr->element[i];
        if (!keep && e->type != REDIS_REPLY_STRING)
            return FEED_EINVAL;
        if (keep && !keep(arg, e))
            continue;
        if ((k->keys[k->n] = malloc(e->len + 1)) == NULL)
            return FEED_ENOMEM;
        memcpy(k->keys[k->n], e->str, e->len + 1);
        k->lens[k->n++] = e->len;
    }
    return FEED_OK;
}

/* feed__keys_free: the keys' copies and lists; k is empty again. */
void feed__keys_free(feed_keys *k)
{
    for (size_t i = 1; i < k->n; i++)
        free(k->keys[i]);
    free(k->keys);
    free(k->lens);
    *k = (feed_keys){ NULL, NULL, 0 };
}

enum {
    ALL_START,
    ALL_MAP,        /* cluster: the map asked afresh before a walk */
    ALL_SCAN,       /* SCAN the node (single Redis: node 0) at the cursor */
    ALL_DROP,       /* DEL the SCAN reply's keys */
    ALL_AWAY,       /* cluster: DEL the keys that moved, routed */
    ALL_SETTLE_MAP, /* cluster: the map again after the walk */
    ALL_SETTLE,     /* cluster: CLUSTER NODES on every primary */
    ALL_DONE
};

typedef struct all_op {
    feed_op        op;
    uint64_t      *dropped;
    char          *pattern;
    char           cursor[32];
    uint64_t       count;
    int            walk;        /* walks begun (MAX_WALKS at most) */
    uint64_t       before;      /* the map's stamp when the walk began */
    /* Cluster: the primaries of the walk's map, the one walked primary[node];
     * ALL_SETTLE: of the map after the walk, command i's primary[i]. */
    int           *primary;
    size_t         nprimary, node;
    int            node_lost;
    feed_keys      keys;        /* a SCAN reply's keys after keys[0], "DEL" */
    struct all_key { char *key; size_t len; } *away;    /* keys that left their node */
    size_t         naway, cap;
    int            moving;      /* ALL_SETTLE: a slot moves, or the map changed */
    int            bad, nomem;
    const char    *argv[6];
    size_t         lens[6];
} all_op;

static void all_free_away(all_op *a)
{
    for (size_t i = 0; i < a->naway; i++)
        free(a->away[i].key);
    a->naway = 0;
}

static void all_keep_away(all_op *a, const char *key, size_t len)
{
    if (a->naway == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 16;
        struct all_key *away = realloc(a->away, cap * sizeof *away);
        if (!away) {
            a->nomem = 1;
            return;
        }
        a->away = away;
        a->cap = cap;
    }
    if (!(a->away[a->naway].key = malloc(len + 1))) {
        a->nomem = 1;
        return;
    }
    memcpy(a->away[a->naway].key, key, len + 1);
    a->away[a->naway++].len = len;
}

static int all_node_of(void *arg, size_t i)
{
    all_op *a = arg;

    return a->primary[a->op.state == ALL_SETTLE ? i : a->node];
}

static void all_lost(void *arg, size_t i, const char *why)
{
    all_op *a = arg;

    (void)i;
    if (!a->node_lost)
        feed__msg(a->op.err, FEED_EREDIS, "%s", why);
    a->node_lost = 1;
}

static int all_build(void *arg, size_t i, const char ***argv, const size_t **lens)
{
    all_op *a = arg;
    static const char *nodes[2] = { "CLUSTER", "NODES" };
    static const size_t nodes_len[2] = { 7, 5 };

    switch (a->op.state) {
    case ALL_SCAN:
        memcpy(a->argv, (const char *[6]){ "SCAN", a->cursor, "MATCH", a->pattern, "COUNT",
                                           "1000" }, sizeof a->argv);
        for (int k = 0; k < 6; k++)
            a->lens[k] = strlen(a->argv[k]);
        *argv = a->argv;
        *lens = a->lens;
        return 6;
    case ALL_DROP:
        if (!a->op.c->topo.cluster) {       /* one DEL of them all */
            *argv = (const char **)a->keys.keys;
            *lens = a->keys.lens;
            return (int)a->keys.n;
        }
        i++;                                /* keys[0] is "DEL" */
        /* FALLTHROUGH */
    case ALL_AWAY:
        a->argv[0] = "DEL";
        a->lens[0] = 3;
        a->argv[1] = a->op.state == ALL_AWAY ? a->away[i].key : a->keys.keys[i];
        a->lens[1] = a->op.state == ALL_AWAY ? a->away[i].len : a->keys.lens[i];
        *argv = a->argv;
        *lens = a->lens;
        return 2;
    default:
        *argv = nodes;
        *lens = nodes_len;
        return 2;
    }
}

/* One SCAN reply: the next cursor and the keys to DEL ("DEL" first). */
static void all_scan_reply(all_op *a, const redisReply *r)
{
    int rc;

    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[0]->len >= sizeof a->cursor ||
        r->element[1]->type != REDIS_REPLY_ARRAY) {
        a->op.c->stats.redis_errors++;
        a->bad = 1;
        feed__msg(a->op.err, FEED_EREDIS, "Redis SCAN: %s",
                  r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        return;
    }
    memcpy(a->cursor, r->element[0]->str, r->element[0]->len + 1);
    if ((rc = feed__keys_keep(&a->keys, "DEL", r->element[1], NULL, NULL)) == FEED_ENOMEM) {
        a->nomem = 1;
    } else if (rc != FEED_OK) {
        a->op.c->stats.redis_errors++;
        a->bad = 1;
        feed__msg(a->op.err, FEED_EREDIS, "Redis SCAN: a key is not a string");
    }
}

static void all_reply(void *arg, size_t i, const redisReply *r)
{
    all_op *a = arg;
    const char *me, *start, *end;

    switch (a->op.state) {
    case ALL_SCAN:
        all_scan_reply(a, r);
        return;
    case ALL_DROP:
    case ALL_AWAY:
        if (r->type == REDIS_REPLY_INTEGER) {
            a->count += (uint64_t)r->integer;
        } else if (a->op.state == ALL_DROP && a->op.c->topo.cluster &&
                   r->type == REDIS_REPLY_ERROR &&
                   (strncmp(r->str, "MOVED ", 6) == 0 || strncmp(r->str, "ASK ", 4) == 0)) {
            all_keep_away(a, a->keys.keys[i + 1], a->keys.lens[i + 1]);
        } else if (!a->bad) {
            a->op.c->stats.redis_errors++;
            a->bad = 1;
            feed__msg(a->op.err, FEED_EREDIS, "Redis DEL: %s",
                      r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        }
        return;
    default:        /* ALL_SETTLE: CLUSTER NODES */
        if (r->type != REDIS_REPLY_STRING || (me = strstr(r->str, "myself")) == NULL) {
            if (!a->bad) {
                feed_node *n = a->op.c->topo.nodes[a->primary[i]];
                a->op.c->stats.redis_errors++;
                a->bad = 1;
                feed__msg(a->op.err, FEED_EREDIS, "Redis %s:%d CLUSTER NODES: %s", n->addr.host,
                          n->addr.port, r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
            }
            return;
        }
        for (start = me; start > r->str && start[-1] != '\n'; start--) {}
        if ((end = strchr(me, '\n')) == NULL)
            end = me + strlen(me);
        if (memchr(start, '[', (size_t)(end - start)))
            a->moving = 1;
    }
}

static enum feed_want all_ask(all_op *a, int state, size_t n, int flags)
{
    a->op.state = state;
    a->node_lost = 0;
    a->op.batch = (feed_batch){ .n = n, .flags = flags | FEED_B_VERBATIM, .slot = 0, .arg = a,
                                .build = all_build, .reply = all_reply, .node_of = all_node_of,
                                .lost = all_lost };
    return FEED_W_REDIS;
}

static enum feed_want all_done(all_op *a, int rc)
{
    if (a->dropped)
        *a->dropped = a->count;
    a->op.rc = rc;
    a->op.state = ALL_DONE;
    return FEED_W_DONE;
}

/* The next primary to walk, primary[a->node]; or the keys that moved. */
static enum feed_want all_next_node(all_op *a)
{
    if (a->node < a->nprimary) {
        strcpy(a->cursor, "0");
        return all_ask(a, ALL_SCAN, 1, FEED_B_NODE);
    }
    return all_ask(a, ALL_AWAY, a->naway, FEED_B_EACH);
}

static int all_failed(all_op *a)
{
    feed_core *c = a->op.c;

    if (a->nomem)
        return feed__msg(a->op.err, FEED_ENOMEM, "out of memory dropping keys");
    if (a->node_lost) {
        char why[FEED_ERRMSG];
        feed__msg_keep(why, a->op.err);
        c->topo.stale = 1;
        c->stats.redis_errors++;
        return feed__msg(a->op.err, FEED_EREDIS, "Redis Cluster: %s", why);
    }
    if (a->op.redis_rc != FEED_OK || a->bad)
        return a->op.redis_rc == FEED_ENOMEM ? FEED_ENOMEM : FEED_EREDIS;
    return FEED_OK;
}

static enum feed_want all_step(feed_op *op, int64_t now)
{
    all_op *a = (all_op *)op;
    feed_core *c = op->c;
    int rc;

    (void)now;
    if (op->state != ALL_START && (rc = all_failed(a)) != FEED_OK)  /* the last batch's */
        return all_done(a, rc);
    switch (op->state) {
    case ALL_START:
        a->walk = 1;
        if (!c->topo.cluster) {
            strcpy(a->cursor, "0");
            return all_ask(a, ALL_SCAN, 1, 0);
        }
        return all_ask(a, ALL_MAP, 0, FEED_B_MAP);
    case ALL_MAP:
        a->before = feed__map_stamp(&c->topo);
        free(a->primary);
        if (!(a->primary = feed__map_primaries(&c->topo, &a->nprimary)))
            return all_done(a, feed__msg(op->err, FEED_ENOMEM, "out of memory for the node list"));
        a->node = 0;
        return all_next_node(a);
    case ALL_SCAN:
        if (a->keys.n > 1)
            return all_ask(a, ALL_DROP, c->topo.cluster ? a->keys.n - 1 : 1,
                           c->topo.cluster ? FEED_B_NODE : 0);
        /* FALLTHROUGH - nothing to drop */
    case ALL_DROP:
        if (strcmp(a->cursor, "0") != 0)
            return all_ask(a, ALL_SCAN, 1, c->topo.cluster ? FEED_B_NODE : 0);
        if (!c->topo.cluster)
            return all_done(a, FEED_OK);
        if (c->test_after_node_scan)
            c->test_after_node_scan(c->handle, c->topo.nodes[a->primary[a->node]]->addr.port,
                                    c->test_arg);
        a->node++;
        return all_next_node(a);
    case ALL_AWAY:
        all_free_away(a);
        return all_ask(a, ALL_SETTLE_MAP, 0, FEED_B_MAP);
    case ALL_SETTLE_MAP:
        free(a->primary);
        if (!(a->primary = feed__map_primaries(&c->topo, &a->nprimary)))
            return all_done(a, feed__msg(op->err, FEED_ENOMEM, "out of memory for the node list"));
        a->moving = a->before != feed__map_stamp(&c->topo);
        return all_ask(a, ALL_SETTLE, a->nprimary, FEED_B_NODE);
    case ALL_SETTLE:
        if (!a->moving)
            return all_done(a, FEED_OK);
        if (a->walk == MAX_WALKS) {
            c->stats.redis_errors++;
            return all_done(a, feed__msg(op->err, FEED_EREDIS, "Redis Cluster: slots moved "
                                         "during each of %d scans of every primary "
                                         "(resharding or failover); call again", MAX_WALKS));
        }
        a->walk++;
        return all_ask(a, ALL_MAP, 0, FEED_B_MAP);
    default:
        return FEED_W_DONE;
    }
}

static void all_free(feed_op *op)
{
    all_op *a = (all_op *)op;

    feed__keys_free(&a->keys);
    all_free_away(a);
    free(a->away);
    free(a->primary);
    free(a->pattern);
    free(a);
}

/* SCAN's MATCH is a glob: the prefix's own '*', '?', '[', ']' and '\'
 * must match themselves. "<escaped key base up to the generation>*:{*": the
 * copies of this family's table and columns in this key format, of every
 * generation (copies in another format are never read, so they are left
 * to their TTL; another table's copies are that table's handles' to drop).
 * The keys come back named as they are, and are dropped so (FEED_B_VERBATIM). */
static char *all_pattern(const char *base)
{
    size_t len = feed__key_gen_at(base);
    const char *tail = "*:{*";
    char *pat = malloc(2 * len + strlen(tail) + 1), *p = pat;

    if (!pat)
        return NULL;
    for (const char *s = base; s < base + len; s++) {
        if (strchr("*?[]\\", *s))
            *p++ = '\\';
        *p++ = *s;
    }
    memcpy(p, tail, strlen(tail) + 1);
    return pat;
}

feed_op *feed__invalidate_all_op(feed_core *c, char *err, int fam, uint64_t *dropped, int *rc)
{
    all_op *a = calloc(1, sizeof *a);

    if (!a || !(a->pattern = all_pattern(c->key_base[fam]))) {
        free(a);
        *rc = feed__msg(err, FEED_ENOMEM, "out of memory for a SCAN pattern");
        return NULL;
    }
    a->op.c = c;
    a->op.err = err;
    a->op.step = all_step;
    a->op.free = all_free;
    a->dropped = dropped;
    if (dropped)
        *dropped = 0;
    *rc = FEED_OK;
    return &a->op;
}
