/* topo.c -- where Redis commands go.
 *
 * A single Redis and a Sentinel-managed primary are node 0. A Redis Cluster
 * starts from its seeds and learns the rest: a slot map from CLUSTER SLOTS
 * asked of any node that answers (the exchange asks, exchange.c), nodes
 * added as the map or a MOVED names them and never removed, so an index
 * names one address for the handle's life.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

/* The index of addr among the nodes, added if new; -1 without memory. */
int feed__node_index(feed_topo *t, const feed_addr *addr)
{
    feed_node *n;

    for (size_t i = 0; i < t->nnodes; i++)
        if (t->nodes[i]->addr.port == addr->port && strcmp(t->nodes[i]->addr.host, addr->host) == 0)
            return (int)i;
    if (t->nnodes == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 8;
        feed_node **bigger = realloc(t->nodes, cap * sizeof *bigger);
        if (!bigger)
            return -1;
        t->nodes = bigger;
        t->cap = cap;
    }
    if ((n = calloc(1, sizeof *n)) == NULL)
        return -1;
    n->addr = *addr;
    memcpy(n->fence.gen, FEED_KEY_GEN_NONE, sizeof n->fence.gen);   /* until trusted */
    t->nodes[t->nnodes] = n;
    return (int)t->nnodes++;
}

/* The handle's topology from its config: node 0 for a single Redis (the
 * Sentinels fill in its address later), the seeds of a cluster. */
int feed__topo_init(feed_core *c)
{
    feed_topo *t = &c->topo;

    if (!t->cluster) {
        feed_addr a = { 0 };
        if (!c->cfg.redis_sentinels) {
            snprintf(a.host, sizeof a.host, "%s", c->cfg.redis_host);
            a.port = c->cfg.redis_port;
        }
        return feed__node_index(t, &a) == 0 ? FEED_OK : FEED_ENOMEM;
    }
    if (feed__parse_addrs(c->cfg.redis_cluster, &t->seeds, &t->nseeds) != FEED_OK)
        return FEED_ENOMEM;     /* the list was checked: only memory can fail */
    if ((t->owner = calloc(FEED_SLOTS, sizeof *t->owner)) == NULL ||
        (t->slot_epoch = calloc(FEED_SLOTS, sizeof *t->slot_epoch)) == NULL)
        return FEED_ENOMEM;
    t->stale = 1;
    return FEED_OK;
}

/* ---- The slot map ---------------------------------------------------- */

typedef struct topo_map_build {
    feed_topo *t;
    uint16_t  *owner;
} topo_map_build;

static int topo_map_range(void *arg, unsigned from, unsigned to, const feed_addr *owner)
{
    topo_map_build *b = arg;
    int i = feed__node_index(b->t, owner);

    if (i < 0)
        return FEED_ENOMEM;
    for (unsigned s = from; s <= to; s++)
        b->owner[s] = (uint16_t)(i + 1);
    return FEED_OK;
}

/* A CLUSTER SLOTS reply from node `from`, kept only if whole. When owners
 * changed (a failover, a reshard), every node's fence is checked again
 * before it serves: a node keeps its run_id when it is demoted, resynced
 * from the new primary (maybe behind) and promoted again, and it is the
 * fence key in its data set, written by whichever node was primary, that
 * then shows the change. FEED_OK, FEED_EINVAL (malformed), FEED_ENOMEM. */
int feed__map_apply(feed_topo *t, int from, const redisReply *r)
{
    uint16_t *owner = calloc(FEED_SLOTS, sizeof *owner);
    topo_map_build b = { t, owner };
    int rc;

    if (!owner)
        return FEED_ENOMEM;
    rc = feed__slot_map_parse(r, t->nodes[from]->addr.host, topo_map_range, &b);
    if (rc == FEED_OK) {
        if (memcmp(t->owner, owner, FEED_SLOTS * sizeof *owner) != 0)
            for (size_t k = 0; k < t->nnodes; k++)
                t->nodes[k]->fence.state = FEED_FENCE_UNKNOWN;
        memcpy(t->owner, owner, FEED_SLOTS * sizeof *owner);
        t->stale = 0;
    }
    free(owner);
    return rc;
}

/* The nodes to ask for the map, in turn: the connected ones first (no
 * connect cost), then the seeds, then every node learned since. *phase
 * and *i walk the candidates (start both at 0); -1 once there are none
 * left, or without memory. */
int feed__map_candidate(feed_topo *t, int *phase, size_t *i)
{
    for (;;) {
        size_t k = (*i)++;
        switch (*phase) {
        case 0:
            if (k < t->nnodes) {
                if (t->nodes[k]->state != FEED_NODE_DOWN)
                    return (int)k;
                continue;
            }
            break;
        case 1:
            if (k < t->nseeds)
                return feed__node_index(t, &t->seeds[k]);
            break;
        case 2:
            if (k < t->nnodes)
                return (int)k;
            break;
        default:
            return -1;
        }
        ++*phase;
        *i = 0;
    }
}

/* The node that serves slot by the current map, or -1. */
int feed__map_owner(const feed_topo *t, unsigned slot)
{
    return t->owner && slot < FEED_SLOTS && t->owner[slot] ? t->owner[slot] - 1 : -1;
}

/* Where node i's fence key lives: its lowest slot in the map (the same
 * for every handle that sees the same map), else the slot being sent to
 * (an ASK target that owns nothing yet). A reshard that moves that slot
 * costs the node one sweep at its next check, never a wrong page. */
