/* pg_async.c -- write transactions on libpq's asynchronous calls, driven
 * by a libevent loop.
 *
 * One connection per loop runs one transaction at a time; the others wait
 * in a queue, in order. A transaction is the same three steps, with the same
 * rules, as the blocking one (backend_sync.c, pgtx.c): BEGIN (on a
 * connection found dead, once more on a fresh one: nothing was done yet),
 * the statement (ROLLBACK after a failure), COMMIT (a connection lost there
 * leaves the outcome unknown). Each step, the connect included, is sent
 * with PQsendQueryParams / PQconnectStartParams, and its socket is watched
 * by the loop for the answer. Each step is bounded too: connect_timeout for
 * a connect, pg_timeout_ms for a statement; a step that overruns drops the
 * connection (no cancel request: that would block the loop), which aborts
 * an uncommitted transaction, and is reported as PostgreSQL being down, or,
 * during COMMIT, as an unknown outcome.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_async.h"
#include "pgtx.h"

enum step { IDLE, CONNECTING, BEGIN, STATEMENT, COMMIT, ROLLBACK };

typedef struct job {
    struct job        *next;
    request           *rq;
    const char        *sql;
    int                nparams;
    const char *const *params;
    tx_done           *done;
    int                retried;     /* BEGIN found the connection dead once */
} job;

struct pg_async {
    struct event_base *base;
    PGconn            *conn;
    struct event      *io;          /* on conn's socket */
    evutil_socket_t    io_fd;
    short              io_what;
    struct event      *timer;       /* the current step's bound */
    struct event      *kick;        /* starts queued jobs from the loop */
    enum step          step;
    int64_t            attempt_us;  /* the last connect */
    job               *head, *tail; /* head runs */
    PGresult          *res;         /* the current step's first result */
    PGresult          *stmt;        /* the statement's result, until COMMIT answers */
    char               err[300];
};

static void run(pg_async *p);
static void step_done(pg_async *p, PGresult *res);
static void on_io(evutil_socket_t fd, short what, void *arg);
static void on_timer(evutil_socket_t fd, short what, void *arg);

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    run(arg);
}

pg_async *pg_async_new(struct event_base *base)
{
    pg_async *p = calloc(1, sizeof *p);

    if (!p)
        return NULL;
    p->base = base;
    p->io_fd = -1;
    p->timer = evtimer_new(base, on_timer, p);
    p->kick = event_new(base, -1, 0, on_kick, p);
    if (!p->timer || !p->kick) {
        if (p->timer)
            event_free(p->timer);
        free(p);
        return NULL;
    }
    return p;
}

/* Wait for what (EV_READ, EV_WRITE) on the connection's socket. */
static void watch(pg_async *p, short what)
{
    evutil_socket_t fd = PQsocket(p->conn);

    if (p->io && (p->io_fd != fd || p->io_what != what)) {
        event_free(p->io);
        p->io = NULL;
    }
    if (!p->io && !(p->io = event_new(p->base, fd, what, on_io, p)))
        return;   /* out of memory: the step's timer ends it */
    p->io_fd = fd;
    p->io_what = what;
    event_add(p->io, NULL);
}

static void bound(pg_async *p, uint32_t ms)
{
    struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000 };

    evtimer_add(p->timer, &tv);
}

static void drop_conn(pg_async *p)
{
    if (p->io) {
        event_free(p->io);
        p->io = NULL;
    }
    if (p->conn) {
        PQfinish(p->conn);
        p->conn = NULL;
    }
}

/* The running job is over: call its completion, start the next one. */
static void complete(pg_async *p, enum tx_result res)
{
    job *j = p->head;
    tx_outcome out = { res, 0, NULL, p->err };

    p->head = j->next;
    if (!p->head)
        p->tail = NULL;
    if (res == TX_OK && p->stmt)
        pg_outcome_rows(p->stmt, &out);
    j->done(j->rq, &out);
    PQclear(p->stmt);
    p->stmt = NULL;
    p->err[0] = '\0';
    free(j);
}

