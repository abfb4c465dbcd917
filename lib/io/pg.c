/* pg.c -- PostgreSQL, without ever blocking: the primary and, when
 * pg_replica_conninfo is set, a read replica; three prepared statements on
 * each (four with an authors' table).
 *
 *   feedcache_top    the first rows of a feed:      WHERE owner = $1
 *   feedcache_after  the rows after a cursor:       WHERE owner = $1
 *                                                   AND (score, id) < ($2, $3)
 *   feedcache_before the rows above a cursor (pull-to-refresh):
 *                    (score, id) > ($2, $3) ORDER BY score ASC, id ASC
 * the first two ORDER BY score DESC, id DESC LIMIT n, which the index on
 * (owner, score DESC, id DESC) answers as a seek plus n rows. With an
 * authors' table (read-time merge, lib/core/merged.c) one more:
 *   feedcache_merge  the first $4 rows after ($2, $3) of feed $1 and of
 *                    each author of the array $5, one seek plus $4 rows a
 *                    source (a LATERAL subquery per author), tagged with
 *                    the source: 0 the feed, k the k-th author. Identifiers from
 * the config are quoted by libpq; values only ever travel as parameters.
 * Parameters and results use the binary format: int8 in network order, no
 * text parsing, nothing lost.
 *
 * A statement is a task (feed_pgtask): connect if needed (PQconnectStart,
 * PQconnectPoll), check the column types and prepare the statements on a
 * new connection, send the statement (PQsend*), collect its result. Each
 * step says which socket event it waits for and until when; the blocking
 * driver waits with poll(), the async driver with its loop, so both run
 * this one code. One task has one deadline, pg_timeout_ms from its start.
 * When it passes, the statement is cancelled (off the caller's thread:
 * libpq 15's PQcancel blocks), the connection dropped, and the next connect
 * waits retry_ms like any other: a frozen server costs one caller one
 * timeout per retry_ms, not every caller every time.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"

#define INT8OID 20
#define INT8ARRAYOID 1016

static const char *const stmt_name[FEED_SQL_STMTS] = {
    "feedcache_top", "feedcache_after", "feedcache_before", "feedcache_merge"
};

static void put_be64(char *p, int64_t v)
{
    uint64_t u = (uint64_t)v;

    for (int i = 7; i >= 0; i--) {
        p[i] = (char)(u & 0xff);
        u >>= 8;
    }
}

static int64_t get_be64(const char *p)
{
    uint64_t u = 0;

    for (int i = 0; i < 8; i++)
        u = (u << 8) | (unsigned char)p[i];
    return (int64_t)u;
}

void feed__pg_init(feed_pg *pg)
{
    memset(pg, 0, sizeof *pg);
    pg->side[FEED_PG_REPLICA].replica = 1;
}

static void drop(feed_pgside *s)
{
    if (s->conn) {
        PQfinish(s->conn);
        s->conn = NULL;
    }
}

void feed__pg_free(feed_pg *pg)
{
    drop(&pg->side[0]);
    drop(&pg->side[1]);
    for (int i = 0; i < FEED_SQL_STMTS; i++)
        free(pg->sql[i]);
    memset(pg, 0, sizeof *pg);
}

/* libpq's messages end in a newline and, for a failed connect (asked in
 * verbose mode, see refused), carry a LOCATION line (the server source line
 * that raised the error); ours are one line with neither. */
static int pg_error(feed_pgtask *t, int code, const char *what, const char *detail)
{
    char text[FEED_ERRMSG];
    size_t len = 0;

    while (*detail && len + 1 < sizeof text) {
        size_t line = strcspn(detail, "\n");
        if (strncmp(detail, "LOCATION:", 9) != 0) {
            size_t n = line < sizeof text - 1 - len ? line : sizeof text - 1 - len;
            memcpy(text + len, detail, n);
            len += n;
            if (len + 1 < sizeof text && detail[line])
                text[len++] = ' ';
        }
        detail += line + (detail[line] != '\0');
    }
    while (len > 0 && text[len - 1] == ' ')
        len--;
    text[len] = '\0';
    t->c->stats.pg_errors++;
    return feed__msg(t->err, code, "%s %s: %s", t->name, what, text);
}

