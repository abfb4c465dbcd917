/* cluster_io.c -- the Redis Cluster transport, on hiredis's blocking API.
 *
 * One lazily opened connection per node (AUTH and the scripts loaded as on
 * a single Redis), a slot map from CLUSTER SLOTS asked of any node that
 * answers (the seeds first time). A call goes to the owner of its slot; the
 * replies decide what comes next (cluster.c, feed__classify):
 *   MOVED      the map is old: refresh it, send again;
 *   ASK        the slot is migrating and the key already left: ASKING + the
 *              command at the target, once;
 *   TRYAGAIN   a multi-key command while its slot migrates (our scripts name
 *              the feed and its lease, which usually does not exist), or
 *              CLUSTERDOWN during a failover: back off and send again, until
 *              redis_timeout_ms has passed since the call began;
 *   NOSCRIPT   a node that lost the scripts (a promoted replica, a restart):
 *              load them on that node, send again.
 * Only the commands still owed an answer are sent again: the others were
 * answered for good. A call that runs out of time fails like a dropped
 * connection: the caller remembers the feed for repair (hooks.c).
 *
 * Failures of a node are rate-limited like a single Redis's (retry_ms per
 * node), and any failure marks the map for a refresh.
 *
 * What no key routes (SCAN for feed_invalidate_all) visits every primary in
 * turn on its own connection: feed__cluster_each_primary.
 *
 * The failover guarantee (wait.c, fence.c), per node:
 *   WAIT       with redis_wait_replicas, a hook's commands to a node are
 *              followed by WAIT in the same pipeline (one per node and
 *              pass: a fan-out over many slots of a node pays one);
 *   the fence  with redis_restart_fence, each node connection has its own
 *              fence, checked before the node serves anything. It starts
 *              UNKNOWN on a new connection AND whenever the slot map
 *              changes owners: a node keeps its run_id when it is demoted,
 *              resynced from the new primary (maybe behind) and promoted
 *              again, and it is the fence key in its data set, written by
 *              whichever node was primary, that then shows the change.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

typedef struct feed_node {
    feed_addr     addr;
    redisContext *c;            /* NULL while disconnected */
    int64_t       attempt_ms;   /* last connect attempt */
    int           fresh;        /* connected by this call: no retry on EOF */
    int           used;         /* feed__cluster_many: got commands this pass */
    int           unflushed;    /* ... appended since its last write */
    int           applied;      /* commands answered for good this pass (WAIT) */
    feed_fence    fence;        /* restart fence of this connection (fence.c) */
} feed_node;

typedef struct feed_cluster {
    feed_addr *seeds;
    size_t     nseeds;
    feed_node *nodes;           /* every node ever named; never shrinks */
    size_t     nnodes, cap;
    uint16_t   owner[FEED_SLOTS];   /* node index + 1; 0 = unknown */
    int        stale;           /* refresh the map before routing */
    int64_t    map_ms;          /* last refresh attempt */
} feed_cluster;

/* The least time between two refreshes of the map: a burst of MOVED during
 * a reshard costs one CLUSTER SLOTS, not one per call. */
#define REFRESH_MIN_MS 20
/* MOVED followed per call before giving up (a map that keeps moving). */
#define MAX_REDIRECTS 5

static struct timeval tv_of(uint32_t ms)
{
    struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000 };
    return tv;
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };

    nanosleep(&ts, NULL);
}

/* The index of addr among the nodes, added if new; -1 without memory. */
static int node_index(feed_cluster *cl, const feed_addr *addr)
{
    for (size_t i = 0; i < cl->nnodes; i++)
        if (cl->nodes[i].addr.port == addr->port && strcmp(cl->nodes[i].addr.host, addr->host) == 0)
            return (int)i;
    if (cl->nnodes == cl->cap) {
        size_t cap = cl->cap ? 2 * cl->cap : 8;
        feed_node *bigger = realloc(cl->nodes, cap * sizeof *bigger);
        if (!bigger)
            return -1;
        cl->nodes = bigger;
        cl->cap = cap;
    }
    memset(&cl->nodes[cl->nnodes], 0, sizeof cl->nodes[0]);
    cl->nodes[cl->nnodes].addr = *addr;
    return (int)cl->nnodes++;
}

static void node_drop(feed_node *n)
{
    if (n->c) {
        redisFree(n->c);
        n->c = NULL;
    }
    n->fence.state = FEED_FENCE_UNKNOWN;    /* whoever answers next is checked */
}

/* The node's connection failed under a call: keep the reason, drop it,
 * refresh the map before the next routing (the node may be gone for good). */
static void node_failed(feed *f, feed_node *n, const char *what)
{
    f->stats.redis_errors++;
    n->attempt_ms = feed__now_ms();
    feed__error(f, FEED_EREDIS, "Redis %s:%d %s: %s", n->addr.host, n->addr.port, what,
                n->c && n->c->errstr[0] ? n->c->errstr : "connection lost");
    node_drop(n);
    f->cluster->stale = 1;
}

