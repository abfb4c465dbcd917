/* sim_world.h -- one simulated world: servers, clients, clock, faults
 * (sim_world.c). Test-only. */
#ifndef FEED_SIM_WORLD_H
#define FEED_SIM_WORLD_H

#include <stdio.h>

#include "core/core.h"
#include "sim/sim.h"

#define SIM_CLIENTS   12
#define SIM_WRITES    4096
#define SIM_MASK_MAX  256
#define SIM_FAULT_LOG 256
#define SIM_SERVERS   8
#define SIM_STEP_CAP  200000    /* steps of one schedule: reaching it is a violation */
/* The least time from a primary's demotion to its promotion again (an
 * episode of two failovers and a resync between them): the library's
 * trust in a cluster node rests on it being above twice redis_timeout_ms
 * (lib/core/topo.c), 500 ms with the default the simulation keeps. */
#define SIM_EPISODE_MS 600

/* The Redis topology. */
enum { SIM_TOPO_SINGLE, SIM_TOPO_SENTINEL, SIM_TOPO_CLUSTER };

/* The kinds of operation a swarm schedule may switch off (sim_world.ops_off). */
enum { SIM_OP_FANOUT = 1, SIM_OP_RELOAD = 2, SIM_OP_DELETE = 4, SIM_OP_MERGED = 8,
       SIM_OP_NEWER = 16 };

/* The races between handles sim_census counts (sim_world.race). */
enum { SIM_RACE_REPAIR, SIM_RACE_REPAIR_REBUILD, SIM_RACE_REBUILD, SIM_RACE_FENCE,
       SIM_RACES };

/* What an application client is. */
enum { SIM_READER, SIM_WRITER, SIM_SYNC };

/* What a client waits for. */
enum {
    SIM_AW_NONE,        /* nothing: its program is over */
    SIM_AW_START,       /* a request to begin at ready_at */
    SIM_AW_IDLE,        /* the log follower with nothing to do: look again at ready_at */
    SIM_AW_CONNECT,     /* a node's connect */
    SIM_AW_TRIP,        /* a set-up's trip: its commands one by one, then the replies */
    SIM_AW_PASS,        /* an exchange's pass: each trip's commands, then its replies */
    SIM_AW_PG,          /* a step of a statement: connect, prepare, describe, query */
    SIM_AW_WAKE,        /* the clock to reach ready_at */
    SIM_AW_PROBE,       /* a set-up's question to a Sentinel */
    SIM_AW_SHARED       /* an async request: on its handle's connections, a set-up
                           it joined, the handle's statement queue or its repairs */
};

/* What an async request in SIM_AW_SHARED waits for. */
enum { SIM_SH_READY, SIM_SH_PASS, SIM_SH_SETUP, SIM_SH_REPAIR, SIM_SH_SQL };

/* The faults, each with its own rate (per mille of the draws for it). */
enum {
    SIM_F_REFUSE,       /* a connect refused */
    SIM_F_DROP,         /* the connection drops before a command reaches Redis */
    SIM_F_LOST,         /* the commands ran, their replies are lost (a timeout) */
    SIM_F_PG,           /* PostgreSQL's connection drops under a step */
    SIM_F_PGDOWN,       /* PostgreSQL away for up to 300 ms (restarted: connections drop) */
    SIM_F_SNAPSHOT,     /* Redis saves a snapshot (for a later restart from it) */
    SIM_F_RESTART,      /* Redis restarts, empty or from the last snapshot */
    SIM_F_EVICT,        /* Redis evicts a feed's copy or its lease */
    SIM_F_PAUSE,        /* a client stalls (up to 3 lease lifetimes) */
    SIM_F_KILL,         /* a writer dies between its commit and its hook */
    SIM_F_JUMP,         /* the clock jumps ahead (up to 2 lease lifetimes) */
    SIM_F_FAILOVER,     /* a replica is promoted, maybe behind (topologies with replicas) */
    SIM_F_SENTINEL,     /* a Sentinel refuses a connection */
    SIM_F_MIGRATE,      /* a cluster slot starts migrating to another primary */
    SIM_F_COUNT
};

/* One request in progress, with its exchange and a node's set-up. */
typedef struct sim_frame {
    feed_op    *op;
    int         heap;           /* a repair request the driver made */
    int         in_batch;
    feed_xchg   x;
    feed_setup *setup;
} sim_frame;

struct sim_ahandle;