/* ------------------------------------------------------------------------
 * Cancelling a statement: libpq 15's PQcancel opens a connection to the
 * server and blocks until the server answers, which a frozen server never
 * does. So it runs on a detached thread of its own, and the caller (maybe an
 * event loop) never waits for it. A cancel reaches a server that is merely
 * slow (a lock wait, a long plan) and frees its backend; a frozen one gets
 * it when it wakes. At most CANCELS_MAX run at once, process-wide: past
 * that, the dropped connection alone ends the statement when the server
 * next writes to it.
 * ------------------------------------------------------------------------ */
#define CANCELS_MAX 16
static atomic_int cancels_running;

static void *cancel_main(void *arg)
{
    char err[256];

    PQcancel(arg, err, sizeof err);   /* best effort: nobody waits for it */
    PQfreeCancel(arg);
    atomic_fetch_sub(&cancels_running, 1);
    return NULL;
}

static void cancel_async(PGconn *c)
{
    PGcancel *k;
    pthread_attr_t attr;
    pthread_t th;
    int started = 0;

    if (PQstatus(c) != CONNECTION_OK || PQtransactionStatus(c) != PQTRANS_ACTIVE)
        return;   /* nothing running, or a connect still in its start-up */
    if (atomic_fetch_add(&cancels_running, 1) >= CANCELS_MAX) {
        atomic_fetch_sub(&cancels_running, 1);
        return;
    }
    if ((k = PQgetCancel(c)) != NULL && pthread_attr_init(&attr) == 0) {
        if (pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0)
            started = pthread_create(&th, &attr, cancel_main, k) == 0;
        pthread_attr_destroy(&attr);
    }
    if (!started) {
        PQfreeCancel(k);
        atomic_fetch_sub(&cancels_running, 1);
    }
}

/* ------------------------------------------------------------------------
 * The statements' text
 * ------------------------------------------------------------------------ */

/* The read-time merge's statement: the reader's feed ($1; NULL for none)
 * and each author of $5, up to $4 rows after ($2, $3) each, every source
 * one index seek (the LATERAL keeps the authors' scans apart: author =
 * ANY($5) alone would read every row of every author after the cursor and
 * sort them). Rows come tagged with their source; their order is checked
 * when they are taken. */
static int build_merge_sql(feed_pgtask *t, PGconn *conn)
{
    const feed_config *cfg = &t->c->cfg;
    const char *names[6] = { cfg->table, cfg->owner_column, cfg->score_column,
                             cfg->id_column, cfg->author_table, cfg->author_column };
    char *q[6] = { NULL, NULL, NULL, NULL, NULL, NULL };
    char **sql = &t->pg->sql[FEED_SQL_MERGE];
    int rc = FEED_OK;
    size_t cap = 600;

    for (int i = 0; i < 6 && rc == FEED_OK; i++) {
        q[i] = PQescapeIdentifier(conn, names[i], strlen(names[i]));
        if (!q[i])
            rc = pg_error(t, FEED_EPG, "quoting an identifier", PQerrorMessage(conn));
        else
            cap += 4 * strlen(q[i]);
    }
    if (rc == FEED_OK && !(*sql = malloc(cap)))
        rc = feed__msg(t->err, FEED_ENOMEM, "out of memory building SQL");
    if (rc == FEED_OK)
        snprintf(*sql, cap,
                 "SELECT 0::int8, s, i FROM (SELECT %s::int8 AS s, %s::int8 AS i FROM %s"
                 " WHERE %s = $1 AND (%s, %s) < ($2, $3) ORDER BY %s DESC, %s DESC LIMIT $4) r"
                 " UNION ALL"
                 " SELECT a.k, p.s, p.i FROM unnest($5::int8[]) WITH ORDINALITY AS a(who, k),"
                 " LATERAL (SELECT %s::int8 AS s, %s::int8 AS i FROM %s"
                 " WHERE %s = a.who AND (%s, %s) < ($2, $3) ORDER BY %s DESC, %s DESC"
                 " LIMIT $4) p",
                 q[2], q[3], q[0], q[1], q[2], q[3], q[2], q[3],
                 q[2], q[3], q[4], q[5], q[2], q[3], q[2], q[3]);
    for (int i = 0; i < 6; i++)
        PQfreemem(q[i]);
    return rc;
}