/* Connected, or connected now if its last attempt is old enough. */
static int node_ready(feed *f, feed_node *n)
{
    struct timeval tv = tv_of(f->cfg.redis_timeout_ms);
    int rc;

    if (n->c)
        return FEED_OK;
    if ((rc = feed__retry_due(f, n->attempt_ms, "Redis node")) != FEED_OK)
        return rc;
    n->attempt_ms = feed__now_ms();
    f->stats.redis_connects++;
    n->c = redisConnectWithTimeout(n->addr.host, n->addr.port, tv);
    if (!n->c)
        return feed__error(f, FEED_ENOMEM, "Redis connect: out of memory");
    if (n->c->err || redisSetTimeout(n->c, tv) != REDIS_OK) {
        f->stats.redis_errors++;
        feed__error(f, FEED_EUNAVAILABLE, "Redis connect to %s:%d: %s", n->addr.host,
                    n->addr.port, n->c->errstr);
        node_drop(n);
        f->cluster->stale = 1;
        return FEED_EUNAVAILABLE;
    }
    if ((rc = feed__redis_hello(f, &n->c)) != FEED_OK) {
        node_drop(n);
        f->cluster->stale = 1;
        return rc;
    }
    n->fresh = 1;
    return FEED_OK;
}

/* ---- The slot map ---------------------------------------------------- */

typedef struct map_build {
    feed_cluster *cl;
    uint16_t     *owner;
} map_build;

static int map_range(void *arg, unsigned from, unsigned to, const feed_addr *owner)
{
    map_build *b = arg;
    int i = node_index(b->cl, owner);

    if (i < 0)
        return FEED_ENOMEM;
    for (unsigned s = from; s <= to; s++)
        b->owner[s] = (uint16_t)(i + 1);
    return FEED_OK;
}

