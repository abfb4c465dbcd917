/* sim_world.c -- the deterministic simulation: the library's request
 * machines (lib/core/) run against a simulated Redis and PostgreSQL on a
 * simulated clock, every choice drawn from one seed.
 *
 * The driver here is the third one beside lib/drive/sync.c and async.c.
 * It runs the same machines in the same order sync.c does (a request's
 * step, its batch's exchange, a node's set-up, the repairs first), but each
 * place where sync.c would block is an await: a connect, one command of a
 * trip reaching Redis, the replies coming back, a statement, a wake-up.
 * The scheduler completes one await of one client at a time, so the
 * commands of other clients land between any two commands of a pipeline,
 * a writer's commit and hook land between a rebuild's SQL read and its
 * install, and so on: every interleaving a seed can choose. At each await
 * a fault may strike (sim_fault_*).
 *
 * The invariant is checked on every page a reader gets (it equals the SQL
 * page of some state of the table between the request's start and end) and
 * at the end, after the faults heal and the writers stop (every cached copy
 * is an exact prefix of SQL's rows, or absent).
 */
#include "sim_world.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ------------------------------------------------------------------------
 * Choices
 * ------------------------------------------------------------------------ */

static uint64_t sim_next(sim_world *w)
{
    /* splitmix64: every draw depends only on the seed and the draws before */
    uint64_t z = (w->rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t sim_pick(sim_world *w, uint64_t n) { return n ? sim_next(w) % n : 0; }

static int  sim_key_server(sim_world *w, const char *key);
static void sim_owner_keys(sim_world *w, int author, int64_t owner, char *key, char *lease);
static void sim_gen_keys(sim_world *w, int author, int64_t owner, const char *gen, char *key,
                         char *lease);

/* A fault of kind k strikes here with probability w->rate[k] per mille?
 * Each such draw is numbered; the shrinker masks draws by number. */
static int sim_fault(sim_world *w, int k, const char *what)
{
    uint64_t draw = sim_pick(w, 1000);
    size_t i = w->fault_draws++;

    if (draw >= w->rate[k] || w->healed)
        return 0;
    for (size_t j = 0; j < w->nmask; j++)
        if (w->mask[j] == i)
            return 0;
    w->faults++;
    if (w->last_faults_n < SIM_FAULT_LOG)
        w->last_faults[w->last_faults_n++] = i;
    sim_trace(w, "    fault #%zu: %s", i, what);
    return 1;
}

void sim_trace(sim_world *w, const char *fmt, ...)
{
    va_list ap;

    if (!w->trace)
        return;
    fprintf(w->trace, "%8" PRId64 " ms  ", w->now);
    va_start(ap, fmt);
    vfprintf(w->trace, fmt, ap);
    va_end(ap);
    fputc('\n', w->trace);
}

static void sim_violation(sim_world *w, const char *fmt, ...)
{
    va_list ap;

    w->violations++;
    if (w->violations > 1)
        return;
    va_start(ap, fmt);
    vsnprintf(w->why, sizeof w->why, fmt, ap);
    va_end(ap);
    sim_trace(w, "VIOLATION: %s", w->why);
}

/* ------------------------------------------------------------------------
 * Redis: connections and trips
 * ------------------------------------------------------------------------ */

/* A connection is a server and the incarnation it was opened on (>= 1):
 * a restart or a death closes every older one. */
static void *sim_conn(sim_world *w, int s)
{
    return (void *)(w->sv[s].epoch * SIM_SERVERS + (uintptr_t)s);
}

/* An async handle (sim_async_*, below): several requests in flight on one
 * core, as lib/drive/async.c carries them on an event loop. Its nodes'
 * connections are sim_aconn: trips appended whole in the order the
 * requests send them (any request's, or a set-up's), their commands
 * reaching the server in that order, their replies coming back in that
 * order; when a connection goes, every trip on it ends at once. */
#define SIM_AREQS  4            /* the async handle's readers */
#define SIM_ACONNS 24
#define SIM_ATRIPS 24           /* trips queued on one connection */
#define SIM_ANODES 32

typedef struct sim_atrip {
    feed_trip  *t;
    sim_client *owner;          /* the request; NULL: the set-up of node `node` */
    int         node;
    int64_t     sent;
    size_t      applied;        /* its commands that reached the server */
    redisReply *replies[64];
} sim_atrip;

typedef struct sim_aconn {
    int        used, server;
    uintptr_t  epoch;           /* the server's incarnation it was made on */
    int        asking;          /* its last command was ASKING */
    long long  woff;            /* the offset of its last write (WAIT) */
    sim_atrip  q[SIM_ATRIPS];   /* the trips on it, oldest first */
    size_t     count;
} sim_aconn;

typedef struct sim_ahandle {
    feed_core      core;
    int            id;          /* in the trace: its set-ups' and repairs' commands */
    sim_aconn      conns[SIM_ACONNS];
    feed_setup    *setup[SIM_ANODES];       /* each node's set-up under way: one, shared */
    int            setup_aw[SIM_ANODES];    /* what it waits for (SIM_AW_*; NONE: to run) */
    unsigned long  setup_ready[SIM_ANODES]; /* its place in the ready queue (0: none) */
    sim_client    *req[SIM_AREQS];
    int            nreq;
    sim_client    *sqlq[SIM_AREQS + 1];     /* one statement at a time, in order */
    size_t         nsql;
    sim_client     pg;          /* runs the statement at the head of sqlq */
    sim_client     rep;         /* the repair request, while `repairing` */
    int            repairing;
    int            rep_seen;    /* sim_census: that repair seen in flight, and the */
    unsigned       rep_cover;   /* feeds with a loss pending when it began */
    unsigned long  seq;         /* the ready queue's and the waiters' order */
    int64_t        ready_at;    /* the loop's next turn: later after a pause */
} sim_ahandle;

/* The server an async connection reaches; -1 when it is closed. */
static int sim_aconn_server(const sim_world *w, const sim_aconn *k)
{
    if (!k->used || w->sv[k->server].epoch != k->epoch || w->sv[k->server].dead)
        return -1;
    return k->server;
}

/* The server a live connection reaches; -1 when it is closed. */
static int sim_conn_server(const sim_world *w, const void *io)
{
    uintptr_t v = (uintptr_t)io;
    int s = (int)(v % SIM_SERVERS);

    if (w->ah && v >= (uintptr_t)w->ah->conns && v < (uintptr_t)(w->ah->conns + SIM_ACONNS))
        return sim_aconn_server(w, io);
    if (!io || s >= w->nsv || w->sv[s].epoch != v / SIM_SERVERS || w->sv[s].dead)
        return -1;
    return s;
}


/* The server (or Sentinel) at addr; -1: nobody listens there. */
static int sim_server_at(const sim_world *w, const feed_addr *a, int sentinel)
{
    for (int s = 0; s < w->nsv; s++)
        if (w->sv[s].sentinel == sentinel && w->sv[s].port == a->port &&
            strcmp(w->sv[s].host, a->host) == 0)
            return s;
    return -1;
}

/* ------------------------------------------------------------------------
 * Replication. A replica's data set is a copy of its primary's taken at
 * random steps (simr_replicate), not a replay of a command stream: the
 * primary applies each command whole (a script too), so a copy taken
 * between two steps is exactly what replaying a prefix of the stream
 * gives, and a copy is a few lines where a stream is a queue to keep,
 * trim and replay. What a replica holds is all that matters to the
 * library: how far behind, and since which of the primary's writes.
 * ------------------------------------------------------------------------ */

/* Replica j receives its primary's data set as it is now. */
static void sim_sync(sim_world *w, int j)
{
    struct sim_server *p = &w->sv[w->sv[j].of];

    if (simr_replicate(w->sv[j].r, p->r) < 0) {
        fprintf(stderr, "sim: out of memory\n");
        exit(3);
    }
    w->sv[j].synced = simr_offset(p->r);
}

/* Before a command of a connection's runs on server s: what ROLE lists
 * (the replicas following s) and what WAIT answers (those holding the
 * connection's last write on s, at offset woff). A WAIT blocks until enough replicas hold it or its timeout
 * passes: each replica behind may catch up meanwhile, or not. */
static void sim_links(sim_world *w, const feed_core *c, long long woff, int s, int wait)
{
    int attached = 0, acked = 0;

    for (int j = 0; j < w->nsv; j++) {
        if (w->sv[j].sentinel || w->sv[j].of != s || w->sv[j].dead)
            continue;
        attached++;
        if (wait && w->sv[j].synced < woff && sim_pick(w, 2))
            sim_sync(w, j);
        acked += w->sv[j].synced >= woff;
    }
    if (wait && acked < (int)c->cfg.redis_wait_replicas)
        w->now += c->cfg.redis_wait_timeout_ms;
    simr_set_links(w->sv[s].r, attached, acked);
}

static void sim_close_if_down(feed_node *n)
{
    if (n->state == FEED_NODE_DOWN)
        n->io = NULL;
}

static void sim_words(const char (*sha)[41], char *out, size_t cap, int argc, const char **argv,
                      const size_t *lens)
{
    size_t used = 0;

    out[0] = '\0';
    for (int i = 0; i < argc && used + 4 < cap; i++) {
        size_t len = lens[i];
        int text = 1;
        for (size_t j = 0; j < len; j++)
            text &= argv[i][j] >= 0x20 && argv[i][j] < 0x7f;
        if (i == 1 && argc > 1 && strncmp(argv[0], "EVALSHA", 7) == 0) {
            const char *name = "?";
            for (int s = 0; s < FEED_SCRIPT_COUNT; s++)
                if (len == 40 && memcmp(argv[1], sha[s], 40) == 0)
                    name = feed__script_name(s);
            used += (size_t)snprintf(out + used, cap - used, " <%s>", name);
        } else if (text) {
            used += (size_t)snprintf(out + used, cap - used, " %.*s", (int)(len > 24 ? 24 : len),
                                     argv[i]);
        } else {
            int64_t id;
            if (feed__member_decode(argv[i], len, &id) == 0)
                used += (size_t)snprintf(out + used, cap - used, " #%" PRId64, id);
            else
                used += (size_t)snprintf(out + used, cap - used, " <%zu bytes>", len);
        }
        if (used >= cap)
            used = cap - 1;
    }
}

static void sim_reply_text(char *out, size_t cap, const redisReply *r)
{
    switch (r->type) {
    case REDIS_REPLY_INTEGER:
        snprintf(out, cap, "%lld", r->integer);
        break;
    case REDIS_REPLY_NIL:
        snprintf(out, cap, "nil");
        break;
    case REDIS_REPLY_ARRAY:
        snprintf(out, cap, "[%zu]", r->elements);
        break;
    case REDIS_REPLY_ERROR:
        snprintf(out, cap, "-%.60s", r->str);
        break;
    default:
        snprintf(out, cap, "\"%.30s\"", r->str);
        break;
    }
    for (char *p = out; *p; p++)
        if (*p == '\r' || *p == '\n')
            *p = ' ';
}

/* ------------------------------------------------------------------------
 * Redis Cluster: the nodes' answers that depend on the slot map. Every
 * node knows the same map (a node that has not yet heard of a change is
 * left out), and a migrating slot's keys move one by one, as MIGRATE moves
 * them, so a command meets Redis 7.0's rules (cluster.c, getNodeByQuery):
 * a key of a slot the node does not serve: MOVED; on the source of a
 * migration, keys of the slot all here: served, none here: ASK, some:
 * TRYAGAIN; on the target, after ASKING: served, unless several keys and
 * some not here yet: TRYAGAIN. A script's own commands on keys it did not
 * declare are judged the same way, with its caller's ASKING, and refused
 * one by one (simr_set_guard).
 * ------------------------------------------------------------------------ */

enum { SIM_SERVE, SIM_MOVED, SIM_ASK, SIM_TRYAGAIN, SIM_CROSSSLOT };

static int sim_word(const char *arg, size_t len, const char *word)
{
    return len == strlen(word) && strncasecmp(arg, word, len) == 0;
}

/* The keys of a command the library sends: argv[*first], n of them. */
static int sim_cmd_keys(int argc, const char *const *argv, const size_t *lens, int *first)
{
    static const char *const one[] = { "ZADD", "ZRANGE", "ZREVRANGE", "ZREVRANGEBYSCORE",
                                       "ZCOUNT", "ZSCORE", "ZRANK", "ZREVRANK", "ZREM",
                                       "ZREMRANGEBYRANK", "ZCARD", "GET", "SET", "PEXPIRE",
                                       "PERSIST", "PTTL", NULL };
    *first = 1;
    if (argc < 2)
        return 0;
    if (sim_word(argv[0], lens[0], "EVALSHA") || sim_word(argv[0], lens[0], "EVAL")) {
        long n = argc > 2 ? strtol(argv[2], NULL, 10) : 0;
        *first = 3;
        return n >= 0 && n <= argc - 3 ? (int)n : 0;
    }
    if (sim_word(argv[0], lens[0], "DEL") || sim_word(argv[0], lens[0], "UNLINK") ||
        sim_word(argv[0], lens[0], "EXISTS"))
        return argc - 1;
    if (sim_word(argv[0], lens[0], "RENAME"))
        return argc >= 3 ? 2 : 0;
    for (int i = 0; one[i]; i++)
        if (sim_word(argv[0], lens[0], one[i]))
            return 1;
    return 0;
}

/* What node s does with a command (SIM_SERVE or a redirect), and its slot. */
static int sim_route(sim_world *w, int s, int asking, int argc, const char *const *argv,
                     const size_t *lens, unsigned *slot)
{
    int first, n = sim_cmd_keys(argc, argv, lens, &first), multiple = 0, missing = 0,
        existing = 0, owner;

    if (n == 0)
        return SIM_SERVE;
    *slot = feed__key_slot(argv[first], lens[first]);
    for (int i = first + 1; i < first + n; i++) {
        if (feed__key_slot(argv[i], lens[i]) != *slot)
            return SIM_CROSSSLOT;
        multiple |= lens[i] != lens[first] || memcmp(argv[i], argv[first], lens[i]) != 0;
    }
    owner = w->owner[*slot] - 1;
    if ((int)*slot == w->mig_slot && (owner == s || w->mig_to == s))
        for (int i = first; i < first + n; i++) {
            if (simr_has(w->sv[s].r, argv[i], lens[i], w->now))
                existing++;
            else
                missing++;
        }
    if (owner == s) {
        if ((int)*slot == w->mig_slot && missing)
            return existing ? SIM_TRYAGAIN : SIM_ASK;
        return SIM_SERVE;
    }
    if ((int)*slot == w->mig_slot && w->mig_to == s && asking)
        return multiple && missing ? SIM_TRYAGAIN : SIM_SERVE;
    return SIM_MOVED;
}

static int sim_guard(void *arg, int argc, const char *const *argv, const size_t *lens,
                     char *why, size_t cap)
{
    struct sim_guard *g = arg;
    unsigned slot;

    if (sim_route(g->w, g->s, g->w->asking_now, argc, argv, lens, &slot) == SIM_SERVE)
        return 0;
    sim_trace(g->w, "    %s:%d refuses a script's %.*s %.*s: slot %u not served here",
              g->w->sv[g->s].host, g->w->sv[g->s].port, (int)lens[0], argv[0],
              argc > 1 ? (int)(lens[1] > 24 ? 24 : lens[1]) : 0, argc > 1 ? argv[1] : "", slot);
    snprintf(why, cap, "ERR Script attempted to access a non local key in a cluster node");
    return 1;
}

static redisReply *sim_resp(const char *buf, size_t len)
{
    void *out = NULL;
    redisReader *rd = redisReaderCreate();

    if (!rd || redisReaderFeed(rd, buf, len) != REDIS_OK ||
        redisReaderGetReply(rd, &out) != REDIS_OK || !out) {
        fprintf(stderr, "sim: cannot make a reply\n");
        exit(3);
    }
    redisReaderFree(rd);
    return out;
}

/* CLUSTER SLOTS: each range of slots with one owner, its primary and
 * replicas. */
static redisReply *sim_cluster_slots(sim_world *w)
{
    static char buf[16384];
    char body[16000];
    size_t used = 0, ranges = 0;

    for (unsigned from = 0; from < 16384;) {
        unsigned to = from;
        int o = w->owner[from] - 1, nrep = 0;
        while (to + 1 < 16384 && w->owner[to + 1] == w->owner[from])
            to++;
        if (o >= 0) {
            for (int j = 0; j < w->nsv; j++)
                nrep += w->sv[j].of == o && !w->sv[j].dead;
            used += (size_t)snprintf(body + used, sizeof body - used,
                                     "*%d\r\n:%u\r\n:%u\r\n*3\r\n$%zu\r\n%s\r\n:%d\r\n$40\r\n%040d\r\n",
                                     3 + nrep, from, to, strlen(w->sv[o].host), w->sv[o].host,
                                     w->sv[o].port, o);
            for (int j = 0; j < w->nsv && used < sizeof body; j++)
                if (w->sv[j].of == o && !w->sv[j].dead)
                    used += (size_t)snprintf(body + used, sizeof body - used,
                                             "*3\r\n$%zu\r\n%s\r\n:%d\r\n$40\r\n%040d\r\n",
                                             strlen(w->sv[j].host), w->sv[j].host, w->sv[j].port,
                                             j);
            ranges++;
        }
        if (used >= sizeof body) {
            fprintf(stderr, "sim: slot map too long\n");
            exit(3);
        }
        from = to + 1;
    }
    used = (size_t)snprintf(buf, sizeof buf, "*%zu\r\n%s", ranges, body);
    return sim_resp(buf, used);
}

/* A cluster node's own answer to a command of a connection's (ASKING,
 * CLUSTER SLOTS, a redirect), or NULL: the data set answers. *asking: the
 * connection said ASKING just before. */
static redisReply *sim_cluster_cmd(sim_world *w, int *asking_flag, int s, int argc,
                                   const char *const *argv, const size_t *lens)
{
    char buf[160];
    unsigned slot = 0;
    int v, asking = *asking_flag;

    *asking_flag = 0;
    if (argc == 1 && sim_word(argv[0], lens[0], "ASKING")) {
        *asking_flag = 1;
        return sim_resp("+OK\r\n", 5);
    }
    if (argc == 2 && sim_word(argv[0], lens[0], "CLUSTER") && sim_word(argv[1], lens[1], "SLOTS"))
        return sim_cluster_slots(w);
    w->asking_now = asking;
    v = sim_route(w, s, asking, argc, argv, lens, &slot);
    if (v == SIM_SERVE)
        return NULL;
    if (v == SIM_MOVED || v == SIM_ASK) {
        const struct sim_server *to = &w->sv[v == SIM_ASK ? w->mig_to : w->owner[slot] - 1];
        snprintf(buf, sizeof buf, "-%s %u %s:%d\r\n", v == SIM_ASK ? "ASK" : "MOVED", slot,
                 to->host, to->port);
    } else if (v == SIM_TRYAGAIN) {
        snprintf(buf, sizeof buf, "-TRYAGAIN Multiple keys request during rehashing of slot\r\n");
    } else {
        snprintf(buf, sizeof buf, "-CROSSSLOT Keys in request don't hash to the same slot\r\n");
    }
    return sim_resp(buf, strlen(buf));
}

/* Command k of trip t reaches server s on a connection of handle c's
 * (ASKING said just before: *asking; its last write's offset: *woff), as
 * client `id` in the trace: run it. Its reply; *wrote: it wrote. */
static redisReply *sim_command(sim_world *w, const feed_core *c, int id, int *asking,
                               long long *woff, feed_trip *t, size_t k, int s, int *wrote)
{
    const char **argv;
    const size_t *lens;
    int argc = t->cmd(t->arg, k, &argv, &lens);
    long long off = simr_offset(w->sv[s].r);
    redisReply *r;

    if (w->topo != SIM_TOPO_SINGLE)
        sim_links(w, c, *woff, s, argc > 0 && lens[0] == 4 && memcmp(argv[0], "WAIT", 4) == 0);
    r = w->topo == SIM_TOPO_CLUSTER ? sim_cluster_cmd(w, asking, s, argc, argv, lens) : NULL;
    if (!r)
        r = simr_exec(w->sv[s].r, argc, argv, lens, w->now);
    *wrote = simr_offset(w->sv[s].r) != off;
    if (*wrote)
        *woff = simr_offset(w->sv[s].r);
    if (!r) {
        fprintf(stderr, "sim: out of memory\n");
        exit(3);
    }
    if (w->trace) {
        char words[200], rep[80];
        sim_words((const char (*)[41])c->sha, words, sizeof words, argc, argv, lens);
        sim_reply_text(rep, sizeof rep, r);
        if (w->nsv > 1)
            sim_trace(w, "c%d  %s:%d%s -> %s", id, w->sv[s].host, w->sv[s].port, words, rep);
        else
            sim_trace(w, "c%d  redis%s -> %s", id, words, rep);
    }
    return r;
}

/* Command k of trip t reaches server s: run it, keep its reply. */
static void sim_apply(sim_world *w, sim_client *cl, feed_trip *t, size_t k, int s)
{
    int wrote;
    redisReply *r = sim_command(w, cl->c, cl->id, &cl->asking[s], &cl->woff[s], t, k, s, &wrote);

    if (wrote && cl->aw == SIM_AW_PASS) {      /* the request's write, not a fence's */
        cl->hoff[s] = cl->woff[s];
        cl->hoff_epoch[s] = w->sv[s].epoch;
    }
    cl->replies[cl->napplied++] = r;
}

/* The replies of trip t come back: the first `got` are handed over, and
 * the trip ends with io. */
static void sim_deliver_replies(redisReply **replies, size_t *napplied, feed_trip *t,
                                size_t got, int io, const char *why)
{
    for (size_t k = 0; k < got; k++)
        t->reply(t->arg, k, replies[k]);
    for (size_t k = 0; k < *napplied; k++)
        freeReplyObject(replies[k]);
    *napplied = 0;
    t->got = got;
    t->io = io;
    snprintf(t->why, sizeof t->why, "%s", why);
}

static void sim_deliver(sim_world *w, sim_client *cl, feed_trip *t, size_t got, int io,
                        const char *why)
{
    sim_deliver_replies(cl->replies, &cl->napplied, t, got, io, why);
    (void)w;
}

/* ------------------------------------------------------------------------
 * The driver: frames of requests, their exchanges and set-ups
 * ------------------------------------------------------------------------ */

static sim_frame *sim_top(sim_client *cl) { return &cl->frames[cl->depth - 1]; }

static int sim_pg_begin(sim_world *w, sim_client *cl);

/* A request's free: one the core made on the heap frees itself; one the
 * simulation allocated for an init call (page, hook) is freed here. */
static void sim_op_free(sim_frame *f)
{
    f->op->free(f->op);
    if (!f->heap)
        free(f->op);
    f->op = NULL;
}

/* The request's batch goes to the exchange; its exchange is over. */
static void sim_xchg_start(sim_world *w, feed_core *c, sim_frame *f)
{
    feed__xchg_begin(&f->x, c, &f->op->batch, f->op->err, w->now);
    f->in_batch = 1;
}

static void sim_xchg_over(sim_frame *f)
{
    f->op->redis_rc = f->x.rc;
    feed__xchg_end(&f->x);
    f->in_batch = 0;
}

/* Run cl's machines until they wait for something; the await is in
 * cl->aw. Returns 1 when cl's top request is done. */
static int sim_advance(sim_world *w, sim_client *cl)
{
    for (;;) {
        sim_frame *f = sim_top(cl);
        feed_core *c = cl->c;

        if (f->setup) {
            feed_setup *s = f->setup;
            switch (feed__setup_next(s, w->now)) {
            case FEED_S_DONE: {
                int rc = s->rc;
                char why[FEED_ERRMSG];
                memcpy(why, s->err, FEED_ERRMSG);
                sim_close_if_down(c->topo.nodes[s->index]);
                feed__setup_end(s);
                free(s);
                f->setup = NULL;
                feed__xchg_setup_done(&f->x, rc, why);
                continue;
            }
            case FEED_S_CONNECT:
                cl->aw = SIM_AW_CONNECT;
                return 0;
            case FEED_S_TRIP:
                cl->aw = SIM_AW_TRIP;
                cl->trip_ms = w->now;
                cl->trip = &s->trip;
                cl->io = c->topo.nodes[s->index]->io;
                cl->cmd_k = 0;
                return 0;
            case FEED_S_PROBE:
                cl->aw = SIM_AW_PROBE;
                return 0;
            default:
                continue;
            }
        }
        if (f->in_batch) {
            switch (feed__xchg_next(&f->x, w->now)) {
            case FEED_X_REPAIR: {
                feed_op *r = feed__repair_op(c);
                sim_trace(w, "c%d  the repair list first", cl->id);
                if (r) {
                    sim_frame *nf = &cl->frames[cl->depth++];
                    memset(nf, 0, sizeof *nf);
                    nf->op = r;
                    nf->heap = 1;
                }
                continue;
            }
            case FEED_X_SETUP:
                f->setup = malloc(sizeof *f->setup);
                if (!f->setup) {
                    fprintf(stderr, "sim: out of memory\n");
                    exit(3);
                }
                feed__setup_begin(f->setup, c, f->x.setup_node, f->x.setup_kind, f->x.setup_slot,
                                  w->now);
                continue;
            case FEED_X_PASS:
                if (f->x.ntrips == 0) {     /* every command lost before it went out */
                    feed__xchg_pass_done(&f->x, w->now);
                    continue;
                }
                cl->aw = SIM_AW_PASS;
                cl->trip_ms = w->now;
                cl->trip_i = 0;
                cl->cmd_k = 0;
                return 0;
            case FEED_X_WAKE:
                cl->aw = SIM_AW_WAKE;
                cl->ready_at = f->x.wake_at;
                return 0;
            case FEED_X_DONE:
                sim_xchg_over(f);
                continue;
            }
        }
        switch (f->op->step(f->op, w->now)) {
        case FEED_W_REDIS:
            sim_xchg_start(w, c, f);
            continue;
        case FEED_W_SQL:
            if (sim_pg_begin(w, cl))
                return 0;               /* a step to carry out */
            continue;
        case FEED_W_WAKE:
            cl->aw = SIM_AW_WAKE;
            cl->ready_at = f->op->wake_at;
            return 0;
        case FEED_W_DONE:
            if (cl->depth > 1) {        /* the repairs ran: back to the exchange */
                sim_op_free(f);
                cl->depth--;
                continue;
            }
            cl->aw = SIM_AW_NONE;
            return 1;
        }
    }
}

/* ------------------------------------------------------------------------
 * PostgreSQL: the statement machine (lib/core/pgstmt.c), each of its steps
 * an await, answered by the simulated server
 * ------------------------------------------------------------------------ */

static int sim_pg_live(const sim_world *w, const sim_client *cl, int server)
{
    return cl->pg_conn[server] != 0 && cl->pg_conn[server] == w->pg_epoch &&
           w->now >= w->pg_down_until;
}

/* Feed io to the machine; 1 when it wants another step (cl->pwant), 0
 * when the statement is done (op->sql_rc set). */
static int sim_pg_next(sim_world *w, sim_client *cl, const feed_pgio *io)
{
    feed_op *op = sim_top(cl)->op;
    int server = op->sql.server;

    cl->pwant = feed__pgstmt_next(&cl->pgm, io, w->now);
    if (cl->pgm.drop)
        cl->pg_conn[server] = 0;
    if (cl->pwant != FEED_P_DONE) {
        cl->aw = SIM_AW_PG;
        return 1;
    }
    op->sql_rc = cl->pgm.rc;
    sim_trace(w, "c%d  sql %d on the %s: %s%s", cl->id, op->sql.stmt,
              server == FEED_PG_REPLICA ? "replica" : "primary",
              op->sql_rc == FEED_OK ? "ok" : "failed: ", op->sql_rc == FEED_OK ? "" : op->err);
    return 0;
}

static int sim_pg_begin(sim_world *w, sim_client *cl)
{
    feed_op *op = sim_top(cl)->op;
    int server = op->sql.server;
    feed_pgio io = { .how = FEED_PIO_START };

    feed__pgstmt_begin(&cl->pgm, cl->c, &op->sql, op->err, cl->pg_texts,
                       &cl->pg_server[server], w->now);
    io.had_conn = cl->pg_conn[server] != 0;
    io.conn_ok = sim_pg_live(w, cl, server);
    return sim_pg_next(w, cl, &io);
}

/* The rows of a statement's answer as PostgreSQL sends them: int8 binary
 * cells, (source,) score, id; a probe's text. */
static void sim_pg_cells(sim_client *cl, const feed_sql *q, feed_pgio *io)
{
    size_t n = 0;

    io->status = FEED_PGR_TUPLES;
    if (q->stmt >= FEED_SQL_STMTS) {
        io->nfields = q->stmt == FEED_SQL_PROBE_PRIMARY ? 1 : 2;
        io->ntuples = 1;
        for (int i = 0; i < io->nfields; i++) {
            snprintf(cl->cellbuf[i], sizeof cl->cellbuf[i], "%s", q->text[i]);
            cl->cells[i] = (feed_pgcell){ cl->cellbuf[i], (int)strlen(cl->cellbuf[i]) };
        }
        io->cells = cl->cells;
        return;
    }
    io->nfields = q->stmt == FEED_SQL_MERGE ? 3 : 2;
    for (size_t k = 0; k <= (q->stmt == FEED_SQL_MERGE ? q->nauthors : 0); k++) {
        const feed_rows *r = q->stmt == FEED_SQL_MERGE ? &q->tagged[k] : &q->rows;
        for (size_t i = 0; i < r->count && n + 3 <= sizeof cl->cells / sizeof *cl->cells; i++) {
            int64_t v[3] = { (int64_t)k, r->items[i].score, r->items[i].id };
            for (int f = 3 - io->nfields; f < 3; f++, n++) {
                for (int b = 0; b < 8; b++)
                    cl->cellbuf[n][b] = (char)(((uint64_t)v[f] >> (56 - 8 * b)) & 0xff);
                cl->cells[n] = (feed_pgcell){ cl->cellbuf[n], 8 };
            }
        }
    }
    io->ntuples = (int)(n / (size_t)io->nfields);
    io->cells = cl->cells;
}

/* Carry out the step cl->pwant; 1 when another step is awaited. */
static int sim_pg_step(sim_world *w, sim_client *cl)
{
    feed_op *op = sim_top(cl)->op;
    int server = op->sql.server, replica = server == FEED_PG_REPLICA;
    feed_pgio io = { .how = FEED_PIO_DONE, .status = FEED_PGR_COMMAND };
    feed_sql answer;
    int rc;

    if (w->now >= cl->pgm.deadline) {          /* the client paused past pg_timeout_ms */
        io.how = FEED_PIO_TIMEOUT;
        return sim_pg_next(w, cl, &io);
    }
    if (cl->pwant == FEED_P_CONNECT) {
        if (w->now < w->pg_down_until || sim_fault(w, SIM_F_PG, "PostgreSQL refuses a connection")) {
            io.how = FEED_PIO_BROKEN;
            io.message = "connection to server on socket \"/sim/.s.PGSQL.5432\" failed: "
                         "Connection refused (simulated)";
            return sim_pg_next(w, cl, &io);
        }
        cl->pg_conn[server] = w->pg_epoch;
        io.conn_ok = 1;
        return sim_pg_next(w, cl, &io);
    }
    io.had_conn = 1;
    if (!sim_pg_live(w, cl, server) ||
        sim_fault(w, SIM_F_PG, "PostgreSQL's connection drops under a statement")) {
        cl->pg_conn[server] = 0;
        io.how = FEED_PIO_BROKEN;
        io.message = "server closed the connection unexpectedly (simulated)";
        return sim_pg_next(w, cl, &io);
    }
    io.conn_ok = 1;
    if (cl->pwant == FEED_P_DESCRIBE) {
        io.types[0] = io.types[1] = 20;       /* int8 */
        return sim_pg_next(w, cl, &io);
    }
    if (cl->pwant != FEED_P_QUERY)           /* a prepare */
        return sim_pg_next(w, cl, &io);
    if (feed__pgstmt_checking(&cl->pgm)) {   /* the tables: as sql/schema.sql makes them */
        static const char *const said[4] = { "r", NULL, "t", "t" };
        io.status = FEED_PGR_TUPLES;
        io.ntuples = 1;
        io.nfields = 4;
        for (int i = 0; i < 4; i++)
            cl->cells[i] = (feed_pgcell){ said[i], said[i] ? 1 : 0 };
        io.cells = cl->cells;
        return sim_pg_next(w, cl, &io);
    }
    /* The query: answered by its meaning at this moment's version (the
     * replica's: what it has replayed). */
    answer = op->sql;
    rc = simpg_answer(w->pg, &answer, replica ? w->replica_v : simpg_version(w->pg),
                      simpg_version(w->pg), w->replica_v);
    if (rc != FEED_OK)
        exit(3);
    sim_trace(w, "c%d  sql %d on the %s at v%" PRIu64 ": %zu rows", cl->id, op->sql.stmt,
              replica ? "replica" : "primary", replica ? w->replica_v : simpg_version(w->pg),
              answer.stmt == FEED_SQL_MERGE ? (size_t)0 : answer.rows.count);
    sim_pg_cells(cl, &answer, &io);
    if (answer.stmt == FEED_SQL_MERGE)
        for (size_t k = 0; k <= answer.nauthors; k++)
            feed__rows_free(&answer.tagged[k]);
    else
        feed__rows_free(&answer.rows);
    return sim_pg_next(w, cl, &io);
}

/* The node a setup or pass works on, by the core's index. */
static feed_node *sim_node(sim_client *cl, int i) { return cl->c->topo.nodes[i]; }

/* A timeout: the client waited redis_timeout_ms for nothing. */
static void sim_timeout(sim_world *w, sim_client *cl)
{
    w->now += cl->c->cfg.redis_timeout_ms;
}

/* A Sentinel's answer to set-up s's probe: the primary it names, as a
 * Sentinel sends it (the bytes read by hiredis's reader). */
static void sim_probe(sim_world *w, int id, feed_setup *s)
{
    int at = sim_server_at(w, &s->probe, 1);
    feed_trip *t = &s->trip;

    if (at < 0 || t->n != 1 || sim_fault(w, SIM_F_SENTINEL, "a Sentinel refuses a connection")) {
        sim_trace(w, "c%d  Sentinel %s:%d refuses", id, s->probe.host, s->probe.port);
        t->io = FEED_IO_FAILED;
        t->got = 0;
        snprintf(t->why, sizeof t->why, "Connection refused (simulated)");
    } else {
        const char **argv;
        const size_t *lens;
        int argc = t->cmd(t->arg, 0, &argv, &lens);
        const struct sim_server *p = &w->sv[w->sv[at].names];
        char buf[128], port[16];
        redisReply *out;
        snprintf(port, sizeof port, "%d", p->port);
        if (argc == 3 && lens[2] == 8 && memcmp(argv[2], "mymaster", 8) == 0)
            snprintf(buf, sizeof buf, "*2\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n", strlen(p->host),
                     p->host, strlen(port), port);
        else
            snprintf(buf, sizeof buf, "*-1\r\n");
        out = sim_resp(buf, strlen(buf));
        sim_trace(w, "c%d  Sentinel %s:%d names %s:%d", id, s->probe.host, s->probe.port,
                  p->host, p->port);
        t->reply(t->arg, 0, out);
        freeReplyObject(out);
        t->io = FEED_IO_OK;
        t->got = 1;
    }
    feed__setup_tripped(s, w->now);
}

/* Complete cl's await, faults included. */
static void sim_complete(sim_world *w, sim_client *cl)
{
    sim_frame *f = sim_top(cl);

    switch (cl->aw) {
    case SIM_AW_PROBE:
        sim_probe(w, cl->id, f->setup);
        break;
    case SIM_AW_CONNECT: {
        feed_node *n = sim_node(cl, f->setup->index);
        int at = sim_server_at(w, &n->addr, 0);
        if (at < 0 || w->now < w->sv[at].down_until || w->sv[at].dead ||
            sim_fault(w, SIM_F_REFUSE, "connection refused")) {
            sim_trace(w, "c%d  connect refused", cl->id);
            n->io = NULL;
            feed__setup_connected(f->setup, 0, "Connection refused (simulated)", w->now);
        } else {
            n->io = sim_conn(w, at);
            if (w->nsv > 1)
                sim_trace(w, "c%d  connected to %s:%d", cl->id, n->addr.host, n->addr.port);
            else
                sim_trace(w, "c%d  connected", cl->id);
            feed__setup_connected(f->setup, 1, "", w->now);
        }
        sim_close_if_down(n);
        break;
    }
    case SIM_AW_TRIP:
    case SIM_AW_PASS: {
        feed_trip *t = cl->aw == SIM_AW_TRIP ? cl->trip : &f->x.trips[cl->trip_i].trip;
        void *io = cl->aw == SIM_AW_TRIP ? cl->io : sim_node(cl, t->node)->io;
        int last, at = sim_conn_server(w, io);

        if (at < 0) {
            sim_trace(w, "c%d  connection closed by the server", cl->id);
            sim_deliver(w, cl, t, 0, FEED_IO_CLOSED, "Connection reset by peer (simulated)");
        } else if (cl->cmd_k < t->n && sim_fault(w, SIM_F_DROP, "connection lost before a command")) {
            sim_deliver(w, cl, t, 0, FEED_IO_CLOSED, "Connection reset by peer (simulated)");
        } else if (cl->cmd_k < t->n) {
            sim_apply(w, cl, t, cl->cmd_k++, at);
            return;                     /* one command per step: others may land between */
        } else if (w->now - cl->trip_ms > (int64_t)cl->core.cfg.redis_timeout_ms) {
            /* The client (or its network) was slow past redis_timeout_ms:
             * the drivers give up on the replies (a timeout), as here. */
            sim_trace(w, "c%d  replies later than redis_timeout_ms: a timeout", cl->id);
            sim_deliver(w, cl, t, 0, FEED_IO_FAILED, "Resource temporarily unavailable (simulated timeout)");
        } else if (sim_fault(w, SIM_F_LOST, "replies lost after the commands ran")) {
            size_t got = sim_pick(w, t->n);
            sim_timeout(w, cl);
            sim_deliver(w, cl, t, got, FEED_IO_FAILED, "Resource temporarily unavailable (simulated timeout)");
        } else {
            sim_deliver(w, cl, t, t->n, FEED_IO_OK, "");
        }
        if (cl->aw == SIM_AW_TRIP) {
            feed__setup_tripped(f->setup, w->now);
            sim_close_if_down(sim_node(cl, f->setup->index));
            break;
        }
        last = ++cl->trip_i >= f->x.ntrips;
        cl->cmd_k = 0;
        if (!last)
            return;
        feed__xchg_pass_done(&f->x, w->now);
        for (size_t k = 0; k < cl->c->topo.nnodes; k++)
            sim_close_if_down(sim_node(cl, (int)k));
        break;
    }
    case SIM_AW_PG:
        if (sim_pg_step(w, cl))
            return;                     /* the next step is awaited */
        break;
    default:
        break;
    }
    cl->aw = SIM_AW_NONE;
}

/* ------------------------------------------------------------------------
 * The async handle: several requests in flight on one core, interleaved
 * at every await, as lib/drive/async.c runs them on an event loop. What it
 * shares as async.c does: the nodes and their connections (sim_aconn:
 * trips answered in order, a fault ending every trip on the connection at
 * once), one set-up per node joined by every request that needs it (the
 * fence check, the scripts' load), one SQL statement at a time on the
 * handle's connection, in order, and one repair request the others wait
 * for. Ready requests run one after another, never one inside another
 * (async.c's run_queue); the loop itself may pause (a stalled process).
 * ------------------------------------------------------------------------ */

static void sim_request_done(sim_world *w, sim_client *cl);
static void sim_plan(sim_world *w, sim_client *cl);
static void sim_core_init(sim_world *w, feed_core *c);

/* r joins the ready queue (or keeps its place there). */
static void sim_aready(sim_ahandle *h, sim_client *r)
{
    r->aw = SIM_AW_SHARED;
    r->shared = SIM_SH_READY;
    if (!r->ready_seq)
        r->ready_seq = ++h->seq;
}

static void sim_await(sim_ahandle *h, sim_client *r, int what)
{
    r->aw = SIM_AW_SHARED;
    r->shared = what;
    r->wait_seq = ++h->seq;
}

/* One of r's trips is over; after the last, r reads its pass. */
static void sim_atrip_over(sim_ahandle *h, sim_client *r)
{
    if (--r->trips_left == 0) {
        r->pass_over = 1;
        sim_aready(h, r);
    }
}

/* Trip 0 of connection k ends with its first `got` replies and io. */
static void sim_aend(sim_world *w, sim_ahandle *h, sim_aconn *k, size_t got, int io,
                     const char *why)
{
    sim_atrip a = k->q[0];

    memmove(&k->q[0], &k->q[1], --k->count * sizeof *k->q);
    sim_deliver_replies(a.replies, &a.applied, a.t, got, io, why);
    if (a.owner) {
        sim_atrip_over(h, a.owner);
    } else {
        feed__setup_tripped(h->setup[a.node], w->now);
        h->setup_aw[a.node] = SIM_AW_NONE;
        h->setup_ready[a.node] = ++h->seq;
    }
}

/* Connection k goes: every trip on it ends with io, its node forgets it. */
static void sim_aclose(sim_world *w, sim_ahandle *h, sim_aconn *k, int io, const char *why)
{
    for (size_t i = 0; i < h->core.topo.nnodes; i++)
        if (h->core.topo.nodes[i]->io == k)
            h->core.topo.nodes[i]->io = NULL;
    while (k->count > 0)
        sim_aend(w, h, k, 0, io, why);
    k->used = 0;
}

/* A DOWN node loses its connection, unless its set-up is under way
 * (async.c, close_down_nodes). */
static void sim_aclose_down(sim_world *w, sim_ahandle *h)
{
    for (size_t i = 0; i < h->core.topo.nnodes; i++) {
        feed_node *n = h->core.topo.nodes[i];
        if (n->state == FEED_NODE_DOWN && n->io && !(i < SIM_ANODES && h->setup[i]))
            sim_aclose(w, h, n->io, FEED_IO_FAILED, "connection dropped");
    }
}

/* Append trip t of owner (NULL: node's set-up) to node's connection; 0,
 * or -1 when there is none (t ends failed at once). */
static int sim_asend(sim_world *w, sim_ahandle *h, int node, feed_trip *t, sim_client *owner)
{
    sim_aconn *k = h->core.topo.nodes[node]->io;

    t->io = FEED_IO_OK;
    t->got = 0;
    t->why[0] = '\0';
    if (!k || k->count == SIM_ATRIPS) {
        t->io = FEED_IO_FAILED;
        snprintf(t->why, sizeof t->why, "connection lost");
        return -1;
    }
    k->q[k->count++] = (sim_atrip){ t, owner, node, w->now, 0, { NULL } };
    return 0;
}

/* A set-up as far as it goes (async.c, setup_run). */
static void sim_asetup_run(sim_world *w, sim_ahandle *h, int node)
{
    feed_setup *s = h->setup[node];
    feed_node *n = h->core.topo.nodes[node];

    for (;;) {
        sim_aclose_down(w, h);
        switch (feed__setup_next(s, w->now)) {
        case FEED_S_PROBE:
            h->setup_aw[node] = SIM_AW_PROBE;
            return;
        case FEED_S_CONNECT:
            if (n->io)
                sim_aclose(w, h, n->io, FEED_IO_FAILED, "connection dropped");
            h->setup_aw[node] = SIM_AW_CONNECT;
            return;
        case FEED_S_TRIP:
            if (sim_asend(w, h, node, &s->trip, NULL) == 0) {
                h->setup_aw[node] = SIM_AW_TRIP;
                return;
            }
            feed__setup_tripped(s, w->now);
            continue;
        case FEED_S_DONE: {
            /* Its waiters go on, in the order they came; one that needs
             * the fence and met a connection-only set-up asks again. */
            for (;;) {
                sim_client *first = NULL;
                for (int i = 0; i < h->nreq + 1; i++) {
                    sim_client *r = i < h->nreq ? h->req[i] : &h->rep;
                    if (r->aw == SIM_AW_SHARED && r->shared == SIM_SH_SETUP &&
                        r->frames[0].x.setup_node == node &&
                        (!first || r->wait_seq < first->wait_seq))
                        first = r;
                }
                if (!first)
                    break;
                if (!(first->frames[0].x.setup_kind == FEED_SETUP_FULL &&
                      s->kind == FEED_SETUP_HELLO && s->rc == FEED_OK))
                    feed__xchg_setup_done(&first->frames[0].x, s->rc, s->err);
                sim_aready(h, first);
            }
            feed__setup_end(s);
            free(s);
            h->setup[node] = NULL;
            h->setup_aw[node] = SIM_AW_NONE;
            sim_aclose_down(w, h);
            return;
        }
        }
    }
}

/* r's exchange needs its node set up: join the set-up under way, or
 * start one. */
static void sim_aneed_setup(sim_world *w, sim_ahandle *h, sim_client *r)
{
    feed_xchg *x = &r->frames[0].x;

    if (x->setup_node >= SIM_ANODES) {
        fprintf(stderr, "sim: more than %d nodes\n", SIM_ANODES);
        exit(3);
    }
    if (!h->setup[x->setup_node]) {
        feed_setup *s = malloc(sizeof *s);
        if (!s) {
            fprintf(stderr, "sim: out of memory\n");
            exit(3);
        }
        feed__setup_begin(s, &h->core, x->setup_node, x->setup_kind, x->setup_slot, w->now);
        h->setup[x->setup_node] = s;
        h->setup_aw[x->setup_node] = SIM_AW_NONE;
        h->setup_ready[x->setup_node] = ++h->seq;
    }
    sim_await(h, r, SIM_SH_SETUP);
}

/* r's exchange needs the repairs first: start them unless under way, and
 * wait. 0: none to run. */
static int sim_aneed_repairs(sim_world *w, sim_ahandle *h, sim_client *r)
{
    if (!h->repairing) {
        feed_op *op = feed__repair_op(&h->core);
        if (!op)
            return 0;
        sim_trace(w, "c%d  the repair list first (c%d runs it)", r->id, h->rep.id);
        h->rep.frames[0] = (sim_frame){ .op = op, .heap = 1 };
        h->rep.depth = 1;
        h->repairing = 1;
        sim_aready(h, &h->rep);
    }
    sim_await(h, r, SIM_SH_REPAIR);
    return 1;
}

/* The statements in order: begin the head's, as far as it goes. */
static void sim_asql_begin(sim_world *w, sim_ahandle *h)
{
    while (h->nsql > 0) {
        h->pg.frames[0] = (sim_frame){ .op = h->sqlq[0]->frames[0].op };
        h->pg.depth = 1;
        h->pg.id = h->sqlq[0]->id;
        if (sim_pg_begin(w, &h->pg))
            return;                     /* its step awaited */
        h->pg.aw = SIM_AW_NONE;
        h->pg.depth = 0;
        sim_aready(h, h->sqlq[0]);
        memmove(&h->sqlq[0], &h->sqlq[1], --h->nsql * sizeof *h->sqlq);
    }
}

static void sim_asql_enqueue(sim_world *w, sim_ahandle *h, sim_client *r)
{
    sim_await(h, r, SIM_SH_SQL);
    h->sqlq[h->nsql++] = r;
    if (h->nsql == 1)
        sim_asql_begin(w, h);
}

/* r's pass: its trips on their nodes' connections. */
static void sim_asend_pass(sim_world *w, sim_ahandle *h, sim_client *r)
{
    feed_xchg *x = &r->frames[0].x;

    sim_await(h, r, SIM_SH_PASS);
    r->trips_left = x->ntrips + 1;
    for (size_t k = 0; k < x->ntrips; k++)
        if (sim_asend(w, h, x->trips[k].trip.node, &x->trips[k].trip, r) != 0)
            sim_atrip_over(h, r);
    sim_atrip_over(h, r);
}

/* r's request is done: the repairs wake their waiters; a reader's page
 * is checked, and its next request planned. */
static void sim_afinished(sim_world *w, sim_ahandle *h, sim_client *r)
{
    if (r == &h->rep) {         /* one that joined it after a newer loss asks again */
        for (int i = 0; i < h->nreq; i++)
            if (h->req[i]->aw == SIM_AW_SHARED && h->req[i]->shared == SIM_SH_REPAIR) {
                feed_xchg *x = &h->req[i]->frames[0].x;
                if (x->repair_gen > feed__repair_op_gen(r->frames[0].op))
                    feed__xchg_repair_again(x);
                sim_aready(h, h->req[i]);
            }
        sim_op_free(&r->frames[0]);
        r->depth = 0;
        r->aw = SIM_AW_NONE;
        h->repairing = 0;
        return;
    }
    r->aw = SIM_AW_NONE;
    sim_request_done(w, r);
    sim_plan(w, r);
}

/* Request r as far as it goes now (async.c, req_run). */
static void sim_areq_run(sim_world *w, sim_ahandle *h, sim_client *r)
{
    sim_frame *f = &r->frames[0];

    if (r->pass_over) {
        r->pass_over = 0;
        feed__xchg_pass_done(&f->x, w->now);
        sim_aclose_down(w, h);
    }
    for (;;) {
        if (f->in_batch) {
            switch (feed__xchg_next(&f->x, w->now)) {
            case FEED_X_REPAIR:
                if (sim_aneed_repairs(w, h, r))
                    return;
                continue;
            case FEED_X_SETUP:
                sim_aneed_setup(w, h, r);
                return;
            case FEED_X_PASS:
                sim_asend_pass(w, h, r);
                return;
            case FEED_X_WAKE:
                r->aw = SIM_AW_WAKE;
                r->ready_at = f->x.wake_at;
                return;
            case FEED_X_DONE:
                sim_xchg_over(f);
                break;
            }
        }
        switch (f->op->step(f->op, w->now)) {
        case FEED_W_REDIS:
            sim_xchg_start(w, &h->core, f);
            continue;
        case FEED_W_SQL:
            sim_asql_enqueue(w, h, r);
            return;
        case FEED_W_WAKE:
            r->aw = SIM_AW_WAKE;
            r->ready_at = f->op->wake_at;
            return;
        case FEED_W_DONE:
            sim_afinished(w, h, r);
            return;
        }
    }
}

/* Run the ready requests and set-ups, oldest first, until none is left
 * (async.c, run_queue). */
static void sim_arun_queue(sim_world *w, sim_ahandle *h)
{
    for (;;) {
        unsigned long best = 0;
        sim_client *r = NULL;
        int node = -1;

        for (int i = 0; i < h->nreq + 1; i++) {
            sim_client *q = i < h->nreq ? h->req[i] : &h->rep;
            if (q->aw == SIM_AW_SHARED && q->shared == SIM_SH_READY && q->ready_seq &&
                (!best || q->ready_seq < best)) {
                best = q->ready_seq;
                r = q;
            }
        }
        for (int i = 0; i < SIM_ANODES; i++)
            if (h->setup[i] && h->setup_ready[i] && (!best || h->setup_ready[i] < best)) {
                best = h->setup_ready[i];
                node = i;
                r = NULL;
            }
        if (!best)
            return;
        if (r) {
            r->ready_seq = 0;
            sim_areq_run(w, h, r);
        } else {
            h->setup_ready[node] = 0;
            sim_asetup_run(w, h, node);
        }
    }
}

/* A step of connection k: its next command reaches the server, or the
 * oldest trip's replies come back (either, when both can: the server
 * runs what was written while the client has not yet read), with the
 * faults of sim_complete, which strike every trip on it. A connection the
 * server closed goes, with or without trips (an idle one too: the loop
 * reads its EOF, and the node's next trip fails at once). */
static void sim_aconn_step(sim_world *w, sim_ahandle *h, sim_aconn *k)
{
    static const char *reset = "Connection reset by peer (simulated)";
    static const char *slow = "Resource temporarily unavailable (simulated timeout)";
    sim_atrip *head = &k->q[0];
    size_t next = 0;
    int at = sim_aconn_server(w, k);

    while (next < k->count && k->q[next].applied == k->q[next].t->n)
        next++;
    if (at < 0) {           /* the loop reads the EOF, idle or not (redis_async.c) */
        sim_trace(w, "c%d  connection closed by the server: %zu trips end", h->id, k->count);
        sim_aclose(w, h, k, FEED_IO_CLOSED, reset);
    } else if (next < k->count && (next == 0 || sim_pick(w, 2))) {
        sim_atrip *a = &k->q[next];
        int wrote;
        if (sim_fault(w, SIM_F_DROP, "connection lost before a command")) {
            sim_aclose(w, h, k, FEED_IO_CLOSED, reset);
            return;
        }
        a->replies[a->applied] = sim_command(w, &h->core, a->owner ? a->owner->id : h->id,
                                             &k->asking, &k->woff, a->t, a->applied, at, &wrote);
        a->applied++;
        if (wrote && a->owner) {        /* a request's write, not a set-up's (WAIT: the
                                           connection's last write, whoever made it) */
            a->owner->hoff[at] = k->woff;
            a->owner->hoff_epoch[at] = w->sv[at].epoch;
        }
    } else if (w->now - head->sent > (int64_t)h->core.cfg.redis_timeout_ms) {
        sim_trace(w, "c%d  replies later than redis_timeout_ms: a timeout, %zu trips end",
                  h->id, k->count);
        sim_aclose(w, h, k, FEED_IO_FAILED, slow);
    } else if (sim_fault(w, SIM_F_LOST, "replies lost after the commands ran")) {
        size_t got = sim_pick(w, head->t->n);
        w->now += h->core.cfg.redis_timeout_ms;
        sim_aend(w, h, k, got, FEED_IO_FAILED, slow);
        sim_aclose(w, h, k, FEED_IO_FAILED, slow);
    } else if (sim_fault(w, SIM_F_DROP, "connection lost while the replies come back")) {
        sim_aend(w, h, k, sim_pick(w, head->t->n), FEED_IO_CLOSED, reset);  /* those read */
        sim_aclose(w, h, k, FEED_IO_CLOSED, reset);
    } else {
        sim_aend(w, h, k, head->t->n, FEED_IO_OK, "");
    }
}

/* A set-up's connect (or Sentinel question) completes. */
static void sim_asetup_step(sim_world *w, sim_ahandle *h, int node)
{
    feed_setup *s = h->setup[node];
    feed_node *n = h->core.topo.nodes[node];
    int at;

    if (h->setup_aw[node] == SIM_AW_PROBE) {
        sim_probe(w, h->id, s);
    } else if ((at = sim_server_at(w, &n->addr, 0)) < 0 || w->now < w->sv[at].down_until ||
               w->sv[at].dead || sim_fault(w, SIM_F_REFUSE, "connection refused")) {
        sim_trace(w, "c%d  connect refused", h->id);
        feed__setup_connected(s, 0, "Connection refused (simulated)", w->now);
    } else {
        sim_aconn *k = NULL;
        for (int i = 0; i < SIM_ACONNS && !k; i++)
            if (!h->conns[i].used)
                k = &h->conns[i];
        if (!k) {
            fprintf(stderr, "sim: more than %d connections\n", SIM_ACONNS);
            exit(3);
        }
        *k = (sim_aconn){ .used = 1, .server = at, .epoch = w->sv[at].epoch };
        n->io = k;
        sim_trace(w, "c%d  connected to %s:%d", h->id, n->addr.host, n->addr.port);
        feed__setup_connected(s, 1, "", w->now);
    }
    h->setup_aw[node] = SIM_AW_NONE;
    h->setup_ready[node] = ++h->seq;
}

/* What the handle's loop may do now, as codes for sim_async_event
 * (a connection's step: its index; a set-up's: 100 + node; the
 * statement's: 200; the repair request's wake-up: 300). */
static size_t sim_async_events(const sim_world *w, int *ev, int64_t *soonest)
{
    const sim_ahandle *h = w->ah;
    size_t n = 0;

    if (!h)
        return 0;
    if (h->ready_at > w->now) {
        if (h->ready_at < *soonest)
            *soonest = h->ready_at;
        return 0;
    }
    for (int i = 0; i < SIM_ACONNS; i++)    /* trips to carry, or a close to notice */
        if (h->conns[i].used && (h->conns[i].count > 0 || sim_aconn_server(w, &h->conns[i]) < 0))
            ev[n++] = i;
    for (int i = 0; i < SIM_ANODES; i++)
        if (h->setup[i] && (h->setup_aw[i] == SIM_AW_CONNECT || h->setup_aw[i] == SIM_AW_PROBE))
            ev[n++] = 100 + i;
    if (h->nsql > 0 && h->pg.aw == SIM_AW_PG)
        ev[n++] = 200;
    if (h->repairing && h->rep.aw == SIM_AW_WAKE) {
        if (h->rep.ready_at <= w->now)
            ev[n++] = 300;
        else if (h->rep.ready_at < *soonest)
            *soonest = h->rep.ready_at;
    }
    return n;
}

/* One turn of the handle's loop: event ev, then the ready queue; the
 * loop may pause after it. */
static void sim_async_event(sim_world *w, int ev)
{
    sim_ahandle *h = w->ah;

    if (ev < 100) {
        sim_aconn_step(w, h, &h->conns[ev]);
    } else if (ev < 200) {
        sim_asetup_step(w, h, ev - 100);
    } else if (ev == 200) {
        if (!sim_pg_step(w, &h->pg)) {
            h->pg.aw = SIM_AW_NONE;
            h->pg.depth = 0;
            sim_aready(h, h->sqlq[0]);
            memmove(&h->sqlq[0], &h->sqlq[1], --h->nsql * sizeof *h->sqlq);
            sim_asql_begin(w, h);
        }
    } else {
        sim_aready(h, &h->rep);
    }
    sim_arun_queue(w, h);
    h->ready_at = w->now + (sim_fault(w, SIM_F_PAUSE, "the async handle's loop pauses")
                                ? (int64_t)sim_pick(w, 3 * w->lease_ms)
                                : (int64_t)sim_pick(w, 2));
}

/* An async request's own turn: it begins, or its wake-up is due. */
static void sim_async_go(sim_world *w, sim_client *cl)
{
    if (cl->aw == SIM_AW_START)
        sim_trace(w, "c%d  (async) begins", cl->id);
    sim_aready(cl->ah, cl);
    sim_arun_queue(w, cl->ah);
}

/* The async handle of a schedule that draws one: n requests on one core,
 * readers, the last a writer's if `writer` (after the other clients, so a
 * schedule without one draws as before). */
static void sim_async_new(sim_world *w, int n, int writer)
{
    sim_ahandle *h = calloc(1, sizeof *h);

    if (!h) {
        fprintf(stderr, "sim: out of memory\n");
        exit(3);
    }
    w->ah = h;
    sim_core_init(w, &h->core);
    h->id = w->ncl + n;
    h->pg.c = h->rep.c = &h->core;
    h->pg.ah = h->rep.ah = h;
    h->rep.id = h->id;
    for (int i = 0; i < n; i++) {
        sim_client *cl = &w->cl[w->ncl++];
        memset(cl, 0, sizeof *cl);
        cl->id = w->ncl - 1;
        cl->kind = writer && i == n - 1 ? SIM_WRITER : SIM_READER;
        cl->c = &h->core;
        cl->ah = h;
        cl->ops_left = cl->kind == SIM_WRITER ? w->ops * 2 : w->ops;
        cl->wid = w->writers - 1;
        h->req[h->nreq++] = cl;
    }
    sim_trace(w, "    c%d..c%d: requests of one async handle%s (c%d: its set-ups and repairs)",
              w->ncl - n, w->ncl - 1, writer ? ", the last a writer's" : "", h->id);
}

static void sim_client_free(sim_client *cl);

/* The handle's own state (its requests are clients, freed with them). */
static void sim_async_free(sim_world *w)
{
    sim_ahandle *h = w->ah;

    if (!h)
        return;
    for (int i = 0; i < SIM_ACONNS; i++)
        for (size_t j = 0; j < h->conns[i].count; j++)
            for (size_t k = 0; k < h->conns[i].q[j].applied; k++)
                freeReplyObject(h->conns[i].q[j].replies[k]);
    for (int i = 0; i < SIM_ANODES; i++)
        if (h->setup[i]) {
            feed__setup_end(h->setup[i]);
            free(h->setup[i]);
        }
    h->pg.depth = 0;
    sim_client_free(&h->pg);
    sim_client_free(&h->rep);
    feed__core_free(&h->core);
    free(h);
    w->ah = NULL;
}

/* ------------------------------------------------------------------------
 * Clients: the handles and what the applications do with them
 * ------------------------------------------------------------------------ */

/* A handle's core as the schedule configures it (its token seed drawn). */
static void sim_core_init(sim_world *w, feed_core *c)
{
    feed_config cfg;

    feed_config_init(&cfg);
    cfg.redis_wait_replicas = w->wait_replicas;
    if (w->topo == SIM_TOPO_SENTINEL) {
        cfg.redis_sentinels = w->addrs;
    } else if (w->topo == SIM_TOPO_CLUSTER) {
        cfg.redis_cluster = w->addrs;
    } else {
        cfg.redis_host = "sim-redis";
    }
    cfg.pg_conninfo = "sim-postgresql";
    cfg.max_len = w->max_len;
    cfg.max_page = 20;
    cfg.ttl_seconds = w->ttl_seconds;
    cfg.empty_ttl_seconds = 1;
    cfg.lease_ms = w->lease_ms;
    cfg.lease_wait_ms = 20;
    cfg.retry_ms = 50;
    cfg.redis_restart_fence = w->fence;
    if (w->replica) {
        cfg.pg_replica_conninfo = "sim-replica";
        cfg.pg_replica_max_lag_ms = w->replica > 1 ? 0 : (uint32_t)w->max_lag_ms;   /* 0: unbounded */
    }
    if (w->authors)
        cfg.author_table = "authors";
    if (feed__core_init(c, &cfg) != FEED_OK || feed__topo_init(c) != FEED_OK) {
        fprintf(stderr, "sim: cannot make a handle\n");
        exit(3);
    }
    c->token_seed = sim_next(w);
    memcpy(w->shas, c->sha, sizeof w->shas);
}

static void sim_client_init(sim_world *w, sim_client *cl, int id, int kind)
{
    memset(cl, 0, sizeof *cl);
    cl->id = id;
    cl->kind = kind;
    cl->c = &cl->core;
    sim_core_init(w, cl->c);
}

static void sim_client_free(sim_client *cl)
{
    while (cl->depth > 0) {
        sim_frame *f = sim_top(cl);
        if (f->setup) {
            feed__setup_end(f->setup);
            free(f->setup);
        }
        if (f->in_batch)
            feed__xchg_end(&f->x);
        if (f->op)
            sim_op_free(f);
        cl->depth--;
    }
    for (size_t k = 0; k < cl->napplied; k++)
        freeReplyObject(cl->replies[k]);
    if (cl->aw == SIM_AW_PG)
        feed__pgstmt_end(&cl->pgm);
    for (int i = 0; i < FEED_PG_TEXTS; i++)
        free(cl->pg_texts[i]);
    if (cl->c == &cl->core)
        feed__core_free(cl->c);
}

/* Start request op on cl (op on the heap, freed when done). */
static void sim_start(sim_world *w, sim_client *cl, feed_op *op, int64_t think)
{
    cl->frames[0] = (sim_frame){ 0 };
    cl->frames[0].op = op;
    cl->depth = 1;
    cl->started_v = simpg_version(w->pg);
    cl->started_ms = w->now;
    memcpy(cl->hoff_start, cl->hoff, sizeof cl->hoff);
    /* cluster-flap: a reader now and then idle longer than a demotion and
     * promotion back of a primary take (its handle keeps its connections
     * and sends them nothing meanwhile), a writer less. */
    if (w->flap && !w->healed && cl->kind != SIM_SYNC && sim_pick(w, 2) == 0)
        think += (int64_t)sim_pick(w, (cl->kind == SIM_READER ? 3 : 1) * SIM_EPISODE_MS);
    cl->ready_at = (cl->ready_at > w->now ? cl->ready_at : w->now) + think;
    cl->aw = SIM_AW_START;
}

static void *sim_alloc(size_t n)
{
    void *p = calloc(1, n);
    if (!p) {
        fprintf(stderr, "sim: out of memory\n");
        exit(3);
    }
    return p;
}

/* A feed's bit in a set of feeds (sim_client.req_feeds, sim_world.lossy):
 * readers' feeds 1..3 the low bits, authors 101..104 from bit 8. */
static unsigned sim_feed_bit(int table, int64_t owner)
{
    return table == SIMPG_FEED ? 1u << (owner - 1) : 1u << (8 + owner - 101);
}

/* One committed write of cl's: in SQL and in the log. */
static void sim_commit(sim_world *w, sim_client *cl, int table, int64_t uid, int64_t score,
                       int64_t id, int del)
{
    if (del)
        simpg_delete(w->pg, table, uid, id);
    else
        simpg_upsert(w->pg, table, uid, score, id);
    if (cl->nwrite == 0)
        cl->first_write = w->nwrites;
    cl->nwrite++;
    w->writes[w->nwrites++] = (struct sim_write){ table, uid, id, score, del, INT64_MAX };
    sim_trace(w, "c%d  COMMIT %s %s %" PRId64 " id %" PRId64 " score %" PRId64 " -> v%" PRIu64,
              cl->id, del ? "delete" : "upsert", table ? "author" : "uid", uid, id, score,
              simpg_version(w->pg));
}

/* A new post of writer cl's: a new id of its own, or one of its rows
 * rescored; few scores, so ties; sometimes above 2^32 or at the ends. */
static void sim_new_post(sim_world *w, sim_client *cl, const int64_t *mine, size_t nmine,
                         int64_t *score, int64_t *id)
{
    if (nmine > 0 && sim_pick(w, 4) == 0) {
        *id = mine[sim_pick(w, nmine)];
    } else {
        /* Two draws in this order (in one expression the order would be
         * the compiler's: a seed would replay differently in another build). */
        int64_t low = (int64_t)sim_pick(w, 20) * w->writers + cl->wid;
        int64_t high = (int64_t)sim_pick(w, 2) << 33;
        *id = low + high - high % w->writers;   /* still the writer's: id % writers */
    }
    *score = (int64_t)sim_pick(w, 12) * 10;
    if (sim_pick(w, 8) == 0)
        *score = sim_pick(w, 2) ? FEED_SCORE_MAX - (int64_t)sim_pick(w, 3) : -FEED_SCORE_MAX;
}

/* A fan-out: one post of cl's into several feeds, one transaction, then
 * feed_on_insert_many's request. */
static void sim_fanout(sim_world *w, sim_client *cl)
{
    int64_t uids[4], score, id;
    size_t n = 0;
    feed_op *op;
    int rc = FEED_OK;

    sim_new_post(w, cl, NULL, 0, &score, &id);
    for (int64_t uid = 1; uid <= w->uids; uid++)
        if (sim_pick(w, 3))
            uids[n++] = uid;
    if (n == 0)
        uids[n++] = 1;
    cl->req_feeds = 0;
    for (size_t i = 0; i < n; i++) {
        sim_commit(w, cl, SIMPG_FEED, uids[i], score, id, 0);
        cl->req_feeds |= sim_feed_bit(SIMPG_FEED, uids[i]);
    }
    if (w->kills && sim_fault(w, SIM_F_KILL, "the writer dies between its commit and its hook")) {
        cl->nwrite = 0;
        cl->ops_left--;
        cl->ready_at = w->now + 1;
        cl->aw = SIM_AW_IDLE;
        return;
    }
    op = feed__fanout_op(cl->c, cl->err, uids, n, score, id, &rc);
    if (!op) {
        fprintf(stderr, "sim: fanout_op: %s\n", cl->err);
        exit(3);
    }
    sim_trace(w, "c%d  FAN-OUT id %" PRId64 " to %zu feeds", cl->id, id, n);
    sim_start(w, cl, op, (int64_t)sim_pick(w, 3));
    cl->frames[0].heap = 1;
}

/* The writer's next write: commit to SQL, then (unless killed) its hook.
 * Each writer writes its own ids (id % writers), as an application's
 * posts each have one author: two writers never race on one row. Now and
 * then a fan-out instead, or a reload (feed_reload: no write, a rebuild). */
static void sim_writer_next(sim_world *w, sim_client *cl)
{
    int table = w->authors && sim_pick(w, 3) == 0 ? SIMPG_AUTHORS : SIMPG_FEED;
    int64_t uid = table == SIMPG_FEED ? 1 + (int64_t)sim_pick(w, (uint64_t)w->uids)
                                      : 101 + (int64_t)sim_pick(w, (uint64_t)w->authors);
    size_t n, mine = 0;
    const simpg_row *rows = simpg_rows(w->pg, table, uid, simpg_version(w->pg), &n);
    int64_t id, score, pick[64];
    feed_hook_op *h;
    int del, rc, kind;

    if (w->nwrites + 8 >= SIM_WRITES) {
        cl->ops_left = 0;
        cl->aw = SIM_AW_NONE;
        return;
    }
    cl->nwrite = 0;
    if (sim_pick(w, 8) == 0 && !(w->ops_off & SIM_OP_FANOUT)) {
        sim_fanout(w, cl);
        return;
    }
    cl->req_feeds = sim_feed_bit(table, uid);
    for (size_t i = 0; i < n && mine < 64; i++)
        if (rows[i].id % w->writers == cl->wid)
            pick[mine++] = rows[i].id;
    del = mine > 0 && sim_pick(w, 3) == 0 && !(w->ops_off & SIM_OP_DELETE);
    kind = del ? FEED_HOOK_DELETE : FEED_HOOK_INSERT;
    if (table == SIMPG_FEED && sim_pick(w, 12) == 0 && !(w->ops_off & SIM_OP_RELOAD)) {
        kind = FEED_HOOK_RELOAD;
        id = score = 0;
    } else if (del) {
        id = pick[sim_pick(w, mine)];
        score = 0;
        sim_commit(w, cl, table, uid, 0, id, 1);
    } else {
        sim_new_post(w, cl, pick, mine, &score, &id);
        sim_commit(w, cl, table, uid, score, id, 0);
    }
    if (kind != FEED_HOOK_RELOAD && w->kills &&
        sim_fault(w, SIM_F_KILL, "the writer dies between its commit and its hook")) {
        cl->nwrite = 0;
        cl->ops_left--;
        cl->ready_at = w->now + 1;
        cl->aw = SIM_AW_IDLE;
        return;
    }
    h = sim_alloc(feed__hook_op_size());
    rc = feed__hook_init(h, cl->c, cl->err, kind,
                         table == SIMPG_FEED ? FEED_FAM_FEED : FEED_FAM_AUTHOR, uid, score, id);
    if (rc != FEED_OK) {
        fprintf(stderr, "sim: hook_init: %s\n", cl->err);
        exit(3);
    }
    sim_trace(w, "c%d  HOOK %s %s %" PRId64 " id %" PRId64, cl->id,
              kind == FEED_HOOK_RELOAD ? "reload" : del ? "delete" : "insert",
              table ? "author" : "uid", uid, id);
    sim_start(w, cl, (feed_op *)h, (int64_t)sim_pick(w, 3));
}

/* The log follower (feedcache-sync): the feed of every committed write is
 * dropped, late, in commit order; a drop that fails is tried again. Now
 * and then the next few writes' feeds go in one feed_invalidate_many. */
static void sim_sync_next(sim_world *w, sim_client *cl)
{
    feed_op *op;
    int rc = FEED_OK;

    if (w->sync_done == w->nwrites) {
        cl->ready_at = w->now + 5;
        cl->aw = SIM_AW_IDLE;
        return;
    }
    cl->write = w->sync_done;       /* every write up to here is committed */
    cl->sync_uid = w->writes[w->sync_done].uid;
    cl->sync_table = w->writes[w->sync_done].table;
    cl->bulk = 0;
    if (sim_pick(w, 3) == 0) {
        int64_t uids[8];
        size_t n = 0;
        cl->req_feeds = 0;
        for (size_t i = w->sync_done; i < w->nwrites && n < 8; i++)
            if (w->writes[i].table == cl->sync_table) {
                uids[n++] = w->writes[i].uid;
                cl->req_feeds |= sim_feed_bit(cl->sync_table, w->writes[i].uid);
                cl->write = i;
            } else {
                break;
            }
        op = feed__invalidate_many_op(cl->c, cl->err,
                                      cl->sync_table == SIMPG_FEED ? FEED_FAM_FEED
                                                                   : FEED_FAM_AUTHOR,
                                      uids, n, &rc);
        if (!op)
            exit(3);
        cl->bulk = 1;
        sim_trace(w, "c%d  SYNC invalidate_many %zu %s", cl->id, n,
                  cl->sync_table ? "authors" : "feeds");
        sim_start(w, cl, op, (int64_t)sim_pick(w, 20));
        cl->frames[0].heap = 1;
        return;
    }
    cl->req_feeds = sim_feed_bit(cl->sync_table, cl->sync_uid);
    op = sim_alloc(feed__hook_op_size());
    if (feed__hook_init((feed_hook_op *)op, cl->c, cl->err, FEED_HOOK_INVALIDATE,
                        cl->sync_table == SIMPG_FEED ? FEED_FAM_FEED : FEED_FAM_AUTHOR,
                        cl->sync_uid, 0, 0) != FEED_OK)
        exit(3);
    sim_trace(w, "c%d  SYNC invalidate %s %" PRId64, cl->id, cl->sync_table ? "author" : "uid",
              cl->sync_uid);
    sim_start(w, cl, op, (int64_t)sim_pick(w, 20));
}

/* The reader's next page: the first of a new walk, or the next one; a
 * walk of one feed, or of a feed merged with some authors. */
static void sim_reader_next(sim_world *w, sim_client *cl)
{
    feed_op *op;
    int rc = FEED_OK;

    if (!cl->walking) {
        cl->uid = 1 + (int64_t)sim_pick(w, (uint64_t)w->uids);
        cl->limit = 1 + (size_t)sim_pick(w, 5);
        cl->score = FEED_FIRST;
        cl->last_id = 0;
        cl->walking = 1;
        cl->nauthors = 0;
        cl->rank = -1;
        cl->walk_pages = 0;
        cl->walk_seen = 0;
        cl->newer = sim_pick(w, 5) == 0 && !(w->ops_off & SIM_OP_NEWER);
        if (cl->newer) {                /* from an item, or from between two */
            size_t n;
            const simpg_row *rows = simpg_rows(w->pg, SIMPG_FEED, cl->uid, simpg_version(w->pg), &n);
            cl->score = n && sim_pick(w, 2) ? rows[sim_pick(w, n)].score
                                            : (int64_t)sim_pick(w, 12) * 10 - 5;
            cl->last_id = n && sim_pick(w, 2) ? rows[sim_pick(w, n)].id : (int64_t)sim_pick(w, 40);
            /* The user holds the items up to here: the walk goes up from it. */
            cl->walk_seen = 1;
            cl->walk_last = (feed_item){ cl->score, cl->last_id };
        } else if (w->authors && sim_pick(w, 2) && !(w->ops_off & SIM_OP_MERGED))
            for (int a = 0; a < w->authors; a++)
                if (sim_pick(w, 3))
                    cl->authors[cl->nauthors++] = 101 + a;
    }
    if (cl->newer) {
        op = sim_alloc(feed__newer_op_size());
        rc = feed__newer_init((feed_newer_op *)op, cl->c, cl->err, cl->uid, cl->score,
                              cl->last_id, cl->limit, &cl->page);
        if (rc != FEED_OK) {
            fprintf(stderr, "sim: newer_init: %s\n", cl->err);
            exit(3);
        }
    } else if (cl->nauthors) {
        op = feed__merged_op(cl->c, cl->err, cl->uid, cl->authors, cl->nauthors, cl->score,
                             cl->last_id, cl->limit, &cl->page, &rc);
        if (!op) {
            fprintf(stderr, "sim: merged_op: %s\n", cl->err);
            exit(3);
        }
    } else {
        op = sim_alloc(feed__page_op_size());
        rc = feed__page_init((feed_page_op *)op, cl->c, cl->err, cl->uid, cl->score,
                             cl->last_id, cl->rank, cl->limit, &cl->page);
        if (rc != FEED_OK) {
            fprintf(stderr, "sim: page_init: %s\n", cl->err);
            exit(3);
        }
    }
    sim_trace(w, "c%d  PAGE uid %" PRId64 "%s %s (%" PRId64 ", %" PRId64 ") rank %" PRId64
                 " limit %zu", cl->id, cl->uid, cl->nauthors ? " merged" : "",
              cl->newer ? "newer than" : "after", cl->score, cl->last_id, cl->rank, cl->limit);
    sim_start(w, cl, op, (int64_t)sim_pick(w, 3));
    cl->frames[0].heap = cl->nauthors > 0;
    cl->rk_off = simr_offset(w->sv[0].r);
    cl->rk_epoch = w->sv[0].epoch;
    cl->rk_evicts = w->evicts;
}

/* Is write wr one of the walk's sources? */
static int sim_in_walk(const sim_client *cl, const struct sim_write *wr)
{
    if (wr->table == SIMPG_FEED)
        return wr->uid == cl->uid;
    for (size_t a = 0; a < cl->nauthors; a++)
        if (wr->uid == cl->authors[a])
            return 1;
    return 0;
}

/* Insert (score, id) into rows (n of them, cap at most) in order, unless
 * the pair is there. */
static size_t sim_put_row(simpg_row *rows, size_t n, size_t cap, int64_t score, int64_t id)
{
    size_t at = 0;

    while (at < n && (rows[at].score > score || (rows[at].score == score && rows[at].id > id)))
        at++;
    if ((at < n && rows[at].score == score && rows[at].id == id) || n == cap)
        return n;
    memmove(&rows[at + 1], &rows[at], (n - at) * sizeof *rows);
    rows[at] = (simpg_row){ score, id };
    return n + 1;
}

/* The walk's rows (the union of its sources, each pair once) after the
 * writes of the log that are certain at start or chosen (bit k of choose:
 * the k-th uncertain one of the walk's sources). */
static size_t sim_state(const sim_world *w, const sim_client *cl, int64_t start, uint32_t choose,
                        simpg_row *rows, size_t cap)
{
    enum { SRC = 5, ROWS = 128 };
    static simpg_row src[SRC][ROWS];
    size_t n = 0, k = 0, ns[SRC] = { 0 };

    for (size_t i = 0; i < w->nwrites; i++) {
        const struct sim_write *wr = &w->writes[i];
        size_t s = wr->table == SIMPG_FEED ? 0 : (size_t)(wr->uid - 100), at = 0;
        if (!sim_in_walk(cl, wr) || s >= SRC)
            continue;
        if (wr->certain_at >= start && !(choose >> k++ & 1))
            continue;
        while (at < ns[s] && src[s][at].id != wr->id)
            at++;
        if (at < ns[s]) {
            memmove(&src[s][at], &src[s][at + 1], (ns[s] - at - 1) * sizeof **src);
            ns[s]--;
        }
        if (!wr->del)
            ns[s] = sim_put_row(src[s], ns[s], ROWS, wr->score, wr->id);
    }
    for (size_t s = 0; s < SRC; s++)
        for (size_t i = 0; i < ns[s]; i++)
            n = sim_put_row(rows, n, cap, src[s][i].score, src[s][i].id);
    return n;
}

/* Does (score, id) sort strictly above (before, newest first) item b? */
static int sim_above(int64_t score, int64_t id, feed_item b)
{
    return score > b.score || (score == b.score && id > b.id);
}

/* Does the page equal SQL's page of a state the walk's sources may have
 * had while it was served: the certain writes, and any of those that were
 * not yet certain when the request began? (-1: too many of those to try.)
 * And does it continue the walk: in that same state, no row lies between
 * the item the walk's pages so far end at (walk_last) and the cursor this
 * page was given, so that the walk skips nothing there? 2: the page is
 * SQL's for its cursor in some state, but in each such state a row lies
 * between (the cursor handed out skips it). */
static int sim_page_exact(sim_world *w, sim_client *cl)
{
    const feed_result *r = &cl->page;
    int uncertain = 0, skips = 0;
    simpg_row rows[512];
    /* A page a replica answered may miss what it had not replayed: writes
     * count as certain only pg_replica_max_lag_ms after they were. */
    int64_t start = cl->started_ms - (w->replica && r->source == FEED_SOURCE_DB ? w->max_lag_ms : 0);

    for (size_t i = 0; i < w->nwrites; i++)
        uncertain += sim_in_walk(cl, &w->writes[i]) && w->writes[i].certain_at >= start;
    if (uncertain > 12)
        return -1;
    for (uint32_t choose = 0; choose < (1u << uncertain); choose++) {
        size_t n = sim_state(w, cl, start, choose, rows, 512), at = 0, k;
        if (cl->newer) {
            /* Pull-to-refresh: the limit items just above the cursor,
             * newest first; more when still newer ones exist. */
            size_t above = 0;
            while (above < n && (rows[above].score > cl->score ||
                                 (rows[above].score == cl->score && rows[above].id > cl->last_id)))
                above++;
            at = above > cl->limit ? above - cl->limit : 0;
            for (k = 0; k < r->count && at + k < above; k++)
                if (r->items[k].score != rows[at + k].score || r->items[k].id != rows[at + k].id)
                    break;
            if (k == r->count && at + k == above && r->has_more == (above > cl->limit)) {
                /* The gap: rows above the newest item the user holds, at
                 * or below the cursor given (the page covers those above it). */
                size_t gap = 0;
                for (size_t j = above; j < n; j++)
                    gap += sim_above(rows[j].score, rows[j].id, cl->walk_last);
                if (gap == 0)
                    return 1;
                skips = 1;
            }
            continue;
        }
        if (cl->score != FEED_FIRST)
            while (at < n && !(rows[at].score < cl->score ||
                               (rows[at].score == cl->score && rows[at].id < cl->last_id)))
                at++;
        for (k = 0; k < r->count && at + k < n; k++)
            if (r->items[k].score != rows[at + k].score || r->items[k].id != rows[at + k].id)
                break;
        if (k == r->count && r->count <= cl->limit &&
            (r->count == cl->limit || at + k == n) && r->has_more == (at + k < n)) {
            /* The gap: rows below the walk's last item, at or above the
             * cursor given (the page covers those below it). */
            size_t gap = 0;
            for (size_t j = 0; j < at && cl->walk_seen; j++)
                gap += !sim_above(rows[j].score, rows[j].id, cl->walk_last) &&
                       (rows[j].score != cl->walk_last.score || rows[j].id != cl->walk_last.id);
            if (gap == 0)
                return 1;
            skips = 1;
        }
    }
    return skips ? 2 : 0;
}

static void sim_page_text(char *out, size_t cap, const feed_result *r, int newer)
{
    size_t used = (size_t)snprintf(out, cap, "[");
    for (size_t i = 0; i < r->count && used + 30 < cap; i++)
        used += (size_t)snprintf(out + used, cap - used, "%s(%" PRId64 ",%" PRId64 ")",
                                 i ? " " : "", r->items[i].score, r->items[i].id);
    if (used < cap)
        used += (size_t)snprintf(out + used, cap - used, "] more=%d", r->has_more);
    if ((r->has_more || newer) && used < cap)   /* next_* is only set then */
        snprintf(out + used, cap - used, " next=(%" PRId64 ",%" PRId64 ")", r->next_score,
                 r->next_id);
}

/* feed_page_ranked's next_rank, when it gives one, is "the rank the item
 * after out's last one held in the cache when this page was read". Checked
 * where the simulation can tell what the copy was then: a single Redis
 * that no command has written to, no eviction or restart has touched,
 * since the request began (its copy then is the one there now, or gone by
 * its TTL). In the generation the handle's node trusts (none: the fence
 * off). 0, or a violation reported. */
static int sim_rank_check(sim_world *w, sim_client *cl, int64_t next_rank, const char *text)
{
    const feed_node *n = cl->c->topo.nodes[0];
    char key[128];
    const char *argv[] = { "ZREVRANGE", key, "0", "-1", "WITHSCORES", NULL };
    redisReply *r;
    feed_item it = { 0, 0 };
    const feed_item last = { cl->page.next_score, cl->page.next_id };
    size_t at = 0;

    if (next_rank < 0 || w->topo != SIM_TOPO_SINGLE || !cl->page.has_more ||
        simr_offset(w->sv[0].r) != cl->rk_off || w->sv[0].epoch != cl->rk_epoch ||
        w->evicts != cl->rk_evicts || (w->fence && n->fence.state != FEED_FENCE_TRUSTED))
        return 0;
    sim_gen_keys(w, 0, cl->uid, w->fence ? n->fence.gen : FEED_KEY_GEN_NONE, key, NULL);
    r = simr_execv(w->sv[0].r, w->now, argv);
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
        freeReplyObject(r);
        return 0;                       /* gone by its TTL */
    }
    w->ranks++;
    /* The first entry strictly below the page's last item: its rank. */
    while (2 * at + 1 < r->elements && !feed__reply_end(r, 2 * at) &&
           feed__reply_pair(r, 2 * at, &it) == FEED_OK &&
           (sim_above(it.score, it.id, last) || (it.score == last.score && it.id == last.id)))
        at++;
    freeReplyObject(r);
    if ((int64_t)at == next_rank)
        return 0;
    sim_violation(w, "c%d: page of uid %" PRId64 " after (%" PRId64 ", %" PRId64 ") is %s: it "
                     "hands out rank %" PRId64 " for its cursor, but the item after it is at rank "
                     "%zu in the copy it was read from", cl->id, cl->uid, cl->score, cl->last_id,
                  text, next_rank, at);
    return 1;
}

/* How many pages a walk of cl's may take at most: each page with has_more
 * shows at least one item (limit >= 1, no filter) beyond every item the
 * walk showed before (the walk checks see to that), and each such item is
 * a (score, id) pair some write of the walk's sources put there, so one
 * page per such write, plus the last page. A walk past it goes round. */
static long sim_walk_budget(const sim_world *w, const sim_client *cl)
{
    long n = 1;

    for (size_t i = 0; i < w->nwrites; i++)
        n += !w->writes[i].del && sim_in_walk(cl, &w->writes[i]);
    return n;
}

/* The walk-level checks of a page just served (FEED_OK) and checked
 * against SQL for the cursor it was given: the cursor it hands out, and
 * that it continues the walk without repeating an item. 0, or a
 * violation reported. */
static int sim_walk_check(sim_world *w, sim_client *cl, const char *text)
{
    const feed_result *r = &cl->page;

    if (cl->newer) {
        /* feed_page_newer: the cursor to keep is, on every FEED_OK, the
         * newest item returned, or the cursor given when none is. */
        int64_t s = r->count ? r->items[0].score : cl->score;
        int64_t id = r->count ? r->items[0].id : cl->last_id;
        if (r->next_score != s || r->next_id != id) {
            sim_violation(w, "c%d: pull-to-refresh page of uid %" PRId64 " newer than (%" PRId64
                             ", %" PRId64 ") is %s: it hands out the cursor (%" PRId64 ", %"
                             PRId64 "), not (%" PRId64 ", %" PRId64 ")", cl->id, cl->uid,
                          cl->score, cl->last_id, text, r->next_score, r->next_id, s, id);
            return 1;
        }
        if (r->count && !sim_above(r->items[r->count - 1].score, r->items[r->count - 1].id,
                                   cl->walk_last)) {
            sim_violation(w, "c%d: pull-to-refresh page of uid %" PRId64 " is %s: its oldest "
                             "item is not newer than (%" PRId64 ", %" PRId64 "), which the walk "
                             "already showed", cl->id, cl->uid, text, cl->walk_last.score,
                          cl->walk_last.id);
            return 1;
        }
        return 0;
    }
    if (r->has_more && (r->count == 0 || r->next_score != r->items[r->count - 1].score ||
                        r->next_id != r->items[r->count - 1].id)) {
        sim_violation(w, "c%d: %spage of uid %" PRId64 " after (%" PRId64 ", %" PRId64 ") is %s:"
                         " the cursor it hands out is not its last item", cl->id,
                      cl->nauthors ? "merged " : "", cl->uid, cl->score, cl->last_id, text);
        return 1;
    }
    if (r->count && cl->walk_seen &&
        (sim_above(r->items[0].score, r->items[0].id, cl->walk_last) ||
         (r->items[0].score == cl->walk_last.score && r->items[0].id == cl->walk_last.id))) {
        sim_violation(w, "c%d: %spage of uid %" PRId64 " after (%" PRId64 ", %" PRId64 ") is %s:"
                         " it repeats the walk's items down to (%" PRId64 ", %" PRId64 ")",
                      cl->id, cl->nauthors ? "merged " : "", cl->uid, cl->score, cl->last_id,
                      text, cl->walk_last.score, cl->walk_last.id);
        return 1;
    }
    return 0;
}

/* A request of cl ended with rc: check it, then plan the next one. */
static void sim_request_done(sim_world *w, sim_client *cl)
{
    sim_frame *f = sim_top(cl);
    int rc = f->op->rc;
    /* feed_page_ranked's next_rank: the hint the page hands out with its
     * cursor, which the walk passes back with it. */
    int64_t next_rank = cl->kind == SIM_READER && !cl->newer && !cl->nauthors
                            ? feed__page_next_rank((const feed_page_op *)f->op) : -1;

    sim_op_free(f);
    cl->depth = 0;
    w->requests++;
    if (cl->kind == SIM_READER) {
        char text[400];
        int exact;
        if (rc != FEED_OK) {
            sim_trace(w, "c%d  page failed: %s", cl->id, cl->err);
            if (w->faults == 0 && !w->expect_errors)
                sim_violation(w, "c%d: a page failed with no fault: %s", cl->id, cl->err);
            cl->walking = 0;
        } else {
            const feed_result *pg = &cl->page;
            sim_page_text(text, sizeof text, pg, cl->newer);
            sim_trace(w, "c%d  page %s%s from %s", cl->id, text,
                      next_rank >= 0 ? " (with a rank)" : "", feed_source_name(pg->source));
            exact = sim_page_exact(w, cl);
            w->unchecked += exact < 0;
            if (exact == 0)
                sim_violation(w, "c%d: %spage of uid %" PRId64 " after (%" PRId64 ", %" PRId64
                                 ") limit %zu is %s (from %s): SQL's page of no state of the "
                                 "feed while it was served",
                              cl->id, cl->nauthors ? "merged " : "", cl->uid, cl->score,
                              cl->last_id, cl->limit, text,
                              feed_source_name(pg->source));
            else if (exact == 2)
                sim_violation(w, "c%d: %spage of uid %" PRId64 " %s (%" PRId64 ", %" PRId64
                                 ") limit %zu is %s (from %s): the walk skips SQL's rows "
                                 "between (%" PRId64 ", %" PRId64 "), where its pages so far "
                                 "end, and that cursor", cl->id, cl->nauthors ? "merged " : "",
                              cl->uid, cl->newer ? "newer than" : "after", cl->score,
                              cl->last_id, cl->limit, text, feed_source_name(pg->source),
                              cl->walk_last.score, cl->walk_last.id);
            else if (!sim_walk_check(w, cl, text))
                sim_rank_check(w, cl, next_rank, text);
            cl->walk_pages++;
            /* The walk goes on from the cursor the page handed out (and
             * its rank hint): what an application does with it. */
            if (pg->count > 0) {
                cl->walk_seen = 1;
                cl->walk_last = pg->items[cl->newer ? 0 : pg->count - 1];
            }
            if (pg->has_more) {
                cl->score = pg->next_score;
                cl->last_id = pg->next_id;
                cl->rank = next_rank;
                if (cl->walk_pages >= sim_walk_budget(w, cl))
                    sim_violation(w, "c%d: a walk of uid %" PRId64 " is at its %ld-th page and "
                                     "goes on: more pages than its sources ever had items",
                                  cl->id, cl->uid, cl->walk_pages);
            } else {
                cl->walking = 0;
                w->walks++;
            }
            w->pages++;
        }
        feed_result_free(&cl->page);
        if (!cl->walking)
            cl->ops_left--;
    } else if (cl->kind == SIM_WRITER) {
        if (rc != FEED_OK)
            sim_trace(w, "c%d  hook failed: %s", cl->id, cl->err);
        for (int s = 0; s < w->nsv && rc == FEED_OK; s++)     /* its writes acknowledged */
            if (cl->hoff[s] > cl->hoff_start[s] && cl->hoff[s] > w->sv[s].acked &&
                cl->hoff_epoch[s] == w->sv[s].epoch)   /* not lost to a restart since */
                w->sv[s].acked = cl->hoff[s];
        for (size_t i = 0; i < cl->nwrite; i++)
            w->writes[cl->first_write + i].certain_at = w->now;
        cl->nwrite = 0;
        cl->ops_left--;
    } else if (rc != FEED_OK) {
        sim_trace(w, "c%d  drop failed, tried again: %s", cl->id, cl->err);
    } else {
        /* The copies were dropped after every write up to cl->write
         * committed: those writes' feeds (one, or a bulk drop's) are
         * certain now. */
        for (size_t j = w->sync_done; j <= cl->write; j++) {
            if (!cl->bulk && j > w->sync_done)
                break;
            for (size_t i = 0; i <= cl->write; i++)
                if (w->writes[i].uid == w->writes[j].uid &&
                    w->writes[i].table == w->writes[j].table && w->writes[i].certain_at > w->now)
                    w->writes[i].certain_at = w->now;
        }
        while (w->sync_done < w->nwrites && w->writes[w->sync_done].certain_at <= w->now)
            w->sync_done++;
        if (w->sync_done <= cl->write && cl->bulk)
            w->sync_done = cl->write + 1;
    }
}

/* Has some handle set up server s as it now runs, its fence done (on a
 * cluster, the fence of slot too, the slot a copy lives in)? */
static int sim_fenced(sim_world *w, int s, unsigned slot)
{
    for (int i = 0; i < w->ncl; i++)
        for (size_t k = 0; k < w->cl[i].c->topo.nnodes; k++) {
            feed_node *n = w->cl[i].c->topo.nodes[k];
            if (n->state == FEED_NODE_READY && sim_conn_server(w, n->io) == s &&
                (!w->fence || feed__slot_trusted(&w->cl[i].c->topo, n, slot)))
                return 1;
        }
    return 0;
}

/* After the writers stopped and the faults healed: have the repairs and
 * the log follower settled? Until then the readers go on reading, which
 * is what makes each handle reach Redis again and run the repairs. */
static int sim_settled(sim_world *w)
{
    int ready = 0;

    /* Some handle set up on the primary as it now runs (its fence done);
     * on a cluster, on every primary that serves a copy. */
    if (w->topo == SIM_TOPO_CLUSTER) {
        ready = 1;
        for (int64_t o = 1; o <= w->uids + w->authors && ready; o++) {
            char key[128], lease[128];
            sim_owner_keys(w, o > w->uids, o <= w->uids ? o : 100 + o - w->uids, key, lease);
            ready = sim_fenced(w, sim_key_server(w, key), feed__key_slot(key, strlen(key)));
        }
    }
    for (int i = 0; i < w->ncl && w->topo != SIM_TOPO_CLUSTER; i++) {
        feed_node *n = w->cl[i].c->topo.nodes[0];
        ready |= n->state == FEED_NODE_READY && sim_conn_server(w, n->io) == w->prim;
    }
    return ready && !feed__repairs_pending() &&
           (!w->sync || w->sync_done == w->nwrites);
}

/* Give cl its next request, if it has one. */
static void sim_plan(sim_world *w, sim_client *cl)
{
    if (cl->kind == SIM_SYNC) {
        if (w->sync)
            sim_sync_next(w, cl);
        return;
    }
    if (w->healed && cl->kind == SIM_READER && !cl->walking) {
        if (sim_settled(w) || w->now > w->healed_at + 5000) {
            cl->aw = SIM_AW_NONE;
            return;
        }
        cl->ops_left = 1;
        cl->ready_at = w->now + 10;     /* a page now and then, until settled */
    }
    if (cl->ops_left <= 0) {
        cl->aw = SIM_AW_NONE;
        return;
    }
    if (cl->kind == SIM_READER)
        sim_reader_next(w, cl);
    else
        sim_writer_next(w, cl);
}

/* ------------------------------------------------------------------------
 * Faults of the world (not of one await)
 * ------------------------------------------------------------------------ */

/* A failover lost a write whose hook returned FEED_OK (on `what`). With
 * redis_wait_replicas that is a broken promise (docs/ha.md: an
 * acknowledged hook lost in a failover fails instead); without, the
 * fence keeps it from leaving a stale copy, and it is only counted. */
static void sim_acked_lost(sim_world *w, int p, int lost, const char *what)
{
    if (!lost)
        return;
    w->acked_lost++;
    sim_trace(w, "    %s:%d's failover lost a write acknowledged to a writer (%s)",
              w->sv[p].host, w->sv[p].port, what);
    if (w->wait_replicas)
        sim_violation(w, "a failover of %s:%d lost a write acknowledged with WAIT (%s)",
                      w->sv[p].host, w->sv[p].port, what);
}

/* A failover: the primary's replica is promoted with what it holds (maybe
 * behind: acknowledged writes lost), and the old primary is killed (back
 * later as a replica), demoted at once (a replica that keeps its
 * connections and its old data set until it syncs), or left a writable
 * primary without replicas for a while before it is demoted (SENTINEL
 * FAILOVER: the Sentinels reconfigure it late). The Sentinels learn of
 * it one by one, later. */
static void sim_failover(sim_world *w)
{
    int p = w->prim, r = -1, kind, kinds[3], nk = 0;
    static const char *const what[] = { "killed", "demoted at once", "left writable a while" };

    if (w->topo == SIM_TOPO_CLUSTER) {      /* a primary not in a migration */
        p = w->owner[sim_pick(w, 16384)] - 1;
        if (p < 0 || p == w->mig_from || p == w->mig_to)
            return;
    }
    for (int j = 0; j < w->nsv && r < 0; j++)
        if (!w->sv[j].sentinel && w->sv[j].of == p && !w->sv[j].dead)
            r = j;
    for (int k = 0; k < 3; k++)
        if (w->failover_kinds & (1 << k))
            kinds[nk++] = k;
    if (r < 0 || nk == 0)
        return;
    /* A replica that was this primary's primary until lately (demoted,
     * resynced) is not promoted back sooner than SIM_EPISODE_MS after its
     * demotion: two failovers take the cluster bus's votes (or Sentinel's
     * agreement) and a resync between, never an instant. */
    if (w->sv[r].demoted_at && w->now < w->sv[r].demoted_at + SIM_EPISODE_MS)
        return;
    kind = kinds[sim_pick(w, (uint64_t)nk)];
    sim_acked_lost(w, p, w->sv[p].acked > 0 && w->sv[r].synced < w->sv[p].acked, "promoted replica");
    /* What the promoted replica holds, or what was found lost already:
     * a write acknowledged above it later (its reply came back after the
     * promotion, or the old primary is left writable) is lost too. */
    w->sv[p].acked_then = w->sv[r].synced > w->sv[p].acked ? w->sv[r].synced : w->sv[p].acked;
    w->sv[r].acked = 0;
    simr_promote(w->sv[r].r, sim_next(w));
    w->sv[r].of = -1;
    w->sv[r].demoted_at = 0;
    w->sv[p].heir = r;
    if (w->topo == SIM_TOPO_CLUSTER) {
        for (int k = 0; k < 16384; k++)
            if (w->owner[k] == p + 1)
                w->owner[k] = (uint8_t)(r + 1);
    } else {
        w->prim = r;
    }
    sim_trace(w, "    FAILOVER: %s:%d promoted (%lld of the old primary's %lld writes), "
                 "%s:%d %s", w->sv[r].host, w->sv[r].port, w->sv[r].synced,
              simr_offset(w->sv[p].r), w->sv[p].host, w->sv[p].port, what[kind]);
    if (kind == 0) {
        w->sv[p].dead = 1;
        w->sv[p].epoch++;
        w->sv[p].of = r;
        w->sv[p].down_until = w->now + 1 + (int64_t)sim_pick(w, 300);
    } else if (kind == 1) {
        w->sv[p].of = r;
        w->sv[p].synced = -1;
        w->sv[p].demoted_at = w->now;
        simr_set_role(w->sv[p].r, 1, 0);
    } else {
        w->sv[p].demote_at = w->now + 1 + (int64_t)sim_pick(w, 200);
    }
}

/* Does key hash to the migrating slot? */
static int sim_in_slot(void *arg, const char *key, size_t len)
{
    const sim_world *w = arg;
    return (int)feed__key_slot(key, len) == w->mig_slot;
}

/* What follows a failover, due at its time (or at once, healing): a
 * killed server back as a replica of the primary (a full sync), an old
 * primary demoted, a Sentinel that learns of the new primary. Then each
 * replica may receive its primary's data set. */
static void sim_topo_step(sim_world *w, int heal)
{
    for (int j = 0; j < w->nsv; j++) {
        struct sim_server *v = &w->sv[j];
        if (v->sentinel) {
            if (v->names != w->prim && (heal || sim_pick(w, 3) == 0))
                v->names = w->prim;
            continue;
        }
        if (v->dead && (heal || w->now >= v->down_until)) {
            simr_restart(v->r, NULL, sim_next(w));
            simr_set_role(v->r, 1, 0);
            v->dead = 0;
            v->acked = 0;
            v->epoch++;
            v->of = v->heir;
            v->down_until = 0;
            sim_sync(w, j);
            sim_trace(w, "    %s:%d back, a replica of %s:%d", v->host, v->port,
                      w->sv[v->heir].host, w->sv[v->heir].port);
        }
        if (v->demote_at && (heal || w->now >= v->demote_at)) {
            sim_acked_lost(w, j, v->acked > v->acked_then, "old primary, demoted");
            v->demote_at = 0;
            v->demoted_at = w->now;
            v->of = v->heir;
            v->synced = -1;
            simr_set_role(v->r, 1, 0);
            sim_trace(w, "    %s:%d demoted: a replica of %s:%d", v->host, v->port,
                      w->sv[v->heir].host, w->sv[v->heir].port);
        }
        if (v->of >= 0 && !v->dead && (heal || sim_pick(w, w->sync_every) == 0))
            sim_sync(w, j);
    }
    while (w->mig_slot >= 0 && (heal || sim_pick(w, 3) == 0)) {
        int moved = simr_migrate_one(w->sv[w->mig_from].r, w->sv[w->mig_to].r, sim_in_slot, w,
                                     w->now);
        if (moved < 0) {
            fprintf(stderr, "sim: out of memory\n");
            exit(3);
        }
        if (moved == 0) {                   /* CLUSTER SETSLOT slot NODE target */
            w->owner[w->mig_slot] = (uint8_t)(w->mig_to + 1);
            sim_trace(w, "    slot %d now served by %s:%d", w->mig_slot, w->sv[w->mig_to].host,
                      w->sv[w->mig_to].port);
            w->mig_slot = -1;
            w->mig_from = w->mig_to = -1;
        } else if (w->trace) {
            sim_trace(w, "    a key of slot %d moved to %s:%d", w->mig_slot, w->sv[w->mig_to].host,
                      w->sv[w->mig_to].port);
        }
        if (!heal)
            break;
    }
}

/* The server whose data set holds key now: its slot's owner in a
 * cluster (or the migration's target, once the key moved there). */
static int sim_key_server(sim_world *w, const char *key)
{
    unsigned slot;

    if (w->topo != SIM_TOPO_CLUSTER)
        return w->prim;
    slot = feed__key_slot(key, strlen(key));
    if ((int)slot == w->mig_slot && !simr_has(w->sv[w->mig_from].r, key, strlen(key), w->now))
        return w->mig_to;
    return w->owner[slot] - 1;
}

/* A feed's (or an author's) copy key in generation gen (base.h). */
static void sim_gen_keys(sim_world *w, int author, int64_t owner, const char *gen, char *key,
                         char *lease)
{
    const feed_core *c = w->cl[0].c;

    feed__family_keys(c->key_base[author ? FEED_FAM_AUTHOR : FEED_FAM_FEED], owner, key, lease);
    memcpy(key + c->key_gen_at, gen, FEED_KEY_GEN_LEN);
    if (lease)
        memcpy(lease + c->key_gen_at, gen, FEED_KEY_GEN_LEN);
}

/* The generation the library names copies on server s with: that of its
 * data set now (with the fence; none without, nor on a cluster). */
static void sim_server_gen(sim_world *w, int s, char gen[FEED_KEY_GEN_LEN + 1])
{
    const char *run_id, *replid;

    if (!w->cl[0].c->cfg.redis_restart_fence || w->topo == SIM_TOPO_CLUSTER) {
        memcpy(gen, FEED_KEY_GEN_NONE, FEED_KEY_GEN_LEN + 1);
        return;
    }
    simr_identity(w->sv[s].r, &run_id, &replid);
    feed__key_gen(run_id, replid, gen);
}

/* A feed's (or an author's) copy key as handles set up now name it, for
 * the faults and the final look: the slot decides the server, the server's
 * data set the generation. */
static void sim_owner_keys(sim_world *w, int author, int64_t owner, char *key, char *lease)
{
    char gen[FEED_KEY_GEN_LEN + 1];

    sim_gen_keys(w, author, owner, FEED_KEY_GEN_NONE, key, lease);
    sim_server_gen(w, sim_key_server(w, key), gen);
    sim_gen_keys(w, author, owner, gen, key, lease);
}

/* A slot of some feed's keys starts migrating to another primary. */
static void sim_migrate(sim_world *w)
{
    char key[128], lease[128];
    int author = w->authors && sim_pick(w, 3) == 0, to;
    int64_t owner = author ? 101 + (int64_t)sim_pick(w, (uint64_t)w->authors)
                           : 1 + (int64_t)sim_pick(w, (uint64_t)w->uids);
    unsigned slot;

    sim_owner_keys(w, author, owner, key, lease);
    slot = feed__key_slot(key, strlen(key));
    to = w->owner[sim_pick(w, 16384)] - 1;
    if (to == w->owner[slot] - 1 || to < 0)
        return;
    w->mig_slot = (int)slot;
    w->mig_from = w->owner[slot] - 1;
    w->mig_to = to;
    sim_trace(w, "    slot %u (%s) migrating from %s:%d to %s:%d", slot, key,
              w->sv[w->mig_from].host, w->sv[w->mig_from].port, w->sv[to].host, w->sv[to].port);
}

static void sim_world_faults(sim_world *w)
{
    int pi = w->topo == SIM_TOPO_CLUSTER ? w->owner[sim_pick(w, 16384)] - 1 : w->prim;
    struct sim_server *p = &w->sv[pi];

    if (sim_fault(w, SIM_F_SNAPSHOT, "Redis saves a snapshot")) {
        simr_free(p->snap);
        p->snap = simr_snapshot(p->r);
    }
    if (sim_fault(w, SIM_F_RESTART, "Redis restarts")) {
        int old = p->snap && sim_pick(w, 2);
        p->epoch++;
        simr_restart(p->r, old ? p->snap : NULL, sim_next(w));
        p->down_until = w->now + (int64_t)sim_pick(w, 100);
        p->acked = 0;                   /* a restart loses writes with or without WAIT */
        for (int j = 0; j < w->nsv; j++)
            if (w->sv[j].of == pi)
                w->sv[j].synced = -1;  /* a new replication id: a full sync */
        if (w->nsv > 1)
            sim_trace(w, "    %s:%d restarted %s", p->host, p->port,
                      old ? "from an older snapshot" : "empty");
        else
            sim_trace(w, "    Redis restarted %s", old ? "from an older snapshot" : "empty");
    }
    if (sim_fault(w, SIM_F_EVICT, "Redis evicts a key")) {
        char key[128], lease[128];
        int author = w->authors && sim_pick(w, 3) == 0;
        int64_t owner = author ? 101 + (int64_t)sim_pick(w, (uint64_t)w->authors)
                               : 1 + (int64_t)sim_pick(w, (uint64_t)w->uids);
        const char *which;
        sim_owner_keys(w, author, owner, key, lease);
        which = sim_pick(w, 2) ? key : lease;
        if (w->topo == SIM_TOPO_CLUSTER)
            p = &w->sv[sim_key_server(w, which)];
        simr_evict(p->r, which, strlen(which));
        w->evicts++;
    }
    if (sim_fault(w, SIM_F_JUMP, "the clock jumps ahead"))
        w->now += (int64_t)sim_pick(w, 2 * w->lease_ms);
    if (sim_fault(w, SIM_F_PGDOWN, "PostgreSQL restarts, away for a while")) {
        w->pg_down_until = w->now + (int64_t)sim_pick(w, 300);
        w->pg_epoch++;
    }
    if (w->replica && sim_pick(w, 4) == 0 && w->replica_v < simpg_version(w->pg))
        w->replica_v++;                 /* the replica replays one more commit */
    if (w->topo != SIM_TOPO_SINGLE && sim_fault(w, SIM_F_FAILOVER, "a failover"))
        sim_failover(w);
    if (w->topo == SIM_TOPO_CLUSTER && w->mig_slot < 0 &&
        sim_fault(w, SIM_F_MIGRATE, "a slot migration begins"))
        sim_migrate(w);
}

/* ------------------------------------------------------------------------
 * One schedule
 * ------------------------------------------------------------------------ */

static void sim_seed_data(sim_world *w)
{
    for (int64_t o = 1; o <= w->uids + w->authors; o++) {
        int table = o <= w->uids ? SIMPG_FEED : SIMPG_AUTHORS, n = (int)sim_pick(w, 14);
        int64_t owner = o <= w->uids ? o : 100 + o - w->uids;
        for (int i = 0; i < n; i++) {
            int64_t score = (int64_t)sim_pick(w, 12) * 10, low = (int64_t)sim_pick(w, 40),
                    id = low + ((int64_t)sim_pick(w, 2) << 33);   /* the draws in this order */
            simpg_upsert(w->pg, table, owner, score, id);
            w->writes[w->nwrites++] = (struct sim_write){ table, owner, id, score, 0, -1 };
        }
    }
    w->sync_done = w->nwrites;
    w->replica_v = simpg_version(w->pg);
}

/* The servers of w->topo. A single Redis: sim-redis:6379. Under
 * Sentinel: a primary, its replica, and two Sentinels naming the primary.
 * 0, or -1 when out of memory. */
static int sim_servers(sim_world *w)
{
    static const struct { const char *host; int port, sentinel; } single[] = {
        { "sim-redis", 6379, 0 } }, sentinel[] = {
        { "sim-redis-0", 6379, 0 }, { "sim-redis-1", 6380, 0 },
        { "sim-sentinel-0", 26379, 1 }, { "sim-sentinel-1", 26380, 1 } };
    const int cluster = w->topo == SIM_TOPO_CLUSTER;
    const int n = w->topo == SIM_TOPO_SINGLE ? 1 : cluster ? 6 : 4;

    w->nsv = 0;
    w->prim = 0;
    w->addrs[0] = '\0';
    w->mig_slot = w->mig_from = w->mig_to = -1;
    for (int j = 0; j < n; j++, w->nsv++) {
        struct sim_server *v = &w->sv[j];
        memset(v, 0, sizeof *v);
        if (cluster) {              /* three primaries, then a replica of each */
            snprintf(v->host, sizeof v->host, "sim-node-%d", j);
            v->port = 7000 + j;
            v->of = j < 3 ? -1 : j - 3;
        } else {
            snprintf(v->host, sizeof v->host, "%s", n == 1 ? single[j].host : sentinel[j].host);
            v->port = n == 1 ? single[j].port : sentinel[j].port;
            v->sentinel = n == 1 ? 0 : sentinel[j].sentinel;
            v->of = j == 0 || v->sentinel ? -1 : 0;
        }
        v->epoch = 1;
        v->synced = -1;
        v->guard = (struct sim_guard){ w, j };
        if (cluster && j < 3) {     /* the seeds; slots split in three */
            size_t used = strlen(w->addrs);
            snprintf(w->addrs + used, sizeof w->addrs - used, "%s%s:%d", used ? "," : "",
                     v->host, v->port);
            memset(w->owner + j * 5462, j + 1, j < 2 ? 5462 : 16384 - 2 * 5462);
        }
        if (v->sentinel) {
            size_t used = strlen(w->addrs);
            snprintf(w->addrs + used, sizeof w->addrs - used, "%s%s:%d",
                     used ? "," : "", v->host, v->port);
            continue;
        }
        if ((v->r = simr_new(sim_next(w), NULL)) == NULL)
            return -1;
        if (v->of >= 0)
            simr_set_role(v->r, 1, 0);
        if (cluster)
            simr_set_guard(v->r, sim_guard, &v->guard);
    }
    return 0;
}

/* The generations a copy on server s may be read in: that of s's data set
 * now (a handle set up there now, or one that looks again and finds it),
 * and every handle's trusted one on a node at s's address that it reads
 * without looking again (on a cluster, not lapsed: topo.c). Distinct, at
 * most cap; the count. */
static int sim_gens_on(sim_world *w, int s, char (*gens)[FEED_KEY_GEN_LEN + 1], int cap)
{
    int n = 1;

    sim_server_gen(w, s, gens[0]);
    for (int i = 0; i < w->ncl; i++) {
        const feed_topo *t = &w->cl[i].c->topo;
        for (size_t k = 0; k < t->nnodes; k++) {
            const feed_node *node = t->nodes[k];
            int seen = 0;
            if (node->addr.port != w->sv[s].port || strcmp(node->addr.host, w->sv[s].host) != 0 ||
                node->fence.state != FEED_FENCE_TRUSTED ||
                (t->cluster && w->now - node->fence.heard_ms >
                                   (int64_t)w->cl[i].c->cfg.redis_timeout_ms))
                continue;
            for (int g = 0; g < n; g++)
                seen |= strcmp(gens[g], node->fence.gen) == 0;
            if (!seen && n < cap)
                memcpy(gens[n++], node->fence.gen, FEED_KEY_GEN_LEN + 1);
        }
    }
    return n;
}

/* The copy at key on server s an exact prefix of SQL's rows (or absent). */
static void sim_check_copy(sim_world *w, int table, int64_t owner, const char *key, int s)
{
    const char *argv[] = { "ZREVRANGE", key, "0", "-1", "WITHSCORES", NULL };
    redisReply *r;
    size_t n, items = 0;
    const simpg_row *rows = simpg_rows(w->pg, table, owner, simpg_version(w->pg), &n);
    int end = 0, bad = 0;

    r = simr_execv(w->sv[s].r, w->now, argv);
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
        feed_item it;
        if (feed__reply_end(r, i)) {
            end = 1;
            continue;
        }
        if (feed__reply_pair(r, i, &it) != FEED_OK || items >= n ||
            rows[items].score != it.score || rows[items].id != it.id)
            bad = 1;
        items++;
    }
    if (!bad && end && items != n)
        bad = 1;
    if (!bad && items > w->max_len)
        bad = 1;
    if (bad)
        sim_violation(w, "the copy of %s %" PRId64 " (%zu items%s) is not a prefix of SQL's "
                         "%zu rows", table ? "author" : "uid", owner, items,
                      end ? " and the end marker" : "", n);
    freeReplyObject(r);
}