/* Build the statements' text once, with the identifiers quoted. */
static int build_sql(feed_pgtask *t, PGconn *conn)
{
    const feed_config *cfg = &t->c->cfg;
    const char *names[4] = { cfg->table, cfg->owner_column, cfg->score_column, cfg->id_column };
    char *q[4] = { NULL, NULL, NULL, NULL };
    char **sql = t->pg->sql;
    int rc = FEED_OK;
    size_t cap;

    if (sql[0])
        return FEED_OK;
    for (int i = 0; i < 4 && rc == FEED_OK; i++) {
        q[i] = PQescapeIdentifier(conn, names[i], strlen(names[i]));
        if (!q[i])
            rc = pg_error(t, FEED_EPG, "quoting an identifier", PQerrorMessage(conn));
    }
    if (rc == FEED_OK) {
        cap = 200 + 3 * (strlen(q[0]) + strlen(q[1]) + 2 * strlen(q[2]) + 2 * strlen(q[3]));
        for (int i = 0; i < FEED_SQL_MERGE; i++)
            sql[i] = malloc(cap);
        if (!sql[0] || !sql[1] || !sql[2]) {
            rc = feed__msg(t->err, FEED_ENOMEM, "out of memory building SQL");
        } else {
            snprintf(sql[FEED_SQL_TOP], cap,
                     "SELECT %s::int8, %s::int8 FROM %s WHERE %s = $1"
                     " ORDER BY %s DESC, %s DESC LIMIT $2",
                     q[2], q[3], q[0], q[1], q[2], q[3]);
            snprintf(sql[FEED_SQL_AFTER], cap,
                     "SELECT %s::int8, %s::int8 FROM %s WHERE %s = $1"
                     " AND (%s, %s) < ($2, $3)"
                     " ORDER BY %s DESC, %s DESC LIMIT $4",
                     q[2], q[3], q[0], q[1], q[2], q[3], q[2], q[3]);
            snprintf(sql[FEED_SQL_BEFORE], cap,   /* pull-to-refresh, closest first */
                     "SELECT %s::int8, %s::int8 FROM %s WHERE %s = $1"
                     " AND (%s, %s) > ($2, $3)"
                     " ORDER BY %s ASC, %s ASC LIMIT $4",
                     q[2], q[3], q[0], q[1], q[2], q[3], q[2], q[3]);
        }
    }
    for (int i = 0; i < 4; i++)
        PQfreemem(q[i]);
    if (rc == FEED_OK && cfg->author_table)
        rc = build_merge_sql(t, conn);
    if (rc != FEED_OK)
        for (int i = 0; i < FEED_SQL_STMTS; i++) {
            free(sql[i]);
            sql[i] = NULL;
        }
    return rc;
}

/* The type check's text: SELECT score, id FROM table WHERE false. */
static char *types_sql(feed_pgtask *t, PGconn *conn, const char *table)
{
    const feed_config *cfg = &t->c->cfg;
    const char *names[3] = { cfg->score_column, cfg->id_column, table };
    char *q[3] = { NULL, NULL, NULL }, *sql = NULL;
    int ok = 1;

    for (int i = 0; i < 3 && ok; i++)
        if (!(q[i] = PQescapeIdentifier(conn, names[i], strlen(names[i])))) {
            t->setup_rc = pg_error(t, FEED_EPG, "quoting an identifier", PQerrorMessage(conn));
            ok = 0;
        }
    if (ok) {
        size_t cap = strlen(q[0]) + strlen(q[1]) + strlen(q[2]) + 40;
        if ((sql = malloc(cap)) != NULL)
            snprintf(sql, cap, "SELECT %s, %s FROM %s WHERE false", q[0], q[1], q[2]);
        else
            t->setup_rc = feed__msg(t->err, FEED_ENOMEM, "out of memory building SQL");
    }
    for (int i = 0; i < 3; i++)
        PQfreemem(q[i]);
    return sql;
}

/* The score and id columns must be integers. The statements read them as
 * ::int8, which is exact for smallint, integer and bigint but would round a
 * numeric or double score (1.5 -> 2) and so order the cache differently from
 * SQL: refuse such a table (or view) at once, with its column types named.
 * Costs one prepare and one describe per connection. */
