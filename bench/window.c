/* window.c -- section "window": how long a Redis Cluster primary that has
 * been replaced keeps answering reads with its old data.
 *
 * Reads carry no role check on a cluster: a node answers from its own data
 * while it believes it owns the slot. Two ways a primary P can believe so
 * after its replica R was promoted, each measured in rounds:
 *
 *   zombie     P frozen (SIGSTOP) on the cluster of bench/run.sh until R has
 *              been promoted and has taken a write, then thawed: a long
 *              stall (a paused VM, swapping) of the primary alone. How long
 *              does P answer after the thaw, before it learns it was
 *              replaced?
 *   partition  P cut off from the other five nodes while clients still
 *              reach it: a private cluster of 6 nodes on 10.77.0.11-16 in a
 *              network namespace of its own (a child process), the cut made
 *              of policy-routing rules (ip rule) that send the packets
 *              between P's address and the others' into a bridge with no
 *              port. P answers until it counts a minority, R is promoted
 *              after about cluster-node-timeout too: which comes first?
 *              Then the cut heals.
 *
 * A read is stale when it was sent after the write on R was acknowledged
 * and answered with the old data; a read sent before and answered after
 * overlaps the write, and either answer is right. Readers, each on a thread
 * of its own, from before the cut until P redirects (MOVED):
 *   - plain hiredis connections to P, in a tight loop: GET of a key of the
 *     feed's slot that is rewritten on R after the promotion (SET), and the
 *     same GET followed by ROLE in one round trip (would a role check, the
 *     one reads carry under Sentinel with redis_wait_replicas, have refused
 *     the stale answers?);
 *   - feed_page of the feed, on a handle with the default redis_timeout_ms
 *     (250 ms) and on one with 30 s (its connection to P survives the
 *     freeze); the new item goes into SQL and through feed_on_insert on R.
 * Both clusters: cluster-node-timeout 2000 (tools/servers.sh). After each
 * round P is made primary again (CLUSTER FAILOVER), so rounds are alike. */
#define _GNU_SOURCE              /* unshare, CLONE_NEWNET */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>              /* unshare */
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "internal.h"            /* feed__uid_slot */
#include "window.h"

#define W_UID0      90000000     /* the feed: uid W_UID0 + variant, a few rows of its own */
#define W_NEW_ID    5000000      /* + round: the item written on R */
#define W_ROUNDS    7
#define W_LATE      5.0          /* s: the later thaw of a zombie */
#define W_LONG_MS   30000        /* the second handle's redis_timeout_ms: longer than a freeze */
#define NET_NODES   6
#define NET_PORT    7000         /* every node of the private cluster, on its own address */
#define NET_FIRST   11           /* 10.77.0.11 .. 10.77.0.16 */

typedef struct waddr { char host[64]; int port; } waddr;

/* The readers, each on its own thread. */
enum {
    RD_GET,         /* GET on a connection to P */
    RD_ROLE,        /* GET and ROLE, one round trip: what a role check would see */
    RD_PAGE,        /* feed_page, redis_timeout_ms 250 (the default) */
    RD_PAGE_LONG,   /* feed_page, redis_timeout_ms W_LONG_MS */
    NREADERS
};

/* What a reader saw: one entry per call. */
enum { K_OLD, K_NEW, K_SQL, K_MOVED, K_DOWN, K_ERR };
typedef struct wev { double sent, got; int kind, attached; } wev;   /* attached: ROLE's replicas */
typedef struct wlog { wev *v; size_t n, cap; } wlog;

/* One round's figures, all times in ms. Copied whole through a pipe from
 * the partition's child process. */
typedef struct wround {
    double promote;          /* cut -> R says master */
    double down;             /* cut -> P's first refusal (CLUSTERDOWN), NAN if none */
    double last_ok;          /* cut -> P's last answer with data before the heal */
    double moved;            /* heal -> P's first MOVED */
    double written;          /* cut -> the SET on R acknowledged */
    double thawed;           /* the SET on R -> the heal (the thaw) */
    long   stale[NREADERS];  /* reads sent after the write, answered old */
    double window[NREADERS]; /* the last of those answers, after the thaw (zombie) or
                                the write (partition); 0: none */
    long   overlap[NREADERS];/* sent before the write, answered old after it */
    long   role_passed;      /* RD_ROLE's stale reads whose ROLE showed a replica attached */
} wround;

typedef struct wsetup {
    const char *what;        /* "zombie", "partition" */
    char        seeds[512];
    char        pg[512];     /* conninfo */
    const char *prefix;
    int64_t     uid;
    waddr       p, r;        /* the feed's primary and its replica */
    pid_t       p_pid;       /* zombie: P's process */
    waddr       all[16];     /* every node, for the health checks */
    int         nall;
} wsetup;

/* ---- small Redis helpers (each exits on failure: a lost cluster fails the run) ---- */

static redisContext *w_connect(const waddr *a, double timeout_s)
{
    struct timeval tv = { (time_t)timeout_s, (suseconds_t)((timeout_s - (time_t)timeout_s) * 1e6) };
    redisContext *c = redisConnectWithTimeout(a->host, a->port, tv);

    if (!c || c->err || redisSetTimeout(c, tv) != REDIS_OK)
        die("window: connect %s:%d: %s", a->host, a->port, c ? c->errstr : "out of memory");
    return c;
}

/* The reply of one command, NULL on an I/O error (never an exit). */
static redisReply *w_try(const waddr *a, const char *cmd)
{
    struct timeval tv = { 1, 0 };
    redisContext *c = redisConnectWithTimeout(a->host, a->port, tv);
    redisReply *r = NULL;

    if (c && !c->err && redisSetTimeout(c, tv) == REDIS_OK)
        r = redisCommand(c, cmd);
    if (c)
        redisFree(c);
    return r;
}

static int is_master_reply(redisReply *r)
{
    int yes = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
              r->element[0]->type == REDIS_REPLY_STRING &&
              strcmp(r->element[0]->str, "master") == 0;

    freeReplyObject(r);
    return yes;
}