/* Every cached copy a handle may read an exact prefix of SQL's rows (or
 * absent): in each generation it may be read in. Copies of other
 * generations are never read (base.h) and wait for the sweep. */
static void sim_check_copies(sim_world *w)
{
    for (int64_t o = 1; o <= w->uids + w->authors; o++) {
        int table = o <= w->uids ? SIMPG_FEED : SIMPG_AUTHORS;
        int64_t owner = o <= w->uids ? o : 100 + o - w->uids;
        char key[128], gens[16][FEED_KEY_GEN_LEN + 1];
        int s, n;

        sim_gen_keys(w, table != SIMPG_FEED, owner, FEED_KEY_GEN_NONE, key, NULL);
        s = sim_key_server(w, key);
        n = sim_gens_on(w, s, gens, 16);
        for (int g = 0; g < n; g++) {
            sim_gen_keys(w, table != SIMPG_FEED, owner, gens[g], key, NULL);
            sim_check_copy(w, table, owner, key, s);
        }
    }
}

/* How many requests the schedule's async handle carries (0: none), and
 * whether one of them is a writer's: drawn from the seed apart from the
 * schedule's own draws, so that a schedule without one is the one it was
 * before async handles were simulated. */
static int sim_async_drawn(const sim_world *w, int *writer)
{
    uint64_t z = (w->seed + 0x632be59bd9b4e019ULL) * 0x9e3779b97f4a7c15ULL;

    z ^= z >> 31;
    *writer = 0;
    if (w->async < 0 || (!w->async && (z >> 7) % 2 == 0))
        return 0;
    *writer = (z >> 17) % 2 == 0;
    return 2 + (int)((z >> 11) % (SIM_AREQS - 1));
}