/* CLUSTER SLOTS from node i into a fresh map; kept only if whole. */
static int map_from(feed *f, int i)
{
    feed_cluster *cl = f->cluster;
    const char *argv[2] = { "CLUSTER", "SLOTS" };
    uint16_t *owner;
    redisReply *r;
    map_build b;
    int rc;

    if ((rc = node_ready(f, &cl->nodes[i])) != FEED_OK)
        return rc;
    f->stats.redis_calls++;
    r = redisCommandArgv(cl->nodes[i].c, 2, argv, NULL);
    if (!r) {
        node_failed(f, &cl->nodes[i], "CLUSTER SLOTS");
        return FEED_EUNAVAILABLE;
    }
    owner = calloc(FEED_SLOTS, sizeof *owner);
    if (!owner) {
        freeReplyObject(r);
        return feed__error(f, FEED_ENOMEM, "out of memory for the slot map");
    }
    b.cl = cl;
    b.owner = owner;
    rc = feed__slot_map_parse(r, cl->nodes[i].addr.host, map_range, &b);
    if (rc == FEED_EINVAL) {
        f->stats.redis_errors++;
        feed__error(f, FEED_EREDIS, "Redis %s:%d: CLUSTER SLOTS: %s", cl->nodes[i].addr.host,
                    cl->nodes[i].addr.port,
                    r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    }
    freeReplyObject(r);
    if (rc == FEED_OK) {
        /* Owners changed (a failover, a reshard): check every node's fence
         * again before it serves (see the top of this file). */
        if (memcmp(cl->owner, owner, sizeof cl->owner) != 0)
            for (size_t k = 0; k < cl->nnodes; k++)
                cl->nodes[k].fence.state = FEED_FENCE_UNKNOWN;
        memcpy(cl->owner, owner, sizeof cl->owner);
        cl->stale = 0;
    }
    free(owner);
    return rc;
}

/* Ask the nodes we know (owners first: they are the live ones, most
 * likely), then the seeds. FEED_OK once one answered. */
static int map_refresh(feed *f)
{
    feed_cluster *cl = f->cluster;
    int rc = FEED_EUNAVAILABLE;

    cl->map_ms = feed__now_ms();
    for (size_t i = 0; i < cl->nnodes; i++) {
        if (!cl->nodes[i].c)
            continue;       /* connected ones first: no connect cost */
        if ((rc = map_from(f, (int)i)) == FEED_OK || rc == FEED_ENOMEM)
            return rc;
    }
    for (size_t i = 0; i < cl->nseeds; i++) {
        int n = node_index(cl, &cl->seeds[i]);
        if (n < 0)
            return feed__error(f, FEED_ENOMEM, "out of memory for the node list");
        if ((rc = map_from(f, n)) == FEED_OK || rc == FEED_ENOMEM)
            return rc;
    }
    for (size_t i = 0; i < cl->nnodes; i++) {   /* nodes learned since */
        if ((rc = map_from(f, (int)i)) == FEED_OK || rc == FEED_ENOMEM)
            return rc;
    }
    return rc;
}

/* The node that owns slot, the map refreshed first if it is stale (at most
 * every REFRESH_MIN_MS). -1 with the reason on f if none is known. */
static int route(feed *f, unsigned slot)
{
    feed_cluster *cl = f->cluster;

    if ((cl->stale || !cl->owner[slot]) && feed__now_ms() - cl->map_ms >= REFRESH_MIN_MS)
        map_refresh(f);
    if (!cl->owner[slot]) {
        if (!f->errmsg[0])
            feed__error(f, FEED_EUNAVAILABLE, "Redis Cluster: no node serves slot %u", slot);
        return -1;
    }
    return cl->owner[slot] - 1;
}

/* Where node i's fence key lives: its lowest slot in the map (the same
 * for every handle that sees the same map), else the slot being sent to
 * (an ASK target that owns nothing yet). A reshard that moves that slot
 * costs the node one flush at its next check, never a wrong page. */
static int fence_slot(const feed_cluster *cl, int i, unsigned slot)
{
    for (unsigned s = 0; s < FEED_SLOTS; s++)
        if (cl->owner[s] == i + 1)
            return (int)s;
    return (int)slot;
}

/* Node i may serve the call: its restart fence is cleared (fence.c), or it
 * is being cleared and the call is a hook (hooks only make a copy more
 * right, and every copy is dropped anyway). Returns FEED_OK, the fence's
 * failure (the node then dropped, retried after retry_ms), or
 * FEED_EUNAVAILABLE while the node's copies are being dropped. */
static int node_fenced(feed *f, int i, unsigned slot)
{
    feed_cluster *cl = f->cluster;
    feed_node *n = &cl->nodes[i];
    int rc;

    if (!f->cfg.redis_restart_fence || n->fence.state == FEED_FENCE_TRUSTED)
        return FEED_OK;
    rc = feed__fence_step(f, &n->c, &n->fence, fence_slot(cl, i, slot));
    if (!n->c) {                /* fence.c freed it */
        node_drop(n);
        n->attempt_ms = feed__now_ms();
        cl->stale = 1;
    }
    if (rc != FEED_OK) {
        cl->stale = 1;          /* maybe the fence key's slot moved: ask again */
        return rc;
    }
    if (n->fence.state != FEED_FENCE_TRUSTED && !f->in_hook)
        return feed__error(f, FEED_EUNAVAILABLE, "Redis %s:%d came back from a restart or "
                           "failover: its cached copies are being dropped", n->addr.host,
                           n->addr.port);
    return FEED_OK;
}

int feed__cluster_connect(feed *f)
{
    feed_cluster *cl;
    int rc;

    feed__cluster_free(f);
    cl = calloc(1, sizeof *cl);
    if (!cl)
        return feed__error(f, FEED_ENOMEM, "out of memory for the cluster");
    f->cluster = cl;
    rc = feed__parse_addrs(f->cfg.redis_cluster, &cl->seeds, &cl->nseeds);
    if (rc != FEED_OK)
        return feed__error(f, rc, "redis_cluster: not host:port[,host:port...]");
    return map_refresh(f);
}

void feed__cluster_free(feed *f)
{
    feed_cluster *cl = f->cluster;

    if (!cl)
        return;
    for (size_t i = 0; i < cl->nnodes; i++)
        node_drop(&cl->nodes[i]);
    free(cl->nodes);
    free(cl->seeds);
    free(cl);
    f->cluster = NULL;
}

unsigned feed__command_slot(int argc, const char **argv, const size_t *lens)
{
    int k = 1;

    if (argc > 3 && strcmp(argv[0], "EVALSHA") == 0)
        k = 3;
    if (argc <= k)
        return 0;
    return feed__key_slot(argv[k], lens ? lens[k] : strlen(argv[k]));
}

/* ---- One slot: feed__cluster_exchange ---------------------------------- */

/* Why a call ended without answers: keep the last server's word. */
static int give_up(feed *f, const char *why)
{
    char copy[sizeof f->errmsg];

    snprintf(copy, sizeof copy, "%s", why);    /* why may be f->errmsg */
    f->stats.redis_errors++;
    return feed__error(f, FEED_EREDIS, "Redis Cluster: %s", copy);
}

/* Did the node close a connection that worked (a restart, a failover)?
 * Then one retry is worth it; a timeout is not retried. */
static int closed_by_peer(const redisContext *c)
{
    return c->err == REDIS_ERR_EOF ||
           (c->err == REDIS_ERR_IO && (errno == ECONNRESET || errno == EPIPE));
}

/* The state of one call (one slot, or many) between two sends. */
typedef struct attempt {
    int64_t deadline;
    int     tries;          /* TRYAGAIN-like waits so far */
    int     redirects;      /* since the last wait */
    int     reloaded;       /* scripts reloaded once */
    int     peer_retried;
    int     had_msg;        /* f->errmsg was set before the call */
    char    why[200];       /* the last refusal, for the message */
} attempt;

static void attempt_init(feed *f, attempt *a)
{
    a->deadline = feed__now_ms() + f->cfg.redis_timeout_ms;
    a->tries = a->redirects = a->reloaded = a->peer_retried = 0;
    a->had_msg = f->errmsg[0] != '\0';
    a->why[0] = '\0';
}

/* A call that got its answers after all (a node failed, another served
 * it) leaves no message behind. */
static void attempt_done(feed *f, const attempt *a)
{
    if (!a->had_msg)
        f->errmsg[0] = '\0';
}

/* Load the scripts again on node n (NOSCRIPT): one round trip. */
static int reload_on(feed *f, feed_node *n)
{
    int rc = feed__redis_hello(f, &n->c);

    if (rc == FEED_EUNAVAILABLE || !n->c)
        node_failed(f, n, "SCRIPT LOAD");
    return rc;
}

/* What the verdicts of one pass ask for before the next. */
typedef struct pass_need {
    int       moved, ask, tryagain, noscript;
    feed_addr ask_to;
} pass_need;

/* Note a verdict; returns 1 when the command is answered for good. */
static int note_verdict(feed *f, attempt *a, pass_need *need, const redisReply *r,
                        enum feed_verdict v, const feed_addr *to, unsigned slot)
{
    feed_cluster *cl = f->cluster;

    switch (v) {
    case FEED_V_MOVED: {
        int i = node_index(cl, to);
        need->moved = 1;
        if (i >= 0) {
            cl->owner[slot] = (uint16_t)(i + 1);   /* until the refresh says more */
            cl->nodes[i].fence.state = FEED_FENCE_UNKNOWN;   /* it gained a slot */
        }
        cl->stale = 1;
        break;
    }
    case FEED_V_ASK:
        need->ask = 1;
        need->ask_to = *to;
        break;
    case FEED_V_TRYAGAIN:
        need->tryagain = 1;
        break;
    case FEED_V_NOSCRIPT:
        need->noscript = 1;
        break;
    default:
        return 1;
    }
    snprintf(a->why, sizeof a->why, "%s", r->str);
    return 0;
}

/* After a pass that left commands unanswered: wait or not, and say whether
 * to go on. FEED_OK = send again; otherwise the call gives up. */
static int next_pass(feed *f, attempt *a, const pass_need *need)
{
    char why[sizeof a->why + 64];
    int64_t now, pause;

    if (need->moved || need->ask) {
        if (++a->redirects <= MAX_REDIRECTS) {
            f->stats.redis_redirects++;
            return FEED_OK;
        }
        snprintf(why, sizeof why, "too many redirects (last: %s)", a->why);
        return give_up(f, why);
    }
    if (need->noscript && !a->reloaded) {
        a->reloaded = 1;
        return FEED_OK;
    }
    now = feed__now_ms();
    pause = feed__backoff_ms(++a->tries, now, a->deadline);
    if (!need->tryagain || pause < 0) {
        snprintf(why, sizeof why, "%s (retried for %u ms)", a->why, f->cfg.redis_timeout_ms);
        return give_up(f, why);
    }
    f->stats.redis_retries++;
    sleep_ms(pause);
    /* A migrating slot answers ASK, then TRYAGAIN at the target, for as long
     * as it migrates: redirects count only between two waits, the deadline
     * bounds the rest. */
    a->redirects = 0;
    if (need->tryagain && f->cluster->stale)
        f->cluster->map_ms = 0;     /* CLUSTERDOWN: a failover may have moved it */
    return FEED_OK;
}

static void free_replies(redisReply **replies, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        freeReplyObject(replies[i]);
        replies[i] = NULL;
    }
}