static int w_is_master(const waddr *a)
{
    return is_master_reply(w_try(a, "ROLE"));
}

/* INFO section of node a contains every one of the needles (NULL-ended). */
static int w_info_has(const waddr *a, const char *cmd, const char *const *needles)
{
    redisReply *r = w_try(a, cmd);
    int ok = r && r->type == REDIS_REPLY_STRING;

    for (int i = 0; ok && needles[i]; i++)
        ok = strstr(r->str, needles[i]) != NULL;
    freeReplyObject(r);
    return ok;
}

/* Every node: cluster state ok with all slots served; every replica's link up. */
static int w_cluster_ok(const wsetup *s)
{
    char known[64];
    const char *const ok[] = { "cluster_state:ok", "cluster_slots_ok:16384", known, NULL };
    static const char *const slave[] = { "role:slave", NULL };
    static const char *const up[] = { "master_link_status:up", NULL };
    int replicas = 0;

    snprintf(known, sizeof known, "cluster_known_nodes:%d\r", s->nall);
    for (int i = 0; i < s->nall; i++) {
        if (!w_info_has(&s->all[i], "CLUSTER INFO", ok))
            return 0;
        if (w_info_has(&s->all[i], "INFO replication", slave)) {
            if (!w_info_has(&s->all[i], "INFO replication", up))
                return 0;
            replicas++;
        }
    }
    return replicas == s->nall / 2;   /* one per primary */
}

static void w_wait_ok(const wsetup *s, const char *when)
{
    double end = now_s() + 60;

    while (!w_cluster_ok(s)) {
        if (now_s() > end)
            die("window (%s): the cluster is not ok 60 s %s", s->what, when);
        sleep_s(0.05);
    }
}

/* The owner of slot and its first replica, from CLUSTER SLOTS of node a;
 * 0 while the node knows no replica of it (a cluster still forming). */
static int w_owner_once(const waddr *a, unsigned slot, waddr *p, waddr *r)
{
    redisReply *rep = w_try(a, "CLUSTER SLOTS");
    int found = 0;

    for (size_t i = 0; rep && rep->type == REDIS_REPLY_ARRAY && i < rep->elements; i++) {
        redisReply *e = rep->element[i];
        if (e->elements < 4 || slot < (unsigned)e->element[0]->integer ||
            slot > (unsigned)e->element[1]->integer)
            continue;
        snprintf(p->host, sizeof p->host, "%s", e->element[2]->element[0]->str);
        p->port = (int)e->element[2]->element[1]->integer;
        snprintf(r->host, sizeof r->host, "%s", e->element[3]->element[0]->str);
        r->port = (int)e->element[3]->element[1]->integer;
        found = 1;
    }
    freeReplyObject(rep);
    return found;
}

static void w_owner(const waddr *a, unsigned slot, waddr *p, waddr *r)
{
    double end = now_s() + 30;

    while (!w_owner_once(a, slot, p, r)) {
        if (now_s() > end)
            die("window: no primary with a replica serves slot %u", slot);
        sleep_s(0.1);
    }
}

/* Every node's address, from CLUSTER NODES of node a. */
static void w_nodes(wsetup *s, const waddr *a)
{
    redisContext *c = w_connect(a, 5);
    redisReply *rep = redisCommand(c, "CLUSTER NODES");
    char *line, *save = NULL;

    if (!rep || rep->type != REDIS_REPLY_STRING)
        die("window: CLUSTER NODES failed");
    s->nall = 0;
    for (line = strtok_r(rep->str, "\n", &save); line && s->nall < 16;
         line = strtok_r(NULL, "\n", &save)) {
        char host[64];
        int port;
        if (sscanf(line, "%*s %63[^:]:%d", host, &port) == 2) {
            snprintf(s->all[s->nall].host, sizeof s->all[0].host, "%s", host);
            s->all[s->nall++].port = port;
        }
    }
    freeReplyObject(rep);
    redisFree(c);
}

/* When R was last promoted (now_s), 0: never. */
static double last_promotion;

/* P primary of the feed's slot again, R its replica, everything in sync.
 * The primaries vote for one failover of a slot set per 2 x
 * cluster-node-timeout (2 s here), so a CLUSTER FAILOVER sooner after the
 * promotion times out (5 s) unheard: wait that long, and ask again if it
 * does not happen. */
static void w_restore(const wsetup *s)
{
    static const char *const follows_r[] = { "role:slave", "master_link_status:up", NULL };
    double end = now_s() + 90;

    w_wait_ok(s, "after the round");
    if (last_promotion > 0 && now_s() < last_promotion + 4.5)
        sleep_s(last_promotion + 4.5 - now_s());
    while (!w_is_master(&s->p)) {
        double again = now_s() + 6;
        redisReply *r;
        while (!w_info_has(&s->p, "INFO replication", follows_r)) {
            if (now_s() > end)
                die("window (%s): %s:%d did not rejoin as a replica", s->what, s->p.host,
                    s->p.port);
            sleep_s(0.05);
        }
        r = w_try(&s->p, "CLUSTER FAILOVER");
        if (!r || r->type != REDIS_REPLY_STATUS)
            die("window (%s): CLUSTER FAILOVER on %s:%d refused", s->what, s->p.host, s->p.port);
        freeReplyObject(r);
        while (!w_is_master(&s->p) && now_s() < again)
            sleep_s(0.02);
        if (now_s() > end)
            die("window (%s): %s:%d not primary again", s->what, s->p.host, s->p.port);
    }
    w_wait_ok(s, "after the failover back");
}

/* ---- readers ---- */