/* The clients that may move now (into cand), the soonest time another
 * may; returns how many are still at work, *apps how many of them are the
 * application's (not the log follower). */
static int sim_candidates(sim_world *w, sim_client **cand, int *ncand, int64_t *soonest,
                          int *apps)
{
    int active = 0;

    *apps = 0;
    for (int i = 0; i < w->ncl; i++) {
        sim_client *cl = &w->cl[i];
        int64_t at = cl->ah && cl->ah->ready_at > cl->ready_at ? cl->ah->ready_at : cl->ready_at;
        if (cl->aw == SIM_AW_NONE)
            continue;
        if (cl->kind != SIM_SYNC || cl->aw != SIM_AW_IDLE)
            active++;
        *apps += cl->kind != SIM_SYNC;
        if (cl->aw == SIM_AW_SHARED)
            continue;                   /* its handle's loop moves it */
        if (at <= w->now)
            cand[(*ncand)++] = cl;
        else if (at < *soonest)
            *soonest = at;
    }
    return active;
}

/* The writers are done: heal, let the log follower catch up and every
 * handle run its repairs (the readers read on until that settles). */
static void sim_heal(sim_world *w)
{
    w->healed = 1;
    w->healed_at = w->now;
    w->pg_down_until = 0;
    for (int j = 0; j < w->nsv; j++)
        w->sv[j].down_until = 0;
    if (w->topo != SIM_TOPO_SINGLE)
        sim_topo_step(w, 1);
    sim_trace(w, "    writers done: faults heal");
    for (int i = 0; i < w->ncl; i++)
        if (w->cl[i].kind != SIM_SYNC) {
            w->cl[i].kind = SIM_READER;
            w->cl[i].ops_left = 1;
            w->cl[i].walking = 0;
            w->cl[i].ready_at = w->now + 1;
            sim_plan(w, &w->cl[i]);
        }
}