/* One pass: the pending commands to node n (each after ASKING when
 * asking), one round trip. -1 on I/O failure: the node dropped when the
 * commands could not be queued, left to the caller (as a failed read) when
 * the write failed. */
static int send_pending(feed *f, feed_node *n, int asking, size_t count, const int *argc,
                        const char **const *argv, const size_t *const *lens,
                        const unsigned char *pending)
{
    static const char *asking_argv[1] = { "ASKING" };
    size_t all = 0;

    while (all < count && pending[all])
        all++;
    if (!asking && all == count) {   /* the usual pass: in one write() */
        int d = feed__send_direct(n->c, count, argc, argv, lens);
        if (d > 0)
            f->stats.redis_calls++;
        if (d != 0)   /* sent; or the write failed: handled as a failed read */
            return d > 0 ? 0 : -1;
    }
    for (size_t i = 0; i < count; i++) {
        if (!pending[i])
            continue;
        if ((asking && redisAppendCommandArgv(n->c, 1, asking_argv, NULL) != REDIS_OK) ||
            redisAppendCommandArgv(n->c, argc[i], argv[i], lens[i]) != REDIS_OK) {
            node_failed(f, n, "pipeline");
            return -1;
        }
    }
    f->stats.redis_calls++;
    return 0;
}

static int read_reply(feed_node *n, redisReply **r)
{
    *r = NULL;
    if (redisGetReply(n->c, (void **)r) == REDIS_OK && *r)
        return 0;
    return -1;
}

