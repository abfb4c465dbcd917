/* async.h -- the event-loop driver's handle and requests (async.c), for
 * the loops (libevent.c, libuv.c) and the public async calls
 * (lib/api/async.c). Not installed. */
#ifndef FEED_ASYNC_H
#define FEED_ASYNC_H

#include <stddef.h>

#include "drive/loop.h"
#include "io/io.h"
#include "io/redis_async.h"

/* What can wait in the ready queue: a request, or a node's set-up. */
typedef struct feed_task {
    struct feed_task *next_ready;
    int               queued;
    int               is_setup;
} feed_task;

enum { FEED_API_PAGE, FEED_API_RANKED, FEED_API_DONE, FEED_API_HEALTH, FEED_API_INTERNAL,
       FEED_API_QUIET };

/* One request on the loop. */
typedef struct feed_areq {
    feed_task         task;         /* first */
    struct feed_async *a;
    struct feed_areq  *prev, *next; /* every live request of the handle */
    struct feed_areq  *next_wait;   /* in a set-up's, the repairs', the SQL or the done list */
    int                pooled;      /* its size is the handle's spare size: recycled */
    int                in_x;        /* an exchange of op->batch is under way */
    int                pass_over;   /* its trips all ended: the exchange reads them */
    size_t             trips_left;
    feed_xchg          x;           /* first after the fields a new request clears */
    void              *timer;       /* wake-ups; made when first needed */
    feed_op           *op;
    int                api;         /* FEED_API_* */
    struct {                        /* the one api says */
        feed_async_page_cb   *page;
        feed_async_ranked_cb *ranked;
        feed_async_done_cb   *done;
        feed_async_health_cb *health;
    } cb;
    void              *arg;
    feed_result        result;
    char               err[FEED_ERRMSG];
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

struct feed_async {
    feed_core         core;         /* first */
    feed_pg           pg;
    const feed_loop  *loop;
    void             *loop_data;
    char              errmsg[FEED_ERRMSG];
    const char       *cur_err;      /* during a callback: that request's message */
    feed_areq        *all;
    feed_task        *ready_head, *ready_tail;
    feed_areq        *done_head, *done_tail;
    void             *kick;         /* a zero timer: runs the queue, then the callbacks */
    int               kicked;
    int               depth;        /* frames of this file under way on the handle */
    int               dead;         /* closed from inside a frame: free on the way out */
    struct feed_asetup **setups;    /* by node: its set-up under way, or NULL */
    size_t            nsetups;
    feed_areq        *repair;       /* the repairs under way, and who waits for them */
    feed_areq        *repair_waiters;
    feed_areq        *sql_head, *sql_tail, *sql_running;
    feed_pgtask       pgtask;
    void             *sql_watch, *sql_timer;
    int               sql_fd;
    feed_connect_result opened;     /* the first connects' outcome (nobody waits for it) */
    struct feed_areq **spare;       /* requests to recycle (async.c, req_alloc) */
    size_t            nspare, spare_op_size;
};

/* Requests under way (tests: a loop run until the first connects are made). */
int feed__async_busy(const feed_async *a);

/* The loops' doors (libevent.c, libuv.c). The adapters are libraries of
 * their own (libfeedcache-libevent, -libuv) that call these two across the
 * shared library's boundary: exported, the only feed__ names that are
 * (tests/t_symbols.t); same-version libraries only, never a public API. */
FEED_API int feed__async_open(feed_async **out, const feed_config *cfg, const feed_loop *loop,
                              void *loop_data);
FEED_API int feed__async_refuse(const char *why);

#endif /* FEED_ASYNC_H */
