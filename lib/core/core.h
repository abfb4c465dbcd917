/* core.h -- the decisions of the library, without any I/O.
 *
 * Every public call is a request: a small machine that says what it needs
 * next (a Redis batch, a SQL statement, a wake-up) and consumes the answer.
 * A driver (lib/drive/sync.c: blocking, lib/drive/async.c: an event loop) does the
 * I/O and hands the answers back, so both APIs make the same decisions
 * because they run the same code. Nothing in core/ touches a socket, sleeps
 * or reads the clock: the time comes in as `now`.
 *
 *   config.c    the configuration, the handle's shared state, statistics
 *   settings.c  feed_config's fields by name: defaults, limits, text
 *   topo.c      where Redis commands go: the nodes, the slot map
 *   setup.c     a node's connection set-up: Sentinel, AUTH, ROLE, scripts,
 *               the restart fence
 *   exchange.c  one batch of commands to Redis: routing, MOVED/ASK/TRYAGAIN,
 *               NOSCRIPT, a peer that closed, READONLY, WAIT and ROLE checks
 *   repair.c    feeds whose write was lost, dropped before anything else
 *   page.c      feed_page, feed_page_ranked       newer.c  feed_page_newer
 *   merge.c     read-time merge, the decisions: what a source's reply proves,
 *               the merged page cut from the sources' answers
 *   merged.c    feed_page_merged: the request over many sources
 *   rebuild.c   a rebuild under a lease (a miss, a reload, merged sources);
 *               the TTLs the handle knows
 *   hooks.c     the write path: insert, delete, fan-out, reload, invalidate
 *               (of either feed family: readers' feeds, authors' posts)
 *   bulk.c      feed_invalidate_many, feed_invalidate_all
 *   health.c    feed_health
 *   sql.c       which PostgreSQL server reads what, the replica's lag proof
 *   pgstmt.c    one statement on one PostgreSQL server: its text, the set-up
 *               of a connection, the rows checked, retries, the error code
 *   policy.c    a source's name; when a lost store is tried again
 *
 * A request's state lives in the request, never on the handle, so an
 * event loop can carry any number of them at once. What the handle holds is
 * shared by all of them: the config, the nodes and the slot map, the rank
 * hints (guesses, always proven), the statistics. Not installed.
 */
#ifndef FEED_CORE_H
#define FEED_CORE_H

#include "base/base.h"

/* ------------------------------------------------------------------------
 * The handle's shared state (config.c)
 * ------------------------------------------------------------------------ */

/* The Lua scripts: lua/<name>.lua becomes feed_lua_<name> at build time
 * (tools/embed.c writes build/lib/scripts.c). */
enum feed_script {
    FEED_SCRIPT_PAGE,           /* lua/page.lua    the read path's fallback */
    FEED_SCRIPT_REBUILD,        /* lua/rebuild.lua install rows under a lease */
    FEED_SCRIPT_INSERT,         /* lua/insert.lua  insert or rescore hook */
    FEED_SCRIPT_DELETE,         /* lua/delete.lua  delete hook */
    FEED_SCRIPT_NEWER,          /* lua/newer.lua   pull-to-refresh */
    FEED_SCRIPT_INVALIDATE,     /* lua/invalidate.lua drop a copy and its lease */
    FEED_SCRIPT_LEASE,          /* lua/lease.lua   take a lease outright (reload) */
    FEED_SCRIPT_COUNT
};
extern const char feed_lua_page[], feed_lua_rebuild[], feed_lua_insert[],
                  feed_lua_delete[], feed_lua_newer[], feed_lua_invalidate[],
                  feed_lua_lease[];
const char *feed__script_source(enum feed_script s);
const char *feed__script_name(enum feed_script s);

#define FEED_HINTS 64               /* page.c: rank hints kept per handle (2-way sets) */
#define FEED_TTL_SLOTS 256          /* rebuild.c: copies whose TTL the handle knows */

/* The restart fence of one connection (setup.c). LAPSED (cluster):
 * trusted, but not heard from as a primary for redis_timeout_ms (topo.c,
 * feed__fence_lapse, says why): its identity is read again before it
 * serves, and the same identity keeps the slots' trust. */
enum { FEED_FENCE_UNKNOWN, FEED_FENCE_TRUSTED, FEED_FENCE_LAPSED };
/* The least time between two steps of one handle's sweep of old copies on a
 * node (setup.c): a SCAN of 1000 keys and their UNLINK, once a tenth of a
 * second, about 10,000 keys a second for each handle sweeping. */
#define FEED_SWEEP_GAP_MS 100
typedef struct feed_fence {
    int  state;                 /* FEED_FENCE_* */
    char gen[FEED_KEY_GEN_LEN + 1]; /* the generation of the trusted data set's
                                   copies (base.h): written into every key sent
                                   here; FEED_KEY_GEN_NONE without the fence */
    int  sweeping;              /* copies of older generations may be left: dropped
                                   in the background, a step per FEED_SWEEP_GAP_MS */
    int64_t sweep_at;           /* the next step of the sweep, not before */
    char cursor[24];            /* SCAN cursor of the sweep */
    char run_id[41];            /* of the server connected to */
    char replid[41];            /* its master_replid (INFO replication) */
    char trusted_run_id[41];    /* the data set last trusted here: "" = none yet */
    char trusted_replid[41];
    uint32_t epoch;             /* cluster: this trust's number (feed_topo.epochs),
                                   new each time the node is trusted again */
    int64_t  look_ms;           /* when the identity above was last asked (INFO) */
    int64_t  heard_ms;          /* cluster: when the last trip was sent that the node
                                   answered as a primary, under this trust */
} feed_fence;

/* A Redis node: the one Redis, the primary the Sentinels name, or one node
 * of a cluster. Allocated one by one, so a pointer stays valid for the
 * handle's life (nodes are never removed). */
enum { FEED_NODE_DOWN, FEED_NODE_UP, FEED_NODE_READY };
typedef struct feed_node {
    feed_addr  addr;
    int        state;           /* DOWN: no connection; UP: connected, not set
                                   up; READY: AUTH, ROLE, scripts done */
    int        fresh;           /* no reply read since connect: a close is not retried */
    unsigned   reload;          /* scripts (1 << feed_script) a NOSCRIPT said are lost */
    int64_t    attempt_ms;      /* last connect attempt */
    char       why[256];        /* why the node last went DOWN ("" none known):
                                   told while a reconnect is held off */
    int        refused;         /* it went DOWN because it answered and said no
                                   (AUTH, an ACL): a configuration error */
    int        failing;         /* its failure was told (log_fn): its recovery will be */
    uint64_t   fenced_by;       /* the batch that last took a step of its fence */
    feed_fence fence;
    void      *io;              /* the driver's connection; NULL while DOWN */
} feed_node;