static int check_types(feed_pgtask *t, const PGresult *res, const char *table)
{
    const feed_config *cfg = &t->c->cfg;

    for (int i = 0; i < 2; i++) {
        Oid ty = PQftype(res, i);
        const char *name = ty == 1700 ? "numeric" : ty == 700 ? "real" :
                           ty == 701 ? "double precision" : ty == 25 ? "text" :
                           ty == 1043 ? "varchar" : "another type";
        if (ty != 20 && ty != 21 && ty != 23) {   /* int8, int2, int4 */
            t->c->stats.pg_errors++;
            return feed__msg(t->err, FEED_EPG, "%s: column \"%s\" of \"%s\" is %s (oid %u);"
                             " the score and id columns must be integer types"
                             " (smallint, integer or bigint)", t->name,
                             i == 0 ? cfg->score_column : cfg->id_column, table, name,
                             (unsigned)ty);
        }
    }
    return FEED_OK;
}

/* Did a failed connect reach a server that refused us (bad password, no
 * such database or user: a configuration error, FEED_EPG), rather than no
 * server, or one not accepting connections now (FEED_EUNAVAILABLE)? libpq
 * keeps the SQLSTATE of a start-up error to itself, but in verbose mode
 * writes it into the message: "FATAL:  3D000: database ...". 57P03 is
 * "cannot connect now": starting up, shutting down, in recovery. */
static int refused(PGconn *c)
{
    const char *m = PQerrorMessage(c);

    if (PQconnectionNeedsPassword(c))
        return 1;
    for (const char *p = strstr(m, ":  "); p; p = strstr(p + 1, ":  ")) {
        const char *code = p + 3;
        if (strspn(code, "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ") == 5 && code[5] == ':')
            return strncmp(code, "57P03", 5) != 0;
    }
    return 0;
}

/* Copy a result into rows, checking every value: a score outside the range
 * Redis holds exactly, or a negative id, is an error, never a wrong page. */
static int take_rows(feed_pgtask *t, PGresult *res, feed_rows *rows)
{
    int n = PQntuples(res);

    if (PQnfields(res) != 2)
        return pg_error(t, FEED_EPG, "query", "unexpected result shape");
    rows->items = malloc(((size_t)n + 1) * sizeof *rows->items);
    if (!rows->items)
        return feed__msg(t->err, FEED_ENOMEM, "out of memory for %d rows", n);
    for (int i = 0; i < n; i++) {
        feed_item *it = &rows->items[i];
        if (PQgetisnull(res, i, 0) || PQgetisnull(res, i, 1) ||
            PQgetlength(res, i, 0) != 8 || PQgetlength(res, i, 1) != 8) {
            feed__rows_free(rows);
            return pg_error(t, FEED_EPG, "query", "NULL or non-int8 score or id");
        }
        it->score = get_be64(PQgetvalue(res, i, 0));
        it->id = get_be64(PQgetvalue(res, i, 1));
        if (!feed__score_ok(it->score) || it->id < 0) {
            long long sc = it->score, id = it->id;
            feed__rows_free(rows);
            return feed__msg(t->err, FEED_ERANGE,
                             "row of owner %lld in SQL has id %lld, score %lld:"
                             " scores must lie within +/-(2^53-1), ids >= 0",
                             (long long)t->q->uid, id, sc);
        }
    }
    rows->count = (size_t)n;
    return FEED_OK;
}

/* ------------------------------------------------------------------------
 * The task
 * ------------------------------------------------------------------------ */

enum {
    T_START,        /* is the server connected? else connect */
    T_CONNECTING,   /* PQconnectPoll */
    T_SETUP,        /* send the next set-up statement (types, prepares) */
    T_SETUP_WAIT,   /* its result */
    T_SEND,         /* send the statement */
    T_WAIT,         /* its result */
    T_DONE
};
/* Set-up steps on a new connection: the type check (a prepare, then a
 * describe) of the feed table, then of the authors' table (if any), then
 * the statements prepared (feedcache_merge only with an authors' table). */
enum { SU_TYPES, SU_DESCRIBE, SU_AUTHOR_TYPES, SU_AUTHOR_DESCRIBE, SU_PREPARE,
       SU_END = SU_PREPARE + FEED_SQL_STMTS };

/* The set-up step after step: those of the authors' table only with one. */
static int next_step(const feed_pgtask *t, int step)
{
    step++;
    if (!t->c->cfg.author_table && (step == SU_AUTHOR_TYPES || step == SU_AUTHOR_DESCRIBE ||
                                    step == SU_PREPARE + FEED_SQL_MERGE))
        return next_step(t, step);
    return step;
}