typedef struct sim_client {
    int          id, kind, wid;
    feed_core    core;
    feed_core   *c;             /* the handle's: its own core, or an async handle's */
    /* a request of an async handle (sim_async_*): its handle, the trips of
     * its pass still out, the pass over, its place in the ready queue */
    struct sim_ahandle *ah;
    size_t       trips_left;
    int          pass_over;
    int          shared;        /* SIM_AW_SHARED: what it waits for (SIM_SH_*) */
    unsigned long ready_seq, wait_seq;
    char         err[FEED_ERRMSG];
    sim_frame    frames[4];
    int          depth;
    int          aw;
    int64_t      ready_at;
    feed_trip   *trip;          /* SIM_AW_TRIP */
    void        *io;
    size_t       trip_i, cmd_k;
    int64_t      trip_ms;       /* when the trip (or pass) began: its replies are due by
                                   redis_timeout_ms later, or they are lost (a timeout) */
    redisReply  *replies[64];
    size_t       napplied;
    /* PostgreSQL: the statement machine in progress, each server's
     * connection (the server's incarnation it was made on; 0: none), last
     * connect and the handle's statement texts */
    feed_pgstmt  pgm;
    int          pwant;
    unsigned     pg_conn[2];
    feed_pgserver pg_server[2];
    char        *pg_texts[FEED_PG_TEXTS];
    feed_pgcell  cells[3 * 256];
    char         cellbuf[3 * 256][24];
    long long    woff[SIM_SERVERS]; /* the offset of its last write on each server (WAIT) */
    int          asking[SIM_SERVERS];   /* its connection to the node said ASKING */
    long long    hoff[SIM_SERVERS];         /* the same for a request's own writes (no set-up's) */
    long long    hoff_start[SIM_SERVERS];   /* hoff when its request began */
    uintptr_t    hoff_epoch[SIM_SERVERS];   /* the server's incarnation of that write */
    int          ops_left;
    size_t       write;         /* the log follower: the last write its drop covers */
    int64_t      sync_uid;
    int          sync_table;
    uint64_t     started_v;
    int64_t      started_ms;
    /* a reader's walk */
    int          walking;
    int64_t      uid, score, last_id;
    size_t       limit;
    int64_t      authors[4];    /* a merged walk's authors */
    size_t       nauthors;
    int          newer;         /* a pull-to-refresh walk: upwards from (score, last_id) */
    int64_t      rank;          /* the rank hint the last page handed out with its cursor
                                   (feed_page_ranked's next_rank; -1: none) */
    /* The walk so far, as the user saw it: how many pages, and the item
     * its pages end at (the last shown; a pull-to-refresh walk: the newest
     * shown, or its starting cursor), which the next page must continue
     * from without repeating or skipping an item. */
    long         walk_pages;
    /* The single Redis as the page's request began (its writes so far,
     * its incarnation, the evictions): unchanged at its end, the copy the
     * page read is the copy there now (sim_rank_check). */
    long long    rk_off;
    uintptr_t    rk_epoch;
    long         rk_evicts;
    int          walk_seen;
    feed_item    walk_last;
    size_t       first_write, nwrite;   /* a writer's writes in flight (a fan-out: several) */
    unsigned     req_feeds;     /* the feeds its write request touches (sim_feed_bit) */
    unsigned     weight;        /* how often the scheduler picks it, relative (swarm) */
    int          rep_seen;      /* its repair request (sync driver) seen in flight, */
    unsigned     rep_cover;     /* and the feeds with a loss pending when it began */
    int          bulk;          /* the log follower's last drop was feed_invalidate_many */
    feed_result  page;
} sim_client;

