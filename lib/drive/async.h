/* async.h -- the event-loop driver's handle and requests (async.c), for
 * the loops (libevent.c, libuv.c) and the public async calls
 * (lib/api/async.c). Not installed. */
#ifndef FEED_ASYNC_H
#define FEED_ASYNC_H

#include <stddef.h>

#include "drive/loop.h"
#include "io/io.h"
#include "io/redis_async.h"

/* Where a task (a request, or a node's set-up) is: on exactly one list of
 * its handle, a->on[at], which says what it waits for. Only task_move
 * (async.c) changes it. */
enum feed_at {
    FEED_AT_NONE,       /* on none: running, being made, or being freed */
    FEED_AT_DONE,       /* a request finished: its callback comes from the kick */
    FEED_AT_READY,      /* the ready queue: runs when the queue runs next */
    FEED_AT_REDIS,      /* a request's pass is out on the nodes' connections */
    FEED_AT_SETUP,      /* a request waits for node x.setup_node's set-up */
    FEED_AT_REPAIR,     /* a request waits for the repairs (a->repair) */
    FEED_AT_SQL,        /* a request in line for PostgreSQL: the first one's statement runs */
    FEED_AT_TIMER,      /* a request waits for its timer (a wake-up, a back-off) */
    FEED_AT_LEASE,      /* a request waits for the one of its handle that asks
                           for their feed (async.c, "Lease waits") */
    FEED_AT_LOOP,       /* a set-up waits for its connect or its trip */
    FEED_AT_COUNT
};

typedef struct feed_task {
    struct feed_task *prev, *next;
    enum feed_at      at;
    int               is_setup;
} feed_task;

typedef struct feed_tasks {
    feed_task *head, *tail;
    size_t     n;
} feed_tasks;

enum { FEED_API_PAGE, FEED_API_DONE, FEED_API_HEALTH, FEED_API_INTERNAL };

/* One request on the loop: made by feed__async_request, freed only by
 * req_free (async.c), after its callback, or by feed__async_discard. */
typedef struct feed_areq {
    feed_task         task;         /* first */
    struct feed_async *a;
    int                pooled;      /* its size is the handle's spare size: recycled */
    int                in_x;        /* an exchange of op->batch is under way */
    int                budgeted;    /* its statement holds a slot of the budget (budget.c) */
    int                pass_over;   /* its trips all ended: the exchange reads them */
    size_t             trips_left;  /* FEED_AT_REDIS: trips still out */
    void              *timer;       /* wake-ups; made when first needed */
    struct feed_alease *leads;      /* the lease waits it asks for, or NULL */
    struct feed_alease *follows;    /* FEED_AT_LEASE: the lease waits it is one of */
    struct feed_areq  *lease_prev, *lease_next;     /* ... in their order */
    feed_op           *op;
    int                api;         /* FEED_API_*; INTERNAL: no callback */
    struct {                        /* the one api says (a page: page or ranked) */
        feed_async_page_cb   *page;
        feed_async_ranked_cb *ranked;
        feed_async_done_cb   *done;
        feed_async_health_cb *health;
    } cb;
    void              *arg;
    feed_result        result;      /* last of the fields a new request clears */
    char               err[FEED_ERRMSG];
    feed_xchg          x;
    max_align_t        op_space[];  /* the request's machine (a health check's: its
                                       feed_health_info; the machine is on the heap) */
} feed_areq;

/* Make a request whose machine needs op_size bytes (op_space); NULL
 * without memory. */
feed_areq *feed__async_request(struct feed_async *a, size_t op_size, int api, void *arg);
/* Start it: it runs on the loop until it needs to wait; its callback comes
 * later, from the loop. */
void feed__async_start(feed_areq *r);
/* A request that could not be started (its machine refused): free it. */
void feed__async_discard(feed_areq *r);

/* One feed's lease waits on a handle (async.c, "Lease waits"): the
 * request that asks for them all, and the ones that wait on it. */
#define FEED_LEASE_SLOTS 64
typedef struct feed_alease {
    uint64_t           feed;        /* feed_op.lease_of */
    struct feed_areq  *leader;      /* NULL: the slot is free */
    struct feed_areq  *first, *last;
} feed_alease;

struct feed_async {
    feed_core         core;         /* first */
    feed_pg           pg;
    const feed_loop  *loop;
    void             *loop_data;
    char              errmsg[FEED_ERRMSG];
    const char       *cur_err;      /* during a callback: that request's message */
    int               flags;        /* FEED_A_* (async.c says what each keeps) */
    feed_tasks        on[FEED_AT_COUNT];
    void             *kick;         /* a zero timer: runs the queue, then the callbacks */
    void             *sweep;        /* the deadlines' timer (async.c, "Deadlines") */
    struct feed_asetup **setups;    /* by node: its set-up under way, or NULL */
    size_t            nsetups;
    feed_areq        *repair;       /* the repairs under way */
    feed_pgtask       pgtask;       /* the first FEED_AT_SQL request's statement, once
                                       sql_running (it waits for the budget before) */
    int               sql_running;
    void             *sql_watch, *sql_timer;
    int               sql_fd;
    feed_connect_result opened;     /* the first connects' outcome (nobody waits for it) */
    feed_alease       lease[FEED_LEASE_SLOTS];  /* direct-mapped by feed */
    struct feed_areq **spare;       /* requests to recycle (async.c, req_alloc) */
    size_t            nspare, spare_op_size;
};

/* Requests under way (tests: a loop run until the first connects are made). */
int feed__async_busy(const feed_async *a);

/* The loops' door (libevent.c, libuv.c). The adapters are libraries of
 * their own (libfeedcache-libevent, -libuv) that call it across the shared
 * library's boundary: exported, the only feed__ name that is
 * (tests/t_symbols.t); same-version libraries only, never a public API. A
 * NULL loop_data is refused with loop->null_loop. */
FEED_API int feed__async_open(feed_async **out, const feed_config *cfg, const feed_loop *loop,
                              void *loop_data);

#endif /* FEED_ASYNC_H */