typedef struct reader {
    const wsetup *s;
    feed         *f;          /* NULL: a plain reader */
    const char   *mark;       /* the plain readers' key */
    const char   *new_value;
    int64_t       new_id;
    wlog          log;
    pthread_t     t;
    atomic_int   *stop;
    int           which;      /* RD_* */
    /* What the main thread watches (the log itself is the reader's own
     * until it is joined): a CLUSTERDOWN seen, and a MOVED to a read sent
     * after moved_after (now_ns; 0: not yet asked). */
    atomic_int    saw_down, saw_moved;
    atomic_llong  moved_after;
} reader;

static void log_add(wlog *l, double sent, double got, int kind, int attached)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 4096;
        wev *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            die("out of memory");
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (wev){ sent, got, kind, attached };
}

static int kind_of_error(const char *s)
{
    if (strncmp(s, "MOVED", 5) == 0)
        return K_MOVED;
    if (strncmp(s, "CLUSTERDOWN", 11) == 0)
        return K_DOWN;
    return K_ERR;
}

/* How many replicas a ROLE reply lists as attached (the rule of lib/core/exchange.c, judge_role
 * under Sentinel); -1 if it is not a primary's. */
static int attached_of(const redisReply *r)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING || strcmp(r->element[0]->str, "master") != 0)
        return -1;
    return r->element[2]->type == REDIS_REPLY_ARRAY ? (int)r->element[2]->elements : 0;
}

/* GET of the key (and, for RD_ROLE, ROLE in the same round trip) on one
 * connection to P, in a tight loop; a refusal pauses 1 ms. */
static void *plain_reader(void *arg)
{
    reader *x = arg;
    redisContext *c = w_connect(&x->s->p, 30);
    int with_role = x->which == RD_ROLE;

    while (!atomic_load(x->stop)) {
        double t0 = now_s(), t1;
        redisReply *r = NULL, *role = NULL;
        int kind, ok;

        ok = redisAppendCommand(c, "GET %s", x->mark) == REDIS_OK &&
             (!with_role || redisAppendCommand(c, "ROLE") == REDIS_OK) &&
             redisGetReply(c, (void **)&r) == REDIS_OK &&
             (!with_role || redisGetReply(c, (void **)&role) == REDIS_OK);
        t1 = now_s();
        if (!ok || !r)
            kind = K_ERR;
        else if (r->type == REDIS_REPLY_ERROR)
            kind = kind_of_error(r->str);
        else if (r->type == REDIS_REPLY_STRING)
            kind = strcmp(r->str, x->new_value) == 0 ? K_NEW : K_OLD;
        else
            kind = K_ERR;
        log_add(&x->log, t0, t1, kind, attached_of(role));
        if (kind == K_DOWN)
            atomic_store(&x->saw_down, 1);
        if (kind == K_MOVED && atomic_load(&x->moved_after) != 0 &&
            t0 * 1e9 > (double)atomic_load(&x->moved_after))
            atomic_store(&x->saw_moved, 1);
        freeReplyObject(r);
        freeReplyObject(role);
        if (!ok) {              /* the connection broke: a new one, as a client would */
            redisFree(c);
            sleep_s(0.01);
            c = w_connect(&x->s->p, 30);
        } else if (kind != K_OLD && kind != K_NEW) {
            sleep_s(0.001);     /* refusals: no point in spinning */
        }
    }
    redisFree(c);
    return NULL;
}

static void *page_reader(void *arg)
{
    reader *x = arg;

    while (!atomic_load(x->stop)) {
        feed_result res;
        double t0 = now_s(), t1;
        int rc = feed_page(x->f, x->s->uid, FEED_FIRST, 0, 5, &res), kind;

        t1 = now_s();
        if (rc != FEED_OK)
            kind = K_ERR;
        else if (res.source != FEED_SOURCE_CACHE)
            kind = K_SQL;
        else
            kind = res.count > 0 && res.items[0].id == x->new_id ? K_NEW : K_OLD;
        if (rc == FEED_OK)
            feed_result_free(&res);
        log_add(&x->log, t0, t1, kind, -1);
        if (kind == K_ERR || kind == K_SQL)
            sleep_s(0.001);
    }
    return NULL;
}

static feed *w_open(const wsetup *s, const char *seeds, uint32_t timeout_ms)
{
    feed_config cfg;
    feed *f = NULL;

    feed_config_init(&cfg);
    cfg.redis_cluster = seeds;
    cfg.pg_conninfo = s->pg;
    cfg.key_prefix = s->prefix;
    if (timeout_ms)
        cfg.redis_timeout_ms = timeout_ms;
    if (feed_open(&f, &cfg) != FEED_OK)
        die("window (%s): feed_open: %s", s->what, feed_errmsg(NULL));
    return f;
}

/* A page of the feed from the cache on P, its top item not the new one. */
static void w_warm(const wsetup *s, feed *f)
{
    double end = now_s() + 30;

    for (;;) {
        feed_result res;
        int rc = feed_page(f, s->uid, FEED_FIRST, 0, 5, &res), cached = 0;

        if (rc == FEED_OK) {
            cached = res.source == FEED_SOURCE_CACHE;
            feed_result_free(&res);
        }
        if (cached)
            return;
        if (now_s() > end)
            die("window (%s): the feed is not cached 30 s on: %s", s->what, feed_errmsg(f));
        sleep_s(0.02);
    }
}

/* ---- one round ---- */

typedef void (*cut_fn)(const wsetup *s, int on);

static void w_sql(PGconn *pg, const char *sql)
{
    PQclear(b_sql(pg, sql));
}

/* Figures of reader i's log: stale reads (sent after written, answered
 * old) and the last one's time after ref, overlapping ones. Returns the
 * stale reads whose ROLE showed a replica attached. */
static long w_tally(const wlog *l, double written, double ref, int i, wround *w)
{
    long passed = 0;

    w->stale[i] = w->overlap[i] = 0;
    w->window[i] = 0;
    for (size_t k = 0; k < l->n; k++) {
        const wev *e = &l->v[k];
        if (e->kind != K_OLD || e->got < written)
            continue;
        if (e->sent < written) {
            w->overlap[i]++;
        } else {
            w->stale[i]++;
            passed += e->attached > 0;
            if ((e->got - ref) * 1e3 > w->window[i])
                w->window[i] = (e->got - ref) * 1e3;
        }
    }
    return passed;
}