static int finish(feed_pgtask *t, int rc)
{
    /* A statement that could not run is PostgreSQL's failure (FEED_EPG);
     * only a connect (feed_open) tells "no answer" from "refused". */
    if (rc == FEED_EUNAVAILABLE && t->q->stmt >= 0 && t->q->stmt < FEED_SQL_STMTS)
        rc = FEED_EPG;
    PQclear(t->res);
    t->res = NULL;
    free(t->array);
    t->array = NULL;
    t->rc = rc;
    t->state = T_DONE;
    t->want = FEED_PGW_DONE;
    return FEED_PGW_DONE;
}

static int wait_for(feed_pgtask *t, int want)
{
    t->want = want;
    return want;
}

void feed__pg_task_begin(feed_pgtask *t, feed_pg *pg, feed_core *c, feed_sql *q, char *err,
                         int64_t now)
{
    memset(t, 0, sizeof *t);
    t->pg = pg;
    t->c = c;
    t->q = q;
    t->err = err;
    t->s = &pg->side[q->server];
    t->name = q->server == FEED_PG_REPLICA ? "PostgreSQL replica" : "PostgreSQL";
    t->deadline = now + c->cfg.pg_timeout_ms;
    t->was_up = t->s->conn != NULL;
    t->state = T_START;
    q->rows.items = NULL;
    q->rows.count = 0;
    if (q->stmt == FEED_SQL_MERGE)
        for (size_t k = 0; k <= q->nauthors; k++)
            q->tagged[k] = (feed_rows){ NULL, 0 };
}

int feed__pg_task_fd(const feed_pgtask *t)
{
    return t->s->conn ? PQsocket(t->s->conn) : -1;
}

void feed__pg_task_abandon(feed_pgtask *t)
{
    if (t->state != T_DONE) {
        if (t->s->conn)
            cancel_async(t->s->conn);
        drop(t->s);
        PQclear(t->res);
        t->res = NULL;
        free(t->array);
        t->array = NULL;
        t->state = T_DONE;
    }
}

/* pg_timeout_ms ran out: cancel whatever runs, count it, and make the
 * next connect wait retry_ms. */
static int timed_out(feed_pgtask *t, const char *what, int64_t now)
{
    if (t->s->conn)
        cancel_async(t->s->conn);
    drop(t->s);
    t->s->attempt_ms = now;
    t->c->stats.pg_timeouts++;
    t->c->stats.pg_errors++;
    t->late = 1;
    feed__msg(t->err, FEED_EUNAVAILABLE, "%s %s: no answer within pg_timeout_ms (%u ms); "
              "connection dropped", t->name, what, t->c->cfg.pg_timeout_ms);
    return FEED_EUNAVAILABLE;
}

/* Collect the result of what was sent: flush, read, and keep the first
 * error over other results. 1: *res complete (maybe NULL: broken); 0: wait
 * for t->want. */
static int collect(feed_pgtask *t, int *broken)
{
    PGconn *c = t->s->conn;

    *broken = 0;
    for (;;) {
        int pending = PQflush(c);
        PGresult *r;
        if (pending < 0) {
            *broken = 1;
            return 1;
        }
        if (pending) {
            t->want = FEED_PGW_WRITE;
            return 0;
        }
        if (!PQconsumeInput(c)) {
            *broken = 1;
            return 1;
        }
        if (PQisBusy(c)) {
            t->want = FEED_PGW_READ;
            return 0;
        }
        if (!(r = PQgetResult(c))) {
            *broken = t->res == NULL;
            return 1;
        }
        if (!t->res || (PQresultStatus(r) == PGRES_FATAL_ERROR &&
                        PQresultStatus(t->res) != PGRES_FATAL_ERROR)) {
            PQclear(t->res);
            t->res = r;
        } else {
            PQclear(r);
        }
    }
}

/* The statement text for a probe of the replica's lag. */
static const char *probe_sql(int stmt)
{
    return stmt == FEED_SQL_PROBE_PRIMARY ? "SELECT pg_current_wal_insert_lsn()::text"
        : "SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false),"
          " coalesce(pg_last_wal_replay_lsn() >= $2::pg_lsn, false)";
}