typedef struct sim_world {
    uint64_t   seed, rng;
    int64_t    now;
    /* the schedule's shape (sim_run draws it) and options */
    int        uids, ops, writers, authors;   /* feeds 1..uids, authors 101..100+authors */
    uint32_t   max_len, ttl_seconds, lease_ms;
    int64_t    max_lag_ms;      /* the replica's bound (mode replica) */
    int        fence, sync, kills, replica, expect_errors;
    int        async;           /* an async handle: 0 in half the schedules, 1 in all, -1 none */
    int        flap;            /* mode cluster-flap: primaries demoted and promoted back,
                                   readers idle for a while between pages */
    unsigned   rate[SIM_F_COUNT];
    /* Swarm testing (feedsim.c draws it): a contended schedule has one
     * reader feed, at most one author, three readers and two writers, each
     * kind of fault on or off (on: often), and kinds of operation switched
     * off (bits SIM_OP_*), and clients scheduled at unequal speeds
     * (sim_client.weight), so that handles meet in one feed's windows. */
    int        swarm;
    unsigned   ops_off;
    /* The Redis servers (and Sentinels), addressed by host:port. A single
     * Redis: sv[0]. Under Sentinel: a primary, its replica, and Sentinels
     * that name the primary (late, after a failover). */
    struct sim_server {
        simr     *r, *snap;
        char      host[24];
        int       port;
        int       sentinel;     /* a Sentinel: names sv[names] */
        int       names;
        uintptr_t epoch;        /* its incarnation: a restart or death closes older connections */
        int       of;           /* a replica: the index of its primary; -1: a primary */
        long long synced;       /* a replica: the primary's offset its data set holds */
        int       dead;         /* killed: refuses connects, back at down_until as a replica */
        int64_t   down_until;   /* refuses connects until then */
        int64_t   demote_at;    /* an old primary left writable: a replica from then (0: no) */
        int       heir;         /* an old primary: the replica promoted in its place */
        int64_t   demoted_at;   /* a primary demoted (not killed): promoted again no
                                   sooner than SIM_EPISODE_MS later */
        long long acked;        /* the offset of the last write acknowledged to a writer */
        long long acked_then;   /* an old primary: what its heir holds of it, or was found lost */
        struct sim_guard { struct sim_world *w; int s; } guard;
    } sv[SIM_SERVERS];
    /* A Redis Cluster: the slot map (server index + 1; every node answers
     * CLUSTER SLOTS with it), and the slot migrating, if any: its keys move
     * one by one from mig_from to mig_to, then the slot is mig_to's. */
    uint8_t    owner[16384];
    int        mig_slot, mig_from, mig_to, asking_now;
    int        nsv, prim;       /* the servers; the current primary */
    int        topo;            /* SIM_TOPO_* */
    int        failover_kinds;  /* bits: 1 kill, 2 demote at once, 4 left writable a while */
    uint32_t   wait_replicas;
    uint32_t   sync_every;      /* a replica receives its primary's data about once per this many steps */
    char       addrs[128];      /* the Sentinels' or the cluster seeds' addresses (config) */
    int64_t    pg_down_until;
    unsigned   pg_epoch;        /* PostgreSQL's incarnation: a restart drops connections */
    simpg     *pg;
    uint64_t   replica_v;
    /* clients */
    sim_client cl[SIM_CLIENTS];
    int        ncl;
    /* Every write, in commit order. A write is certain once the cache must
     * show it: its hook returned (a failed hook's feed is on the repair
     * list, dropped before the process's next request), or the log
     * follower dropped its feed after the commit. Until then a page may
     * show the feed with or without it. */
    struct sim_write {
        int     table;          /* SIMPG_FEED (owner: a reader), SIMPG_AUTHORS (an author) */
        int64_t uid, id, score;
        int     del;
        int64_t certain_at;     /* INT64_MAX: not yet */
    } writes[SIM_WRITES];
    size_t     nwrites, sync_done;
    int        healed;
    int64_t    healed_at;
    /* faults: draws numbered; masked ones never strike (shrinking) */
    size_t     fault_draws, faults;
    size_t     mask[SIM_MASK_MAX], nmask;
    size_t     last_faults[SIM_FAULT_LOG], last_faults_n;
    /* results */
    long       steps, requests, pages, unchecked;
    long       walks;           /* walks that ended (has_more 0), each checked whole */
    long       ranks;           /* rank hints checked against the copy (sim_rank_check) */
    long       evicts;          /* keys evicted so far */
    /* Contention between handles (sim_census): the losses pending on the
     * process's repair list as the simulation saw them recorded (feeds,
     * sim_feed_bit), the list's generation last seen, and whether this
     * schedule had: a loss recorded for a feed while another handle's
     * repair of it was in flight (SIM_RACE_REPAIR), a loss recorded for a
     * feed while its lease was held (a rebuild under way, SIM_RACE_REBUILD),
     * the first and then, that loss still pending, the feed's lease held
     * (SIM_RACE_REPAIR_REBUILD: raced, the feeds of the first), two handles
     * setting up one server at once after it restarted (its fence,
     * SIM_RACE_FENCE). */
    unsigned   lossy, raced;
    uint64_t   loss_gen;
    int        race[4];
    long       acked_lost;      /* failovers that lost a write acknowledged to a writer */
    int        violations;
    char       why[600];
    FILE      *trace;
    char       shas[FEED_SCRIPT_COUNT][41];
    struct sim_ahandle *ah;     /* the async handle, if the schedule drew one */
} sim_world;

void sim_trace(sim_world *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Run one schedule of w (seed, options, rates and mask set by the
 * caller; the rest zeroed). 0: no violation; 1: w->why says the first;
 * -1: out of memory. */
int  sim_run(sim_world *w);

#endif /* FEED_SIM_WORLD_H */