/* The feeds the async handle's requests touch. */
static unsigned sim_async_feeds(const sim_world *w)
{
    unsigned m = 0;

    for (int i = 0; w->ah && i < w->ah->nreq; i++)
        m |= w->ah->req[i]->req_feeds;
    return m;
}

/* A repair request of a handle is in flight (in) or not: note the feeds
 * with a loss pending when it is first seen (what it took off the list). */
static void sim_census_repair(sim_world *w, int in, int *seen, unsigned *cover)
{
    if (in && !*seen)
        *cover = w->lossy;
    *seen = in;
}

/* After one step of handle `mover` (NULL: none moved), whose requests
 * touch the feeds in mask, the repair list at generation gen0 before it:
 * the races between handles that step made (sim_world.race). A measure of
 * what schedules reach, not a check: the windows where a mistake in the
 * repair bookkeeping across handles, the leases or the fence would show. */
static int sim_lease_held(sim_world *w, int bit)
{
    char key[128], lease[128];
    int author = bit >= 8;

    sim_owner_keys(w, author, author ? 101 + bit - 8 : 1 + bit, key, lease);
    return simr_has(w->sv[sim_key_server(w, lease)].r, lease, strlen(lease), w->now);
}

static void sim_census(sim_world *w, const feed_core *mover, unsigned mask, uint64_t gen0)
{
    uint64_t gen = feed__repair_gen();
    unsigned setups[SIM_SERVERS] = { 0 };   /* per server: the handles setting it up */
    int nh = 0;

    for (int b = 0; b < 16 && w->raced; b++)
        if ((w->raced >> b & 1) && sim_lease_held(w, b))
            w->race[SIM_RACE_REPAIR_REBUILD] = 1;

    for (int i = 0; i < w->ncl; i++)
        if (!w->cl[i].ah)
            sim_census_repair(w, w->cl[i].depth > 1, &w->cl[i].rep_seen, &w->cl[i].rep_cover);
    if (w->ah)
        sim_census_repair(w, w->ah->repairing, &w->ah->rep_seen, &w->ah->rep_cover);
    if (mover && gen > gen0 && mask) {      /* mover recorded a loss for (some of) mask */
        for (int i = 0; i < w->ncl; i++)
            if (!w->cl[i].ah && w->cl[i].c != mover && w->cl[i].rep_seen &&
                (w->cl[i].rep_cover & mask)) {
                w->race[SIM_RACE_REPAIR] = 1;
                w->raced |= w->cl[i].rep_cover & mask;
            }
        if (w->ah && &w->ah->core != mover && w->ah->rep_seen && (w->ah->rep_cover & mask)) {
            w->race[SIM_RACE_REPAIR] = 1;
            w->raced |= w->ah->rep_cover & mask;
        }
        for (int b = 0; b < 16; b++)
            if ((mask >> b & 1) && sim_lease_held(w, b))
                w->race[SIM_RACE_REBUILD] = 1;
        w->lossy |= mask;
    }
    w->loss_gen = gen;
    if (!feed__repairs_pending())
        w->lossy = w->raced = 0;
    /* The fence: handles (each bit one) in a set-up of each server. */
    for (int i = 0; i < w->ncl; i++, nh++)
        for (int d = 0; !w->cl[i].ah && d < w->cl[i].depth; d++) {
            const feed_setup *su = w->cl[i].frames[d].setup;
            int s = su ? sim_server_at(w, &w->cl[i].c->topo.nodes[su->index]->addr, 0) : -1;
            if (s >= 0)
                setups[s] |= 1u << (nh % 32);
        }
    for (size_t k = 0; w->ah && k < w->ah->core.topo.nnodes && k < SIM_ANODES; k++) {
        int s = w->ah->setup[k] ? sim_server_at(w, &w->ah->core.topo.nodes[k]->addr, 0) : -1;
        if (s >= 0)
            setups[s] |= 1u << (nh % 32);
    }
    for (int s = 0; s < w->nsv; s++)      /* two bits or more, on a new data set */
        if ((setups[s] & (setups[s] - 1)) && w->sv[s].epoch > 1)
            w->race[SIM_RACE_FENCE] = 1;
}

