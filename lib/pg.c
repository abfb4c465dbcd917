/* pg.c -- the PostgreSQL side: a connection to the primary and, when
 * pg_replica_conninfo is set, one to a read replica; three prepared
 * statements on each.
 *
 *   feedcache_top    the first rows of a feed:      WHERE owner = $1
 *   feedcache_after  the rows after a cursor:       WHERE owner = $1
 *                                                   AND (score, id) < ($2, $3)
 *   feedcache_before the rows above a cursor (pull-to-refresh, newer.c):
 *                    (score, id) > ($2, $3) ORDER BY score ASC, id ASC
 * the first two ORDER BY score DESC, id DESC LIMIT n, which the index on
 * (owner, score DESC, id DESC) answers as a seek plus n rows. Identifiers from
 * the config are quoted by libpq; values only ever travel as parameters.
 * Parameters and results use the binary format: int8 in network order, no
 * text parsing, nothing lost.
 *
 * Which server reads what: rebuilds (feed__pg_top, feed__pg_after) read the
 * primary, always, so that a rebuild never installs rows from a replica that
 * has not yet replayed a write whose hook already ran. Pages past the cache
 * (feed__pg_page) read the replica when it answers, else the primary.
 *
 * Nothing here waits longer than pg_timeout_ms. Connects are non-blocking
 * (PQconnectStart, then PQconnectPoll as poll() says the socket is ready);
 * statements are sent with PQsend* and their results awaited with poll() on
 * the socket. One SQL read (reconnecting if needed, preparing, the
 * statement) has one deadline. When it passes, the statement is cancelled,
 * the connection dropped, and the next connect waits retry_ms like any
 * other: a frozen server costs one caller one timeout per retry_ms, not
 * every caller every time. A lost connection is dropped and reconnected on
 * a later call, at most once per retry_ms; the statements are prepared
 * again on every new connection.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define INT8OID 20

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

/* One of the two servers: where its connection and last attempt live. */
typedef struct pg_side {
    PGconn    **conn;
    int64_t    *attempt_ms;
    const char *conninfo;
    const char *name;           /* for messages */
    int         replica;
} pg_side;

static pg_side primary(feed *f)
{
    pg_side s = { &f->pg, &f->pg_attempt_ms, f->cfg.pg_conninfo, "PostgreSQL", 0 };

    return s;
}

static pg_side replica(feed *f)
{
    pg_side s = { &f->pg_replica, &f->pg_replica_attempt_ms, f->cfg.pg_replica_conninfo,
                  "PostgreSQL replica", 1 };

    return s;
}

/* libpq's messages end in a newline and, for a failed connect (asked in
 * verbose mode, see refused), carry a LOCATION line (the server source line
 * that raised the error); ours are one line with neither. */
static int pg_error(feed *f, pg_side s, int code, const char *what, const char *detail)
{
    char text[sizeof f->errmsg];
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
    f->stats.pg_errors++;
    return feed__error(f, code, "%s %s: %s", s.name, what, text);
}

static void drop(pg_side s)
{
    if (*s.conn) {
        PQfinish(*s.conn);
        *s.conn = NULL;
    }
}

void feed__pg_drop(feed *f)
{
    drop(primary(f));
    drop(replica(f));
}

/* ------------------------------------------------------------------------
 * Bounded waits
 * ------------------------------------------------------------------------ */

/* Wait until c's socket is ready for events: 1 ready, 0 deadline passed,
 * -1 no socket or poll failed. */
