/* redis_async.c -- a Redis node's connection on an event loop: hiredis's
 * async context with its socket on the loop's watch (no SIGPIPE on a write
 * to a peer gone, below), and what hiredis 0.14 lacks: a bound on
 * connecting and on every round trip.
 *
 * Trips (core.h, feed_trip) are appended as they come, any number from
 * any request, and answered in order: the connection keeps them in a FIFO,
 * and each reply hiredis hands over goes to the trip at its head. hiredis
 * writes what was appended in one turn of the loop in one write, so the
 * requests of one turn share it (pipelining).
 *
 * A timer watches the connect, then the connection's progress: it is given
 * up, and every trip on it ends failed, as a blocking read would time out,
 * only when redis_timeout_ms have passed with trips out and no reply at all
 * (counted from the oldest trip's send, or the last reply if later). A
 * reply late because the loop was busy, or because thousands of trips are
 * queued ahead of it, is no sign of a dead server: while replies keep
 * coming, and once after a timer that fired late (the loop was stalled:
 * what it has not read yet gets one turn first), the connection stays. The
 * connection is freed, never reused half-read.
 *
 * A connection is in one state (n->state):
 *
 *   RA_CONNECTING  the connect is under way; trips appended now wait in
 *                  hiredis's buffer, and their time starts once it is made
 *   RA_UP          connected
 *   RA_CLOSING     given up (feed__ra_close, the timer) or lost (hiredis
 *                  handed a NULL reply): no trip is taken; hiredis ends each
 *                  trip on it with NULL replies, then frees the context
 *   RA_GONE        hiredis freed the context, or will once its connect
 *                  callback returns after a failed connect
 *
 * hiredis names n in every reply callback it owes (one per command
 * appended) and in the connect and disconnect callbacks, so n outlives
 * them all: settle frees it once it is GONE and no trip is left, the only
 * place n is freed. The owner's pointer (*owner, a node's io)
 * names n only while it takes trips (CONNECTING, UP). A trip ends only
 * through ended(), from its last reply or from the NULL replies hiredis
 * hands over as it frees the context; this file never frees a context from
 * inside its connect callback (hiredis would touch it after), and what
 * happens next is the driver's.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "io/io.h"
#include "io/redis_async.h"

typedef struct pending {
    feed_trip *t;               /* NULL: its request went away */
    size_t     left;            /* replies not yet in */
    int64_t    deadline;
    void     (*ended)(void *arg, feed_trip *t);
    void      *arg;
} pending;

enum ra_state { RA_CONNECTING, RA_UP, RA_CLOSING, RA_GONE };

struct feed_anode {
    redisAsyncContext *ac;
    const feed_loop   *loop;
    void             **owner;   /* the pointer to clear when this stops taking trips */
    void              *timer;
    uint32_t           timeout_ms;
    int64_t            connect_deadline;
    int64_t            read_ms;     /* when the last reply came (0: none yet) */
    int                stalled;     /* the timer came late once: given a turn to read */
    enum ra_state      state;
    int                replied; /* a reply came: a TLS handshake is behind it */
    int                io;      /* what a trip ends with when the connection goes */
    char               why[128];
    void             (*on_connect)(void *arg, int ok, const char *why);
    void              *connect_arg;
    pending           *q;       /* ring of trips awaiting replies */
    size_t             head, count, cap;
    uint64_t           popped;  /* entries ever taken off the ring: entry i holds the
                                   trip sent as number popped + i (feed_trip.ra_seq) */
};

/* ---- The socket on the loop ----
 *
 * hiredis's own loop adapters write with write(), and a write to a peer that
 * went away raises SIGPIPE, whose default action ends the process. So the
 * context gets hiredis's event hooks (ac->ev) over the loop's watch
 * (loop.h) instead, and its writes go through feed__ra_nopipe: as libpq does
 * around send() (pq_block_sigpipe), SIGPIPE is blocked on this thread for
 * the write, and one the write raised is taken off before the mask is put
 * back. The write fails with EPIPE, and the connection is lost as on any
 * failed write. A SIGPIPE already pending before is left to the
 * application. Reads can write too under TLS (OpenSSL answers the peer's
 * key updates), so a TLS context's reads are guarded alike; a plaintext
 * read never writes.
 *
 * hiredis may free the context, and call ra_ev_cleanup, from inside the
 * read it is handed (a reply callback closes the connection): the watch is
 * then freed only once ra_ev_fired is done with it (RW_IN_CALLBACK). */

enum { RW_IN_CALLBACK = 1, RW_FREED = 2 };

typedef struct ra_watch {
    const feed_loop   *loop;
    void              *w;       /* the loop's watch of ac's socket */
    redisAsyncContext *ac;
    int                events;  /* FEED_LOOP_READ/WRITE watched now */
    int                flags;   /* RW_* */
} ra_watch;