typedef struct feed_topo {
    int         cluster;        /* cfg.redis_cluster set */
    feed_node **nodes;          /* single Redis and Sentinel: nodes[0] */
    size_t      nnodes, cap;
    feed_addr  *seeds;          /* cluster: the configured seeds */
    size_t      nseeds;
    uint16_t   *owner;          /* cluster: FEED_SLOTS entries, node index + 1; 0 = unknown */
    int         stale;          /* refresh the slot map before routing */
    /* cluster, with the restart fence: a slot's copies are read on its
     * owner only while slot_epoch[slot] is the owner's fence.epoch (the
     * slot's own fence key was found naming the owner under that trust,
     * setup.c); allocated with owner. epochs numbers the trusts. slot_tag:
     * the n of each slot's fence key "<prefix>:fence:s{n}", made at its
     * first use (NULL before). */
    uint32_t   *slot_epoch;
    uint32_t    epochs;
    uint32_t   *slot_tag;
    int64_t     map_ms;         /* last refresh attempt */
    uint64_t    store[FEED_FAM_COUNT];   /* which copies these are, per family, for
                                            the repair list */
} feed_topo;

/* 1 when built against hiredis_ssl (the Makefile's HIREDIS=DIR): lib/io/tls.c
 * then speaks TLS to Redis. */
#ifndef FEED_HAVE_TLS
#define FEED_HAVE_TLS 0
#endif

/* What the requests of one handle share. */
typedef struct feed_core {
    feed_config cfg;            /* strings point into owned copies below */
    char       *owned[32];      /* at least the string fields of feed_config */
    struct feed_tls *tls;       /* lib/io/tls.c: the TLS context, NULL: plaintext;
                                   made and freed by the driver that opens */
    char       *key_base[FEED_FAM_COUNT];   /* "<prefix>:3:<tag>:<gen>:" (base.h), gen
                                               FEED_KEY_GEN_NONE (feed__keys_stamp) */
    size_t      key_gen_at;     /* bytes of a key base before its generation */
    size_t      key_cap;        /* bytes of a key name, NUL included (both bases
                                   are as long) */
    char        index_suffix[sizeof ":authors:" + FEED_KEY_TAG_LEN];  /* filter.c */
    char        ttl_ms[24];     /* cfg.ttl_seconds * 1000 as text, "0" = no TTL */
    char        empty_ttl_ms[24];   /* the TTL of a feed known to be empty */
    char        lease_ms[24];
    char        grant_ms[24];   /* how long a granted rebuild may install (page.lua) */
    char        sha[FEED_SCRIPT_COUNT][41];
    uint64_t    token_seed, token_seq, jitter_seq;
    int64_t     shed_ms;        /* when a call was last shed (FEED_EBUSY): retry.c */

    /* page.c: where recent pages ended. hints[h] says that in uid's zset the
     * first entry after the cursor (score, id) sat at rank `rank` when last
     * read; a next page fetches by rank from there and its reply proves (or
     * disproves) that the rank still holds. Never trusted, only a guess. */
    struct feed_hint {
        int64_t  uid, score, id, rank;
        uint64_t used;          /* hint_clock when last put; 0 = empty */
    } hints[FEED_HINTS];
    uint64_t hint_clock;
    int      hint_slack;        /* ranks read below a hinted page */
    /* rebuild.c: the copy of (fam, owner) needs no TTL check before
     * fresh_until (plain and merged first pages alike). Direct-mapped. */
    struct feed_ttl_seen {
        int64_t owner, fresh_until;
        int     fam, used;
        int     empty;          /* the copy then held only the end marker */
    } ttl_seen[FEED_TTL_SLOTS];

    feed_topo  topo;
    feed_stats stats;
    uint64_t   xchg_seq;        /* exchanges begun: each has its own number */

    /* sql.c: the replica's lag proof (pg_replica_max_lag_ms). */
    int64_t replica_fresh_until;
    int64_t replica_probe_ms;   /* when the last probe was asked of the primary; 0: none */
    int64_t replica_tried_ms;
    char    replica_probe_lsn[32];

    /* pgstmt.c: what the catalog check found of the feed table and of the
     * authors' (FEED_FAM_*), once per handle: whether a row may lack its
     * score or id (the statements then leave such rows out); and what it
     * warned of, which feed_open leaves in the handle's message. */
    struct feed_table_facts { int checked, nullable; } tables[FEED_FAM_COUNT];
    char warnings[FEED_ERRMSG];

    /* filter.c: the share of examined items filtered pages showed lately,
     * per mille: how far a chunk over-reads. A guess, never relied on. */
    uint32_t filter_kept_pm;

    /* merged.c: each author's share of its last merged page, a guess only
     * (the TTLs known are ttl_seen's); allocated by the first merged page. */
    struct feed_merge_hints *merge;

    /* Tests only: called between a rebuild's SQL read and its install (with
     * the owner rebuilt: a uid, or an author for a merged page's source),
     * and after feed_invalidate_all scanned a cluster node. */
    void (*test_before_install)(feed *handle, int64_t uid, void *arg);
    void (*test_after_node_scan)(feed *handle, int port, void *arg);
    void  *test_arg;
    feed  *handle;              /* the blocking handle, for the test hooks */
} feed_core;

/* topo.c */
int  feed__topo_init(feed_core *c);
int  feed__node_index(feed_topo *t, const feed_addr *addr);
int  feed__map_apply(feed_topo *t, int from, const redisReply *r);
int  feed__map_candidate(feed_topo *t, int *phase, size_t *i);
int  feed__map_owner(const feed_topo *t, unsigned slot);
int  feed__fence_slot(const feed_topo *t, int i, unsigned slot);
int  feed__slot_trusted(const feed_topo *t, const feed_node *n, unsigned slot);
void feed__fence_lapse(const feed_topo *t, feed_node *n, uint32_t trust_ms, int64_t now);
void feed__fence_heard(feed_node *n, int64_t sent_ms);
int64_t feed__slot_tag(feed_topo *t, unsigned slot);
int *feed__map_primaries(const feed_topo *t, size_t *n);
uint64_t feed__map_stamp(const feed_topo *t);

/* config.c. The config check: NULL when feed_open may use c, else why (a
 * static text, or why[0..len) filled). */
const char *feed__config_check(const feed_config *c, char *why, size_t len);
int  feed__core_init(feed_core *c, const feed_config *cfg);   /* FEED_OK or FEED_ENOMEM */
void feed__core_free(feed_core *c);
/* settings.c: the table of feed_config's fields (feed_config_init reads
 * its defaults). feed__config_fields_check is each field's own check
 * (NULL or why, written into why[0..len)); feed__config_set is
 * feed_config_set's, its message into err (FEED_ERRMSG bytes);
 * feed__config_string is field i when it is a string (else NULL). */