/* One round's state: the readers and the instants (now_s) the figures are
 * taken against. */
typedef struct wstate {
    const wsetup *s;
    int         round, partition;
    char        mark[128], oldv[32], newv[32];
    atomic_int  stop;
    reader      rd[NREADERS];
    double      t_cut, t_prom, t_w, t_hook, t_heal;
} wstate;

/* The old data on P and on R (WAIT), each feed handle's copy cached on P,
 * then the readers started. */
static void w_start(wstate *x)
{
    const wsetup *s = x->s;
    redisContext *cp = w_connect(&s->p, 5);

    b_cmd_ok(cp, "SET %s %s", x->mark, x->oldv);
    for (int i = 0; i < NREADERS; i++) {
        reader *r = &x->rd[i];
        r->s = s;
        r->mark = x->mark;
        r->new_value = x->newv;
        r->new_id = W_NEW_ID + x->round;
        r->stop = &x->stop;
        r->which = i;
        if (i >= RD_PAGE) {
            r->f = w_open(s, s->seeds, i == RD_PAGE ? 0 : W_LONG_MS);
            w_warm(s, r->f);
        }
    }
    if (b_cmd_int(cp, "WAIT 1 2000") < 1)
        die("window (%s): the replica did not acknowledge the old data", s->what);
    redisFree(cp);
    for (int i = 0; i < NREADERS; i++)
        if (pthread_create(&x->rd[i].t, NULL, i < RD_PAGE ? plain_reader : page_reader,
                           &x->rd[i]) != 0)
            die("window: pthread_create failed");
}

/* Once R is promoted: the new item in SQL (the source of truth), the key
 * rewritten on R (t_w, acknowledged), and the item through feed_on_insert
 * on a handle that knows only R, as a process that connected after the
 * promotion would (t_hook: the page readers' write). */
static void w_write(wstate *x, PGconn *pg)
{
    const wsetup *s = x->s;
    int64_t score = 2000000000000LL + x->round, id = W_NEW_ID + x->round;
    double end = now_s() + 30;
    char sql[256], seed[128];
    redisContext *cr = w_connect(&s->r, 5);
    redisReply *rep;
    feed *wr;

    snprintf(sql, sizeof sql, "INSERT INTO feed_entry (uid, score, id) VALUES (%lld, %lld, %lld)",
             (long long)s->uid, (long long)score, (long long)id);
    w_sql(pg, sql);
    while ((rep = redisCommand(cr, "SET %s %s", x->mark, x->newv)) != NULL &&
           rep->type != REDIS_REPLY_STATUS && now_s() < end) {
        freeReplyObject(rep);
        sleep_s(0.001);
    }
    if (!rep || rep->type != REDIS_REPLY_STATUS)
        die("window (%s): the new primary refuses the write", s->what);
    freeReplyObject(rep);
    redisFree(cr);
    x->t_w = now_s();
    snprintf(seed, sizeof seed, "%s:%d", s->r.host, s->r.port);
    wr = w_open(s, seed, 0);
    while (feed_on_insert(wr, s->uid, score, id) != FEED_OK) {
        if (now_s() > end)
            die("window (%s): feed_on_insert on the new primary: %s", s->what, feed_errmsg(wr));
        sleep_s(0.005);
    }
    x->t_hook = now_s();
    feed_close(wr);
}

/* The plain reader's figures: P's first refusal and last answer with data
 * before the heal, its first MOVED after; then each reader's stale reads. */
static void w_figures(const wstate *x, wround *w)
{
    const wlog *l = &x->rd[RD_GET].log;

    memset(w, 0, sizeof *w);
    w->promote = (x->t_prom - x->t_cut) * 1e3;
    w->written = (x->t_w - x->t_cut) * 1e3;
    w->thawed = (x->t_heal - x->t_w) * 1e3;
    w->down = w->last_ok = w->moved = NAN;
    for (size_t k = 0; k < l->n; k++) {
        const wev *e = &l->v[k];
        if (e->got < x->t_cut)
            continue;
        if (e->kind == K_DOWN && isnan(w->down))
            w->down = (e->got - x->t_cut) * 1e3;
        if ((e->kind == K_OLD || e->kind == K_NEW) && e->got < x->t_heal)
            w->last_ok = (e->got - x->t_cut) * 1e3;
        if (e->kind == K_MOVED && e->got > x->t_heal && isnan(w->moved))
            w->moved = (e->got - x->t_heal) * 1e3;
    }
    /* The plain readers' write is the SET, the pages' the hook. */
    for (int i = 0; i < NREADERS; i++) {
        double written = i < RD_PAGE ? x->t_w : x->t_hook;
        w->role_passed += w_tally(&x->rd[i].log, written, x->partition ? written : x->t_heal, i, w);
    }
}