/* The replica check (wait.c: WAIT in a hook) that rode node n's pipeline
 * this pass: read and judged if a command was applied there, else dropped.
 * Too few replicas: the call fails, and the map is asked again (a primary
 * short of its replicas may be on its way out). */
static int check_pass(feed *f, feed_node *n)
{
    int rc = n->applied ? feed__check_read(f, n->c) : feed__check_skip(f, n->c);

    if (rc == FEED_EUNAVAILABLE) {
        node_drop(n);
        n->attempt_ms = feed__now_ms();
    }
    if (rc != FEED_OK)
        f->cluster->stale = 1;
    return rc;
}

int feed__cluster_exchange(feed *f, unsigned slot, size_t n, const int *argc,
                           const char **const *argv, const size_t *const *lens,
                           redisReply **replies)
{
    feed_cluster *cl = f->cluster;
    unsigned char small[16], *pending = n <= sizeof small ? small : malloc(n);
    size_t left = n;
    int ask_node = -1, checked = feed__check_on(f);
    attempt a;

    memset(replies, 0, n * sizeof *replies);
    if (!pending)
        return feed__error(f, FEED_ENOMEM, "out of memory for a pipeline of %zu", n);
    memset(pending, 1, n);
    attempt_init(f, &a);
    while (left > 0) {
        int node = ask_node >= 0 ? ask_node : route(f, slot);
        pass_need need;
        feed_node *nd;
        int rc = FEED_EREDIS;

        if (node < 0 || (rc = node_ready(f, &cl->nodes[node])) != FEED_OK) {
            /* The owner is down (maybe between two reconnects): ask the map
             * again next time, a replica may have taken over. */
            cl->stale = 1;
            if (rc != FEED_ENOMEM)
                give_up(f, f->errmsg[0] ? f->errmsg : "no node");
            goto failed;
        }
        if (node_fenced(f, node, slot) != FEED_OK)
            goto failed;
        nd = &cl->nodes[node];
        nd->applied = 0;
        if (send_pending(f, nd, ask_node >= 0, n, argc, argv, lens, pending) < 0)
            goto io_failed;
        if (checked && feed__check_append(f, nd->c) != REDIS_OK) {
            node_failed(f, nd, "WAIT");
            goto failed;
        }
        memset(&need, 0, sizeof need);
        for (size_t i = 0; i < n; i++) {
            redisReply *r;
            feed_addr to;
            if (!pending[i])
                continue;
            if (ask_node >= 0) {
                if (read_reply(nd, &r) < 0)
                    goto io_failed;
                freeReplyObject(r);
            }
            if (read_reply(nd, &r) < 0)
                goto io_failed;
            if (note_verdict(f, &a, &need, r, feed__classify(r, nd->addr.host, &to), &to, slot)) {
                replies[i] = r;
                pending[i] = 0;
                left--;
                nd->applied++;
            } else {
                freeReplyObject(r);
            }
        }
        if (checked && check_pass(f, nd) != FEED_OK)
            goto failed;
        nd->fresh = 0;
        ask_node = -1;
        if (left == 0)
            break;
        if (need.noscript && !a.reloaded && reload_on(f, nd) != FEED_OK)
            goto failed;
        if (next_pass(f, &a, &need) != FEED_OK)
            goto failed;
        if (need.ask && (ask_node = node_index(cl, &need.ask_to)) < 0)
            goto failed;
        continue;
io_failed:
        /* Not after a command was applied under WAIT: its WAIT is lost. */
        if (!nd->fresh && !a.peer_retried && nd->c && closed_by_peer(nd->c) &&
            !(checked && nd->applied)) {
            /* The node went away under a connection that had worked: ask
             * the map again and send what is still owed, once. */
            node_drop(nd);
            nd->attempt_ms = 0;
            cl->stale = 1;
            cl->map_ms = 0;
            a.peer_retried = 1;
            ask_node = -1;
            continue;
        }
        node_failed(f, nd, argv[0][0]);
        goto failed;
    }
    if (pending != small)
        free(pending);
    attempt_done(f, &a);
    return FEED_OK;
failed:
    free_replies(replies, n);
    if (pending != small)
        free(pending);
    return FEED_EREDIS;
}

/* ---- Many slots: feed__cluster_many ------------------------------------ */