const char  *feed__config_fields_check(const feed_config *c, char *why, size_t len);
int          feed__config_set(feed_config *c, const char *name, const char *value, char *err);
const char **feed__config_string(feed_config *c, size_t i);
/* policy.c: the retry rule: a lost connection is tried again only retry_ms
 * after the last attempt, so that an outage cannot turn into a connect
 * storm. FEED_OK when an attempt is due; else the answer of a call held
 * off, in err, saying what the last attempt met (why, "" none): a store
 * that answered and refused (refused_rc, FEED_EREDIS or FEED_EPG: a
 * configuration error, in the store's words), or one that did not answer
 * (FEED_EUNAVAILABLE: not tried again yet, never "down" of a store that may
 * well be back). refused_rc 0: it did not refuse. */
int  feed__retry_due(const feed_core *c, int64_t last_attempt_ms, int64_t now,
                     const char *store, const char *why, int refused_rc, char *err);
/* The time left, in ms, until a connection whose last connect attempt was
 * at attempt_ms may be tried again (0: due now, or never tried); and the
 * longest such time over the Redis nodes that are down. */
uint32_t feed__retry_left(const feed_core *c, int64_t attempt_ms, int64_t now);
uint32_t feed__redis_retry_left(const feed_core *c, int64_t now);
/* The end of a read that PostgreSQL answered instead of Redis (counted in
 * redis_failed_pages when Redis had failed). */
int  feed__db_outcome(feed_core *c, char *err, int rc, int redis_failed, const char *redis_msg);
/* config.c: how long a granted rebuild keeps its right to install (the
 * lease's hash, lua/page.lua): past lease_ms, the whole deadline twice. */
int64_t feed__grant_ms(const feed_config *cfg);
/* config.c: write gen (FEED_KEY_GEN_LEN characters) into every argument of
 * a command that is a key of this handle's families (base.h says why the
 * generation is written last). The arguments are the request's own
 * buffers. */
void feed__keys_stamp(const feed_core *c, const char *gen, int argc, const char **argv,
                      const size_t *lens);
/* policy.c: the time to record as a failed attempt's, now moved back by up
 * to a fifth of retry_ms, so that the handles an outage struck
 * together do not all try again in the same millisecond (and send the
 * store's return, or PostgreSQL's, the whole load at once). */
int64_t feed__attempt_at(feed_core *c, int64_t now);
/* policy.c: a store's outage told once: its first failure since it last
 * worked (FEED_LOG_ERROR, why), then its return (FEED_LOG_INFO, "<store>
 * answers again"); *failing, the store's own flag, says which is due. */