static int send_setup(feed_pgtask *t)
{
    static const Oid types[5] = { INT8OID, INT8OID, INT8OID, INT8OID, INT8ARRAYOID };
    static const int nparams[FEED_SQL_STMTS] = { 2, 4, 4, 5 };
    PGconn *c = t->s->conn;
    char *sql;
    int ok;

    switch (t->step) {
    case SU_TYPES:
    case SU_AUTHOR_TYPES:
        if (!(sql = types_sql(t, c, t->step == SU_TYPES ? t->c->cfg.table
                                                        : t->c->cfg.author_table)))
            return -1;
        ok = PQsendPrepare(c, "", sql, 0, NULL);
        free(sql);
        return ok;
    case SU_DESCRIBE:
    case SU_AUTHOR_DESCRIBE:
        return PQsendDescribePrepared(c, "");
    default:
        /* A refusal here is the schema's (no such table or column):
         * retrying will not help (FEED_EPG). A dead connection is an
         * outage. */
        t->c->stats.sql_queries++;
        return PQsendPrepare(c, stmt_name[t->step - SU_PREPARE], t->pg->sql[t->step - SU_PREPARE],
                             nparams[t->step - SU_PREPARE], types);
    }
}

/* The authors as an int8[] in text, "{1,2,3}": malloc'd, or NULL. */
static char *int8_array(const int64_t *v, size_t n)
{
    char *text = malloc(n * 21 + 3), *p = text;

    if (!text)
        return NULL;
    *p++ = '{';
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            *p++ = ',';
        p += feed__i64_to_str(v[i], p);
    }
    *p++ = '}';
    *p = '\0';
    return text;
}

/* 1 sent, 0 not (the connection), -1 no memory (t->setup_rc says so). */
static int send_statement(feed_pgtask *t)
{
    static const int lengths[5] = { 8, 8, 8, 8, 0 }, formats[5] = { 1, 1, 1, 1, 0 };
    feed_sql *q = t->q;
    PGconn *c = t->s->conn;
    const char *values[5];

    t->c->stats.sql_queries++;
    t->c->stats.replica_queries += t->s->replica;
    if (q->stmt >= FEED_SQL_STMTS) {            /* a lag probe: text in, text out */
        values[0] = q->text[0];
        values[1] = q->text[1];
        return PQsendQueryParams(c, probe_sql(q->stmt),
                                 q->stmt == FEED_SQL_PROBE_PRIMARY ? 0 : 2, NULL, values,
                                 NULL, NULL, 0);
    }
    for (int i = 0; i < q->nparams; i++) {
        put_be64(t->buf[i], q->params[i]);
        values[i] = t->buf[i];
    }
    if (q->stmt == FEED_SQL_MERGE) {
        if (!t->array && !(t->array = int8_array(q->authors, q->nauthors))) {
            t->setup_rc = feed__msg(t->err, FEED_ENOMEM, "out of memory for %zu authors",
                                    q->nauthors);
            return -1;
        }
        if (!q->with_feed)
            values[0] = NULL;       /* the feed is no source: no rows of it */
        values[4] = t->array;
        return PQsendQueryPrepared(c, stmt_name[q->stmt], 5, values, lengths, formats, 1);
    }
    return PQsendQueryPrepared(c, stmt_name[q->stmt], q->nparams, values, lengths, formats, 1);
}

static int by_order(const void *x, const void *y)
{
    const feed_item *a = x, *b = y;

    if (a->score != b->score)
        return a->score > b->score ? -1 : 1;
    return a->id > b->id ? -1 : a->id < b->id;
}

/* Rows (source, score, id) into q->tagged[source], each in (score DESC, id
 * DESC) order (sorted when the server sent them otherwise), every value
 * checked as take_rows does. */