static int wait_socket(PGconn *c, short events, int64_t deadline)
{
    struct pollfd p;

    p.fd = PQsocket(c);
    p.events = events;
    p.revents = 0;
    if (p.fd < 0)
        return -1;
    for (;;) {
        int64_t left = deadline - feed__now_ms();
        int n;
        if (left <= 0)
            return 0;
        n = poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

enum { PG_DONE, PG_TIMEOUT, PG_BROKEN };

/* Flush what was sent on c and collect its result into *res (an error
 * result if the statement failed; the first error wins over other
 * results). PG_TIMEOUT or PG_BROKEN leave *res NULL. */
static int await_result(PGconn *c, int64_t deadline, PGresult **res)
{
    *res = NULL;
    for (;;) {
        int pending = PQflush(c), w;
        if (pending < 0)
            break;
        if (!pending && !PQisBusy(c)) {
            PGresult *r = PQgetResult(c);
            if (!r)
                return *res ? PG_DONE : PG_BROKEN;
            if (!*res || (PQresultStatus(r) == PGRES_FATAL_ERROR &&
                          PQresultStatus(*res) != PGRES_FATAL_ERROR)) {
                PQclear(*res);
                *res = r;
            } else {
                PQclear(r);
            }
            continue;
        }
        w = wait_socket(c, pending ? POLLIN | POLLOUT : POLLIN, deadline);
        if (w == 0) {
            PQclear(*res);
            *res = NULL;
            return PG_TIMEOUT;
        }
        if (w < 0 || !PQconsumeInput(c))
            break;
    }
    PQclear(*res);
    *res = NULL;
    return PG_BROKEN;
}

/* Cancelling a statement: libpq 15's PQcancel opens a connection to the
 * server and blocks until the server answers, which a frozen server never
 * does. So it runs on a detached thread of its own, and the caller never
 * waits for it. A cancel reaches a server that is merely slow (a lock
 * wait, a long plan) and frees its backend; a frozen one gets it when it
 * wakes. At most CANCELS_MAX run at once, process-wide: past that, the
 * dropped connection alone ends the statement when the server next writes
 * to it. */
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
    pthread_t t;
    int started = 0;

    if (PQstatus(c) != CONNECTION_OK || PQtransactionStatus(c) != PQTRANS_ACTIVE)
        return;   /* nothing running, or a connect still in its start-up */
    if (atomic_fetch_add(&cancels_running, 1) >= CANCELS_MAX) {
        atomic_fetch_sub(&cancels_running, 1);
        return;
    }
    if ((k = PQgetCancel(c)) != NULL && pthread_attr_init(&attr) == 0) {
        if (pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0)
            started = pthread_create(&t, &attr, cancel_main, k) == 0;
        pthread_attr_destroy(&attr);
    }
    if (!started) {
        PQfreeCancel(k);
        atomic_fetch_sub(&cancels_running, 1);
    }
}

/* pg_timeout_ms ran out on c: cancel whatever it runs, count it, and make
 * the next connect wait retry_ms. The caller drops c. */
static int timed_out(feed *f, pg_side s, PGconn *c, const char *what)
{
    cancel_async(c);
    *s.attempt_ms = feed__now_ms();
    f->stats.pg_timeouts++;
    f->stats.pg_errors++;
    return feed__error(f, FEED_EUNAVAILABLE, "%s %s: no answer within pg_timeout_ms"
                       " (%u ms); connection dropped", s.name, what, f->cfg.pg_timeout_ms);
}

/* Await what a PQsend* call sent (sent: its return value) and check that
 * its result has status want. FEED_OK with *out set (when out is not NULL;
 * the caller clears it); FEED_EPG when the server answered with an error
 * on a healthy connection; FEED_EUNAVAILABLE when the connection broke or
 * the deadline passed (*late = 1 then: the caller drops c). */
static int finish(feed *f, pg_side s, PGconn *c, int sent, int64_t deadline,
                  const char *what, ExecStatusType want, PGresult **out, int *late)
{
    PGresult *res = NULL;
    int w = sent ? await_result(c, deadline, &res) : PG_BROKEN, rc = FEED_OK;

    *late = w == PG_TIMEOUT;
    if (out)
        *out = NULL;
    if (w == PG_TIMEOUT)
        return timed_out(f, s, c, what);
    if (w == PG_BROKEN)
        return pg_error(f, s, FEED_EUNAVAILABLE, what, PQerrorMessage(c));
    if (PQresultStatus(res) != want) {
        rc = pg_error(f, s, PQstatus(c) == CONNECTION_OK ? FEED_EPG : FEED_EUNAVAILABLE,
                      what, PQerrorMessage(c));
        PQclear(res);
    } else if (out) {
        *out = res;
    } else {
        PQclear(res);
    }
    return rc;
}

/* ------------------------------------------------------------------------
 * Connecting
 * ------------------------------------------------------------------------ */

/* Build the two statements' text once, with the identifiers quoted. */
static int build_sql(feed *f, pg_side s, PGconn *conn)
{
    const char *names[4] = { f->cfg.table, f->cfg.owner_column,
                             f->cfg.score_column, f->cfg.id_column };
    char *q[4] = { NULL, NULL, NULL, NULL };
    int rc = FEED_OK;
    size_t cap;

    if (f->sql_top)
        return FEED_OK;
    for (int i = 0; i < 4 && rc == FEED_OK; i++) {
        q[i] = PQescapeIdentifier(conn, names[i], strlen(names[i]));
        if (!q[i])
            rc = pg_error(f, s, FEED_EPG, "quoting an identifier", PQerrorMessage(conn));
    }
    if (rc == FEED_OK) {
        cap = 200 + 3 * (strlen(q[0]) + strlen(q[1]) + 2 * strlen(q[2]) + 2 * strlen(q[3]));
        f->sql_top = malloc(cap);
        f->sql_after = malloc(cap);
        f->sql_before = malloc(cap);
        if (!f->sql_top || !f->sql_after || !f->sql_before) {
            rc = feed__error(f, FEED_ENOMEM, "out of memory building SQL");
        } else {
            snprintf(f->sql_top, cap,
                     "SELECT %s::int8, %s::int8 FROM %s WHERE %s = $1"
                     " ORDER BY %s DESC, %s DESC LIMIT $2",
                     q[2], q[3], q[0], q[1], q[2], q[3]);
            snprintf(f->sql_after, cap,
                     "SELECT %s::int8, %s::int8 FROM %s WHERE %s = $1"
                     " AND (%s, %s) < ($2, $3)"
                     " ORDER BY %s DESC, %s DESC LIMIT $4",
                     q[2], q[3], q[0], q[1], q[2], q[3], q[2], q[3]);
            snprintf(f->sql_before, cap,   /* pull-to-refresh, closest first */
                     "SELECT %s::int8, %s::int8 FROM %s WHERE %s = $1"
                     " AND (%s, %s) > ($2, $3)"
                     " ORDER BY %s ASC, %s ASC LIMIT $4",
                     q[2], q[3], q[0], q[1], q[2], q[3], q[2], q[3]);
        }
    }
    for (int i = 0; i < 4; i++)
        PQfreemem(q[i]);
    if (rc != FEED_OK) {
        free(f->sql_top);
        free(f->sql_after);
        free(f->sql_before);
        f->sql_top = f->sql_after = f->sql_before = NULL;
    }
    return rc;
}

static int prepare(feed *f, pg_side s, PGconn *conn, const char *name, const char *sql,
                   int nparams, int64_t deadline, int *late)
{
    static const Oid types[4] = { INT8OID, INT8OID, INT8OID, INT8OID };

    /* A refusal here is the schema's (no such table or column): retrying
     * will not help (FEED_EPG). A dead connection is an outage. */
    f->stats.sql_queries++;
    return finish(f, s, conn, PQsendPrepare(conn, name, sql, nparams, types), deadline,
                  "prepare", PGRES_COMMAND_OK, NULL, late);
}

/* The score and id columns must be integers. The statements read them as
 * ::int8, which is exact for smallint, integer and bigint but would round a
 * numeric or double score (1.5 -> 2) and so order the cache differently from
 * SQL: refuse such a table (or view) at once, with its column types named.
 * Costs one prepare and one describe per connection. */
static int check_types(feed *f, pg_side s, PGconn *conn, int64_t deadline, int *late)
{
    const char *names[3] = { f->cfg.score_column, f->cfg.id_column, f->cfg.table };
    char *q[3] = { NULL, NULL, NULL }, *sql = NULL;
    PGresult *res = NULL;
    int rc = FEED_OK;

    for (int i = 0; i < 3 && rc == FEED_OK; i++) {
        q[i] = PQescapeIdentifier(conn, names[i], strlen(names[i]));
        if (!q[i])
            rc = pg_error(f, s, FEED_EPG, "quoting an identifier", PQerrorMessage(conn));
    }
    if (rc == FEED_OK) {
        size_t cap = strlen(q[0]) + strlen(q[1]) + strlen(q[2]) + 40;
        if (!(sql = malloc(cap)))
            rc = feed__error(f, FEED_ENOMEM, "out of memory building SQL");
        else
            snprintf(sql, cap, "SELECT %s, %s FROM %s WHERE false", q[0], q[1], q[2]);
    }
    /* Part of connecting, like libpq's own start-up: not counted in
     * sql_queries (statements that prepare or read feeds). */
    if (rc == FEED_OK)
        rc = finish(f, s, conn, PQsendPrepare(conn, "", sql, 0, NULL), deadline,
                    "prepare", PGRES_COMMAND_OK, NULL, late);
    if (rc == FEED_OK)
        rc = finish(f, s, conn, PQsendDescribePrepared(conn, ""), deadline,
                    "prepare", PGRES_COMMAND_OK, &res, late);
    for (int i = 0; i < 2 && rc == FEED_OK; i++) {
        Oid t = PQftype(res, i);
        const char *name = t == 1700 ? "numeric" : t == 700 ? "real" :
                           t == 701 ? "double precision" : t == 25 ? "text" :
                           t == 1043 ? "varchar" : "another type";
        if (t != 20 && t != 21 && t != 23) {   /* int8, int2, int4 */
            f->stats.pg_errors++;
            rc = feed__error(f, FEED_EPG, "%s: column %s of %s is %s (oid %u);"
                             " the score and id columns must be integer types"
                             " (smallint, integer or bigint)", s.name, q[i], q[2], name,
                             (unsigned)t);
        }
    }
    PQclear(res);
    free(sql);
    for (int i = 0; i < 3; i++)
        PQfreemem(q[i]);
    return rc;
}

/* Did a failed connect reach a server that refused us (bad password, no
 * such database or user: a configuration error, FEED_EPG), rather than no
 * server, or one not accepting connections now (FEED_EUNAVAILABLE)? libpq
 * keeps the SQLSTATE of a start-up error to itself, but in verbose mode
 * writes it into the message: "FATAL:  3D000: database ...". 57P03 is
 * "cannot connect now": starting up, shutting down, in recovery. (PQping
 * would tell the same, but it is one more connect, and a blocking one.) */
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

/* Start-up, then what every new connection needs: the statements' text,
 * the column types checked, both statements prepared. All before deadline;
 * libpq's own blocking phase is name resolution only (use an IP address in
 * the conninfo for a strict bound). */
static int connect_until(feed *f, pg_side s, PGconn *c, int64_t deadline)
{
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;
    int rc = FEED_OK, late = 0;

    PQsetErrorVerbosity(c, PQERRORS_VERBOSE);
    while (st != PGRES_POLLING_OK) {
        int w;
        if (st == PGRES_POLLING_FAILED || PQstatus(c) == CONNECTION_BAD)
            return pg_error(f, s, refused(c) ? FEED_EPG : FEED_EUNAVAILABLE, "connect",
                            PQerrorMessage(c));
        w = wait_socket(c, st == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline);
        if (w == 0)
            return timed_out(f, s, c, "connect");
        if (w < 0)
            return pg_error(f, s, FEED_EUNAVAILABLE, "connect", "no socket to wait on");
        st = PQconnectPoll(c);
    }
    PQsetErrorVerbosity(c, PQERRORS_DEFAULT);
    if (PQsetnonblocking(c, 1) != 0)
        return pg_error(f, s, FEED_EUNAVAILABLE, "connect", PQerrorMessage(c));
    rc = build_sql(f, s, c);
    if (rc == FEED_OK)
        rc = check_types(f, s, c, deadline, &late);
    if (rc == FEED_OK)
        rc = prepare(f, s, c, "feedcache_top", f->sql_top, 2, deadline, &late);
    if (rc == FEED_OK)
        rc = prepare(f, s, c, "feedcache_after", f->sql_after, 4, deadline, &late);
    if (rc == FEED_OK)
        rc = prepare(f, s, c, "feedcache_before", f->sql_before, 4, deadline, &late);
    return rc;
}

/* Returns FEED_OK, FEED_EUNAVAILABLE (no answer in time) or FEED_EPG
 * (answered and refused: authentication, no such database, table or
 * column). */
static int open_side(feed *f, pg_side s, int64_t deadline)
{
    PGconn *c;
    int rc;

    drop(s);
    *s.attempt_ms = feed__now_ms();
    f->stats.pg_connects++;
    if (s.replica) {
        /* A lag proof holds for the server it was taken on: a new
         * connection may reach another (a multi-host conninfo, DNS). */
        f->replica_fresh_until = 0;
        f->replica_probe_ms = 0;
    }
    c = PQconnectStart(s.conninfo);
    if (!c)
        return feed__error(f, FEED_ENOMEM, "%s connect: out of memory", s.name);
    rc = connect_until(f, s, c, deadline);
    if (rc != FEED_OK) {
        PQfinish(c);
        return rc;
    }
    *s.conn = c;
    return FEED_OK;
}

/* The primary, then the replica if there is one. A replica that does not
 * answer is tried again later (pages use the primary meanwhile); one that
 * answers and refuses is a configuration error, reported like the
 * primary's. */
int feed__pg_connect(feed *f)
{
    int rc = open_side(f, primary(f), feed__now_ms() + f->cfg.pg_timeout_ms);

    if (f->cfg.pg_replica_conninfo && rc != FEED_ENOMEM) {
        char msg[sizeof f->errmsg];
        int rrc;
        snprintf(msg, sizeof msg, "%s", f->errmsg);
        rrc = open_side(f, replica(f), feed__now_ms() + f->cfg.pg_timeout_ms);
        if (rrc == FEED_EPG || rrc == FEED_ENOMEM || rrc == FEED_ERANGE)
            return rrc;
        snprintf(f->errmsg, sizeof f->errmsg, "%s", msg);
    }
    return rc;
}

static int ready(feed *f, pg_side s, int64_t deadline)
{
    int rc;

    if (*s.conn && PQstatus(*s.conn) == CONNECTION_OK)
        return FEED_OK;
    drop(s);
    if ((rc = feed__retry_due(f, *s.attempt_ms, s.name)) != FEED_OK)
        return rc;
    return open_side(f, s, deadline);
}

int feed__pg_ready(feed *f)
{
    return ready(f, primary(f), feed__now_ms() + f->cfg.pg_timeout_ms);
}

/* ------------------------------------------------------------------------
 * Reading rows
 * ------------------------------------------------------------------------ */

void feed__rows_free(feed_rows *rows)
{
    free(rows->items);
    rows->items = NULL;
    rows->count = 0;
}

/* Copy a result into rows, checking every value: a score outside the range
 * Redis holds exactly, or a negative id, is an error, never a wrong page. */
static int take_rows(feed *f, pg_side s, int64_t uid, PGresult *res, feed_rows *rows)
{
    int n = PQntuples(res);

    if (PQnfields(res) != 2)
        return pg_error(f, s, FEED_EPG, "query", "unexpected result shape");
    rows->items = malloc(((size_t)n + 1) * sizeof *rows->items);
    if (!rows->items)
        return feed__error(f, FEED_ENOMEM, "out of memory for %d rows", n);
    for (int i = 0; i < n; i++) {
        feed_item *it = &rows->items[i];
        if (PQgetisnull(res, i, 0) || PQgetisnull(res, i, 1) ||
            PQgetlength(res, i, 0) != 8 || PQgetlength(res, i, 1) != 8) {
            feed__rows_free(rows);
            return pg_error(f, s, FEED_EPG, "query", "NULL or non-int8 score or id");
        }
        it->score = get_be64(PQgetvalue(res, i, 0));
        it->id = get_be64(PQgetvalue(res, i, 1));
        if (!feed__score_ok(it->score) || it->id < 0) {
            long long sc = it->score, id = it->id;
            feed__rows_free(rows);
            return feed__error(f, FEED_ERANGE,
                               "row of owner %lld in SQL has id %lld, score %lld:"
                               " scores must lie within +/-(2^53-1), ids >= 0",
                               (long long)uid, id, sc);
        }
    }
    rows->count = (size_t)n;
    return FEED_OK;
}

/* Run a prepared statement on one server, within one pg_timeout_ms. A
 * connection that dies under the query is reconnected and the query sent
 * once more: a PostgreSQL restart between two calls then costs the caller
 * nothing. A timeout is not retried. */
static int run(feed *f, pg_side s, int64_t uid, const char *stmt, int nparams,
               const int64_t *params, feed_rows *rows)
{
    char buf[4][8];
    const char *values[4];
    static const int lengths[4] = { 8, 8, 8, 8 }, formats[4] = { 1, 1, 1, 1 };
    int64_t deadline = feed__now_ms() + f->cfg.pg_timeout_ms;
    int was_up = *s.conn != NULL;

    rows->items = NULL;
    rows->count = 0;
    for (int i = 0; i < nparams; i++) {
        put_be64(buf[i], params[i]);
        values[i] = buf[i];
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        PGresult *res;
        int late, rc = ready(f, s, deadline);
        if (rc != FEED_OK)
            return rc == FEED_EUNAVAILABLE ? FEED_EPG : rc;
        f->stats.sql_queries++;
        f->stats.replica_queries += s.replica;
        rc = finish(f, s, *s.conn,
                    PQsendQueryPrepared(*s.conn, stmt, nparams, values, lengths, formats, 1),
                    deadline, "query", PGRES_TUPLES_OK, &res, &late);
        if (rc == FEED_OK) {
            rc = take_rows(f, s, uid, res, rows);
            PQclear(res);
            return rc;
        }
        if (rc == FEED_EPG)   /* answered with an error: the connection is fine */
            return rc;
        drop(s);
        if (late || !was_up)
            break;
        *s.attempt_ms = 0;    /* the server went away under us: try now */
        was_up = 0;
    }
    return FEED_EPG;
}

static int read_rows(feed *f, pg_side s, int64_t uid, int first, int64_t score,
                     int64_t id, size_t limit, feed_rows *rows)
{
    int64_t params[4] = { uid, score, id, (int64_t)limit };

    if (first) {
        params[1] = (int64_t)limit;
        return run(f, s, uid, "feedcache_top", 2, params, rows);
    }
    return run(f, s, uid, "feedcache_after", 4, params, rows);
}

int feed__pg_top(feed *f, int64_t uid, size_t limit, feed_rows *rows)
{
    return read_rows(f, primary(f), uid, 1, 0, 0, limit, rows);
}

int feed__pg_after(feed *f, int64_t uid, int64_t score, int64_t id,
                   size_t limit, feed_rows *rows)
{
    return read_rows(f, primary(f), uid, 0, score, id, limit, rows);
}

/* Pull-to-refresh asks for the newest writes: a lagging replica would miss
 * exactly those, so the primary answers. */
int feed__pg_before(feed *f, int64_t uid, int64_t score, int64_t id,
                    size_t limit, feed_rows *rows)
{
    int64_t params[4] = { uid, score, id, (int64_t)limit };

    return run(f, primary(f), uid, "feedcache_before", 4, params, rows);
}

/* One text statement with text parameters and a one-row result, on one
 * server, within pg_timeout_ms; no retry. The caller clears *res. */
static int ask(feed *f, pg_side s, const char *sql, int nparams,
               const char *const *values, PGresult **res)
{
    int64_t deadline = feed__now_ms() + f->cfg.pg_timeout_ms;
    int late, rc = ready(f, s, deadline);

    *res = NULL;
    if (rc != FEED_OK)
        return rc;
    f->stats.sql_queries++;
    f->stats.replica_queries += s.replica;
    rc = finish(f, s, *s.conn,
                PQsendQueryParams(*s.conn, sql, nparams, NULL, values, NULL, NULL, 0),
                deadline, "lag probe", PGRES_TUPLES_OK, res, &late);
    if (rc == FEED_EUNAVAILABLE)
        drop(s);
    if (rc == FEED_OK && PQntuples(*res) != 1) {
        PQclear(*res);
        *res = NULL;
        rc = pg_error(f, s, FEED_EPG, "lag probe", "not one row");
    }
    return rc;
}

/* May the replica answer a page now, under pg_replica_max_lag_ms = max?
 *
 * A probe is the primary's WAL insert position L, read at probe_ms: every
 * transaction that had committed by then wrote its commit record below L.
 * Once the replica has replayed past L, it shows all of them, so until
 * probe_ms + max every page it answers shows every write committed at least
 * max ms before the page: the bound. Each probe is checked twice: at once
 * (an idle replica passes), and again at the next probe, by when a replica
 * that streams with a lag below max/4 has replayed it; a busy primary thus
 * still keeps the replica usable. Probes run only when the window has
 * closed, at most once per max/4 ms: two small statements each. */
static int replica_fresh(feed *f)
{
    int64_t now = feed__now_ms(), max = f->cfg.pg_replica_max_lag_ms;
    const char *values[2];
    char lsn[sizeof f->replica_probe_lsn];
    PGresult *res;

    if (max == 0 || now < f->replica_fresh_until)
        return 1;
    if (now - f->replica_tried_ms < max / 4 + 1)
        return 0;
    f->replica_tried_ms = now;
    if (ask(f, primary(f), "SELECT pg_current_wal_insert_lsn()::text", 0, NULL, &res) != FEED_OK)
        return 0;
    snprintf(lsn, sizeof lsn, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    values[0] = lsn;
    values[1] = f->replica_probe_ms ? f->replica_probe_lsn : lsn;
    /* NULL (not in recovery: not a replica) proves nothing. */
    if (ask(f, replica(f), "SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false),"
            " coalesce(pg_last_wal_replay_lsn() >= $2::pg_lsn, false)", 2, values, &res) == FEED_OK) {
        if (strcmp(PQgetvalue(res, 0, 0), "t") == 0)
            f->replica_fresh_until = now + max;
        else if (f->replica_probe_ms && strcmp(PQgetvalue(res, 0, 1), "t") == 0)
            f->replica_fresh_until = f->replica_probe_ms + max;
        PQclear(res);
    }
    snprintf(f->replica_probe_lsn, sizeof f->replica_probe_lsn, "%s", lsn);
    f->replica_probe_ms = now;
    return now < f->replica_fresh_until;
}

/* A page past the cache. The replica's rows may lag the primary's by its
 * replication delay, or by at most pg_replica_max_lag_ms when that is set
 * (README: "PostgreSQL: timeouts and a read replica"); they never reach
 * the cache. When the replica cannot answer (down, frozen, refusing, a
 * recovery conflict), the primary does, and a replica that failed is
 * tried again only after retry_ms. */
int feed__pg_page(feed *f, int64_t uid, int first, int64_t score, int64_t id,
                  size_t limit, feed_rows *rows)
{
    char why[sizeof f->errmsg];
    int rc;

    if (!f->cfg.pg_replica_conninfo)
        return read_rows(f, primary(f), uid, first, score, id, limit, rows);
    if (!replica_fresh(f)) {
        f->stats.replica_lagging++;
        return read_rows(f, primary(f), uid, first, score, id, limit, rows);
    }
    rc = read_rows(f, replica(f), uid, first, score, id, limit, rows);
    if (rc == FEED_OK || rc == FEED_ENOMEM || rc == FEED_ERANGE)
        return rc;    /* the primary holds the same rows: ERANGE there too */
    f->stats.replica_fallbacks++;
    snprintf(why, sizeof why, "%s", f->errmsg);
    rc = read_rows(f, primary(f), uid, first, score, id, limit, rows);
    if (rc == FEED_OK) {
        snprintf(f->errmsg, sizeof f->errmsg, "%s", why);   /* answered; keep why not by the replica */
    } else if (rc != FEED_ENOMEM) {
        char pg_msg[sizeof f->errmsg];
        snprintf(pg_msg, sizeof pg_msg, "%s", f->errmsg);
        rc = feed__error(f, rc, "%s; %s", why, pg_msg);
    }
    return rc;
}