static void w_round(const wsetup *s, cut_fn cut, int round, PGconn *pg, wround *w)
{
    static wstate x;        /* big (the readers' logs' heads); one round at a time */
    reader *plain = &x.rd[RD_GET];
    redisContext *poll;
    double end;

    memset(&x, 0, sizeof x);
    x.s = s;
    x.round = round;
    x.partition = strcmp(s->what, "partition") == 0;
    /* Not under the handles' prefix: a fence flush would drop it. */
    snprintf(x.mark, sizeof x.mark, "window-%s:{%lld}", s->prefix, (long long)s->uid);
    snprintf(x.oldv, sizeof x.oldv, "old-%d", round);
    snprintf(x.newv, sizeof x.newv, "new-%d", round);
    w_start(&x);
    sleep_s(0.3);

    poll = w_connect(&s->r, 1);
    x.t_cut = now_s();
    cut(s, 1);
    end = x.t_cut + 30;
    while (!is_master_reply(redisCommand(poll, "ROLE"))) {
        if (now_s() > end || poll->err)
            die("window (%s): %s:%d not promoted 30 s after the cut", s->what, s->r.host,
                s->r.port);
        sleep_s(0.002);
    }
    x.t_prom = last_promotion = now_s();
    redisFree(poll);
    w_write(&x, pg);
    /* A zombie is thawed at once, or (every other round) 5 s later; a
     * partition lasts until P refuses reads and 2 s past the write: the
     * readers watch P all that time. */
    if (!x.partition)
        sleep_s(round % 2 ? W_LATE : 0);
    while (x.partition && (!atomic_load(&plain->saw_down) || now_s() < x.t_hook + 2) &&
           now_s() < end)
        sleep_s(0.05);
    x.t_heal = now_s();
    cut(s, 0);
    atomic_store(&plain->moved_after, (long long)now_ns());
    end = x.t_heal + 30;
    while (!atomic_load(&plain->saw_moved)) {     /* P redirects: it knows */
        if (now_s() > end)
            die("window (%s): P still answers 30 s after the heal", s->what);
        sleep_s(0.01);
    }
    sleep_s(0.3);
    atomic_store(&x.stop, 1);
    for (int i = 0; i < NREADERS; i++)
        pthread_join(x.rd[i].t, NULL);
    w_figures(&x, w);
    for (int i = 0; i < NREADERS; i++) {
        if (x.rd[i].f)
            feed_close(x.rd[i].f);
        free(x.rd[i].log.v);
    }
}

/* The feed's rows in SQL: three old items, the rounds' new ones dropped. */
static void w_feed_rows(PGconn *pg, int64_t uid)
{
    char sql[256];

    snprintf(sql, sizeof sql, "DELETE FROM feed_entry WHERE uid = %lld", (long long)uid);
    w_sql(pg, sql);
    snprintf(sql, sizeof sql, "INSERT INTO feed_entry (uid, score, id) VALUES "
             "(%lld, 1000, 1), (%lld, 2000, 2), (%lld, 3000, 3)",
             (long long)uid, (long long)uid, (long long)uid);
    w_sql(pg, sql);
}

static void w_rounds(wsetup *s, cut_fn cut, int rounds, wround *out)
{
    PGconn *pg = PQconnectdb(s->pg);

    if (PQstatus(pg) != CONNECTION_OK)
        die("window (%s): PostgreSQL: %s", s->what, PQerrorMessage(pg));
    w_feed_rows(pg, s->uid);
    for (int k = 0; k < rounds; k++) {
        w_restore(s);
        note("window (%s): round %d of %d", s->what, k + 1, rounds);
        w_round(s, cut, k, pg, &out[k]);
    }
    w_restore(s);
    w_feed_rows(pg, s->uid);
    PQfinish(pg);
}

/* ---- zombie: SIGSTOP / SIGCONT of P on the cluster of bench/run.sh ---- */

static pid_t frozen;     /* a frozen node, thawed at exit whatever happens */

static void thaw_at_exit(void)
{
    if (frozen > 0)
        kill(frozen, SIGCONT);
}

static void zombie_cut(const wsetup *s, int on)
{
    static int registered;

    if (!registered && atexit(thaw_at_exit) == 0)
        registered = 1;
    frozen = on ? s->p_pid : 0;
    if (kill(s->p_pid, on ? SIGSTOP : SIGCONT) != 0)
        die("window: kill %d: %s", (int)s->p_pid, strerror(errno));
}

static pid_t pid_of_port(int port)
{
    char path[1024];
    FILE *fp;
    long pid = 0;

    snprintf(path, sizeof path, "%s/cluster/%d/redis.pid", env_or("FEED_SERVERS_DIR", "."), port);
    if ((fp = fopen(path, "r")) == NULL || fscanf(fp, "%ld", &pid) != 1)
        die("window: no pid in %s", path);
    fclose(fp);
    return (pid_t)pid;
}

static int zombie_rounds(wround *out, int rounds)
{
    wsetup s;
    waddr seed;

    memset(&s, 0, sizeof s);
    s.what = "zombie";
    s.prefix = "zw";
    s.uid = W_UID0;
    snprintf(s.seeds, sizeof s.seeds, "%s", env_or("FEED_REDIS_CLUSTER", ""));
    snprintf(s.pg, sizeof s.pg, "%s", env_or("FEED_PG_CONNINFO", ""));
    if (sscanf(s.seeds, "%63[^:]:%d", seed.host, &seed.port) != 2)
        die("window: FEED_REDIS_CLUSTER is not host:port,...");
    w_nodes(&s, &seed);
    w_wait_ok(&s, "before the rounds");
    w_owner(&seed, feed__uid_slot(s.uid), &s.p, &s.r);
    s.p_pid = pid_of_port(s.p.port);
    w_rounds(&s, zombie_cut, rounds, out);
    return rounds;
}

/* ---- partition: a private cluster in a network namespace ---- */

static pid_t net_pids[NET_NODES];

static void net_kill(void)
{
    for (int i = 0; i < NET_NODES; i++)
        if (net_pids[i] > 0) {
            kill(net_pids[i], SIGCONT);
            kill(net_pids[i], SIGKILL);
            waitpid(net_pids[i], NULL, 0);
            net_pids[i] = 0;
        }
}

/* A network namespace of our own: as root, or as root of a new user
 * namespace. 0, or -1 with the reason in why. */
static int net_enter(char *why, size_t cap)
{
    uid_t uid = getuid();
    gid_t gid = getgid();
    char map[64];
    int fd;

    if (unshare(CLONE_NEWNET) == 0)
        return 0;
    if (unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) {
        snprintf(why, cap, "no network namespace (unshare: %s)", strerror(errno));
        return -1;
    }
    static const char *const files[3] = { "/proc/self/setgroups", "/proc/self/uid_map",
                                          "/proc/self/gid_map" };
    for (int i = 0; i < 3; i++) {
        if (i == 0)
            snprintf(map, sizeof map, "deny");
        else
            snprintf(map, sizeof map, "0 %u 1", i == 1 ? (unsigned)uid : (unsigned)gid);
        if ((fd = open(files[i], O_WRONLY)) < 0 || write(fd, map, strlen(map)) < 0) {
            snprintf(why, cap, "user namespace: %s: %s", files[i], strerror(errno));
            if (fd >= 0)
                close(fd);
            return -1;
        }
        close(fd);
    }
    return 0;
}

