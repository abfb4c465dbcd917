/* pg.c -- PostgreSQL's sockets, never blocking: the primary and, when
 * pg_replica_conninfo is set, a read replica. lib/core/pgstmt.c decides
 * what to send and what a result means; this file carries out each step
 * with libpq and hands back what came of it, waiting for the socket event
 * libpq names: with poll() in the blocking driver, with the loop in the
 * async one. A statement past its deadline is cancelled off the caller's
 * thread (libpq 15's PQcancel blocks) and its connection dropped.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"

void feed__pg_init(feed_pg *pg)
{
    memset(pg, 0, sizeof *pg);
}

/* ------------------------------------------------------------------------
 * Cancelling a statement: libpq 15's PQcancel opens a connection to the
 * server and blocks until the server answers, which a frozen server never
 * does. So it runs on a detached thread of its own, and the caller (maybe an
 * event loop) never waits for it. A cancel reaches a server that is merely
 * slow (a lock wait, a long plan) and frees its backend; a frozen one gets
 * it when it wakes. At most PG_CANCELS_MAX run at once, process-wide: past
 * that, the dropped connection alone ends the statement when the server
 * next writes to it.
 * ------------------------------------------------------------------------ */
#define PG_CANCELS_MAX 16
static atomic_int pg_cancels;

static void *pg_cancel_main(void *arg)
{
    char err[256];

    PQcancel(arg, err, sizeof err);   /* best effort: nobody waits for it */
    PQfreeCancel(arg);
    atomic_fetch_sub(&pg_cancels, 1);
    return NULL;
}

static void pg_cancel(PGconn *c)
{
    PGcancel *k;
    pthread_t th;

    if (PQstatus(c) != CONNECTION_OK || PQtransactionStatus(c) != PQTRANS_ACTIVE)
        return;   /* nothing running, or a connect still in its start-up */
    if (atomic_fetch_add(&pg_cancels, 1) >= PG_CANCELS_MAX) {
        atomic_fetch_sub(&pg_cancels, 1);
        return;
    }
    if ((k = PQgetCancel(c)) != NULL && pthread_create(&th, NULL, pg_cancel_main, k) == 0) {
        pthread_detach(th);     /* cannot fail: th is ours, joinable, not joined */
        return;
    }
    PQfreeCancel(k);
    atomic_fetch_sub(&pg_cancels, 1);
}

/* Close a connection, cancelling first what runs on it if asked. */
static void pg_drop(PGconn **conn, int cancel)
{
    if (*conn) {
        if (cancel)
            pg_cancel(*conn);
        PQfinish(*conn);
        *conn = NULL;
    }
}

void feed__pg_free(feed_pg *pg)
{
    for (int i = 0; i < FEED_PG_TEXTS; i++)
        free(pg->texts[i]);
    for (int i = 0; i < 2; i++)
        pg_drop(&pg->side[i].conn, 0);
    memset(pg, 0, sizeof *pg);
}

void feed__pg_task_begin(feed_pgtask *t, feed_pg *pg, feed_core *c, feed_sql *q, char *err,
                         int64_t now)
{
    feed_pgside *s = &pg->side[q->server];

    memset(t, 0, sizeof *t);
    t->conn = &s->conn;
    feed__pgstmt_begin(&t->m, c, q, err, pg->texts, &s->server, now);
    t->doing = FEED_P_DONE;
}

int feed__pg_task_fd(const feed_pgtask *t)
{
    return *t->conn ? PQsocket(*t->conn) : -1;
}

void feed__pg_task_abandon(feed_pgtask *t)
{
    if (!t->done) {
        pg_drop(t->conn, 1);
        PQclear(t->res);
        t->res = NULL;
        feed__pgstmt_end(&t->m);
        t->done = 1;
    }
}

/* What became of the connection and of t->res, for pgstmt. */
static void pg_report(feed_pgtask *t, feed_pgio *io, int how)
{
    PGconn *c = *t->conn;
    PGresult *r = t->res;
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    feed_pgcell *cell;

    io->how = how;
    io->conn_ok = PQstatus(c) == CONNECTION_OK;
    io->message = PQerrorMessage(c);
    if (how != FEED_PIO_DONE || !r)
        return;
    io->status = st == PGRES_COMMAND_OK ? FEED_PGR_COMMAND
               : st == PGRES_TUPLES_OK ? FEED_PGR_TUPLES : FEED_PGR_ERROR;
    io->ntuples = PQntuples(r);
    io->nfields = PQnfields(r);
    for (int i = 0; i < 2 && i < io->nfields; i++)
        io->types[i] = PQftype(r, i);
    if (io->status != FEED_PGR_TUPLES)
        return;
    if (!(io->cells = cell = t->cells = malloc(((size_t)io->ntuples * (size_t)io->nfields + 1)
                                                  * sizeof *cell)))
        io->how = FEED_PIO_NOMEM;
    for (int i = 0; cell && i < io->ntuples; i++)
        for (int k = 0; k < io->nfields; k++, cell++) {
            cell->v = PQgetisnull(r, i, k) ? NULL : PQgetvalue(r, i, k);
            cell->len = PQgetlength(r, i, k);
        }
}