/* Per command of a many-call: where it went, whether it is answered. */
typedef struct many_cmd {
    int      node;          /* node of the current pass, -1 = not sent */
    int      ask;           /* next pass: ASKING at this node index + 1 */
    unsigned slot;
    unsigned char done;
} many_cmd;

/* Write out what node n holds (blocking). */
static void flush_node(feed *f, feed_node *n)
{
    int done = 0;

    n->unflushed = 0;
    while (!done && n->c) {
        if (redisBufferWrite(n->c, &done) != REDIS_OK)
            node_failed(f, n, "pipeline");
    }
}

/* Every node that got commands this pass writes them out before any reply
 * is read: the nodes work at once. */
static void flush_all(feed *f)
{
    feed_cluster *cl = f->cluster;

    for (size_t k = 0; k < cl->nnodes; k++) {
        if (!cl->nodes[k].used || !cl->nodes[k].c)
            continue;
        f->stats.redis_calls++;
        flush_node(f, &cl->nodes[k]);
    }
}

/* A node's commands are written as they pile up, not all at the end: the
 * calls come sorted by slot, so node by node, and the first node starts
 * working while the next one's commands are still being built. */
#define FLUSH_EVERY 256

/* Send every command not done to its node (appended only). */
static int many_send(feed *f, size_t n, feed__cmd_fn *build, void *arg, many_cmd *cmds)
{
    static const char *asking_argv[1] = { "ASKING" };
    feed_cluster *cl = f->cluster;

    for (size_t i = 0; i < n; i++) {
        const char **argv;
        const size_t *lens;
        int argc, node, rc;
        feed_node *nd;

        cmds[i].node = -1;
        if (cmds[i].done)
            continue;
        argc = build(arg, i, &argv, &lens);
        cmds[i].slot = feed__command_slot(argc, argv, lens);
        node = cmds[i].ask ? cmds[i].ask - 1 : route(f, cmds[i].slot);
        if (node < 0)
            return FEED_EREDIS;
        nd = &cl->nodes[node];
        if ((rc = node_ready(f, nd)) != FEED_OK) {
            cl->stale = 1;
            return rc;
        }
        /* The fence talks on the connection: only before anything of this
         * pass is appended to it. */
        if (!nd->used && (rc = node_fenced(f, node, cmds[i].slot)) != FEED_OK)
            return rc;
        if ((cmds[i].ask && redisAppendCommandArgv(nd->c, 1, asking_argv, NULL) != REDIS_OK) ||
            redisAppendCommandArgv(nd->c, argc, argv, lens) != REDIS_OK) {
            node_failed(f, nd, "pipeline");
            return FEED_EREDIS;
        }
        cmds[i].node = node;
        nd->used = 1;
        if (++nd->unflushed >= FLUSH_EVERY)
            flush_node(f, nd);
    }
    return FEED_OK;
}

/* Read every reply of the pass, node by node in sending order. Any I/O
 * failure loses the commands of that node (done stays 0, rc EREDIS). */
static int many_read(feed *f, attempt *a, size_t n, many_cmd *cmds, pass_need *need,
                     int *first_error, feed__reply_fn *on_reply, void *arg)
{
    feed_cluster *cl = f->cluster;
    int rc = FEED_OK;

    for (size_t i = 0; i < n; i++) {
        feed_node *nd;
        redisReply *r;
        feed_addr to;
        enum feed_verdict v;

        if (cmds[i].node < 0)
            continue;
        nd = &cl->nodes[cmds[i].node];
        if (!nd->c) {       /* failed earlier in this pass */
            rc = FEED_EREDIS;
            continue;
        }
        if (cmds[i].ask) {
            if (read_reply(nd, &r) < 0) {
                node_failed(f, nd, "pipeline");
                rc = FEED_EREDIS;
                continue;
            }
            freeReplyObject(r);
        }
        cmds[i].ask = 0;
        if (read_reply(nd, &r) < 0) {
            node_failed(f, nd, "pipeline");
            rc = FEED_EREDIS;
            continue;
        }
        v = feed__classify(r, nd->addr.host, &to);
        if (note_verdict(f, a, need, r, v, &to, cmds[i].slot)) {
            cmds[i].done = 1;
            nd->applied++;
            if (r->type == REDIS_REPLY_ERROR && *first_error == 0) {
                f->stats.redis_errors++;
                feed__error(f, FEED_EREDIS, "Redis: %s", r->str);
                *first_error = 1;
            } else if (r->type != REDIS_REPLY_ERROR && on_reply) {
                on_reply(arg, i, r);
            }
        } else if (v == FEED_V_ASK) {
            int k = node_index(cl, &to);
            cmds[i].ask = k >= 0 ? k + 1 : 0;
        }
        freeReplyObject(r);
    }
    return rc;
}

/* The replica check after each node's commands of a pass (wait.c): one
 * per node, appended once every command is, read once every reply is. */