static int take_tagged(feed_pgtask *t, PGresult *res)
{
    feed_sql *q = t->q;
    size_t nsrc = q->nauthors + 1, *count = calloc(nsrc, sizeof *count);
    feed_rows *rows = q->tagged;
    int n = PQntuples(res), rc = FEED_OK;

    if (!count)
        return feed__msg(t->err, FEED_ENOMEM, "out of memory for %d rows", n);
    if (PQnfields(res) != 3)
        rc = pg_error(t, FEED_EPG, "query", "unexpected result shape");
    for (int i = 0; i < n && rc == FEED_OK; i++) {
        int64_t src;
        for (int c = 0; c < 3 && rc == FEED_OK; c++)
            if (PQgetisnull(res, i, c) || PQgetlength(res, i, c) != 8)
                rc = pg_error(t, FEED_EPG, "query", "NULL or non-int8 source, score or id");
        if (rc == FEED_OK && ((src = get_be64(PQgetvalue(res, i, 0))) < 0 ||
                              (uint64_t)src >= nsrc))
            rc = pg_error(t, FEED_EPG, "query", "a row of no source asked for");
        if (rc == FEED_OK)
            count[src]++;
    }
    for (size_t k = 0; k < nsrc && rc == FEED_OK; k++)
        if (!(rows[k].items = malloc((count[k] + 1) * sizeof *rows[k].items)))
            rc = feed__msg(t->err, FEED_ENOMEM, "out of memory for %d rows", n);
    for (int i = 0; i < n && rc == FEED_OK; i++) {
        feed_rows *r = &rows[get_be64(PQgetvalue(res, i, 0))];
        feed_item *it = &r->items[r->count++];
        it->score = get_be64(PQgetvalue(res, i, 1));
        it->id = get_be64(PQgetvalue(res, i, 2));
        if (!feed__score_ok(it->score) || it->id < 0)
            rc = feed__msg(t->err, FEED_ERANGE, "row in SQL has id %lld, score %lld: scores must"
                           " lie within +/-(2^53-1), ids >= 0", (long long)it->id,
                           (long long)it->score);
    }
    for (size_t k = 0; k < nsrc && rc == FEED_OK; k++)
        for (size_t i = 1; i < rows[k].count; i++)
            if (by_order(&rows[k].items[i - 1], &rows[k].items[i]) >= 0) {
                qsort(rows[k].items, rows[k].count, sizeof *rows[k].items, by_order);
                break;
            }
    if (rc != FEED_OK)
        for (size_t k = 0; k < nsrc; k++)
            feed__rows_free(&rows[k]);
    free(count);
    return rc;
}

/* The statement's result, checked. */
static int take_result(feed_pgtask *t)
{
    feed_sql *q = t->q;
    PGresult *res = t->res;

    if (q->stmt >= FEED_SQL_STMTS) {
        if (PQntuples(res) != 1)
            return pg_error(t, FEED_EPG, "lag probe", "not one row");
        for (int i = 0; i < PQnfields(res) && i < 2; i++)
            snprintf(q->text[i], sizeof q->text[i], "%s", PQgetvalue(res, 0, i));
        return FEED_OK;
    }
    if (q->stmt == FEED_SQL_MERGE)
        return take_tagged(t, res);
    return take_rows(t, res, &q->rows);
}