void feed__ra_nopipe(void (*handle)(redisAsyncContext *), redisAsyncContext *ac)
{
    sigset_t pipe_set, old, pending_set;
    struct timespec zero = { 0, 0 };
    int was_pending;

    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    if (pthread_sigmask(SIG_BLOCK, &pipe_set, &old) != 0) {
        handle(ac);     /* cannot fail with these arguments; unguarded if it did */
        return;
    }
    was_pending = sigpending(&pending_set) == 0 && sigismember(&pending_set, SIGPIPE);
    handle(ac);
    if (!was_pending && sigpending(&pending_set) == 0 && sigismember(&pending_set, SIGPIPE))
        while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
            ;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void ra_ev_fired(void *arg, int ready)
{
    ra_watch *rw = arg;

    rw->flags |= RW_IN_CALLBACK;
    if (ready & FEED_LOOP_READ) {
        if (feed__tls_on(&rw->ac->c))
            feed__ra_nopipe(redisAsyncHandleRead, rw->ac);
        else
            redisAsyncHandleRead(rw->ac);
    }
    /* The read may have freed the context (RW_FREED), or it may no longer
     * want to write. */
    if (!(rw->flags & RW_FREED) && (ready & FEED_LOOP_WRITE) && (rw->events & FEED_LOOP_WRITE))
        feed__ra_nopipe(redisAsyncHandleWrite, rw->ac);
    rw->flags &= ~RW_IN_CALLBACK;
    if (rw->flags & RW_FREED)
        free(rw);
}

static void ra_ev_want(ra_watch *rw, int events)
{
    if (rw->w && events != rw->events) {
        rw->events = events;
        rw->loop->watch_set(rw->w, events);
    }
}

static void ra_ev_add_read(void *p)  { ra_watch *rw = p; ra_ev_want(rw, rw->events | FEED_LOOP_READ); }
static void ra_ev_del_read(void *p)  { ra_watch *rw = p; ra_ev_want(rw, rw->events & ~FEED_LOOP_READ); }
static void ra_ev_add_write(void *p) { ra_watch *rw = p; ra_ev_want(rw, rw->events | FEED_LOOP_WRITE); }
static void ra_ev_del_write(void *p) { ra_watch *rw = p; ra_ev_want(rw, rw->events & ~FEED_LOOP_WRITE); }

static void ra_ev_cleanup(void *p)
{
    ra_watch *rw = p;

    if (rw->w)
        rw->loop->watch_free(rw->w);
    rw->w = NULL;
    if (rw->flags & RW_IN_CALLBACK)
        rw->flags |= RW_FREED;
    else
        free(rw);
}

/* ac's socket watched on the loop through hiredis's event hooks: REDIS_OK,
 * or REDIS_ERR (out of memory, or hooks already set). */
static int ra_attach(redisAsyncContext *ac, const feed_loop *loop, void *loop_data)
{
    ra_watch *rw;

    if (ac->ev.data != NULL || !(rw = calloc(1, sizeof *rw)))
        return REDIS_ERR;
    rw->loop = loop;
    rw->ac = ac;
    if (!(rw->w = loop->watch_new(loop_data, ac->c.fd, ra_ev_fired, rw))) {
        free(rw);
        return REDIS_ERR;
    }
    ac->ev.addRead = ra_ev_add_read;
    ac->ev.delRead = ra_ev_del_read;
    ac->ev.addWrite = ra_ev_add_write;
    ac->ev.delWrite = ra_ev_del_write;
    ac->ev.cleanup = ra_ev_cleanup;
    ac->ev.data = rw;
    return REDIS_OK;
}

static pending *at(feed_anode *n, size_t i)
{
    return &n->q[(n->head + i) % n->cap];
}

/* The connect's deadline, then the oldest trip's, moved on by each reply
 * (0: none). */
static int64_t due(feed_anode *n)
{
    int64_t last;

    if (n->state == RA_CONNECTING)
        return n->connect_deadline;
    if (n->count == 0)
        return 0;
    last = n->read_ms + n->timeout_ms;
    return at(n, 0)->deadline > last ? at(n, 0)->deadline : last;
}

static void arm(feed_anode *n, int64_t now)
{
    int64_t when = due(n);

    n->loop->timer_stop(n->timer);
    if (when)
        n->loop->timer_start(n->timer, when > now ? when - now : 0);
}

/* n stops taking trips (state CLOSING or GONE): its owner forgets it. */
static void lose(feed_anode *n, enum ra_state state)
{
    if (n->owner && *n->owner == n)
        *n->owner = NULL;
    n->owner = NULL;
    n->state = state;
}

/* The one place n is freed: GONE, and hiredis owes it no reply. */
static void settle(feed_anode *n)
{
    if (n->state == RA_GONE && n->count == 0) {
        n->loop->timer_free(n->timer);
        free(n->q);
        free(n);
    }
}

/* Why the connection went, as the blocking reader says it: a peer that
 * closed it (a restart: worth one retry) or anything else. */
static void note_failure(feed_anode *n, const redisAsyncContext *ac)
{
    if (n->state >= RA_CLOSING)
        return;
    n->io = ac->err == REDIS_ERR_EOF ||
            (ac->err == REDIS_ERR_IO && (errno == ECONNRESET || errno == EPIPE))
            ? FEED_IO_CLOSED : FEED_IO_FAILED;
    if (feed__tls_on(&ac->c))   /* hiredis_ssl says "I/O error": name the cause */
        feed__tls_why(&ac->c, !n->replied, n->why, sizeof n->why);
    else
        feed__msg_keep_n(n->why, sizeof n->why,
                         ac->errstr && ac->errstr[0] ? ac->errstr : "connection lost");
}

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    feed_anode *n = privdata;
    pending *p = at(n, 0), done;

    if (!reply) {   /* hiredis is freeing the context: every trip ends */
        note_failure(n, ac);
        if (n->state < RA_CLOSING)
            lose(n, RA_CLOSING);
        if (p->t && !p->t->io) {
            p->t->io = n->io;
            feed__msg_keep_n(p->t->why, sizeof p->t->why, n->why);
        }
    } else {
        n->replied = 1;
        n->read_ms = feed__now_ms();
        n->stalled = 0;
        if (p->t && !p->t->io)
            p->t->reply(p->t->arg, p->t->got++, reply);
    }
    if (--p->left > 0)
        return;
    done = *p;
    n->head = (n->head + 1) % n->cap;
    n->count--;
    n->popped++;
    if (reply && n->count > 0)
        arm(n, feed__now_ms());
    if (done.t)
        done.ended(done.arg, done.t);
    settle(n);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    feed_anode *n = ac->data;
    int64_t now = feed__now_ms();

    if (status == REDIS_OK) {
        n->state = RA_UP;
        for (size_t i = 0; i < n->count; i++)
            at(n, i)->deadline = now + n->timeout_ms;
        arm(n, now);
        if (n->on_connect)
            n->on_connect(n->connect_arg, 1, "");
        return;
    }
    /* hiredis ends the trips and frees the context after this callback. */
    note_failure(n, ac);
    lose(n, RA_CLOSING);
    if (n->on_connect)
        n->on_connect(n->connect_arg, 0, n->why);
    n->state = RA_GONE;
    settle(n);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    feed_anode *n = ac->data;

    (void)status;
    note_failure(n, ac);
    lose(n, RA_GONE);
    settle(n);
}

