/* exchange.c -- one batch of commands to Redis, to its end: the one retry
 * machine of the library, for a single Redis, Sentinel and Cluster alike.
 *
 * A request hands over a batch (core.h, feed_batch): n commands on one slot
 * that go, in order, in one pipeline to one node (a page read, a hook's
 * script, a rebuild's staging and install), or n independent commands each
 * routed by its own key (a fan-out, repairs), or commands for named nodes
 * (SCAN, PING). The exchange says what the driver must do, pass after pass,
 * and reads the replies:
 *
 *   route      single Redis and Sentinel: node 0. Cluster: the owner of the
 *              slot by the map, refreshed first when it is stale (at most
 *              every REFRESH_MIN_MS: a burst of MOVED during a reshard costs
 *              one CLUSTER SLOTS, not one per call);
 *   set up     each node of the pass connected and set up (setup.c), its
 *              data set's generation known with the restart fence (now and
 *              then a step of the sweep of older generations' copies too);
 *              on a cluster a read also needs its slot's own fence
 *              cleared on the slot's owner, and is never sent on by ASK: the
 *              copies of a slot being imported are not known right until
 *              the slot has arrived and its fence is checked there;
 *   keys       each command's keys carry the generation of the node it is
 *              sent to, written as the trip is formed (base.h);
 *   pass       the commands still owed an answer, one trip per node, every
 *              node at once; a hook's trip ends with WAIT (redis_wait_replicas),
 *              a read's under Sentinel with ROLE (its answer is used only while
 *              the node still has its replicas attached: xchg_judge_role);
 *   replies    final, or: MOVED (the map is old: refresh it, send again),
 *              ASK (migrating: ASKING + the command at the target, once),
 *              TRYAGAIN / CLUSTERDOWN / LOADING (back off: a wake-up, never a
 *              sleep here, until redis_timeout_ms has passed since the batch
 *              began), NOSCRIPT (load the scripts on that node, send again,
 *              once), READONLY (a demoted primary: drop it, ask the Sentinels
 *              at once);
 *   failures   a node that closed a connection that had worked (a restart) is
 *              tried once more on a fresh one, if nothing of that trip was
 *              answered; any other failure fails the batch (FEED_EREDIS, the
 *              reason in the request's message) and drops the connection,
 *              reconnected after retry_ms.
 *
 * Before anything, feeds whose write was lost are dropped (repair.c): the
 * exchange asks the driver to run the repairs first.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

/* The least time between two refreshes of the slot map. */
#define REFRESH_MIN_MS 20
/* MOVED or ASK followed per batch (between two waits) before giving up. */
#define MAX_REDIRECTS 5

/* x->state. The rest of the retry machine's state, x->pass, x->met and
 * x->peer, is named in core.h (FEED_XP_*, FEED_XM_*, feed_xpeer). */
enum { XCHG_START, XCHG_ROUTE, XCHG_MAP, XCHG_MAP_SETUP, XCHG_MAP_ASK, XCHG_PASS, XCHG_WAKE,
       XCHG_CONNECT, XCHG_DONE };

static int xchg_cluster(const feed_xchg *x)
{
    return x->c->topo.cluster;
}

static feed_node *xchg_node(const feed_xchg *x, int i)
{
    return x->c->topo.nodes[i];
}

static enum feed_xwant xchg_done(feed_xchg *x, int rc)
{
    x->rc = rc;
    x->state = XCHG_DONE;
    return FEED_X_DONE;
}