static int sh(const char *cmd)
{
    int rc = system(cmd);

    return rc == 0 ? 0 : -1;
}

static void net_addr(int i, waddr *a)
{
    snprintf(a->host, sizeof a->host, "10.77.0.%d", NET_FIRST + i);
    a->port = NET_PORT;
}

/* Six nodes, each on its own loopback address, the cluster made by
 * redis-cli as tools/servers.sh makes it, with the same settings. */
static void net_start(const char *dir)
{
    char path[1200], cmd[2048];
    FILE *fp;

    for (int i = 0; i < NET_NODES; i++) {
        waddr a;
        pid_t pid;
        net_addr(i, &a);
        snprintf(path, sizeof path, "%s/%d", dir, i);
        if (mkdir(path, 0700) != 0 && errno != EEXIST)
            die("window: mkdir %s: %s", path, strerror(errno));
        snprintf(path, sizeof path, "%s/%d/redis.conf", dir, i);
        if ((fp = fopen(path, "w")) == NULL)
            die("window: %s: %s", path, strerror(errno));
        fprintf(fp, "bind %s\nbind-source-addr %s\nport %d\nprotected-mode no\n"
                    "daemonize no\nlogfile %s/%d/redis.log\ndir %s/%d\nsave \"\"\n"
                    "appendonly no\ncluster-enabled yes\ncluster-config-file nodes.conf\n"
                    "cluster-announce-ip %s\ncluster-node-timeout 2000\n"
                    "cluster-replica-validity-factor 0\ncluster-require-full-coverage no\n"
                    "repl-diskless-sync-delay 0\n",
                a.host, a.host, a.port, dir, i, dir, i, a.host);
        fclose(fp);
        if ((pid = fork()) < 0)
            die("window: fork: %s", strerror(errno));
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            execlp("redis-server", "redis-server", path, (char *)NULL);
            _exit(127);
        }
        net_pids[i] = pid;
    }
    for (int i = 0; i < NET_NODES; i++) {
        waddr a;
        double end = now_s() + 10;
        net_addr(i, &a);
        for (;;) {
            redisReply *r = w_try(&a, "PING");
            int up = r && r->type == REDIS_REPLY_STATUS;
            freeReplyObject(r);
            if (up)
                break;
            if (now_s() > end)
                die("window: node %s:%d did not answer PING in 10 s", a.host, a.port);
            sleep_s(0.05);
        }
    }
    snprintf(cmd, sizeof cmd, "redis-cli --cluster create");
    for (int i = 0; i < NET_NODES; i++)
        snprintf(cmd + strlen(cmd), sizeof cmd - strlen(cmd), " 10.77.0.%d:%d", NET_FIRST + i,
                 NET_PORT);
    snprintf(cmd + strlen(cmd), sizeof cmd - strlen(cmd),
             " --cluster-replicas 1 --cluster-yes >%s/create.log 2>&1", dir);
    if (sh(cmd) != 0)
        die("window: redis-cli --cluster create failed (%s/create.log)", dir);
}

/* The namespace's network: lo up with the six nodes' addresses, and a
 * bridge with no port ("wcut") that every node address is routed to in
 * table 100. The local table's rule moves behind the ones net_cut adds, so
 * that a rule "from A to B lookup 100" sends A's packets to B into the
 * bridge, where they vanish: no error, no reset, a connect() that never
 * completes, as in a real partition. (A blackhole or unreachable route
 * would fail the connect() at once, and Redis then connects again without
 * its source address, around the rule.) */
static int net_routes(void)
{
    char cmd[2048];
    size_t len = (size_t)snprintf(cmd, sizeof cmd, "ip -batch - <<'EOF'\nlink set lo up\n"
                                  "link add wcut type bridge\nlink set wcut up\n");

    for (int i = 0; i < NET_NODES && len < sizeof cmd; i++)
        len += (size_t)snprintf(cmd + len, sizeof cmd - len,
                                "addr add 10.77.0.%d/32 dev lo\n"
                                "route add 10.77.0.%d/32 dev wcut table 100\n",
                                NET_FIRST + i, NET_FIRST + i);
    if (len < sizeof cmd)
        len += (size_t)snprintf(cmd + len, sizeof cmd - len,
                                "rule add pref 100 lookup local\nrule del pref 0\nEOF\n");
    return len < sizeof cmd ? sh(cmd) : -1;
}

/* Cut (on) or heal: P's packets to every other node, and theirs to P, go
 * into the bridge; clients reach every node (their sockets are not bound,
 * and a connection to a node takes that node's own address as source). */
static void net_cut(const wsetup *s, int on)
{
    char cmd[4096];
    size_t len = (size_t)snprintf(cmd, sizeof cmd, "ip -batch - <<'EOF'\n");
    int pref = 10;

    for (int i = 0; i < s->nall && len < sizeof cmd; i++) {
        if (strcmp(s->all[i].host, s->p.host) == 0)
            continue;
        if (on)
            len += (size_t)snprintf(cmd + len, sizeof cmd - len,
                                    "rule add pref %d from %s to %s lookup 100\n"
                                    "rule add pref %d from %s to %s lookup 100\n",
                                    pref, s->p.host, s->all[i].host, pref + 1, s->all[i].host,
                                    s->p.host);
        else
            len += (size_t)snprintf(cmd + len, sizeof cmd - len,
                                    "rule del pref %d\nrule del pref %d\n", pref, pref + 1);
        pref += 2;
    }
    if (len < sizeof cmd)
        snprintf(cmd + len, sizeof cmd - len, "EOF\n");
    if (len >= sizeof cmd || sh(cmd) != 0)
        die("window: ip rule %s failed", on ? "add" : "del");
}

