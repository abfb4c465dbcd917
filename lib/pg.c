/* pg.c -- the PostgreSQL side: one connection, three prepared statements.
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
 * A lost connection is dropped and reconnected on a later call, at most once
 * per retry_ms; the statements are prepared again on every new connection.
 */
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

/* libpq's messages end in a newline; ours do not. */
static int pg_error(feed *f, int code, const char *what, const char *detail)
{
    size_t len = strlen(detail);

    while (len > 0 && (detail[len - 1] == '\n' || detail[len - 1] == ' '))
        len--;
    f->stats.pg_errors++;
    return feed__error(f, code, "PostgreSQL %s: %.*s", what, (int)len, detail);
}

void feed__pg_drop(feed *f)
{
    if (f->pg) {
        PQfinish(f->pg);
        f->pg = NULL;
    }
}

/* Build the two statements' text once, with the identifiers quoted. */
static int build_sql(feed *f, PGconn *conn)
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
            rc = pg_error(f, FEED_EPG, "quoting an identifier", PQerrorMessage(conn));
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

static int prepare(feed *f, PGconn *conn, const char *name, const char *sql,
                   int nparams)
{
    static const Oid types[4] = { INT8OID, INT8OID, INT8OID, INT8OID };
    PGresult *res = PQprepare(conn, name, sql, nparams, types);
    int rc = FEED_OK;

    f->stats.sql_queries++;
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        /* A refusal here is the schema's (no such table or column): retrying
         * will not help. A dead connection is an outage. */
        rc = pg_error(f, PQstatus(conn) == CONNECTION_OK ? FEED_EPG : FEED_EUNAVAILABLE,
                      "prepare", PQerrorMessage(conn));
    }
    PQclear(res);
    return rc;
}

/* The score and id columns must be integers. The statements read them as
 * ::int8, which is exact for smallint, integer and bigint but would round a
 * numeric or double score (1.5 -> 2) and so order the cache differently from
 * SQL: refuse such a table (or view) at once, with its column types named.
 * Costs one prepare and one describe per connection. */
static int check_types(feed *f, PGconn *conn)
{
    const char *names[3] = { f->cfg.score_column, f->cfg.id_column, f->cfg.table };
    char *q[3] = { NULL, NULL, NULL }, *sql = NULL;
    PGresult *res = NULL;
    int rc = FEED_OK;

    for (int i = 0; i < 3 && rc == FEED_OK; i++) {
        q[i] = PQescapeIdentifier(conn, names[i], strlen(names[i]));
        if (!q[i])
            rc = pg_error(f, FEED_EPG, "quoting an identifier", PQerrorMessage(conn));
    }
    if (rc == FEED_OK) {
        size_t cap = strlen(q[0]) + strlen(q[1]) + strlen(q[2]) + 40;
        if (!(sql = malloc(cap)))
            rc = feed__error(f, FEED_ENOMEM, "out of memory building SQL");
        else
            snprintf(sql, cap, "SELECT %s, %s FROM %s WHERE false", q[0], q[1], q[2]);
    }
    if (rc == FEED_OK) {
        /* Part of connecting, like libpq's own start-up: not counted in
         * sql_queries (statements that prepare or read feeds). */
        res = PQprepare(conn, "", sql, 0, NULL);
        if (PQresultStatus(res) == PGRES_COMMAND_OK) {
            PQclear(res);
            res = PQdescribePrepared(conn, "");
        }
        if (PQresultStatus(res) != PGRES_COMMAND_OK) {
            rc = pg_error(f, PQstatus(conn) == CONNECTION_OK ? FEED_EPG : FEED_EUNAVAILABLE,
                          "prepare", PQerrorMessage(conn));
        } else {
            for (int i = 0; i < 2 && rc == FEED_OK; i++) {
                Oid t = PQftype(res, i);
                const char *name = t == 1700 ? "numeric" : t == 700 ? "real" :
                                   t == 701 ? "double precision" : t == 25 ? "text" :
                                   t == 1043 ? "varchar" : "another type";
                if (t != 20 && t != 21 && t != 23)   /* int8, int2, int4 */
                    rc = feed__error(f, FEED_EPG, "PostgreSQL: column %s of %s is %s (oid %u);"
                                     " the score and id columns must be integer types"
                                     " (smallint, integer or bigint)", q[i], q[2], name,
                                     (unsigned)t);
            }
        }
        if (rc == FEED_EPG)
            f->stats.pg_errors++;
    }
    PQclear(res);
    free(sql);
    for (int i = 0; i < 3; i++)
        PQfreemem(q[i]);
    return rc;
}

/* Returns FEED_OK, FEED_EUNAVAILABLE (no answer) or FEED_EPG (answered and
 * refused: authentication, no such database, table or column). */