static void many_check_append(feed *f)
{
    feed_cluster *cl = f->cluster;

    for (size_t k = 0; k < cl->nnodes; k++) {
        feed_node *nd = &cl->nodes[k];
        nd->applied = 0;
        if (nd->used && nd->c && feed__check_append(f, nd->c) != REDIS_OK)
            node_failed(f, nd, "WAIT");
    }
}

static int many_check_read(feed *f)
{
    feed_cluster *cl = f->cluster;
    int rc = FEED_OK;

    for (size_t k = 0; k < cl->nnodes; k++) {
        feed_node *nd = &cl->nodes[k];
        if (nd->used && nd->c && check_pass(f, nd) != FEED_OK)
            rc = FEED_EREDIS;
    }
    return rc;
}

int feed__cluster_many(feed *f, size_t n, feed__cmd_fn *build, void *arg)
{
    return feed__cluster_many_r(f, n, build, NULL, arg);
}

int feed__cluster_owner(const feed *f, unsigned slot)
{
    const feed_cluster *cl = f->cluster;

    return cl && slot < FEED_SLOTS && cl->owner[slot] ? cl->owner[slot] - 1 : -1;
}

int feed__cluster_many_r(feed *f, size_t n, feed__cmd_fn *build, feed__reply_fn *on_reply,
                         void *arg)
{
    feed_cluster *cl = f->cluster;
    many_cmd *cmds = calloc(n ? n : 1, sizeof *cmds);
    int first_error = 0, rc = FEED_OK, checked = feed__check_on(f);
    attempt a;

    if (!cmds)
        return feed__error(f, FEED_ENOMEM, "out of memory for a pipeline of %zu", n);
    attempt_init(f, &a);
    for (;;) {
        pass_need need;
        size_t left = 0;

        for (size_t k = 0; k < cl->nnodes; k++)
            cl->nodes[k].used = 0;
        rc = many_send(f, n, build, arg, cmds);
        if (checked)
            many_check_append(f);
        flush_all(f);
        memset(&need, 0, sizeof need);
        /* Read what was sent even if a later send failed: the connections
         * stay in step. */
        if (many_read(f, &a, n, cmds, &need, &first_error, on_reply, arg) != FEED_OK &&
            rc == FEED_OK)
            rc = FEED_EREDIS;
        if (checked && many_check_read(f) != FEED_OK && rc == FEED_OK)
            rc = FEED_EREDIS;
        if (rc != FEED_OK)
            break;
        for (size_t i = 0; i < n; i++)
            left += !cmds[i].done;
        if (left == 0)
            break;
        if (need.noscript && !a.reloaded) {
            for (size_t k = 0; k < cl->nnodes; k++)
                if (cl->nodes[k].used && cl->nodes[k].c && reload_on(f, &cl->nodes[k]) != FEED_OK)
                    rc = FEED_EREDIS;
            if (rc != FEED_OK)
                break;
        }
        if ((rc = next_pass(f, &a, &need)) != FEED_OK)
            break;
    }
    if (rc == FEED_OK && first_error)
        rc = FEED_EREDIS;
    else if (rc == FEED_OK)
        attempt_done(f, &a);
    free(cmds);
    return rc;
}

/* ---- Every primary: feed__cluster_each_primary ------------------------- */

/* FNV-1a over the slot -> node table: equal stamps, same map (node
 * indexes are never reused, so an index names one address for good). */