static void send_step(pg_async *p, enum step step, const char *sql, int nparams,
                      const char *const *params)
{
    int flushed;

    p->step = step;
    if (!PQsendQueryParams(p->conn, sql, nparams, NULL, params, NULL, NULL, 0) ||
        (flushed = PQflush(p->conn)) < 0) {
        step_done(p, NULL);   /* the failure is the step's answer */
        return;
    }
    watch(p, flushed ? EV_READ | EV_WRITE : EV_READ);
    bound(p, opt.cfg.pg_timeout_ms);
}

/* Connect; -1 when retry_ms has not passed since the last try (unless
 * force) or libpq refuses at once (p->err says why). */
static int connect_start(pg_async *p, int force)
{
    const char *keys[] = { "connect_timeout", "dbname", NULL };
    const char *vals[] = { PG_CONNECT_TIMEOUT, opt.cfg.pg_conninfo, NULL };
    int64_t t = now_us();

    if (!force && p->attempt_us && t - p->attempt_us < (int64_t)opt.cfg.retry_ms * 1000) {
        if (!p->err[0])
            snprintf(p->err, sizeof p->err, "PostgreSQL: not retried yet (retry_ms)");
        return -1;
    }
    p->attempt_us = t;
    drop_conn(p);
    p->conn = PQconnectStartParams(keys, vals, 1);
    if (!p->conn || PQstatus(p->conn) == CONNECTION_BAD) {
        pg_message(p->conn, NULL, p->err, sizeof p->err);
        return -1;
    }
    p->step = CONNECTING;
    watch(p, EV_WRITE);   /* as if PQconnectPoll had said PGRES_POLLING_WRITING */
    bound(p, (uint32_t)atoi(PG_CONNECT_TIMEOUT) * 1000);
    return 0;
}

/* Start jobs while the connection is idle. */
static void run(pg_async *p)
{
    while (p->step == IDLE && p->head) {
        if (p->conn && PQstatus(p->conn) == CONNECTION_OK) {
            send_step(p, BEGIN, "BEGIN", 0, NULL);
            return;
        }
        if (connect_start(p, p->head->retried) == 0)
            return;
        complete(p, TX_DOWN);
    }
}

/* The step's answer is in (res, NULL when the connection failed). */
static void step_done(pg_async *p, PGresult *res)
{
    enum step step = p->step;
    job *j = p->head;

    evtimer_del(p->timer);
    p->step = IDLE;
    if (pg_command_ok(res)) {
        if (step == BEGIN) {
            PQclear(res);
            send_step(p, STATEMENT, j->sql, j->nparams, j->params);
            return;
        }
        if (step == STATEMENT) {
            p->stmt = res;
            send_step(p, COMMIT, "COMMIT", 0, NULL);
            return;
        }
        PQclear(res);
        if (step == COMMIT)
            complete(p, TX_OK);
        run(p);   /* after ROLLBACK too */
        return;
    }
    if (step != ROLLBACK)
        pg_message(p->conn, res, p->err, sizeof p->err);
    if (step == BEGIN && pg_conn_lost(p->conn, res) && !j->retried) {
        j->retried = 1;   /* a dead connection: once more on a fresh one */
        drop_conn(p);
    } else if (step == BEGIN) {
        complete(p, pg_conn_lost(p->conn, res) ? TX_DOWN : TX_FAILED);
    } else if (step == STATEMENT) {
        complete(p, pg_statement_error(p->conn, res));
        if (PQstatus(p->conn) == CONNECTION_OK) {
            PQclear(res);
            send_step(p, ROLLBACK, "ROLLBACK", 0, NULL);
            return;
        }
    } else if (step == COMMIT) {
        complete(p, pg_conn_lost(p->conn, res) ? TX_UNKNOWN : TX_FAILED);
    }
    PQclear(res);
    run(p);
}