int feed__pg_connect(feed *f)
{
    PGconn *conn;
    int rc;

    feed__pg_drop(f);
    f->pg_attempt_ms = feed__now_ms();
    f->stats.pg_connects++;
    conn = PQconnectdb(f->cfg.pg_conninfo);
    if (!conn)
        return feed__error(f, FEED_ENOMEM, "PostgreSQL connect: out of memory");
    if (PQstatus(conn) != CONNECTION_OK) {
        /* PQping tells a server that refused us from one that is not there. */
        int answered = PQping(f->cfg.pg_conninfo) == PQPING_OK;
        rc = pg_error(f, answered ? FEED_EPG : FEED_EUNAVAILABLE, "connect",
                      PQerrorMessage(conn));
        PQfinish(conn);
        return rc;
    }
    rc = build_sql(f, conn);
    if (rc == FEED_OK)
        rc = check_types(f, conn);
    if (rc == FEED_OK)
        rc = prepare(f, conn, "feedcache_top", f->sql_top, 2);
    if (rc == FEED_OK)
        rc = prepare(f, conn, "feedcache_after", f->sql_after, 4);
    if (rc == FEED_OK)
        rc = prepare(f, conn, "feedcache_before", f->sql_before, 4);
    if (rc != FEED_OK) {
        PQfinish(conn);
        return rc;
    }
    f->pg = conn;
    return FEED_OK;
}

int feed__pg_ready(feed *f)
{
    int rc;

    if (f->pg && PQstatus(f->pg) == CONNECTION_OK)
        return FEED_OK;
    feed__pg_drop(f);
    if ((rc = feed__retry_due(f, f->pg_attempt_ms, "PostgreSQL")) != FEED_OK)
        return rc;
    return feed__pg_connect(f);
}

void feed__rows_free(feed_rows *rows)
{
    free(rows->items);
    rows->items = NULL;
    rows->count = 0;
}

/* Copy a result into rows, checking every value: a score outside the range
 * Redis holds exactly, or a negative id, is an error, never a wrong page. */
static int take_rows(feed *f, int64_t uid, PGresult *res, feed_rows *rows)
{
    int n = PQntuples(res);

    if (PQnfields(res) != 2)
        return pg_error(f, FEED_EPG, "query", "unexpected result shape");
    rows->items = malloc(((size_t)n + 1) * sizeof *rows->items);
    if (!rows->items)
        return feed__error(f, FEED_ENOMEM, "out of memory for %d rows", n);
    for (int i = 0; i < n; i++) {
        feed_item *it = &rows->items[i];
        if (PQgetisnull(res, i, 0) || PQgetisnull(res, i, 1) ||
            PQgetlength(res, i, 0) != 8 || PQgetlength(res, i, 1) != 8) {
            feed__rows_free(rows);
            return pg_error(f, FEED_EPG, "query", "NULL or non-int8 score or id");
        }
        it->score = get_be64(PQgetvalue(res, i, 0));
        it->id = get_be64(PQgetvalue(res, i, 1));
        if (!feed__score_ok(it->score) || it->id < 0) {
            long long s = it->score, id = it->id;
            feed__rows_free(rows);
            return feed__error(f, FEED_ERANGE,
                               "row of owner %lld in SQL has id %lld, score %lld:"
                               " scores must lie within +/-(2^53-1), ids >= 0",
                               (long long)uid, id, s);
        }
    }
    rows->count = (size_t)n;
    return FEED_OK;
}

/* Run a prepared statement. A connection that dies under the query is
 * reconnected and the query sent once more: a PostgreSQL restart between
 * two calls then costs the caller nothing. */
static int run(feed *f, int64_t uid, const char *stmt, int nparams,
               const int64_t *params, feed_rows *rows)
{
    char buf[4][8];
    const char *values[4];
    static const int lengths[4] = { 8, 8, 8, 8 }, formats[4] = { 1, 1, 1, 1 };
    int was_up = f->pg != NULL;

    rows->items = NULL;
    rows->count = 0;
    for (int i = 0; i < nparams; i++) {
        put_be64(buf[i], params[i]);
        values[i] = buf[i];
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        PGresult *res;
        int rc = feed__pg_ready(f);
        if (rc != FEED_OK)
            return rc == FEED_EUNAVAILABLE ? FEED_EPG : rc;
        f->stats.sql_queries++;
        res = PQexecPrepared(f->pg, stmt, nparams, values, lengths, formats, 1);
        if (PQresultStatus(res) == PGRES_TUPLES_OK) {
            rc = take_rows(f, uid, res, rows);
            PQclear(res);
            return rc;
        }
        PQclear(res);
        if (PQstatus(f->pg) == CONNECTION_OK)
            return pg_error(f, FEED_EPG, "query", PQerrorMessage(f->pg));
        pg_error(f, FEED_EPG, "query", PQerrorMessage(f->pg));
        feed__pg_drop(f);
        if (!was_up)
            break;
        f->pg_attempt_ms = 0;   /* the server went away under us: try now */
        was_up = 0;
    }
    return FEED_EPG;
}

int feed__pg_top(feed *f, int64_t uid, size_t limit, feed_rows *rows)
{
    int64_t params[2] = { uid, (int64_t)limit };

    return run(f, uid, "feedcache_top", 2, params, rows);
}

int feed__pg_after(feed *f, int64_t uid, int64_t score, int64_t id,
                   size_t limit, feed_rows *rows)
{
    int64_t params[4] = { uid, score, id, (int64_t)limit };

    return run(f, uid, "feedcache_after", 4, params, rows);
}

int feed__pg_before(feed *f, int64_t uid, int64_t score, int64_t id,
                    size_t limit, feed_rows *rows)
{
    int64_t params[4] = { uid, score, id, (int64_t)limit };

    return run(f, uid, "feedcache_before", 4, params, rows);
}