int feed__pg_task_run(feed_pgtask *t, int ready, int64_t now)
{
    feed_pgside *s = t->s;
    const char *what;
    int rc, broken;

    if (t->state == T_DONE)
        return FEED_PGW_DONE;
    if (!ready && t->state != T_START && t->state != T_SEND && t->state != T_SETUP &&
        now >= t->deadline) {
        what = t->state == T_CONNECTING ? "connect" : t->state == T_WAIT ? "query" : "prepare";
        if (t->q->stmt >= FEED_SQL_STMTS)
            what = "lag probe";
        return finish(t, timed_out(t, what, now));
    }
    for (;;) {
        switch (t->state) {
        case T_START:
            if (s->conn && PQstatus(s->conn) == CONNECTION_OK) {
                t->state = t->q->stmt < 0 ? T_DONE : T_SEND;
                if (t->q->stmt < 0)
                    return finish(t, FEED_OK);
                continue;
            }
            drop(s);
            rc = feed__retry_due(t->c, s->attempt_ms, now, t->name, t->err);
            if (rc != FEED_OK)
                return finish(t, rc);
            s->attempt_ms = now;
            t->c->stats.pg_connects++;
            if (s->replica) {
                /* A lag proof holds for the server it was taken on: a new
                 * connection may reach another (a multi-host conninfo). */
                t->c->replica_fresh_until = 0;
                t->c->replica_probe_ms = 0;
            }
            s->conn = PQconnectStart(s->replica ? t->c->cfg.pg_replica_conninfo
                                                : t->c->cfg.pg_conninfo);
            if (!s->conn)
                return finish(t, feed__msg(t->err, FEED_ENOMEM, "%s connect: out of memory",
                                           t->name));
            PQsetErrorVerbosity(s->conn, PQERRORS_VERBOSE);
            t->state = T_CONNECTING;
            t->want = FEED_PGW_WRITE;
            /* fall through: PQconnectPoll's first call says what to wait for */
            /* FALLTHROUGH */
        case T_CONNECTING: {
            PostgresPollingStatusType st = PQstatus(s->conn) == CONNECTION_BAD
                ? PGRES_POLLING_FAILED : PQconnectPoll(s->conn);
            if (st == PGRES_POLLING_FAILED) {
                rc = pg_error(t, refused(s->conn) ? FEED_EPG : FEED_EUNAVAILABLE, "connect",
                              PQerrorMessage(s->conn));
                drop(s);
                return finish(t, rc);
            }
            if (st == PGRES_POLLING_READING)
                return wait_for(t, FEED_PGW_READ);
            if (st == PGRES_POLLING_WRITING)
                return wait_for(t, FEED_PGW_WRITE);
            PQsetErrorVerbosity(s->conn, PQERRORS_DEFAULT);
            if (PQsetnonblocking(s->conn, 1) != 0) {
                rc = pg_error(t, FEED_EUNAVAILABLE, "connect", PQerrorMessage(s->conn));
                drop(s);
                return finish(t, rc);
            }
            if ((rc = build_sql(t, s->conn)) != FEED_OK) {
                drop(s);
                return finish(t, rc);
            }
            t->step = SU_TYPES;
            t->state = T_SETUP;
            continue;
        }
        case T_SETUP:
            if (t->step == SU_END) {
                if (t->q->stmt < 0)
                    return finish(t, FEED_OK);
                t->state = T_SEND;
                continue;
            }
            if ((rc = send_setup(t)) <= 0) {
                rc = rc < 0 ? t->setup_rc
                   : pg_error(t, FEED_EUNAVAILABLE, "prepare", PQerrorMessage(s->conn));
                drop(s);
                return finish(t, rc);
            }
            t->state = T_SETUP_WAIT;
            /* FALLTHROUGH */
        case T_SETUP_WAIT:
            if (!collect(t, &broken))
                return t->want;
            if (broken || PQresultStatus(t->res) != PGRES_COMMAND_OK) {
                rc = pg_error(t, !broken && PQstatus(s->conn) == CONNECTION_OK ? FEED_EPG
                                                                                : FEED_EUNAVAILABLE,
                              "prepare", PQerrorMessage(s->conn));
                drop(s);
                return finish(t, rc);
            }
            if ((t->step == SU_DESCRIBE || t->step == SU_AUTHOR_DESCRIBE) &&
                (rc = check_types(t, t->res, t->step == SU_DESCRIBE ? t->c->cfg.table
                                                                    : t->c->cfg.author_table))
                != FEED_OK) {
                drop(s);
                return finish(t, rc);
            }
            PQclear(t->res);
            t->res = NULL;
            t->step = next_step(t, t->step);
            t->state = T_SETUP;
            continue;
        case T_SEND:
            if ((rc = send_statement(t)) < 0)
                return finish(t, t->setup_rc);
            if (rc == 0) {
                broken = 1;
                goto statement_failed;
            }
            t->state = T_WAIT;
            /* FALLTHROUGH */
        case T_WAIT:
            if (!collect(t, &broken))
                return t->want;
            if (!broken && PQresultStatus(t->res) == PGRES_TUPLES_OK)
                return finish(t, take_result(t));
        statement_failed:
            rc = pg_error(t, !broken && PQstatus(s->conn) == CONNECTION_OK ? FEED_EPG
                                                                            : FEED_EUNAVAILABLE,
                          t->q->stmt >= FEED_SQL_STMTS ? "lag probe" : "query",
                          PQerrorMessage(s->conn));
            if (rc == FEED_EPG)     /* answered with an error: the connection is fine */
                return finish(t, rc);
            PQclear(t->res);
            t->res = NULL;
            drop(s);
            if (!t->was_up || t->attempt > 0 || t->q->stmt >= FEED_SQL_STMTS)
                return finish(t, rc);
            /* The server went away under us (a restart): once more, now. */
            t->attempt++;
            t->was_up = 0;
            s->attempt_ms = 0;
            t->state = T_START;
            continue;
        default:
            return finish(t, t->rc);
        }
    }
}