void feed__store_failed(const feed_core *c, int *failing, const char *why);
void feed__store_back(const feed_core *c, int *failing, const char *store);
/* Tell the application's log_fn (config.c; nothing when none is set). */
void feed__log(const feed_core *c, feed_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A batch of rows from SQL, in (score DESC, id DESC) order. */
typedef struct feed_rows {
    feed_item *items;
    size_t     count;
} feed_rows;
void feed__rows_free(feed_rows *rows);

/* ------------------------------------------------------------------------
 * Trips (what the drivers carry out)
 * ------------------------------------------------------------------------ */

/* A trip: n commands written in order on one node's connection, then their
 * n replies read in order. The driver asks for each command
 * with cmd (k = 0 .. n-1, once each, in order; argv valid until the next
 * call) and hands each reply to reply (in order; the reply is freed after
 * the call). Then it sets io and calls the owner's end. */
enum { FEED_IO_OK, FEED_IO_CLOSED, FEED_IO_FAILED };
typedef struct feed_trip {
    int     node;
    size_t  n;
    void   *arg;
    int   (*cmd)(void *arg, size_t k, const char ***argv, const size_t **lens);
    void  (*reply)(void *arg, size_t k, const redisReply *r);
    /* Set by the driver. */
    int     io;                 /* FEED_IO_OK; CLOSED: the peer closed a connection
                                   (EOF, reset, broken pipe); FAILED: timeout, protocol
                                   error, no memory */
    size_t  got;                /* replies handed over */
    char    why[160];           /* what failed, for messages */
    uint64_t ra_seq;            /* lib/io/redis_async.c: its place on the connection */
} feed_trip;

/* The set-up machine (setup.c): a node made ready to serve, step by step.
 * Its want, what feed__setup_next asks of the driver: */
enum feed_swant {
    FEED_S_PROBE,       /* connect to s->probe (a Sentinel), run s->trip on it, close */
    FEED_S_CONNECT,     /* connect node s->index (s->node->addr) within redis_timeout_ms */
    FEED_S_TRIP,        /* run s->trip on the node's connection */
    FEED_S_DONE         /* s->rc: FEED_OK, the node may serve; else why in s->err */
};
/* With the fence (on a cluster, the slot's too: setup.c), or the
 * connection only. */
enum { FEED_SETUP_FULL, FEED_SETUP_HELLO };
enum {                  /* s->said, cleared before each step */
    FEED_SR_BAD   = 1,  /* a reply was not right (why in s->why) */
    FEED_SR_MATCH = 2,  /* the fence key names the run_id of the server answering */
    FEED_SR_MOVED = 4,  /* the fence key's slot is not served here (MOVED, ASK) */
    FEED_SR_NOMEM = 8,  /* no memory for the keys of a SCAN reply */
    FEED_SR_FULL  = 16, /* GETKEYSINSLOT returned as many keys as asked */
    FEED_SR_PRIMARY = 32    /* INFO replication says role:master */
};
/* A command over keys a reply listed: keys[0] its name (not copied), then
 * the keys (bulk.c). */
typedef struct feed_keys {
    char  **keys;
    size_t *lens, n;
} feed_keys;
int  feed__keys_keep(feed_keys *k, const char *verb, const redisReply *arr,
                     int (*keep)(const void *arg, const redisReply *key), const void *arg);
void feed__keys_free(feed_keys *k);
struct feed_scmd {
    int         argc;
    const char *argv[6];
    size_t      lens[6];
};
typedef struct feed_setup {
    feed_core *c;
    feed_node *node;
    int        index;           /* the node's index */
    int        kind;            /* FEED_SETUP_* */
    unsigned   slot;            /* the slot about to be served (the fence key's, on an
                                   ASK target that owns none yet) */
    int        step;
    int        rc;
    int64_t    deadline;        /* a slot fence's flush, per set-up */
    int64_t    sent_ms;         /* when the step's trip was sent */
    feed_addr  probe;           /* FEED_S_PROBE: the Sentinel to ask */
    size_t     sentinel;        /* the next Sentinel to ask */
    feed_addr  found;
    feed_trip  trip;
    struct feed_scmd cmds[FEED_SCRIPT_COUNT + 2];
    size_t     ncmds;
    int        script_of[FEED_SCRIPT_COUNT];   /* the scripts' step: command k loads this */
    unsigned   said;            /* FEED_SR_*: what the last trip's replies said */
    char       cursor[24];
    unsigned   count;           /* the slot's flush: keys asked per GETKEYSINSLOT */
    char       slot_words[2][12];   /* its slot and count, as text */
    feed_keys  keys;            /* a SCAN or GETKEYSINSLOT reply's, "UNLINK" first */
    char       key[300], pattern[600];
    char       mark[84];        /* a fence key's value: "<run_id>:<replid>" */
    char       why[256];        /* the last trip's refusal */
    char       last[512];       /* the last Sentinel's */
    char       err[FEED_ERRMSG];
} feed_setup;
void feed__setup_begin(feed_setup *s, feed_core *c, int node, int kind, unsigned slot,
                       int64_t now);
enum feed_swant feed__setup_next(feed_setup *s, int64_t now);
void feed__setup_end(feed_setup *s);
/* After FEED_S_CONNECT: ok, or why not. */
void feed__setup_connected(feed_setup *s, int ok, const char *why, int64_t now);
/* After FEED_S_PROBE and FEED_S_TRIP: s->trip.io and replies say how it went. */
void feed__setup_tripped(feed_setup *s, int64_t now);

/* ------------------------------------------------------------------------
 * Batches (exchange.c): what a request asks of Redis
 * ------------------------------------------------------------------------ */

enum {
    FEED_B_HOOK   = 1,  /* a write: WAIT applies (redis_wait_replicas) */
    FEED_B_EACH   = 2,  /* independent commands, each routed by its own first
                           key (fan-out, repairs); else all go, in order, in one
                           pipeline to the node of `slot` */
    FEED_B_REPAIR = 4,  /* the repairs themselves: no repairs before them */
    FEED_B_NODE   = 8,  /* to the nodes named by node_of, as they are: no
                           routing, no redirects, replies raw (SCAN, PING) */
    FEED_B_MAP    = 16, /* no commands: ask a node for the slot map now (a single
                           Redis: connect and set node 0 up, no fence) */
    FEED_B_FINISH = 32, /* ends work already done (a rebuild's install, a lease given
                           back): sent past the request's deadline too */
    FEED_B_VERBATIM = 64 /* its keys are named as Redis listed them (a SCAN's): sent
                           as they are, their generation not written over */
};
typedef struct feed_batch {
    size_t   n;
    int      flags;
    unsigned slot;
    void    *arg;
    /* Command i: its argc, *argv and *lens (valid until the next call). */
    int    (*build)(void *arg, size_t i, const char ***argv, const size_t **lens);
    /* The final reply to command i (error replies included; NULL: not
     * wanted, except for FEED_B_NODE). */
    void   (*reply)(void *arg, size_t i, const redisReply *r);
    /* FEED_B_NODE: the node of command i; and why command i got no reply
     * (NULL: not wanted). */
    int    (*node_of)(void *arg, size_t i);
    void   (*lost)(void *arg, size_t i, const char *why);
} feed_batch;

/* The exchange machine: one batch carried to its end, pass after pass. Its
 * want, what feed__xchg_next asks of the driver: */
enum feed_xwant {
    FEED_X_REPAIR,      /* run the repairs first (feed__repair_op), then call again */
    FEED_X_SETUP,       /* set node x->setup_node up (kind x->setup_kind), then
                           feed__xchg_setup_done */
    FEED_X_PASS,        /* run x->trips[0 .. x->ntrips) (write all, then read all),
                           then feed__xchg_pass_done */
    FEED_X_WAKE,        /* call again at x->wake_at */
    FEED_X_DONE         /* x->rc: FEED_OK, or the reason in the request's err */
};

/* Per command of a batch. */
typedef struct feed_xcmd {
    int      node;              /* node of the current pass, -1: not sent */
    int      ask;               /* ASKING at node ask - 1 next pass; 0: none */
    unsigned slot;
    unsigned char done;
    unsigned char fenced;       /* set-ups that checked its slot's fence in this batch */
} feed_xcmd;

/* Per trip: what its commands are. */
enum { FEED_XK_ASKING = -1, FEED_XK_WAIT = -2, FEED_XK_ROLE = -3, FEED_XK_SLOTS = -4 };
typedef struct feed_xtrip {
    feed_trip  trip;
    struct feed_xchg *x;
    int       *map;             /* command k: batch index, or FEED_XK_* */
    int        small[8];
    size_t     applied;         /* commands answered for good (WAIT) */
    int        was_fresh;       /* its connection had answered nothing before */
    int        map_small;       /* map is small */
} feed_xtrip;

/* The retry machine's state besides x->state. x->pass: what the replies of
 * this pass asked for (judged by feed__xchg_pass_done, cleared when the
 * next pass is routed). */
enum {
    FEED_XP_MOVED    = 1,   /* MOVED: the slot map was old; send again */
    FEED_XP_ASK      = 2,   /* ASK: ASKING and the command at the target, next pass */
    FEED_XP_TRYAGAIN = 4,   /* TRYAGAIN, CLUSTERDOWN, LOADING: back off, send again */
    FEED_XP_NOSCRIPT = 8,   /* a node lost scripts: set it up again, send again once */
    FEED_XP_DEMOTED  = 16,  /* READONLY: the primary was demoted; ask the Sentinels */
    FEED_XP_SHORT    = 32,  /* WAIT or ROLE: too few replicas; the batch fails */
    FEED_XP_FAILED   = 64,  /* a trip failed (why on the request); the batch fails */
    FEED_XP_UNSURE   = 128  /* a read sent on by ASK: the target's copies of a slot
                               being imported are not known right; the batch fails */
};
/* x->met: what the batch met, kept to its end. */
enum {
    FEED_XM_REFUSED  = 1,   /* FEED_B_EACH: an error reply (the first one's message kept) */
    FEED_XM_RELOADED = 2    /* sent again after a NOSCRIPT: a second one fails */
};
/* x->peer: a connection that had worked, closed by its peer (a restart), is
 * tried once more per batch on a fresh one. NONE: no such close yet; DUE:
 * the next pass goes on a fresh one; SPENT: it went, another close fails. */
enum feed_xpeer { FEED_XPEER_NONE, FEED_XPEER_DUE, FEED_XPEER_SPENT };
typedef struct feed_xchg {
    feed_core        *c;
    const feed_batch *b;
    char             *err;      /* the request's message */
    int               state;
    int               rc;
    int64_t           deadline;
    int               tries;        /* back-offs so far */
    int               redirects;    /* MOVED or ASK followed since the last back-off */
    unsigned          pass, met;    /* FEED_XP_*, FEED_XM_* */
    enum feed_xpeer   peer;
    feed_xcmd        *cmds;
    feed_xtrip       *trips;
    size_t            ntrips, trips_cap;
    uint64_t          id;
    int               setup_node, setup_kind;
    unsigned          setup_slot;
    uint64_t          repair_gen;       /* the repair list's generation when it asked
                                           for the repairs (feed__repair_gen) */
    int64_t           wake_at;
    int64_t           pass_ms;      /* when the pass in flight was sent */
    int               map_rc, map_fail_rc;
    int               map_phase;    /* slot map refresh: the candidates walked */
    size_t            map_i;
    int               map_node;     /* the node asked now (xchg_map_next) */
    /* Buffers, not cleared at the start (the fields above are). */
    char              why[200];
    feed_xcmd         small[4];
    feed_xtrip        one_trip;
    char              map_why[FEED_ERRMSG / 2];
    char              what[32];     /* the batch's first command, for messages */
    const char       *wait_argv[3];
    size_t            wait_lens[3];
    char              wait_n[24], wait_ms[24];
} feed_xchg;

/* Start an exchange of batch b for a request whose message buffer is err. */
void feed__xchg_begin(feed_xchg *x, feed_core *c, const feed_batch *b, char *err, int64_t now);
enum feed_xwant feed__xchg_next(feed_xchg *x, int64_t now);
void feed__xchg_setup_done(feed_xchg *x, int rc, const char *why);
void feed__xchg_pass_done(feed_xchg *x, int64_t now);
void feed__xchg_end(feed_xchg *x);      /* free what it holds; any state */
/* The repairs x waited for were another request's, taken before x asked
 * (feed__repair_op_gen below x->repair_gen): x asks for them again. */
void feed__xchg_repair_again(feed_xchg *x);

/* ------------------------------------------------------------------------
 * Repairs (repair.c)
 * ------------------------------------------------------------------------ */

/* A write for owner's feed of family fam could not reach Redis: remember,
 * process-wide, to drop that cached copy as soon as any handle on the same
 * Redis and key prefix reaches it. Returns 0 when the list
 * (FEED_REPAIR_MAX feeds) is full. */
#define FEED_REPAIR_MAX 65536
int  feed__repair_remember(const feed_core *c, int fam, int64_t owner);
/* The repair list's generation: it grows with every loss remembered. */
uint64_t feed__repair_gen(void);
int  feed__repairs_pending(void);
int  feed__repair_slot_pending(const feed_core *c, unsigned slot);
void feed__repair_forget(void);   /* tests only */
uint64_t feed__store_of(const feed_config *cfg, const char *key_base);

/* ------------------------------------------------------------------------
 * SQL (sql.c): what a request asks of PostgreSQL
 * ------------------------------------------------------------------------ */

enum feed_stmt {
    FEED_SQL_TOP,       /* WHERE owner = $1 ORDER BY score DESC, id DESC LIMIT $2 */
    FEED_SQL_AFTER,     /* ... AND (score, id) < ($2, $3) ... LIMIT $4 */
    FEED_SQL_BEFORE,    /* ... AND (score, id) > ($2, $3) ORDER BY score, id LIMIT $4 */
    FEED_SQL_MERGE,     /* with author_table only: the first $4 rows after ($2, $3) of
                           feed $1 (NULL: none) and of each author of the array $5,
                           tagged by source (see feed_sql) */
    FEED_SQL_FILTER,    /* with item_author_column only: of the first $4 rows after
                           ($2, $3) of feed $1, those whose author is not in the array
                           $5, then one row naming the last of the $4 and how many
                           there were (see feed_sql) */
    FEED_SQL_AUTHORS,   /* with item_author_column only: (id, author) of feed $1's
                           rows whose id is in the array $5 */
    FEED_SQL_STMTS,
    FEED_SQL_PROBE_PRIMARY = FEED_SQL_STMTS,   /* the primary's WAL insert position */
    FEED_SQL_PROBE_REPLICA                      /* has the replica replayed $1, $2? */
};
enum { FEED_PG_PRIMARY, FEED_PG_REPLICA };
typedef struct feed_sql {
    int       stmt;             /* FEED_SQL_* */
    int       server;           /* FEED_PG_* */
    int64_t   params[4];
    int       nparams;
    int64_t   uid;              /* for messages */
    feed_rows rows;             /* out: the rows */
    char      text[2][32];      /* probes: text parameters in, answers out */
    /* FEED_SQL_MERGE: params are uid, score, id, per (first page: INT64_MAX,
     * 0); with_feed says whether uid's feed is a source; $5 is authors[0 ..
     * nauthors). The rows come out by source, each in (score DESC, id DESC)
     * order: tagged[0] uid's feed's, tagged[1 + k] authors[k]'s (nauthors + 1
     * entries, empty when the statement fails). The array and the rows are
     * the request's; feed__sql_ask leaves these fields alone. */
    const int64_t *authors;
    size_t     nauthors;
    int        with_feed;
    feed_rows *tagged;
    /* FEED_SQL_FILTER and FEED_SQL_AUTHORS: $5 is authors[0 .. nauthors)
     * too (the authors hidden; the ids looked up), params[1..3] are unused
     * by FEED_SQL_AUTHORS. row_authors[i] is rows.items[i]'s author
     * (INT64_MIN: NULL), malloc'd, the request's to free; FEED_SQL_AUTHORS
     * gives (0, id) items. FEED_SQL_FILTER: scanned rows were read after
     * the cursor, the last of them `last` (scanned 0: none). */
    int64_t   *row_authors;
    int64_t    scanned;
    feed_item  last;
    int        refused;         /* out: it failed because the server answered and
                                   refused (pgstmt.c, feed_pgserver) */
} feed_sql;

/* A page past the cache (page.c, newer.c): which server reads it. The
 * replica when one is configured and proven fresh enough, else the
 * primary; a replica that failed is replaced by the primary. */
typedef struct feed_sqlpage {
    int     state;
    int     stmt;
    int64_t params[4];
    int     nparams;
    int64_t uid;
    int64_t probe_ms;           /* the previous probe's time */
    int64_t asked_ms;           /* this probe's time: when it was asked of the primary */
    char   *why;                /* the replica's failure, kept while the primary reads:
                                   FEED_ERRMSG bytes on the heap, made only then (most
                                   pages never need it); NULL none */
} feed_sqlpage;

/* One statement on one server (pgstmt.c): decided there, carried out by
 * lib/io/pg.c, which reports each outcome (feed_pgio) to feed__pgstmt_next
 * and does what it returns. The fields marked "to io" say how; before it,
 * drop: close the connection (cancel: first cancel what runs on it); then
 * wait for the outcome until deadline. No libpq state is read in core. */
enum feed_pwant {
    FEED_P_CONNECT,     /* connect to conninfo text, errors in verbose mode */
    FEED_P_PREPARE,     /* prepare text as name: nparams of types (NULL: none) */
    FEED_P_DESCRIBE,    /* describe the prepared statement name */
    FEED_P_QUERY,       /* run prepared name (NULL: text) with nparams values,
                           lengths, formats (NULL: text); results in the same format */
    FEED_P_DONE         /* rc; the rows in the feed_sql, or why in err */
};
/* How a step went: START the first call (conn_ok, had_conn); DONE connected,
 * or the server's result; BROKEN the connect or the connection failed
 * (needs_password after a connect); TIMEOUT the deadline passed; NOMEM no
 * memory to connect, or for ntuples rows' cells. */
enum { FEED_PIO_START, FEED_PIO_DONE, FEED_PIO_BROKEN, FEED_PIO_TIMEOUT, FEED_PIO_NOMEM };
enum { FEED_PGR_COMMAND, FEED_PGR_TUPLES, FEED_PGR_ERROR };   /* a result's status */
typedef struct feed_pgcell { const char *v; int len; } feed_pgcell;  /* v NULL: SQL NULL */
typedef struct feed_pgio {
    int how;                    /* FEED_PIO_* */
    int conn_ok, had_conn;      /* the connection is up (PQstatus); one exists */
    int needs_password, status; /* status: DONE's FEED_PGR_* */
    const char *message;        /* libpq's error text (NULL: none) */
    unsigned types[2];          /* DONE: the first two columns' type oids (0: none) */
    int ntuples, nfields;
    const feed_pgcell *cells;   /* DONE, FEED_PGR_TUPLES: ntuples x nfields, by row */
} feed_pgio;
/* The handle's texts (built on its first connect): the statements, then
 * the type checks (SELECT score, id FROM table WHERE false). */
enum { FEED_PG_TYPES = FEED_SQL_STMTS, FEED_PG_AUTHOR_TYPES, FEED_PG_TEXTS };
/* What the handle knows of one PostgreSQL server besides its connection
 * (lib/io/pg.c keeps that): when it was last tried (retry_ms counts from
 * there), why the last attempt failed, and whether the server answered and
 * said no (a password, a database, a missing table or column, a column of
 * the wrong type: a configuration error, reported as such to every call
 * held off until the next attempt) rather than not answering. */
typedef struct feed_pgserver {
    int64_t attempt_ms;
    int     refused;
    int     failing;            /* its failure was told (log_fn): its recovery will be */
    char    why[FEED_ERRMSG];   /* the last failure's message, "" none */
} feed_pgserver;
typedef struct feed_pgstmt {
    feed_core  *c;
    feed_sql   *q;
    char       *err, **texts;   /* the request's message; the handle's FEED_PG_TEXTS */
    feed_pgserver *server;      /* the server's state (the handle's) */
    const char *who;            /* "PostgreSQL" or "PostgreSQL replica" */
    int         state, step, was_up, retried, rc;
    int64_t     deadline;       /* pg_timeout_ms after begin: to io, as are the fields below */
    int         drop, cancel, nparams;
    const char *name, *text, *values[5];
    const unsigned *types;
    const int  *lengths, *formats;
    char        buf[4][8];      /* the int8 parameters, in network order */
    char       *array;          /* FEED_SQL_MERGE: the authors as an int8[] in text */
    char       *quoted;         /* the catalog check: the table's name as quoted */
} feed_pgstmt;
void feed__pgstmt_begin(feed_pgstmt *p, feed_core *c, feed_sql *q, char *err, char **texts,
                        feed_pgserver *server, int64_t now);
/* What to do next, having done the last (first: FEED_PIO_START). */
enum feed_pwant feed__pgstmt_next(feed_pgstmt *p, const feed_pgio *io, int64_t now);
void feed__pgstmt_end(feed_pgstmt *p);      /* free what it holds; any state */
/* 1 while the step asked is the catalog check of a table (a query of text
 * p->text with nparams text values, answered by one row of four text
 * cells: relkind, the columns that may be NULL (comma-separated, NULL for
 * none), whether a unique index holds (owner, id), whether a btree index
 * serves (owner, score, id): "t" or "f"), for the simulation. */
int  feed__pgstmt_checking(const feed_pgstmt *p);

/* ------------------------------------------------------------------------
 * Requests
 * ------------------------------------------------------------------------ */

/* The request machine's want: what op->step asks of the driver. */
enum feed_want { FEED_W_REDIS, FEED_W_SQL, FEED_W_WAKE, FEED_W_DONE };
typedef struct feed_op feed_op;
struct feed_op {
    feed_core  *c;
    char       *err;            /* this request's message, FEED_ERRMSG bytes */
    /* A FEED_ERRMSG buffer of the request's own that nothing else uses
     * while it rebuilds (rebuild.c keeps err there while the leases go);
     * set by requests that rebuild. */
    char       *kept;
    /* Says what the request needs next, having read the answer to the last. */
    enum feed_want (*step)(feed_op *op, int64_t now);
    void        (*free)(feed_op *op);   /* release what it holds (any state) */
    feed_batch  batch;          /* FEED_W_REDIS: the batch; then redis_rc */
    int         redis_rc;
    feed_sql    sql;            /* FEED_W_SQL: the statement; then sql_rc */
    int         sql_rc;
    int64_t     wake_at;        /* FEED_W_WAKE */
    /* FEED_W_WAKE for another handle's rebuild: the feed it waits on
     * (feed__lease_wait), else 0. The event-loop driver lets one request
     * of the handle ask for each such feed, and the others wait for that
     * one (lib/drive/async.c, "Lease waits"). */
    uint64_t    lease_of;
    int         rc;             /* FEED_W_DONE: the result */
    int         state;
    /* A read (a page of any kind) has a deadline, request_timeout_ms after
     * its driver started it: past it, what it asks of a store is not done
     * but answered FEED_EBUSY (feed__shed), so that a queue never grows
     * past what callers wait for. A write is bounded by its timeouts, not
     * shed (a shed write would only leave a repair). deadline 0: none. */
    int         reads;
    int64_t     deadline;
    int         shed;           /* it was shed once (counted once) */
};
/* The drivers, at each ask of op: 1 when op is past its deadline, its
 * message then says so (FEED_EBUSY) and the statistics count it once;
 * what: the store it would have asked. */
int feed__shed(feed_op *op, int64_t now, const char *what);

/* rebuild.c: a rebuild under a lease, the one machine of page.c, hooks.c
 * and merged.c. The caller holds the lease of each source and has asked op
 * for their rows (FEED_W_SQL: feed__rebuild_one asks for one feed's); each
 * step after that goes through feed__rebuild_step, which reads the rows,
 * installs them (ZADD staged, PEXPIRE staged, rebuild.lua a source, one
 * batch), or, when the read failed, gives the leases back (DEL, best
 * effort) and returns the read's error, kept meanwhile in op->kept. The
 * rows stay the caller's. */
typedef struct feed_install {
    const char **argv;          /* ZADD staged score member ... (zargc), then
                                   PEXPIRE staged ms, then rebuild.lua's call */
    size_t      *lens, zargc;
    char        *text, *staged;
    int          failed, installed;
} feed_install;
typedef struct feed_rebuild_src {
    int          fam;
    int64_t      owner;
    const char  *key, *lease, *token;
    feed_rows   *rows;          /* its top max_len + 1 rows, once read */
    feed_install in;            /* in.installed, at the end: the copy is the rows now */
} feed_rebuild_src;
enum { FEED_RB_READ, FEED_RB_RELEASE, FEED_RB_INSTALL };
typedef struct feed_rebuild {
    feed_op          *op;
    int               state;    /* FEED_RB_*: past READ, the last answer was Redis's;
                                   INSTALL after FEED_W_DONE: the installs ran */
    int               flags;    /* the batches' (FEED_B_*), and their slot */
    unsigned          slot;
    feed_rebuild_src *src, one;
    size_t            n;
    int               sql_rc;
    const char       *del[3];
    size_t            del_lens[3];
} feed_rebuild;
/* Begin with n sources in src (zeroed, then filled in by the caller). */
void feed__rebuild_begin(feed_rebuild *rb, feed_op *op, feed_rebuild_src *src, size_t n,
                         int flags, unsigned slot);
/* One feed's rebuild: rb->one, its rows (op->sql.rows) asked from the primary. */
enum feed_want feed__rebuild_one(feed_rebuild *rb, feed_op *op, int flags, unsigned slot,
                                 int fam, int64_t owner, const char *key, const char *lease,
                                 const char *token);
/* FEED_W_DONE with *rc: FEED_OK (each src's in.installed says whether it went
 * in), FEED_EREDIS (an install failed), the read's error, or FEED_ENOMEM. */
enum feed_want feed__rebuild_step(feed_rebuild *rb, int64_t now, int *rc);
void feed__rebuild_free(feed_rebuild *rb);      /* any state */
/* Another handle holds a lease: 1, ask again at op->wake_at (a pause that
 * doubles); 0, lease_wait_ms has passed. A wait starts as { 0, 1 }. fam
 * and owner name the one feed waited on (op->lease_of); fam -1: several. */
typedef struct feed_wait {
    int64_t deadline, pause;
} feed_wait;
int  feed__lease_wait(feed_op *op, feed_wait *w, int fam, int64_t owner, int64_t now);

/* rebuild.c: the TTL of a copy (ms, text; "0": none): a feed known to be
 * empty has its own; and when a first page must read a copy's PTTL
 * (rebuild.c, "TTL refresh"). */
const char *feed__ttl_text(const feed_core *c, int empty);
int  feed__ttl_due(feed_core *c, int fam, int64_t owner, int64_t now);
/* The handle knows the copy, and knew it empty when it is not, or not when it is. */
int  feed__ttl_turned(feed_core *c, int fam, int64_t owner, int empty);
void feed__ttl_forget(feed_core *c, int fam, int64_t owner);
/* A PTTL read at `at` said pttl: 1 when the copy wants a PEXPIRE (less
 * than half its TTL left; -1, no TTL, included, as page.lua does); else
 * what it says is remembered and 0. */
int  feed__ttl_checked(feed_core *c, int fam, int64_t owner, int64_t at, long long pttl,
                       int empty);
/* The copy got its full TTL at `at` (a rebuild, a PEXPIRE). */
void feed__ttl_full(feed_core *c, int fam, int64_t owner, int64_t at, int empty);

/* sql.c */
void feed__sql_ask(feed_op *op, int stmt, int server, int64_t uid, const int64_t *params,
                   int nparams);
/* The owner's free calls feed__sqlpage_end (any state: a page it abandons
 * may hold why), and so must find sp->why NULL before the first begin. */
void feed__sqlpage_begin(feed_sqlpage *sp, int stmt, int64_t uid, const int64_t *params,
                         int nparams);
void feed__sqlpage_end(feed_sqlpage *sp);
enum feed_want feed__sqlpage_step(feed_sqlpage *sp, feed_op *op, int64_t now, int *rc);

/* page.c: a page request. The blocking API keeps one on its stack, the
 * async API allocates one per request (feed__page_op_size bytes). */
typedef struct feed_page_op feed_page_op;
size_t  feed__page_op_size(void);
int     feed__page_check(const feed_core *c, char *err, const char *fn, int64_t last_score,
                         int64_t last_id, int64_t rank, size_t limit, const feed_result *out);
int     feed__page_init(feed_page_op *p, feed_core *c, char *err, int64_t uid,
                        int64_t last_score, int64_t last_id, int64_t rank, size_t limit,
                        feed_result *out);
int64_t feed__page_next_rank(const feed_page_op *p);
/* A rider: one command more in the batch of the request's first plain read
 * (not in its scripts or retries), so that a filtered page reads its
 * authors in the page's own round trip (filter.c). build gives the
 * command; reply gets its reply, error replies included, and nothing when
 * Redis could not answer. The rider must outlive the request's first step. */
typedef struct feed_rider {
    void  *arg;
    int  (*build)(void *arg, const char ***argv, const size_t **lens);
    void (*reply)(void *arg, const redisReply *r);
} feed_rider;
void    feed__page_ride(feed_page_op *p, const feed_rider *rider);
/* A page served (page.c, newer.c, merged.c): out->items holds avail items
 * in the page's order; at most limit are shown, has_more and the next
 * cursor (the last shown) follow, and the statistics count it. */
void    feed__page_served(feed_core *c, feed_result *out, size_t avail, size_t limit,
                          feed_source source);
#define FEED_PAGE_SCRIPT_ARGS 13
/* page.lua's call: argv and lens (FEED_PAGE_SCRIPT_ARGS entries) for key and its lease, want
 * items after the cursor (score NULL: a first page), a lease token. */
int     feed__page_script(const feed_core *c, const char **argv, size_t *lens,
                          const char *key, const char *lease, const char *want,
                          const char *score, const char *member, size_t member_len,
                          const char *token);

/* newer.c: pull-to-refresh. */
typedef struct feed_newer_op feed_newer_op;
size_t feed__newer_op_size(void);
int    feed__newer_check(const feed_core *c, char *err, const char *fn, int64_t score,
                         int64_t id, size_t limit, const feed_result *out);
int    feed__newer_init(feed_newer_op *n, feed_core *c, char *err, int64_t uid, int64_t score,
                        int64_t id, size_t limit, feed_result *out);

/* filter.c: filtered pages, of kind FEED_FILTER_*. The checks every
 * filtered call makes on its filter (fn names it); feed__filter_empty: 1
 * when the filter hides nothing (the unfiltered call answers). The request
 * is on the heap, its arrays copied (the other arguments checked by the
 * unfiltered call's check); NULL with *rc when it cannot be made. */
enum { FEED_FILTER_PAGE, FEED_FILTER_MERGED, FEED_FILTER_NEWER };
int      feed__filter_check(const feed_core *c, char *err, const char *fn, int kind,
                            const feed_filter *filter);
int      feed__filter_empty(const feed_filter *filter);
feed_op *feed__filter_op(feed_core *c, char *err, int kind, int64_t uid,
                         const int64_t *authors, size_t n, int64_t last_score, int64_t last_id,
                         size_t limit, const feed_filter *filter, feed_result *out, int *rc);

/* repair.c */
feed_op *feed__repair_op(feed_core *c);
/* The generation of the list a repair request took: it drops every loss
 * remembered up to it. */
uint64_t feed__repair_op_gen(const feed_op *op);

/* connect.c: a handle's first connects (feed_open): Redis (node 0, or the
 * cluster's map), then PostgreSQL's primary, then its replica. */
typedef struct feed_connect_result {
    int  redis_rc, pg_rc;
    char redis_msg[FEED_ERRMSG], pg_msg[FEED_ERRMSG];
} feed_connect_result;
feed_op *feed__connect_op(feed_core *c, feed_connect_result *out, int *rc);

/* bulk.c, health.c: requests made on the heap (NULL with *rc on failure);
 * the drops work on the feeds of family fam. */
feed_op *feed__invalidate_many_op(feed_core *c, char *err, int fam, const int64_t *uids,
                                  size_t n, int *rc);
feed_op *feed__invalidate_all_op(feed_core *c, char *err, int fam, uint64_t *dropped, int *rc);
feed_op *feed__health_op(feed_core *c, char *err, feed_health_info *out, int *rc);

/* hooks.c: insert, delete, invalidate and reload of one feed, owner's in
 * family fam (reload: FEED_FAM_FEED only). */
enum { FEED_HOOK_INSERT, FEED_HOOK_DELETE, FEED_HOOK_INVALIDATE, FEED_HOOK_RELOAD,
       FEED_HOOK_NONE /* nothing to do: done at once (a fan-out to no feed) */ };
typedef struct feed_hook_op feed_hook_op;
size_t feed__hook_op_size(void);
int    feed__hook_check(const feed_core *c, char *err, const char *name, int kind, int fam,
                        int64_t score, int64_t id);
int    feed__hook_init(feed_hook_op *h, feed_core *c, char *err, int kind, int fam,
                       int64_t uid, int64_t score, int64_t id);
int    feed__check_item(char *err, const char *hook, int64_t score, int64_t id);

/* fanout.c: feed_on_insert for many feeds, pipelined. uids are copied. */
feed_op *feed__fanout_op(feed_core *c, char *err, const int64_t *uids, size_t n,
                         int64_t score, int64_t id, int *rc);

/* merge.c -- read-time merge, decisions only.
 *
 * What one source's cache read proves, for a read that asked `want` items
 * after the cursor (first: none). rows gets the items after the cursor (at
 * most want), *ended whether they reach the source's end. */
enum feed_merge_verdict {
    FEED_MERGE_PROVEN,  /* want items, or every item to the end marker */
    FEED_MERGE_SHORT,   /* the copy ends (no end marker) before want items: rows
                           hold what it has; past them only SQL knows */
    FEED_MERGE_UNKNOWN, /* proves nothing (absent key, a long run of ties): page.lua */
    FEED_MERGE_LEASED,  /* page.lua: absent, and the caller now holds the lease */
    FEED_MERGE_BUSY,    /* page.lua: absent, another caller holds the lease */
    FEED_MERGE_BAD      /* not a reply of ours: SQL answers instead */
};
typedef struct feed_cursor_q {
    int     first;
    int64_t score, id;
    size_t  want;
} feed_cursor_q;
/* A plain read: ZREVRANGE key 0 want-1 (first page), or ZREVRANGEBYSCORE
 * key <score> -inf LIMIT 0 asked (after a cursor). */
int  feed__merge_plain(const redisReply *r, const feed_cursor_q *q, size_t asked,
                       feed_rows *rows, int *ended);
/* page.lua's reply (lua/page.lua). */
int  feed__merge_script(const redisReply *r, const feed_cursor_q *q, feed_rows *rows,
                        int *ended);
/* The index of the first of rows strictly after the cursor. */
size_t feed__rows_after(const feed_rows *rows, const feed_cursor_q *q);
/* One source's answer: rows strictly after the cursor, in order, known to
 * be every item of the source down to the last of them, or (ended) every
 * item after the cursor. */
typedef struct feed_merge_answer {
    feed_rows rows;
    int       ended;
} feed_merge_answer;
#define FEED_MERGE_UNPROVEN ((size_t)-2)
#define FEED_MERGE_DISORDER ((size_t)-1)
/* The merged page from n answers (at most FEED_MERGE_MAX + 1, the reader's
 * feed and the authors): the first q->want distinct pairs of their
 * union, written to out (q->want entries) when the answers prove them;
 * returns how many (fewer only when every source ended). Otherwise
 * FEED_MERGE_UNPROVEN, and blocking[k] = 1 for each source that must
 * answer further (q->want items, or to its end) for the page to be
 * proven; FEED_MERGE_DISORDER when some rows are out of order or not after
 * the cursor. */
size_t feed__merge_cut(const feed_merge_answer *src, size_t n, const feed_cursor_q *q,
                       feed_item *out, unsigned char *blocking);

/* merged.c: a merged page request, on the heap (authors copied). The
 * checks every merged page call makes on its arguments first (fn names it
 * in messages); n == 0 is a plain page (feed__page_init). */
int      feed__merged_check(const feed_core *c, char *err, const char *fn,
                            const int64_t *authors, size_t n, int64_t last_score,
                            int64_t last_id, size_t limit, const feed_result *out);
feed_op *feed__merged_op(feed_core *c, char *err, int64_t uid, const int64_t *authors,
                         size_t n, int64_t last_score, int64_t last_id, size_t limit,
                         feed_result *out, int *rc);
/* Tag the merged page's items by source (for filtered pages). */
int      feed__merged_want_tags(feed_op *op, const int64_t **tags);
/* The authors' calls need an authors' table: FEED_OK, or FEED_EINVAL. */
int      feed__authors_on(const feed_core *c, char *err, const char *fn);

#endif /* FEED_CORE_H */