/* The batch fails: why on the request. On a cluster the words name it. */
static enum feed_xwant xchg_give_up(feed_xchg *x, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static enum feed_xwant xchg_give_up(feed_xchg *x, const char *fmt, ...)
{
    char why[FEED_ERRMSG];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    x->c->stats.redis_errors++;
    return xchg_done(x, feed__msg(x->err, FEED_EREDIS, xchg_cluster(x) ? "Redis Cluster: %s"
                                  : "%s", why));
}

void feed__xchg_begin(feed_xchg *x, feed_core *c, const feed_batch *b, char *err, int64_t now)
{
    /* Every field but the buffers (why, map_why, what: written before
     * read), set one by one: this runs on every page. */
    memset(x, 0, offsetof(feed_xchg, why));
    x->id = ++c->xchg_seq;
    x->why[0] = x->map_why[0] = x->what[0] = '\0';
    x->c = c;
    x->b = b;
    x->err = err;
    x->deadline = now + c->cfg.redis_timeout_ms;
    x->trips = &x->one_trip;
    x->trips_cap = 1;
    x->cmds = b->n <= sizeof x->small / sizeof x->small[0] ? x->small
                                                            : calloc(b->n, sizeof *x->cmds);
    if (!x->cmds) {
        xchg_done(x, feed__msg(err, FEED_ENOMEM, "out of memory for a pipeline of %zu", b->n));
        return;
    }
    for (size_t i = 0; i < b->n; i++) {
        x->cmds[i] = (feed_xcmd){ .node = -1, .slot = b->slot };
        if (b->flags & FEED_B_EACH) {   /* each command's own slot */
            const char **argv;
            const size_t *lens;
            int argc = b->build(b->arg, i, &argv, &lens);
            x->cmds[i].slot = feed__command_slot(argc, argv, lens);
        }
    }
    x->map_fail_rc = FEED_EUNAVAILABLE;
    x->state = b->n == 0 && !(b->flags & FEED_B_MAP) ? XCHG_DONE : XCHG_START;
}

static void xchg_free_trips(feed_xchg *x)
{
    for (size_t t = 0; t < x->ntrips; t++)
        if (x->trips[t].map != x->trips[t].small)
            free(x->trips[t].map);
    x->ntrips = 0;
}

void feed__xchg_end(feed_xchg *x)
{
    xchg_free_trips(x);
    if (x->trips != &x->one_trip)
        free(x->trips);
    x->trips = NULL;
    if (x->cmds != x->small)
        free(x->cmds);
    x->cmds = NULL;
}

/* ---- Trips: what goes on the wire, what comes back --------------------- */

static int xchg_check_kind(const feed_xchg *x)
{
    const feed_config *cfg = &x->c->cfg;

    if (cfg->redis_wait_replicas == 0 || (x->b->flags & FEED_B_NODE))
        return 0;
    if (x->b->flags & FEED_B_HOOK)
        return FEED_XK_WAIT;
    return !xchg_cluster(x) && cfg->redis_sentinels ? FEED_XK_ROLE : 0;
}

/* Which of the library's scripts (FEED_SCRIPT_*) a command runs, by its
 * SHA; -1 when it is not an EVALSHA of one. */
static int xchg_script(const feed_xchg *x, int argc, const char **argv, const size_t *lens)
{
    if (argc < 2 || lens[0] != 7 || memcmp(argv[0], "EVALSHA", 7) != 0 || lens[1] != 40)
        return -1;
    for (int s = 0; s < FEED_SCRIPT_COUNT; s++)
        if (memcmp(argv[1], x->c->sha[s], 40) == 0)
            return s;
    return -1;
}

/* The batch's name in messages: its first command, or its script. Only
 * a message needs it: built again then. */
static const char *xchg_what(feed_xchg *x)
{
    const char **argv;
    const size_t *lens;
    int argc, s;

    if (x->b->n == 0)
        return "?";
    argc = x->b->build(x->b->arg, 0, &argv, &lens);
    if ((s = xchg_script(x, argc, argv, lens)) >= 0)
        return feed__script_name(s);
    snprintf(x->what, sizeof x->what, "%.*s", argc > 0 ? (int)lens[0] : 1,
             argc > 0 ? argv[0] : "?");
    return x->what;
}

/* Command k of a trip: a batch command, or one of the exchange's own. */
static int xchg_trip_cmd(void *arg, size_t k, const char ***argv, const size_t **lens)
{
    static const char *words[][2] = { [-1 - FEED_XK_ASKING] = { "ASKING" },
                                      [-1 - FEED_XK_ROLE] = { "ROLE" },
                                      [-1 - FEED_XK_SLOTS] = { "CLUSTER", "SLOTS" } };
    static const size_t word_lens[][2] = { [-1 - FEED_XK_ASKING] = { 6 },
                                           [-1 - FEED_XK_ROLE] = { 4 },
                                           [-1 - FEED_XK_SLOTS] = { 7, 5 } };
    feed_xtrip *t = arg;
    feed_xchg *x = t->x;
    int m = t->map[k];

    if (m >= 0) {
        int argc = x->b->build(x->b->arg, (size_t)m, argv, lens);
        if (!(x->b->flags & (FEED_B_NODE | FEED_B_VERBATIM)))
            feed__keys_stamp(x->c, xchg_node(x, t->trip.node)->fence.gen, argc, *argv, *lens);
        return argc;
    }
    if (m == FEED_XK_WAIT) {
        x->wait_argv[0] = "WAIT";
        x->wait_argv[1] = x->wait_n;
        x->wait_argv[2] = x->wait_ms;
        x->wait_lens[0] = 4;
        x->wait_lens[1] = feed__i64_to_str(x->c->cfg.redis_wait_replicas, x->wait_n);
        x->wait_lens[2] = feed__i64_to_str(x->c->cfg.redis_wait_timeout_ms, x->wait_ms);
        *argv = x->wait_argv;
        *lens = x->wait_lens;
        return 3;
    }
    *argv = words[-1 - m];
    *lens = word_lens[-1 - m];
    return m == FEED_XK_SLOTS ? 2 : 1;
}

/* WAIT's answer: enough replicas hold what this trip applied? */
static void xchg_judge_wait(feed_xchg *x, const redisReply *r)
{
    const feed_config *cfg = &x->c->cfg;

    if (r->type == REDIS_REPLY_INTEGER && r->integer >= (long long)cfg->redis_wait_replicas)
        return;
    x->c->stats.wait_failures++;
    x->c->stats.redis_errors++;
    x->pass |= FEED_XP_SHORT;
    if (r->type == REDIS_REPLY_INTEGER)
        feed__msg(x->err, FEED_EREDIS, "Redis WAIT: %lld of %u replicas acknowledged the write "
                  "within %u ms", r->integer, cfg->redis_wait_replicas,
                  cfg->redis_wait_timeout_ms);
    else
        feed__msg(x->err, FEED_EREDIS, "Redis WAIT: %s",
                  r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
}

/* ROLE's answer after a read under Sentinel. SENTINEL FAILOVER promotes
 * the replica and leaves the old primary a primary for seconds, until the
 * Sentinels reconfigure it; its replica link, though, closes at the
 * promotion. So a read is used only while its node still has
 * redis_wait_replicas replicas attached: a handle that only reads would
 * otherwise go on serving the old primary's copies, which miss the writes
 * made on the new one. A primary answers ["master", offset, [[ip, port,
 * offset], ...]]. */
static void xchg_judge_role(feed_xchg *x, const redisReply *r)
{
    const feed_config *cfg = &x->c->cfg;
    size_t have = r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
                  r->element[0]->type == REDIS_REPLY_STRING &&
                  strcmp(r->element[0]->str, "master") == 0 &&
                  r->element[2]->type == REDIS_REPLY_ARRAY ? r->element[2]->elements : 0;

    if (have >= cfg->redis_wait_replicas)
        return;
    x->c->stats.redis_errors++;
    x->pass |= FEED_XP_SHORT;
    feed__msg(x->err, FEED_EREDIS, "Redis primary has %zu of %u replicas attached: it may have "
              "been replaced; the Sentinels are asked again in retry_ms", have,
              cfg->redis_wait_replicas);
}

/* Does this batch read copies, on a cluster with the restart fence? Not
 * hooks and repairs (they only make a copy more right, or drop it), nor
 * walks over the nodes. */
static int xchg_reads(const feed_xchg *x)
{
    return xchg_cluster(x) && x->c->cfg.redis_restart_fence &&
           !(x->b->flags & (FEED_B_HOOK | FEED_B_NODE | FEED_B_REPAIR));
}

/* Command i of a batch that reads: must its slot's copies be known right?
 * Yes unless it only drops a copy (DEL, invalidate.lua). Asked only off
 * the hot path: when the slot is not yet trusted, or on ASK. */
static int xchg_trusting(feed_xchg *x, size_t i)
{
    const char **argv;
    const size_t *lens;
    int argc = x->b->build(x->b->arg, i, &argv, &lens);

    if (argc > 0 && lens[0] == 3 && memcmp(argv[0], "DEL", 3) == 0)
        return 0;
    return xchg_script(x, argc, argv, lens) != FEED_SCRIPT_INVALIDATE;
}

/* One reply of a batch command: final, or what the next pass needs. */
static void xchg_command_reply(feed_xchg *x, feed_xtrip *t, size_t i, const redisReply *r)
{
    const feed_batch *b = x->b;
    feed_topo *topo = &x->c->topo;
    feed_node *n = xchg_node(x, t->trip.node);
    enum feed_verdict v = FEED_V_DONE;
    feed_addr to;
    int k;

    if (b->flags & FEED_B_NODE) {
        x->cmds[i].done = 1;
        b->reply(b->arg, i, r);
        return;
    }
    if (xchg_cluster(x))
        v = feed__classify(r, n->addr.host, &to);
    else if (feed__is_noscript(r))
        v = FEED_V_NOSCRIPT;
    switch (v) {
    case FEED_V_DONE:
        x->cmds[i].done = 1;
        t->applied++;
        if (r->type == REDIS_REPLY_ERROR) {
            x->pass |= !xchg_cluster(x) && feed__is_readonly(r) ? FEED_XP_DEMOTED : 0;
            if (b->flags & FEED_B_EACH) {
                if (!(x->met & FEED_XM_REFUSED)) {
                    x->c->stats.redis_errors++;
                    if (xchg_cluster(x))
                        feed__msg(x->err, FEED_EREDIS, "Redis: %s", r->str);
                    else
                        feed__msg(x->err, FEED_EREDIS, "Redis %s: %s", xchg_what(x), r->str);
                    x->met |= FEED_XM_REFUSED;
                }
                return;
            }
        }
        if (b->reply)
            b->reply(b->arg, i, r);
        return;
    case FEED_V_MOVED:
        /* The node does not serve the slot (a replica now, or it gave the
         * slot away): the handle's trust in it ends here (topo.c). */
        if (n->fence.state == FEED_FENCE_TRUSTED || n->fence.state == FEED_FENCE_LAPSED)
            n->fence.state = FEED_FENCE_UNKNOWN;
        k = feed__node_index(topo, &to);
        x->pass |= FEED_XP_MOVED;
        if (k >= 0) {
            topo->owner[x->cmds[i].slot] = (uint16_t)(k + 1);   /* until the refresh says more */
            topo->nodes[k]->fence.state = FEED_FENCE_UNKNOWN;  /* it gained a slot */
        }
        topo->stale = 1;
        break;
    case FEED_V_ASK:
        if (xchg_reads(x) && xchg_trusting(x, i)) {
            x->pass |= FEED_XP_UNSURE;      /* a read: not at the target (xchg_route) */
            break;
        }
        k = feed__node_index(topo, &to);
        x->pass |= FEED_XP_ASK;
        x->cmds[i].ask = k >= 0 ? k + 1 : 0;
        break;
    case FEED_V_TRYAGAIN:
        x->pass |= FEED_XP_TRYAGAIN;
        break;
    case FEED_V_NOSCRIPT: {     /* which script: the command's SHA says */
        const char **argv;
        const size_t *lens;
        int argc = b->build(b->arg, i, &argv, &lens), s = xchg_script(x, argc, argv, lens);
        x->pass |= FEED_XP_NOSCRIPT;
        n->reload |= s >= 0 ? 1u << s : (1u << FEED_SCRIPT_COUNT) - 1;
        break;
    }
    }
    feed__msg_keep_n(x->why, sizeof x->why, r->str);
}

static void xchg_trip_reply(void *arg, size_t k, const redisReply *r)
{
    feed_xtrip *t = arg;
    feed_xchg *x = t->x;

    switch (t->map[k]) {
    case FEED_XK_ASKING:
        return;
    case FEED_XK_SLOTS:
        x->map_rc = feed__map_apply(&x->c->topo, t->trip.node, r);
        if (x->map_rc == FEED_EINVAL)
            snprintf(x->why, sizeof x->why, "CLUSTER SLOTS: %s",
                     r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        return;
    case FEED_XK_WAIT:
        /* A trip whose commands were all sent elsewhere (MOVED, ASK,
         * TRYAGAIN: nothing applied here) gives WAIT's answer no meaning; a
         * demoted node even refuses it. */
        if (t->applied > 0)
            xchg_judge_wait(x, r);
        return;
    case FEED_XK_ROLE:
        xchg_judge_role(x, r);
        return;
    default:
        xchg_command_reply(x, t, (size_t)t->map[k], r);
    }
}

/* A new trip to node `node` in this pass. */
static feed_xtrip *xchg_trip_new(feed_xchg *x, int node, size_t most)
{
    feed_xtrip *t;

    if (x->ntrips == x->trips_cap) {
        size_t cap = 2 * x->trips_cap;
        feed_xtrip *old = x->trips == &x->one_trip ? NULL : x->trips;
        feed_xtrip *bigger = realloc(old, cap * sizeof *bigger);

        if (!bigger)
            return NULL;
        if (!old)
            bigger[0] = x->one_trip;    /* the one trip it held */
        x->trips = bigger;
        x->trips_cap = cap;
        for (size_t k = 0; k < x->ntrips; k++) {   /* they moved: point at their places */
            x->trips[k].trip.arg = &x->trips[k];
            if (x->trips[k].map_small)
                x->trips[k].map = x->trips[k].small;
        }
    }
    t = &x->trips[x->ntrips];
    *t = (feed_xtrip){ .trip = { .node = node, .arg = t, .cmd = xchg_trip_cmd,
                                 .reply = xchg_trip_reply, .io = FEED_IO_OK },
                       .x = x, .was_fresh = xchg_node(x, node)->fresh,
                       .map_small = most <= sizeof t->small / sizeof t->small[0] };
    t->map = t->map_small ? t->small : malloc(most * sizeof *t->map);
    if (!t->map)
        return NULL;
    x->ntrips++;
    return t;
}

/* ---- Routing ----------------------------------------------------------- */

/* Node `node` must be set up (kind FEED_SETUP_*) before the batch goes on
 * in state `state`. */
static enum feed_xwant xchg_setup(feed_xchg *x, int node, int kind, unsigned slot, int state)
{
    x->setup_node = node;
    x->setup_kind = kind;
    x->setup_slot = slot;
    x->state = state;
    return FEED_X_SETUP;
}

/* FEED_B_NODE: the commands of node `node` get no reply (why), the rest go on. */
static void xchg_lose(feed_xchg *x, int node, const char *why)
{
    for (size_t i = 0; i < x->b->n; i++) {
        if (!x->cmds[i].done && x->cmds[i].node == node) {
            x->cmds[i].done = 1;
            if (x->b->lost)
                x->b->lost(x->b->arg, i, why);
        }
    }
}

/* The node command i goes to this pass; -1: the slot map must be asked
 * first (state set), -2: no node (the batch fails). */
static int xchg_target(feed_xchg *x, size_t i, int64_t now)
{
    feed_topo *topo = &x->c->topo;
    unsigned slot = x->cmds[i].slot;

    if (x->b->flags & FEED_B_NODE)
        return x->b->node_of(x->b->arg, i);
    if (x->cmds[i].ask)
        return x->cmds[i].ask - 1;
    if (!xchg_cluster(x))
        return 0;
    if ((topo->stale || !topo->owner[slot]) && now - topo->map_ms >= REFRESH_MIN_MS) {
        topo->map_ms = now;
        x->map_phase = 0;
        x->map_i = 0;
        x->state = XCHG_MAP;
        return -1;
    }
    if (!topo->owner[slot])
        return -2;
    return topo->owner[slot] - 1;
}

/* Must node i be set up before this batch? When it is not connected and
 * set up, or lost scripts, or (with the restart fence) its data set is not
 * yet known, so that its keys' generation is not either: then every batch,
 * hooks too, first takes the fence's step (setup.c), once per batch. While
 * older copies are being swept, a batch now and then takes a step of that
 * first. Walks over the nodes (SCAN, PING) only need the connection. */
static int xchg_needs_setup(const feed_xchg *x, const feed_node *n, int64_t now)
{
    if (n->state != FEED_NODE_READY || n->reload)
        return 1;
    return x->c->cfg.redis_restart_fence && !(x->b->flags & FEED_B_NODE) &&
           n->fenced_by != x->id &&
           (n->fence.state != FEED_FENCE_TRUSTED ||
            (n->fence.sweeping && now >= n->fence.sweep_at));
}

/* With the restart fence, may the batch use node n, set up? Its data set's
 * generation must be known: every key sent there is named for it, hooks'
 * too. A cluster node found new is read from once its copies are flushed
 * (setup.c says why); hooks go on meanwhile (they only make a copy more
 * right). FEED_OK, or the batch's failure with the reason in its err. */
static int xchg_fenced_off(feed_xchg *x, const feed_node *n)
{
    int flags = x->b->flags;

    if (!x->c->cfg.redis_restart_fence || (flags & FEED_B_NODE))
        return FEED_OK;
    if (n->fence.state != FEED_FENCE_TRUSTED)
        return feed__msg(x->err, FEED_EREDIS, "Redis %s:%d: its data set is not known yet "
                         "(the restart fence)", n->addr.host, n->addr.port);
    if (xchg_cluster(x) && n->fence.sweeping && !(flags & FEED_B_HOOK))
        return feed__msg(x->err, FEED_EREDIS, "Redis %s:%d came back from a restart or "
                         "failover: its cached copies are being dropped", n->addr.host,
                         n->addr.port);
    return FEED_OK;
}

/* Route every command still owed an answer (state XCHG_ROUTE); each node it
 * names must be usable. FEED_X_SETUP for the first that is not, FEED_X_PASS
 * once the trips are built. */
static enum feed_xwant xchg_route(feed_xchg *x, int64_t now)
{
    const feed_batch *b = x->b;
    int check = xchg_check_kind(x), rc;

    x->state = XCHG_ROUTE;
    xchg_free_trips(x);
    for (size_t i = 0; i < b->n; i++) {
        feed_node *n;
        int node;
        if (x->cmds[i].done)
            continue;
        if ((node = xchg_target(x, i, now)) == -1)
            return feed__xchg_next(x, now);         /* ask for the map first */
        if (node == -2) {
            if (x->map_why[0])
                return xchg_give_up(x, "%s", x->map_why);
            return xchg_give_up(x, "no node serves slot %u", x->cmds[i].slot);
        }
        x->cmds[i].node = node;
        n = xchg_node(x, node);
        /* A cluster node not heard from as a primary lately is looked at
         * again first (topo.c, feed__fence_lapse). */
        feed__fence_lapse(&x->c->topo, n, x->c->cfg.redis_timeout_ms, now);
        if (xchg_needs_setup(x, n, now))
            return xchg_setup(x, node, b->flags & FEED_B_NODE ? FEED_SETUP_HELLO
                              : FEED_SETUP_FULL, x->cmds[i].slot, XCHG_ROUTE);
        if ((rc = xchg_fenced_off(x, n)) != FEED_OK)
            return xchg_done(x, rc);
        /* A read on a cluster: its slot's fence too (setup.c). Two set-ups
         * at most (the first may have been another request's, joined by
         * the event-loop driver), then the read goes to PostgreSQL. */
        if (xchg_reads(x) && !feed__slot_trusted(&x->c->topo, n, x->cmds[i].slot) &&
            xchg_trusting(x, i)) {
            if (x->cmds[i].fenced < 2)
                return xchg_setup(x, node, FEED_SETUP_FULL, x->cmds[i].slot, XCHG_ROUTE);
            x->c->topo.stale = 1;
            return xchg_done(x, feed__msg(x->err, FEED_EREDIS, "Redis %s:%d: the copies of slot "
                                          "%u are not yet known to be right (the slot moved, "
                                          "or its node came back from a restart or failover)",
                                          n->addr.host, n->addr.port, x->cmds[i].slot));
        }
        /* The repairs ran first and left a feed of this slot on the list
         * (a DEL redirected while another node's WAIT failed, say): its
         * copy may miss the lost write. Rare: one atomic load otherwise. */
        if (xchg_reads(x) && feed__repair_slot_pending(x->c, x->cmds[i].slot) &&
            xchg_trusting(x, i))
            return xchg_done(x, feed__msg(x->err, FEED_EREDIS, "Redis Cluster: a copy in slot %u "
                                          "is still to be dropped (a lost write's repair failed)",
                                          x->cmds[i].slot));
    }
    /* One trip per node, its commands in batch order: ASKING before each
     * one redirected by ASK, and the check at the end. */
    for (size_t i = 0; i < b->n; i++) {
        feed_xtrip *t = NULL;
        if (x->cmds[i].done)
            continue;
        for (size_t k = 0; k < x->ntrips; k++)
            if (x->trips[k].trip.node == x->cmds[i].node)
                t = &x->trips[k];
        if (!t && !(t = xchg_trip_new(x, x->cmds[i].node, 2 * b->n + 1)))
            return xchg_done(x, feed__msg(x->err, FEED_ENOMEM, "out of memory for a "
                                          "pipeline of %zu", b->n));
        if (x->cmds[i].ask)
            t->map[t->trip.n++] = FEED_XK_ASKING;
        t->map[t->trip.n++] = (int)i;
    }
    for (size_t k = 0; check && k < x->ntrips; k++)
        x->trips[k].map[x->trips[k].trip.n++] = check;
    x->c->stats.redis_calls += x->ntrips;
    x->pass = 0;
    x->pass_ms = now;
    x->state = XCHG_PASS;
    return FEED_X_PASS;
}

/* ---- The slot map ------------------------------------------------------ */

/* Ask node x->map_node for CLUSTER SLOTS. */
static enum feed_xwant xchg_map_ask(feed_xchg *x)
{
    feed_xtrip *t;

    xchg_free_trips(x);
    if (!(t = xchg_trip_new(x, x->map_node, 1)))
        return xchg_done(x, feed__msg(x->err, FEED_ENOMEM, "out of memory for the slot map"));
    t->map[t->trip.n++] = FEED_XK_SLOTS;
    x->map_rc = FEED_EREDIS;
    x->c->stats.redis_calls++;
    x->state = XCHG_MAP_ASK;
    return FEED_X_PASS;
}

static enum feed_xwant xchg_map_next(feed_xchg *x, int64_t now)
{
    int node = feed__map_candidate(&x->c->topo, &x->map_phase, &x->map_i);

    if (node < 0) {                 /* nobody answered: route with what we have */
        if (x->b->flags & FEED_B_MAP) {
            x->c->stats.redis_errors++;
            return xchg_done(x, feed__msg(x->err, x->map_fail_rc, "Redis Cluster: %s",
                                          x->map_why[0] ? x->map_why : "no node answers"));
        }
        return xchg_route(x, now);
    }
    x->map_node = node;
    if (xchg_node(x, node)->state != FEED_NODE_READY || xchg_node(x, node)->reload)
        return xchg_setup(x, node, FEED_SETUP_HELLO, 0, XCHG_MAP_SETUP);
    return xchg_map_ask(x);
}

/* ---- The machine ------------------------------------------------------- */

void feed__xchg_repair_again(feed_xchg *x)
{
    if (x->state == XCHG_ROUTE)
        x->state = XCHG_START;
}

enum feed_xwant feed__xchg_next(feed_xchg *x, int64_t now)
{
    switch (x->state) {
    case XCHG_START:
        if ((x->b->flags & FEED_B_MAP) && !xchg_cluster(x)) {    /* node 0 connected */
            if (xchg_node(x, 0)->state == FEED_NODE_READY)
                return xchg_done(x, FEED_OK);
            return xchg_setup(x, 0, FEED_SETUP_HELLO, 0, XCHG_CONNECT);
        }
        if (x->b->flags & FEED_B_MAP) {     /* the slot map, asked afresh */
            x->c->topo.map_ms = now;
            x->state = XCHG_MAP;
            return xchg_map_next(x, now);
        }
        x->state = XCHG_ROUTE;
        if (!(x->b->flags & (FEED_B_REPAIR | FEED_B_NODE)) && feed__repairs_pending()) {
            x->repair_gen = feed__repair_gen();
            return FEED_X_REPAIR;
        }
        return xchg_route(x, now);
    case XCHG_ROUTE:
        return xchg_route(x, now);
    case XCHG_MAP:
        return xchg_map_next(x, now);
    case XCHG_MAP_SETUP:              /* set up: ask it */
        return xchg_map_ask(x);
    case XCHG_WAKE:
        if (now < x->wake_at)
            return FEED_X_WAKE;
        return xchg_route(x, now);
    case XCHG_DONE:
        return FEED_X_DONE;
    default:
        return xchg_done(x, feed__msg(x->err, FEED_EREDIS, "Redis: exchange misused"));
    }
}

void feed__xchg_setup_done(feed_xchg *x, int rc, const char *why)
{
    /* feed_open's connect, or no memory: the set-up's word ends the batch. */
    if (x->state == XCHG_CONNECT || rc == FEED_ENOMEM) {
        xchg_done(x, rc == FEED_OK ? FEED_OK : feed__msg(x->err, rc, "%s", why));
        return;
    }
    if (x->state == XCHG_MAP_SETUP) {
        if (rc != FEED_OK) {        /* the next candidate */
            feed__msg_keep_n(x->map_why, sizeof x->map_why, why);
            if (rc == FEED_EREDIS)
                x->map_fail_rc = FEED_EREDIS;   /* answered and refused */
            x->state = XCHG_MAP;
        }
        return;
    }
    if (rc == FEED_OK) {
        xchg_node(x, x->setup_node)->fenced_by = x->id;   /* a fence step per batch */
        for (size_t i = 0; i < x->b->n; i++)          /* and a slot's, at most twice */
            if (!x->cmds[i].done && x->cmds[i].node == x->setup_node &&
                x->cmds[i].slot == x->setup_slot && x->cmds[i].fenced < 2)
                x->cmds[i].fenced++;
        return;
    }
    if (x->b->flags & FEED_B_NODE) {    /* that node's commands are lost, not the rest */
        xchg_lose(x, x->setup_node, why);
        return;
    }
    /* The repairs go to every node they can: a node that cannot be set up
     * keeps its feeds on the repair list, and the others' DELs still land
     * before the request they run ahead of (its feeds may be on them). */
    if ((x->b->flags & FEED_B_REPAIR) && xchg_cluster(x)) {
        x->c->topo.stale = 1;
        for (size_t i = 0; i < x->b->n; i++)
            if (!x->cmds[i].done && x->c->topo.owner[x->cmds[i].slot] == x->setup_node + 1)
                x->cmds[i].node = x->setup_node;
        xchg_lose(x, x->setup_node, why);
        return;
    }
    /* The node is down (maybe between two reconnects): the batch fails; on
     * a cluster the map is asked again next time, a replica may have taken
     * over. */
    if (xchg_cluster(x)) {
        x->c->topo.stale = 1;
        xchg_give_up(x, "%s", why);
    } else {
        xchg_done(x, feed__msg(x->err, FEED_EREDIS, "%s", why));
    }
}

/* A trip that failed: a connection that had worked and was closed by its
 * peer is worth one more try on a fresh one (nothing of the trip answered:
 * no command ran twice, and no WAIT is lost); anything else fails the
 * batch, or on a walk over the nodes (FEED_B_NODE) loses that node's
 * commands only. The driver closes every DOWN node's connection. */
static void xchg_trip_failed(feed_xchg *x, feed_xtrip *t, int64_t now)
{
    feed_node *n = xchg_node(x, t->trip.node);
    n->state = FEED_NODE_DOWN;
    n->refused = 0;                 /* it did not answer */
    if (xchg_cluster(x))
        x->c->topo.stale = 1;
    if (!t->was_fresh && x->peer == FEED_XPEER_NONE && t->trip.io == FEED_IO_CLOSED &&
        t->trip.got == 0) {
        n->attempt_ms = 0;          /* the server went away under us: try now */
        if (xchg_cluster(x))
            x->c->topo.map_ms = 0;
        x->peer = FEED_XPEER_DUE;
    } else {
        /* The connection broke, or stayed silent a whole
         * redis_timeout_ms (an async one is given up only then, not for
         * replies merely late behind others: lib/io/redis_async.c): the
         * next attempt waits retry_ms, jittered (feed__attempt_at). */
        n->attempt_ms = feed__attempt_at(x->c, now);
        snprintf(n->why, sizeof n->why, "Redis at %.64s:%d: %.160s", n->addr.host,
                 n->addr.port, t->trip.why);
        feed__store_failed(x->c, &n->failing, n->why);
        x->c->stats.redis_errors++;
        if (!(x->pass & FEED_XP_FAILED) && xchg_cluster(x))
            feed__msg(x->err, FEED_EREDIS, "Redis Cluster: Redis %s:%d: %s", n->addr.host,
                      n->addr.port, t->trip.why);
        else if (!(x->pass & FEED_XP_FAILED))
            feed__msg(x->err, FEED_EREDIS, "Redis %s: %s", xchg_what(x), t->trip.why);
        x->pass |= FEED_XP_FAILED;
    }
    if (x->b->flags & FEED_B_NODE) {
        xchg_lose(x, t->trip.node, x->err);
        x->pass &= ~(unsigned)FEED_XP_FAILED;
    }
}

/* CLUSTER SLOTS answered (or not): route with the new map, or ask the next
 * candidate. */
static void xchg_map_read(feed_xchg *x)
{
    if (x->map_rc == FEED_OK) {
        if (x->b->flags & FEED_B_MAP)
            xchg_done(x, FEED_OK);
        else
            x->state = XCHG_ROUTE;
    } else if (x->map_rc == FEED_ENOMEM) {
        xchg_done(x, feed__msg(x->err, FEED_ENOMEM, "out of memory for the slot map"));
    } else {
        if (x->map_rc == FEED_EINVAL) {
            feed_node *n = xchg_node(x, x->map_node);
            x->c->stats.redis_errors++;
            snprintf(x->map_why, sizeof x->map_why, "Redis %.64s:%d: %.150s", n->addr.host,
                     n->addr.port, x->why);
        } else if (x->pass & FEED_XP_FAILED) {
            feed__msg_keep_n(x->map_why, sizeof x->map_why, x->err);
        }
        x->pass &= ~(unsigned)FEED_XP_FAILED;
        x->state = XCHG_MAP;        /* the next candidate */
    }
}

/* Does the batch end with this pass? When a trip failed, when too few
 * replicas hold its writes, or when every command has its final reply. */
static int xchg_pass_ends(feed_xchg *x, int64_t now)
{
    if (x->pass & FEED_XP_FAILED) {
        xchg_done(x, FEED_EREDIS);
        return 1;
    }
    if (x->pass & FEED_XP_SHORT) {
        /* Too few replicas: the batch fails. Under Sentinel the primary may
         * have been replaced: ask the Sentinels again after retry_ms (not at
         * once: with no replica at all, every call would reconnect); on a
         * cluster, ask the map again. */
        if (xchg_cluster(x)) {
            x->c->topo.stale = 1;
        } else if (x->c->cfg.redis_sentinels) {
            xchg_node(x, 0)->state = FEED_NODE_DOWN;
            xchg_node(x, 0)->attempt_ms = now;
        }
        xchg_done(x, FEED_EREDIS);
        return 1;
    }
    if (x->pass & FEED_XP_UNSURE) {     /* a read met ASK: PostgreSQL answers it */
        x->c->stats.redis_errors++;
        feed__msg(x->err, FEED_EREDIS, "Redis Cluster: %s: a copy is read only on its slot's "
                  "owner", x->why);
        xchg_done(x, FEED_EREDIS);
        return 1;
    }
    if (x->pass & FEED_XP_DEMOTED) {    /* -READONLY: drop, ask the Sentinels at once */
        x->c->stats.failovers++;
        xchg_node(x, 0)->state = FEED_NODE_DOWN;
        xchg_node(x, 0)->attempt_ms = 0;
    }
    for (size_t i = 0; i < x->b->n; i++)
        if (!x->cmds[i].done)
            return 0;
    xchg_done(x, x->met & FEED_XM_REFUSED ? FEED_EREDIS : FEED_OK);
    return 1;
}

/* Commands are still owed an answer: send them again now (on a fresh
 * connection, after a redirect, with the scripts reloaded) or after a
 * back-off, or give up. */
static void xchg_again(feed_xchg *x, int64_t now)
{
    int64_t pause;

    if (x->peer == FEED_XPEER_DUE) {
        x->peer = FEED_XPEER_SPENT;
        x->state = XCHG_ROUTE;
        return;
    }
    if (x->pass & (FEED_XP_MOVED | FEED_XP_ASK)) {
        if (++x->redirects <= MAX_REDIRECTS) {
            x->c->stats.redis_redirects++;
            x->state = XCHG_ROUTE;
            return;
        }
        xchg_give_up(x, "too many redirects (last: %s)", x->why);
        return;
    }
    if ((x->pass & FEED_XP_NOSCRIPT) && !(x->met & FEED_XM_RELOADED)) {
        x->met |= FEED_XM_RELOADED;
        x->state = XCHG_ROUTE;
        return;
    }
    if ((x->pass & FEED_XP_NOSCRIPT) && !xchg_cluster(x)) {
        xchg_give_up(x, "Redis %s: NOSCRIPT twice", xchg_what(x));
        return;
    }
    pause = feed__backoff_ms(++x->tries, now, x->deadline);
    if (!(x->pass & FEED_XP_TRYAGAIN) || pause < 0) {
        xchg_give_up(x, "%s (retried for %u ms)", x->why, x->c->cfg.redis_timeout_ms);
        return;
    }
    x->c->stats.redis_retries++;
    /* A migrating slot answers ASK, then TRYAGAIN at the target, for as long
     * as it migrates: redirects count only between two waits, the deadline
     * bounds the rest. CLUSTERDOWN: a failover may have moved the slot. */
    x->redirects = 0;
    if (x->c->topo.stale)
        x->c->topo.map_ms = 0;
    x->wake_at = now + pause;
    x->state = XCHG_WAKE;
}

void feed__xchg_pass_done(feed_xchg *x, int64_t now)
{
    for (size_t k = 0; k < x->ntrips; k++) {
        feed_xtrip *t = &x->trips[k];
        if (t->trip.got > 0)
            xchg_node(x, t->trip.node)->fresh = 0;
        /* A command with a key answered, not redirected: the node was a
         * primary after the pass was sent (topo.c: what a trust rests on).
         * Not the slot map's trip (a replica answers CLUSTER SLOTS too), and
         * not a walk's (PING, SCAN: a replica answers them). */
        if (t->trip.io == FEED_IO_OK && t->applied > 0 && x->state != XCHG_MAP_ASK &&
            !(x->b->flags & FEED_B_NODE))
            feed__fence_heard(xchg_node(x, t->trip.node), x->pass_ms);
        if (t->trip.io != FEED_IO_OK)
            xchg_trip_failed(x, t, now);
    }
    xchg_free_trips(x);
    if (x->state == XCHG_MAP_ASK)
        xchg_map_read(x);
    else if (!xchg_pass_ends(x, now))
        xchg_again(x, now);
}