/* Carry on with what t->doing started; a statement's results are
 * flushed, read, and the first error kept over other results.
 * FEED_PGW_DONE: over, *io says how; else what to wait for. */
static int pg_progress(feed_pgtask *t, feed_pgio *io)
{
    PGconn *c = *t->conn;
    PGresult *r;
    int pending, broken;

    if (t->doing == FEED_P_CONNECT) {
        PostgresPollingStatusType st = PQstatus(c) == CONNECTION_BAD
            ? PGRES_POLLING_FAILED : PQconnectPoll(c);
        if (st == PGRES_POLLING_READING || st == PGRES_POLLING_WRITING)
            return t->want = st == PGRES_POLLING_READING ? FEED_PGW_READ : FEED_PGW_WRITE;
        if (st == PGRES_POLLING_OK)
            PQsetErrorVerbosity(c, PQERRORS_DEFAULT);
        pg_report(t, io, st == PGRES_POLLING_OK && PQsetnonblocking(c, 1) == 0
                         ? FEED_PIO_DONE : FEED_PIO_BROKEN);
        io->needs_password = PQconnectionNeedsPassword(c);
    } else {
        for (;;) {
            pending = PQflush(c);
            if ((broken = pending < 0 || (!pending && !PQconsumeInput(c))))
                break;
            if (pending || PQisBusy(c))
                return t->want = pending ? FEED_PGW_WRITE : FEED_PGW_READ;
            if (!(r = PQgetResult(c)))
                break;
            if (!t->res || (PQresultStatus(r) == PGRES_FATAL_ERROR &&
                            PQresultStatus(t->res) != PGRES_FATAL_ERROR)) {
                PQclear(t->res);
                t->res = r;
            } else {
                PQclear(r);
            }
        }
        pg_report(t, io, broken || !t->res ? FEED_PIO_BROKEN : FEED_PIO_DONE);
    }
    t->doing = FEED_P_DONE;
    return FEED_PGW_DONE;
}

/* Start what pgstmt asks for. 1: started; 0: failed at once, *io says how. */
static int pg_start(feed_pgtask *t, enum feed_pwant want, feed_pgio *io)
{
    const feed_pgstmt *m = &t->m;
    PGconn *c = *t->conn;
    int ok;

    switch (want) {
    case FEED_P_CONNECT:
        if (!(*t->conn = PQconnectStart(m->text))) {
            io->how = FEED_PIO_NOMEM;
            return 0;
        }
        PQsetErrorVerbosity(*t->conn, PQERRORS_VERBOSE);
        return 1;
    case FEED_P_PREPARE:
        ok = PQsendPrepare(c, m->name, m->text, m->nparams, m->types);
        break;
    case FEED_P_DESCRIBE:
        ok = PQsendDescribePrepared(c, m->name);
        break;
    default:
        ok = m->name ? PQsendQueryPrepared(c, m->name, m->nparams, m->values, m->lengths,
                                           m->formats, m->formats != NULL)
                     : PQsendQueryParams(c, m->text, m->nparams, NULL, m->values, m->lengths,
                                         m->formats, m->formats != NULL);
    }
    if (!ok)
        pg_report(t, io, FEED_PIO_BROKEN);
    return ok;
}

int feed__pg_task_run(feed_pgtask *t, int ready, int64_t now)
{
    feed_pgio io = { .how = FEED_PIO_START };
    enum feed_pwant want;

    if (t->done)
        return FEED_PGW_DONE;
    if (t->doing != FEED_P_DONE && !ready && now >= t->m.deadline)
        io.how = FEED_PIO_TIMEOUT;
    else if (t->doing != FEED_P_DONE && pg_progress(t, &io) != FEED_PGW_DONE)
        return t->want;
    if (io.how == FEED_PIO_START && *t->conn) {
        io.had_conn = 1;
        io.conn_ok = PQstatus(*t->conn) == CONNECTION_OK;
    }
    for (;;) {
        want = feed__pgstmt_next(&t->m, &io, now);
        free(t->cells);
        t->cells = NULL;
        PQclear(t->res);
        t->res = NULL;
        if (t->m.drop)
            pg_drop(t->conn, t->m.cancel);
        if (want == FEED_P_DONE) {
            t->done = 1;
            t->rc = t->m.rc;
            return t->want = FEED_PGW_DONE;
        }
        memset(&io, 0, sizeof io);
        if (!pg_start(t, want, &io))
            continue;
        t->doing = want;
        if (pg_progress(t, &io) != FEED_PGW_DONE)
            return t->want;
    }
}