/* Which of ncand clients and nev async events moves next: uniformly, or
 * in a swarm schedule by the clients' weights (the async handle's events
 * by its first request's), so that some handles run far ahead of others
 * and one's window stays open while others act. */
static uint64_t sim_pick_weighted(sim_world *w, sim_client *const *cand, int ncand, size_t nev)
{
    uint64_t total = 0, at;
    unsigned ev = w->ah ? w->ah->req[0]->weight : 1;

    if (!w->swarm)
        return sim_pick(w, (uint64_t)ncand + nev);
    for (int i = 0; i < ncand; i++)
        total += cand[i]->weight;
    at = sim_pick(w, total + nev * ev);
    for (int i = 0; i < ncand; i++) {
        if (at < cand[i]->weight)
            return (uint64_t)i;
        at -= cand[i]->weight;
    }
    return (uint64_t)ncand + at / ev;
}

int sim_run(sim_world *w)
{
    int readers = 1 + (int)sim_pick(w, 3), writers = 1 + (int)sim_pick(w, 2), active, wid = 0;
    int awriter, areqs = sim_async_drawn(w, &awriter), moved = 0, apps;
    const feed_core *mover = NULL;
    unsigned mover_feeds = 0;

    w->uids = 1 + (int)sim_pick(w, 3);
    w->authors = (int)sim_pick(w, 4);
    if (w->swarm) {                     /* contended: few feeds, more handles on them */
        w->uids = 1;
        w->authors = w->authors > 1 ? 1 : w->authors;
        readers = 3;
        writers = 2;
    }
    w->writers = writers + awriter;    /* an async writer's ids: the last share */
    w->max_len = 2 + (uint32_t)sim_pick(w, 7);
    w->ttl_seconds = sim_pick(w, 3) ? 0 : 1;
    w->lease_ms = 30 + (uint32_t)sim_pick(w, 100);
    w->max_lag_ms = 20 + (int64_t)sim_pick(w, 100);
    if (w->topo != SIM_TOPO_SINGLE)
        w->sync_every = 1 + (uint32_t)sim_pick(w, 40);  /* how far replicas lag */
    if (w->topo == SIM_TOPO_CLUSTER)
        w->now = 100000;    /* a clock long started: the slot map's refresh is rate-limited from 0 */
    w->pg = simpg_new();
    w->pg_epoch = 1;
    if (!w->pg || sim_servers(w) < 0)
        return -1;
    feed__repair_forget();
    w->loss_gen = feed__repair_gen();
    sim_seed_data(w);
    w->ncl = 0;
    for (int i = 0; i < readers + writers + 1; i++, w->ncl++)
        sim_client_init(w, &w->cl[w->ncl], w->ncl,
                        i < readers ? SIM_READER : i < readers + writers ? SIM_WRITER : SIM_SYNC);
    for (int i = 0; i < w->ncl; i++) {
        w->cl[i].ops_left = w->cl[i].kind == SIM_READER ? w->ops : w->ops * 2;
        if (w->cl[i].kind == SIM_WRITER)
            w->cl[i].wid = wid++;
        sim_plan(w, &w->cl[i]);
    }
    if (areqs > 0) {
        sim_async_new(w, areqs, awriter);
        for (int i = w->ncl - areqs; i < w->ncl; i++)
            sim_plan(w, &w->cl[i]);
    }
    for (int i = 0; i < w->ncl; i++)    /* 1, 2, 4 or 8 (swarm), else 1 */
        w->cl[i].weight = w->swarm ? 1u << sim_pick(w, 4) : 1;

    for (long step = 0;; step++) {
        sim_client *cand[SIM_CLIENTS];
        int ncand = 0, ev[SIM_ACONNS + SIM_ANODES + 2];
        int64_t soonest = INT64_MAX;
        size_t nev;

        if (moved) {                    /* what the last step did between handles */
            sim_census(w, mover, mover_feeds, w->loss_gen);
            moved = 0;
        }
        active = sim_candidates(w, cand, &ncand, &soonest, &apps);
        nev = sim_async_events(w, ev, &soonest);
        if (step == SIM_STEP_CAP) {
            /* A schedule is a few walks and writes of a few operations
             * each: one still going here goes round (a walk that never
             * ends, a request retried for ever), which a user would see. */
            sim_violation(w, "%d clients still at work after %d steps: the schedule does not end",
                          active, SIM_STEP_CAP);
            break;
        }
        if (active == 0 || (apps == 0 && !w->healed)) {
            /* Heal once the application's clients are done (the log
             * follower, retrying its drops, would otherwise keep a world
             * that faults at every step from ever healing), then look at
             * the copies once the readers and the follower are done. */
            if (!w->healed) {
                sim_heal(w);
                continue;
            }
            break;
        }
        if (ncand == 0 && nev == 0) {
            if (soonest == INT64_MAX) {
                sim_violation(w, "%d requests wait for something that never comes", active);
                break;
            }
            w->now = soonest;
            continue;
        }
        uint64_t pick = sim_pick_weighted(w, cand, ncand, nev);
        sim_client *cl = pick < (uint64_t)ncand ? cand[pick] : NULL;
        w->steps++;
        moved = 1;
        mover = cl ? cl->c : &w->ah->core;
        mover_feeds = cl && !cl->ah ? cl->req_feeds : sim_async_feeds(w);
        if (!w->healed)
            sim_world_faults(w);
        if (w->topo != SIM_TOPO_SINGLE)
            sim_topo_step(w, 0);
        if (cl && cl->aw == SIM_AW_IDLE) {
            sim_plan(w, cl);
            continue;
        }
        if (!cl || cl->ah) {
            if (cl)
                sim_async_go(w, cl);
            else
                sim_async_event(w, ev[pick - (uint64_t)ncand]);
            w->now += (int64_t)sim_pick(w, 2);
            if (w->violations)
                break;
            continue;
        }
        if (cl->aw != SIM_AW_START)
            sim_complete(w, cl);
        else
            cl->aw = SIM_AW_NONE;
        if (cl->aw == SIM_AW_NONE && sim_advance(w, cl)) {
            sim_request_done(w, cl);
            sim_plan(w, cl);
        } else if (cl->aw != SIM_AW_WAKE) {
            /* A pause: the client (or its network) is slow this time. */
            cl->ready_at = w->now + (sim_fault(w, SIM_F_PAUSE, "a client pauses")
                                         ? (int64_t)sim_pick(w, 3 * w->lease_ms)
                                         : (int64_t)sim_pick(w, 2));
        }
        w->now += (int64_t)sim_pick(w, 2);
        if (w->violations)
            break;
    }
    if (!w->violations) {
        /* Drain the log follower, then the final look. */
        sim_check_copies(w);
    }
    for (int i = 0; i < w->ncl; i++)
        sim_client_free(&w->cl[i]);
    sim_async_free(w);
    for (int j = 0; j < w->nsv; j++) {
        simr_free(w->sv[j].r);
        simr_free(w->sv[j].snap);
        w->sv[j].r = w->sv[j].snap = NULL;
    }
    w->nsv = 0;
    simpg_free(w->pg);
    w->pg = NULL;
    return w->violations ? 1 : 0;
}