static void connect_poll(pg_async *p)
{
    switch (PQconnectPoll(p->conn)) {
    case PGRES_POLLING_READING:
        watch(p, EV_READ);
        return;
    case PGRES_POLLING_WRITING:
        watch(p, EV_WRITE);
        return;
    case PGRES_POLLING_OK:
        evtimer_del(p->timer);
        p->step = IDLE;
        if (PQsetnonblocking(p->conn, 1) != 0) {
            pg_message(p->conn, NULL, p->err, sizeof p->err);
            drop_conn(p);
            complete(p, TX_DOWN);
        }
        run(p);
        return;
    default:
        evtimer_del(p->timer);
        p->step = IDLE;
        pg_message(p->conn, NULL, p->err, sizeof p->err);
        drop_conn(p);
        complete(p, TX_DOWN);
        run(p);
    }
}

static void on_io(evutil_socket_t fd, short what, void *arg)
{
    pg_async *p = arg;
    PGresult *r;
    int flushed = 0;

    (void)fd;
    if (p->step == CONNECTING) {
        connect_poll(p);
        return;
    }
    if (p->step == IDLE)
        return;
    if (((what & EV_WRITE) && (flushed = PQflush(p->conn)) < 0) ||
        ((what & EV_READ) && !PQconsumeInput(p->conn)) || PQstatus(p->conn) != CONNECTION_OK) {
        PQclear(p->res);
        p->res = NULL;
        step_done(p, NULL);
        return;
    }
    if (!(what & EV_WRITE))
        flushed = PQflush(p->conn);
    /* A step's results: the first one (kept in p->res), then NULL. */
    while (!PQisBusy(p->conn)) {
        if (!(r = PQgetResult(p->conn))) {
            r = p->res;
            p->res = NULL;
            step_done(p, r);
            return;
        }
        if (!p->res)
            p->res = r;
        else
            PQclear(r);
    }
    watch(p, flushed > 0 ? EV_READ | EV_WRITE : EV_READ);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    pg_async *p = arg;
    enum step step = p->step;

    (void)fd;
    (void)what;
    PQclear(p->res);
    p->res = NULL;
    snprintf(p->err, sizeof p->err, "PostgreSQL did not answer within %u ms%s",
             step == CONNECTING ? (unsigned)atoi(PG_CONNECT_TIMEOUT) * 1000
                                : (unsigned)opt.cfg.pg_timeout_ms,
             step == COMMIT ? " to COMMIT" : "");
    drop_conn(p);   /* aborts what was not committed */
    p->step = IDLE;
    if (step != ROLLBACK && p->head)
        complete(p, step == COMMIT ? TX_UNKNOWN : TX_DOWN);
    run(p);
}

void pg_async_tx(pg_async *p, request *rq, const char *sql, int nparams,
                 const char *const *params, tx_done *done)
{
    job *j = calloc(1, sizeof *j);

    if (!j) {
        tx_outcome out = { TX_FAILED, 0, NULL, "out of memory" };
        done(rq, &out);
        return;
    }
    j->rq = rq;
    j->sql = sql;
    j->nparams = nparams;
    j->params = params;
    j->done = done;
    if (p->tail)
        p->tail->next = j;
    else
        p->head = j;
    p->tail = j;
    /* Never complete inside this call: even a job that fails at once (no
     * connection) is started from the loop. */
    if (p->step == IDLE)
        event_active(p->kick, 0, 0);
}

void pg_async_free(pg_async *p)
{
    if (!p)
        return;
    evtimer_del(p->timer);
    snprintf(p->err, sizeof p->err, "the server is stopping");
    while (p->head) {
        enum step step = p->step;
        p->step = IDLE;
        complete(p, step == COMMIT ? TX_UNKNOWN : TX_DOWN);
    }
    drop_conn(p);
    PQclear(p->res);
    event_free(p->timer);
    event_free(p->kick);
    free(p);
}