/* The child: enter the namespace, run the rounds, write them to fd. */
static void net_child(int fd, int rounds)
{
    struct { int n; char why[200]; wround r[W_ROUNDS]; } msg;
    char dir[1024];
    wsetup s;
    const char *base = env_or("FEED_SERVERS_DIR", "");

    memset(&msg, 0, sizeof msg);
    if (net_enter(msg.why, sizeof msg.why) != 0 || net_routes() != 0) {
        if (!msg.why[0])
            snprintf(msg.why, sizeof msg.why, "ip: cannot set up the namespace's network "
                     "(a bridge, addresses, rules)");
        msg.n = -1;
        if (write(fd, &msg, sizeof msg) != (ssize_t)sizeof msg)
            _exit(1);
        _exit(0);
    }
    atexit(net_kill);
    snprintf(dir, sizeof dir, "%s/window-net.XXXXXX", base);
    if (!mkdtemp(dir))
        die("window: mkdtemp %s: %s", dir, strerror(errno));
    net_start(dir);

    memset(&s, 0, sizeof s);
    s.what = "partition";
    s.prefix = "zp";
    s.uid = W_UID0 + 1;
    for (int i = 0; i < NET_NODES; i++) {
        net_addr(i, &s.all[i]);
        snprintf(s.seeds + strlen(s.seeds), sizeof s.seeds - strlen(s.seeds), "%s%s:%d",
                 i ? "," : "", s.all[i].host, s.all[i].port);
    }
    s.nall = NET_NODES;
    /* PostgreSQL listens on 127.0.0.1 of the first namespace: its Unix
     * socket (a file, seen from every namespace) instead. */
    snprintf(s.pg, sizeof s.pg, "%s host=%s/sock", env_or("FEED_PG_CONNINFO", ""), base);
    w_wait_ok(&s, "after it was created");
    w_owner(&s.all[0], feed__uid_slot(s.uid), &s.p, &s.r);
    w_rounds(&s, net_cut, rounds, msg.r);
    msg.n = rounds;
    if (write(fd, &msg, sizeof msg) != (ssize_t)sizeof msg)
        die("window: writing the results: %s", strerror(errno));
    exit(0);
}

/* ---- the report ---- */

static const char *ms(double v)
{
    static _Thread_local char bufs[8][32];
    static _Thread_local unsigned next;
    char *b = bufs[next++ % 8];

    if (isnan(v))
        return "-";
    return fmt_num(b, sizeof bufs[0], v);
}

/* "3 (12 ms)": stale reads and when the last was answered, or "0". */
static const char *stale_cell(const wround *w, int i)
{
    static _Thread_local char bufs[NREADERS][48];
    char *b = bufs[i];

    if (w->stale[i] == 0)
        return "0";
    snprintf(b, sizeof bufs[0], "%ld (%s ms)", w->stale[i], ms(w->window[i]));
    return b;
}

static const char *const reader_names[NREADERS] = {
    "GET on P", "GET + ROLE on P", "feed_page, redis_timeout_ms 250 (default)",
    "feed_page, redis_timeout_ms 30 s",
};

/* Per reader: stale reads over all rounds, the median and max over rounds
 * of the last one's time, and old answers to overlapping reads. Returns
 * the total of reader i in totals[i]. */
static void stale_summary(FILE *md, const wround *w, int n, const char *after, long totals[])
{
    long passed = 0;

    fprintf(md, "| reader | stale reads, all rounds | the last, ms after the %s: median of rounds "
                "| max | old answers to reads sent before the write |\n"
                "| --- | ---: | ---: | ---: | ---: |\n", after);
    for (int i = 0; i < NREADERS; i++) {
        samples last = { 0 };
        long overlap = 0;
        totals[i] = 0;
        for (int k = 0; k < n; k++) {
            sm_add(&last, w[k].window[i]);
            totals[i] += w[k].stale[i];
            overlap += w[k].overlap[i];
        }
        fprintf(md, "| %s | %ld | %s | %s | %ld |\n", reader_names[i], totals[i],
                ms(sm_median(&last)), ms(sm_max(&last)), overlap);
        sm_free(&last);
    }
    for (int k = 0; k < n; k++)
        passed += w[k].role_passed;
    fprintf(md, "\nGET + ROLE: %ld stale reads, %ld of them with ROLE listing a replica attached "
                "(a check requiring one, as `redis_wait_replicas = 1` does under Sentinel, would "
                "have let those through).\n\n", totals[RD_ROLE], passed);
}

static void round_cells(FILE *md, const wround *w)
{
    for (int i = 0; i < NREADERS; i++)
        fprintf(md, " %s |", stale_cell(w, i));
    fprintf(md, "\n");
}

static void round_header(FILE *md, const char *cols, int ncols)
{
    fprintf(md, "| round | %s |", cols);
    for (int i = 0; i < NREADERS; i++)
        fprintf(md, " %s |", reader_names[i]);
    fprintf(md, "\n| ---: |");
    for (int i = 0; i < ncols + NREADERS; i++)
        fprintf(md, " ---: |");
    fprintf(md, "\n");
}