/* The connect or the oldest trip ran out of time: give the connection
 * up, its trips end failed. */
static void on_timer(void *arg)
{
    feed_anode *n = arg;
    int64_t now = feed__now_ms(), when = due(n);

    if (n->state >= RA_CLOSING)
        return;
    if (!when || when > now) {
        arm(n, now);
        return;
    }
    if (n->state == RA_UP && !n->stalled && now - when > (int64_t)n->timeout_ms / 2) {
        /* Late by half the timeout: the loop was busy, and replies may sit
         * unread. One turn to read them before the connection is judged. */
        n->stalled = 1;
        n->loop->timer_start(n->timer, 0);
        return;
    }
    if (n->state == RA_UP) {
        feed__ra_close(n, FEED_IO_FAILED, n->ac && feed__tls_on(&n->ac->c) && !n->replied
                       ? "TLS handshake timed out (is this port plaintext, not TLS?)"
                       : "Resource temporarily unavailable (timed out)");
        return;
    }
    if (n->on_connect)
        n->on_connect(n->connect_arg, 0, "Connection timed out");
    feed__ra_close(n, FEED_IO_FAILED, "Connection timed out");
}

feed_anode *feed__ra_connect(const feed_addr *a, const struct feed_tls *tls,
                             const feed_loop *loop, void *loop_data,
                             uint32_t timeout_ms, int64_t now,
                             void (*done)(void *arg, int ok, const char *why), void *arg,
                             void **owner, char *why, size_t cap)
{
    feed_anode *n = calloc(1, sizeof *n);

    if (!n || !(n->timer = loop->timer_new(loop_data, on_timer, n))) {
        free(n);
        snprintf(why, cap, "out of memory");
        return NULL;
    }
    n->loop = loop;
    n->timeout_ms = timeout_ms;
    n->on_connect = done;
    n->connect_arg = arg;
    n->ac = redisAsyncConnect(a->host, a->port);
    if (!n->ac || n->ac->err) {
        feed__msg_keep_n(why, cap, n->ac && n->ac->errstr ? n->ac->errstr : "out of memory");
    } else if (feed__tls_begin(tls, &n->ac->c, a->host, why, cap) == 0) {
        n->ac->data = n;
        if (ra_attach(n->ac, loop, loop_data) == REDIS_OK &&
            redisAsyncSetConnectCallback(n->ac, on_connect) == REDIS_OK &&
            redisAsyncSetDisconnectCallback(n->ac, on_disconnect) == REDIS_OK) {
            n->connect_deadline = now + timeout_ms;
            arm(n, now);
            n->owner = owner;
            if (owner)
                *owner = n;
            return n;
        }
        snprintf(why, cap, "cannot watch the connection");
    }
    if (n->ac)
        redisAsyncFree(n->ac);
    n->state = RA_GONE;
    settle(n);
    return NULL;
}