int feed__fence_slot(const feed_topo *t, int i, unsigned slot)
{
    if (!t->cluster)
        return -1;
    for (unsigned s = 0; s < FEED_SLOTS; s++)
        if (t->owner[s] == i + 1)
            return (int)s;
    return (int)slot;
}

/* May the copies of slot be read on node n (its owner)? Its fence cleared,
 * and the slot's own fence found naming it under that same trust (setup.c
 * says why a node's fence is not enough on a cluster). One compare on the
 * read path. */
int feed__slot_trusted(const feed_topo *t, const feed_node *n, unsigned slot)
{
    return n->fence.state == FEED_FENCE_TRUSTED && n->fence.epoch != 0 &&
           t->slot_epoch[slot] == n->fence.epoch;
}

/* A trust in a cluster node outlives nothing it has not seen. A primary
 * can be demoted, resynced from its replica promoted meanwhile (which may
 * miss writes the primary acknowledged), and promoted back, keeping its
 * run_id; a handle that holds its connection and sends it nothing meets
 * the same node and the same slot map afterwards, and its fence and slot
 * trusts would pass the other data set. Any command with a key sent to the
 * node while it is a replica is answered MOVED (the answering node's trust
 * then ends, exchange.c), so only a handle idle towards the node through
 * the whole episode can miss it. Hence the bound: the trust lapses
 * trust_ms (redis_timeout_ms) after the sending of the last trip the node
 * answered as a primary (a reply to a command with a key, not MOVED, to a
 * trip that ended before this one is routed), and a lapsed node is asked
 * its run_id and master_replid again (one trip, setup.c) before it
 * serves: a promotion since gave it a new replid, and its copies are then
 * dropped. The same identity means the same data set, and the slots'
 * trust is kept. Between the last proof and a read reaching the node lie
 * at most trust_ms and the read's own trip (a reply later than
 * redis_timeout_ms is not used), and so this holds while a demotion and
 * a promotion back take longer than twice redis_timeout_ms (500 ms by
 * default): two cluster failovers, each through the cluster bus's votes,
 * and a resync between (docs/internals.md, what the simulation assumes).
 * A bound of redis_timeout_ms, not less, so that a handle busy with the
 * node at its link's pace never lapses. The cost: one compare per node
 * on the way out, one store per trip on the way back, and one trip more
 * for the first read after an idle spell; nothing per read. */
void feed__fence_lapse(const feed_topo *t, feed_node *n, uint32_t trust_ms, int64_t now)
{
    if (t->cluster && n->fence.state == FEED_FENCE_TRUSTED &&
        now - n->fence.heard_ms > (int64_t)trust_ms)
        n->fence.state = FEED_FENCE_LAPSED;
}

/* A trip sent at sent_ms was answered by n as a primary (a command with a
 * key, not redirected): its trust holds for redis_timeout_ms from then. A
 * node not trusted now gains nothing (its next trust starts at its own
 * look). */
void feed__fence_heard(feed_node *n, int64_t sent_ms)
{
    if (n->fence.state == FEED_FENCE_TRUSTED && sent_ms > n->fence.heard_ms)
        n->fence.heard_ms = sent_ms;
}

/* The n of slot's fence key "<prefix>:fence:s{n}": the least n whose text
 * hashes to slot (the prefix holds no braces, so the tag alone decides).
 * The table of all 16384 is made at the first call, about 170,000 hashes
 * (every slot is reached below 10^6); -1 without memory. */
int64_t feed__slot_tag(feed_topo *t, unsigned slot)
{
    char num[21];
    size_t left = FEED_SLOTS;

    if (!t->slot_tag) {
        if ((t->slot_tag = malloc(FEED_SLOTS * sizeof *t->slot_tag)) == NULL)
            return -1;
        memset(t->slot_tag, 0xff, FEED_SLOTS * sizeof *t->slot_tag);
        for (uint32_t n = 0; left > 0 && n < 1000000; n++) {
            unsigned s = feed__key_slot(num, feed__i64_to_str(n, num));
            if (t->slot_tag[s] == UINT32_MAX) {
                t->slot_tag[s] = n;
                left--;
            }
        }
    }
    return slot < FEED_SLOTS ? (int64_t)t->slot_tag[slot] : -1;
}

/* The nodes that own a slot in the map (the primaries), in index order:
 * *n of them, in an array the caller frees; NULL without memory. */
int *feed__map_primaries(const feed_topo *t, size_t *n)
{
    int *list = calloc(t->nnodes + 1, sizeof *list);  /* first a flag per node */

    *n = 0;
    for (size_t s = 0; list && s < FEED_SLOTS; s++)
        if (t->owner[s])
            list[t->owner[s] - 1] = 1;
    for (size_t k = 0; list && k < t->nnodes; k++)
        if (list[k])
            list[(*n)++] = (int)k;  /* *n <= k: no flag still to read is overwritten */
    return list;
}

/* FNV-1a over the slot -> node table: equal stamps, same map (node indexes
 * are never reused, so an index names one address for good). */
uint64_t feed__map_stamp(const feed_topo *t)
{
    const unsigned char *p = (const unsigned char *)t->owner;
    uint64_t h = 14695981039346656037ULL;

    for (size_t i = 0; i < FEED_SLOTS * sizeof *t->owner; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}