static void report_zombie(FILE *md, const wround *w, int n)
{
    samples moved = { 0 };
    long total[NREADERS];

    fprintf(md, "### A frozen primary, thawed after its replica took over\n\n"
                "P is stopped (SIGSTOP) until R says `master` and has acknowledged the write,\n"
                "then continued (SIGCONT) at once or, every other round, %.0f s later. Times in\n"
                "ms; a cell \"n (w ms)\" is n stale reads, the last one answered w ms after the\n"
                "thaw.\n\n", W_LATE);
    round_header(md, "R promoted, after the freeze | the thaw, after the write | "
                     "P's first MOVED, after the thaw", 3);
    for (int k = 0; k < n; k++) {
        fprintf(md, "| %d | %s | %s | %s |", k + 1, ms(w[k].promote), ms(w[k].thawed),
                ms(w[k].moved));
        round_cells(md, &w[k]);
        sm_add(&moved, w[k].moved);
    }
    fprintf(md, "\nP's first MOVED came %s ms after the thaw (median; max %s ms).\n\n",
            ms(sm_median(&moved)), ms(sm_max(&moved)));
    stale_summary(md, w, n, "thaw", total);
    out_summary("window_zombie", "cluster: a frozen primary thawed after its replica's promotion: "
                "its first MOVED after the thaw (median, max); stale reads (GET / feed_page "
                "250 ms / 30 s)", "report", "report", "%s ms, %s ms; %ld / %ld / %ld in %d rounds",
                ms(sm_median(&moved)), ms(sm_max(&moved)), total[RD_GET], total[RD_PAGE],
                total[RD_PAGE_LONG], n);
    sm_free(&moved);
}

static void report_partition(FILE *md, const wround *w, int n)
{
    samples margin = { 0 };
    long total[NREADERS];
    int before = 0;

    fprintf(md, "### A primary cut off from the majority, clients still reaching it\n\n"
                "A private cluster of 6 nodes (10.77.0.11-16, same settings) in a network\n"
                "namespace; P cut off from the other five by `ip rule`s, both ways, that send\n"
                "their packets into a bridge with no port (silently lost, as in a partition),\n"
                "until it refuses reads and at least 2 s past the write; the readers reach\n"
                "every node. Times in ms after the cut; \"margin\" = R's promotion minus P's\n"
                "first refusal (positive: P stopped first); a cell \"n (w ms)\" is n stale\n"
                "reads, the last one answered w ms after the write.\n\n");
    round_header(md, "P refuses (CLUSTERDOWN) | P's last answer with data | R promoted | margin | "
                     "P's first MOVED, after the heal", 5);
    for (int k = 0; k < n; k++) {
        double m = w[k].promote - w[k].down;
        sm_add(&margin, m);
        before += m > 0;
        fprintf(md, "| %d | %s | %s | %s | %s | %s |", k + 1, ms(w[k].down), ms(w[k].last_ok),
                ms(w[k].promote), ms(m), ms(w[k].moved));
        round_cells(md, &w[k]);
    }
    fprintf(md, "\nP refused before R was promoted in %d of %d rounds; margin median %s ms, "
                "least %s ms.\n\n", before, n, ms(sm_median(&margin)), ms(sm_min(&margin)));
    stale_summary(md, w, n, "write", total);
    out_summary("window_partition", "cluster: a primary cut off from the majority refuses reads "
                "before its replica's promotion by (median, least); stale reads (GET / "
                "feed_page 250 ms / 30 s)", "report", "report",
                "%s ms, %s ms (first in %d of %d rounds); %ld / %ld / %ld",
                ms(sm_median(&margin)), ms(sm_min(&margin)), before, n, total[RD_GET],
                total[RD_PAGE], total[RD_PAGE_LONG]);
    sm_free(&margin);
}

/* The partition rounds in a child process (its own network namespace):
 * n rounds into w, or -1 with the reason the namespace was refused. */
static int partition_rounds(wround *w, int rounds, char *why, size_t cap)
{
    struct { int n; char why[200]; wround r[W_ROUNDS]; } msg;
    int fds[2], status;
    size_t got = 0;
    pid_t pid;

    fflush(stdout);
    fflush(stderr);
    if (pipe(fds) != 0 || (pid = fork()) < 0)
        die("window: pipe/fork: %s", strerror(errno));
    if (pid == 0) {
        close(fds[0]);
        prctl(PR_SET_PDEATHSIG, SIGKILL);   /* and its nodes with it (net_start) */
        net_child(fds[1], rounds);
    }
    close(fds[1]);
    while (got < sizeof msg) {
        ssize_t k = read(fds[0], (char *)&msg + got, sizeof msg - got);
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    close(fds[0]);
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
        got != sizeof msg)
        die("window: the partition run failed (see above)");
    if (msg.n < 0) {
        snprintf(why, cap, "%s", msg.why);
        return -1;
    }
    memcpy(w, msg.r, (size_t)msg.n * sizeof *w);
    return msg.n;
}

void section_window(void)
{
    FILE *md = out_section("window");
    int rounds = q_rounds(W_ROUNDS), n;
    wround w[W_ROUNDS];
    char why[200];

    fprintf(md, "## Stale reads from a replaced Redis Cluster primary\n\n"
                "A read is stale when it was sent after a write was acknowledged by the new\n"
                "primary R and answered by the old one, P, with the data from before. %d rounds\n"
                "per fault; cluster-node-timeout 2000 ms; readers on threads of their own, from\n"
                "before the fault until P answers `MOVED`: a plain GET in a tight loop on a\n"
                "connection to P (of a key of the feed's slot, rewritten on R), and `feed_page`\n"
                "on two handles (the write: a row in SQL and `feed_on_insert` through R).\n\n",
            rounds);
    if (!*env_or("FEED_REDIS_CLUSTER", "") || !*env_or("FEED_SERVERS_DIR", "")) {
        fprintf(md, "Skipped: FEED_REDIS_CLUSTER or FEED_SERVERS_DIR is not set.\n\n");
        fclose(md);
        return;
    }
    n = zombie_rounds(w, rounds);
    report_zombie(md, w, n);
    fflush(md);
    if ((n = partition_rounds(w, rounds, why, sizeof why)) < 0) {
        fprintf(md, "### A primary cut off from the majority\n\nSkipped: %s.\n\n", why);
        out_summary("window_partition", "cluster: a primary cut off from the majority", "report",
                    "report", "skipped: %s", why);
    } else {
        report_partition(md, w, n);
    }
    fclose(md);
}