/* One command, formatted here (lib/base/text.c: cheaper than hiredis's own),
 * on a small stack buffer when it fits. The buffer ends with a NUL past the
 * command: hiredis 0.14 peeks at the byte after the first argument to see
 * whether a (P)SUBSCRIBE has more, which for a one-word command ("PING") is
 * that byte; its own buffers are sds strings and always have it. */
static int append(feed_anode *n, int argc, const char **argv, const size_t *lens)
{
    char small[512], *buf = small;
    size_t need = feed__resp_size(argc, lens) + 1, len;
    int rc;

    if (need > sizeof small && !(buf = malloc(need)))
        return REDIS_ERR;
    len = feed__resp_format(buf, argc, argv, lens);
    buf[len] = '\0';
    rc = redisAsyncFormattedCommand(n->ac, on_reply, n, buf, len);
    if (buf != small)
        free(buf);
    return rc;
}

static int refuse(feed_trip *t, const char *why)
{
    t->io = FEED_IO_FAILED;
    feed__msg_keep_n(t->why, sizeof t->why, why);
    return -1;
}

int feed__ra_send(feed_anode *n, feed_trip *t, int64_t now,
                  void (*ended)(void *arg, feed_trip *t), void *arg)
{
    t->io = FEED_IO_OK;
    t->got = 0;
    t->why[0] = '\0';
    if (!n || n->state >= RA_CLOSING)
        return refuse(t, "connection lost");
    if (n->count == n->cap) {
        size_t cap = n->cap ? 2 * n->cap : 16;
        pending *q = malloc(cap * sizeof *q);
        if (!q)
            return refuse(t, "out of memory");
        for (size_t i = 0; i < n->count; i++)
            q[i] = *at(n, i);
        free(n->q);
        n->q = q;
        n->head = 0;
        n->cap = cap;
    }
    for (size_t k = 0; k < t->n; k++) {
        const char **argv;
        const size_t *lens;
        int argc = t->cmd(t->arg, k, &argv, &lens);
        if (append(n, argc, argv, lens) != REDIS_OK) {
            /* Part of the trip may be queued: the connection is out of
             * step, and goes; hiredis still owes those k replies. */
            if (k > 0)
                *at(n, n->count++) = (pending){ NULL, k, now + n->timeout_ms, ended, arg };
            feed__ra_close(n, FEED_IO_FAILED, "out of memory");
            return refuse(t, "out of memory");
        }
    }
    t->ra_seq = n->popped + n->count;
    *at(n, n->count++) = (pending){ t, t->n, now + n->timeout_ms, ended, arg };
    if (n->count == 1)
        arm(n, now);
    return 0;
}

/* O(1): the trip's number says where it sits. A storm sheds thousands of
 * requests with thousands of trips queued on one connection; a search of
 * the ring per shed request kept the loop's thread busy for seconds, long
 * enough for every other request to pass its deadline too. A trip not on
 * this ring (answered already, or sent elsewhere) is not at its place. */
void feed__ra_forget(feed_anode *n, const feed_trip *t)
{
    uint64_t i = t->ra_seq - n->popped;

    if (t->ra_seq >= n->popped && i < n->count && at(n, (size_t)i)->t == t)
        at(n, (size_t)i)->t = NULL;
}

void feed__ra_close(feed_anode *n, int io, const char *why)
{
    enum ra_state was = n->state;

    if (was >= RA_CLOSING)      /* lose() already cleared the owner's pointer */
        return;
    lose(n, RA_CLOSING);
    n->io = io;
    feed__msg_keep_n(n->why, sizeof n->why, why);
    n->loop->timer_stop(n->timer);
    /* hiredis runs every pending reply callback with NULL (each trip ends
     * failed); from inside one of the context's own reply callbacks it does
     * so once that callback returns. Connected, on_disconnect follows and
     * frees n; a context that never connected gets no disconnect callback,
     * so it goes here. */
    redisAsyncFree(n->ac);
    if (was == RA_CONNECTING) {
        n->state = RA_GONE;
        settle(n);
    }
}