static uint64_t map_stamp(const feed_cluster *cl)
{
    const unsigned char *p = (const unsigned char *)cl->owner;
    uint64_t h = 14695981039346656037ULL;

    for (size_t i = 0; i < sizeof cl->owner; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

/* flags[i] = 1 when node i owns a slot in the map (a primary); NULL
 * without memory. The caller frees it. */
static unsigned char *primary_flags(const feed_cluster *cl)
{
    unsigned char *flags = calloc(cl->nnodes + 1, 1);

    for (size_t s = 0; flags && s < FEED_SLOTS; s++)
        if (cl->owner[s])
            flags[cl->owner[s] - 1] = 1;
    return flags;
}

/* The map is asked afresh (a call that must reach every primary cannot
 * trust one that may predate a failover), then each node that owns a slot
 * is visited once, in node order. A node that cannot be reached, or whose
 * connection breaks under visit, ends the walk with FEED_EREDIS and marks
 * the map stale: the caller calls again once the cluster has settled (a
 * replica promoted, a node back). */
int feed__cluster_each_primary(feed *f, feed__node_fn *visit, void *arg, uint64_t *stamp)
{
    feed_cluster *cl = f->cluster;
    unsigned char *primary;
    size_t count;
    int rc;

    if ((rc = map_refresh(f)) != FEED_OK)
        return rc == FEED_ENOMEM ? rc : give_up(f, f->errmsg[0] ? f->errmsg : "no node answers");
    if (stamp)
        *stamp = map_stamp(cl);
    count = cl->nnodes;
    if ((primary = primary_flags(cl)) == NULL)
        return feed__error(f, FEED_ENOMEM, "out of memory for the node list");
    for (size_t i = 0; i < count && rc == FEED_OK; i++) {
        feed_node *nd = &cl->nodes[i];
        if (!primary[i])
            continue;
        if ((rc = node_ready(f, nd)) != FEED_OK) {
            cl->stale = 1;
            if (rc != FEED_ENOMEM)
                rc = give_up(f, f->errmsg);
            break;
        }
        rc = visit(f, nd->c, &nd->addr, arg);
        if (rc == FEED_EUNAVAILABLE || (nd->c && nd->c->err)) {
            node_failed(f, nd, "(a walk over every primary)");
            rc = give_up(f, f->errmsg);
        }
        nd->fresh = 0;
    }
    free(primary);
    return rc;
}

/* ---- Health: every primary ---------------------------------------------- */

/* The first failure of a health check, kept (later ones overwrite f),
 * named by the node's address unless the message names it already. */
static void first_why(const feed *f, const feed_node *nd, char *why, size_t cap)
{
    char addr[sizeof nd->addr.host + 8];

    if (why[0])
        return;
    snprintf(addr, sizeof addr, "%s:%d", nd->addr.host, nd->addr.port);
    if (snprintf(why, cap, "%s%s%s", strstr(f->errmsg, addr) ? "" : addr,
                 strstr(f->errmsg, addr) ? "" : ": ", f->errmsg) < 0)
        why[0] = '\0';     /* cut to cap otherwise */
}

/* PING's answer from node nd within left ms; its timeout put back after. */
static int pong_within(feed *f, feed_node *nd, int64_t left)
{
    redisReply *r = NULL;
    int ok;

    if (redisSetTimeout(nd->c, tv_of((uint32_t)(left < 1 ? 1 : left))) != REDIS_OK ||
        read_reply(nd, &r) < 0) {
        node_failed(f, nd, "PING");
        return 0;
    }
    ok = r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
    if (!ok) {
        f->stats.redis_errors++;
        feed__error(f, FEED_EREDIS, "PING: %s",
                    r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    }
    freeReplyObject(r);
    if (redisSetTimeout(nd->c, tv_of(f->cfg.redis_timeout_ms)) != REDIS_OK)
        node_drop(nd);
    return ok;
}

/* feed_health on a cluster: PING every primary of the slot map (asked
 * again first), all at once: the PINGs are written out, then each answer is
 * awaited for what is left of one redis_timeout_ms. A node down since its
 * last attempt is not reconnected before retry_ms (node_ready), and none is
 * once the time is up (a reconnect may add its own timeout). *up and *total
 * count the primaries; FEED_OK when every one answered PONG, else
 * FEED_EREDIS with "Redis Cluster: <up> of <total> primaries answered PING;
 * <host:port>: <why>" (the first failure) on f. */
int feed__cluster_ping(feed *f, size_t *up, size_t *total)
{
    feed_cluster *cl = f->cluster;
    int64_t deadline = feed__now_ms() + f->cfg.redis_timeout_ms;
    unsigned char *primary;
    char why[sizeof f->errmsg] = "";

    *up = *total = 0;
    if (feed__now_ms() - cl->map_ms >= REFRESH_MIN_MS)
        map_refresh(f);
    if ((primary = primary_flags(cl)) == NULL)
        return feed__error(f, FEED_ENOMEM, "out of memory for a health check");
    for (size_t k = 0; k < cl->nnodes; k++) {
        feed_node *nd = &cl->nodes[k];
        if (!primary[k])
            continue;
        ++*total;
        nd->used = 0;
        if (feed__now_ms() >= deadline) {
            feed__error(f, FEED_EREDIS, "not checked, no time left");
        } else if (node_ready(f, nd) == FEED_OK) {
            if (redisAppendCommand(nd->c, "PING") != REDIS_OK)
                node_failed(f, nd, "PING");
            else
                flush_node(f, nd);
            nd->used = nd->c != NULL;
        }
        if (!nd->used)
            first_why(f, nd, why, sizeof why);
    }
    if (*total > 0)
        f->stats.redis_calls++;
    for (size_t k = 0; k < cl->nnodes; k++) {
        feed_node *nd = &cl->nodes[k];
        if (!primary[k] || !nd->used)
            continue;
        nd->used = 0;
        if (pong_within(f, nd, deadline - feed__now_ms()))
            ++*up;
        else
            first_why(f, nd, why, sizeof why);
    }
    free(primary);
    if (*total == 0)
        return feed__error(f, FEED_EREDIS, "Redis Cluster: no primary known (%s)", f->errmsg);
    if (*up < *total)
        return feed__error(f, FEED_EREDIS, "Redis Cluster: %zu of %zu primaries answered PING; "
                           "%s", *up, *total, why);
    return FEED_OK;
}
