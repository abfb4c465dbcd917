/* pgstmt.c -- one statement on one PostgreSQL server, decided: the texts,
 * the set-up of a new connection, the parameters, the rows checked, when
 * to connect again, a failure's error code, the one retry after a restart.
 * lib/io/pg.c carries out each step with libpq and reports what came of it
 * (feed_pgio), as the Redis side's sockets do for exchange.c.
 *
 * The statements (enum feed_stmt) are prepared on each connection, read
 * the index on (owner, score DESC, id DESC) as a seek plus n rows (the
 * merge: one a source), and take values only as parameters, binary: int8
 * in network order, nothing lost. Identifiers from the config are quoted
 * as PQescapeIdentifier does. One statement has one deadline,
 * pg_timeout_ms from its start; past it, the connection is dropped and the
 * next connect waits retry_ms like any other: a frozen server costs one
 * caller one timeout per retry_ms, not every caller every time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

enum { PS_START, PS_CONNECT, PS_SETUP, PS_QUERY, PS_DONE };
/* Set-up steps on a new connection: the catalog check of the feed table,
 * then of the authors' table (what the statements' texts depend on, so
 * they are built after it), the type check (a prepare, then a describe) of
 * each, then the statements prepared; a step whose table or text the
 * handle has not (no author_table, no merge; no item_author_column, no
 * filter) is skipped. */
enum { SU_CATALOG, SU_AUTHOR_CATALOG, SU_TYPES, SU_DESCRIBE, SU_AUTHOR_TYPES,
       SU_AUTHOR_DESCRIBE, SU_PREPARE, SU_END = SU_PREPARE + FEED_SQL_STMTS };

static const char *const pgstmt_names[FEED_SQL_STMTS] = {
    "feedcache_top", "feedcache_after", "feedcache_before", "feedcache_merge",
    "feedcache_filter", "feedcache_authors"
};

/* libpq's messages end in a newline and, for a failed connect (asked in
 * verbose mode, see pgstmt_refused), carry a LOCATION line (the server
 * source line that raised the error), for an error in a statement's text
 * a LINE line and a caret under it, and for one met while binding a
 * parameter a CONTEXT line that quotes the parameter ("unnamed portal
 * parameter $1 = '...'", the table check's). The text and the parameters
 * are ours, not the user's: the error itself and its HINT say what to
 * fix; ours are one line with none of them. A CONTEXT line of anything
 * else (a function or trigger of the user's) is kept. */
static int pgstmt_noise(const char *line, size_t len)
{
    size_t blank = strspn(line, " \t");

    return strncmp(line, "LOCATION:", 9) == 0 || strncmp(line, "LINE ", 5) == 0 ||
           strncmp(line, "CONTEXT:  unnamed portal parameter", 34) == 0 ||
           (blank + 1 == len && line[blank] == '^');
}

static int pgstmt_error(feed_pgstmt *p, int code, const char *what, const char *detail)
{
    char text[FEED_ERRMSG];
    size_t len = 0;

    while (detail && *detail && len + 1 < sizeof text) {
        size_t line = strcspn(detail, "\n");
        if (!pgstmt_noise(detail, line)) {
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
    p->c->stats.pg_errors++;
    return feed__msg(p->err, code, "%s %s: %s", p->who, what, text);
}

/* An identifier in double quotes, each quote doubled: malloc'd, or NULL. */
static char *pgstmt_quote(const char *name)
{
    char *q = malloc(2 * strlen(name) + 3), *o = q;

    if (!q)
        return NULL;
    *o++ = '"';
    for (; *name; name++)
        if ((*o++ = *name) == '"')
            *o++ = '"';
    *o++ = '"';
    *o = '\0';
    return q;
}

#define PGSTMT_COLS "SELECT %s::int8, %s::int8 FROM %s WHERE %s = $1%s"

/* Build the texts once for the handle (the first connect, after the
 * catalog check), with the identifiers quoted. The read-time merge's
 * statement: the reader's feed ($1; NULL for none) and each author of $5,
 * up to $4 rows after ($2, $3) each, every source one index seek (the
 * LATERAL keeps the authors' scans apart: author = ANY($5) alone would read
 * every row of every author after the cursor and sort them). Rows come
 * tagged with their source; their order is checked when they are taken. A
 * type check reads no row: SELECT score, id FROM table WHERE false.
 *
 * A table whose score or id may be NULL (no NOT NULL, or a view): such a
 * row has no place in the order, so every statement leaves it out (IS NOT
 * NULL; a NULL score would come first in score DESC and a NULL id pass
 * (score, id) < (...)), and the top rows, read by every rebuild, carry one
 * such row after them when there is one, to be reported
 * (pgstmt_take_rows). A table declared NOT NULL gets neither. */
static int pgstmt_texts(feed_pgstmt *p)
{
    const feed_config *cfg = &p->c->cfg;
    const char *names[7] = { cfg->table, cfg->owner_column, cfg->score_column,
                             cfg->id_column, cfg->author_table, cfg->author_column,
                             cfg->item_author_column };
    char *q[7] = { NULL, NULL, NULL, NULL, NULL, NULL, NULL }, **t = p->texts;
    char *nn[FEED_FAM_COUNT] = { NULL, NULL };  /* " AND score IS NOT NULL AND id IS NOT NULL" */
    int n = cfg->author_table ? 6 : 4, ok = 1;
    size_t cap = 900;       /* the merge's words, and room for its 16 names */

    if (t[FEED_SQL_TOP])
        return FEED_OK;
    for (int i = 0; i < 7; i++)
        if ((i < n || (i == 6 && names[6])) && (ok = ok && (q[i] = pgstmt_quote(names[i])) != NULL))
            cap += 10 * strlen(q[i]);
    for (int i = 0; i < FEED_PG_TEXTS; i++)         /* one not built stays "" */
        ok = ok && (t[i] = calloc(1, cap)) != NULL;
    for (int k = 0; k < FEED_FAM_COUNT; k++)
        if ((ok = ok && (nn[k] = calloc(1, cap)) != NULL) && p->c->tables[k].nullable)
            snprintf(nn[k], cap, " AND %s IS NOT NULL AND %s IS NOT NULL", q[2], q[3]);
    if (ok && nn[0][0])
        snprintf(t[FEED_SQL_TOP], cap, "(" PGSTMT_COLS " ORDER BY %s DESC, %s DESC LIMIT $2)"
                 " UNION ALL (SELECT %s::int8, %s::int8 FROM %s WHERE %s = $1"
                 " AND (%s IS NULL OR %s IS NULL) LIMIT 1)",
                 q[2], q[3], q[0], q[1], nn[0], q[2], q[3], q[2], q[3], q[0], q[1], q[2], q[3]);
    else if (ok)
        snprintf(t[FEED_SQL_TOP], cap, PGSTMT_COLS " ORDER BY %s DESC, %s DESC LIMIT $2",
                 q[2], q[3], q[0], q[1], "", q[2], q[3]);
    if (ok) {
        snprintf(t[FEED_SQL_AFTER], cap, PGSTMT_COLS " AND (%s, %s) < ($2, $3)"
                 " ORDER BY %s DESC, %s DESC LIMIT $4",
                 q[2], q[3], q[0], q[1], nn[0], q[2], q[3], q[2], q[3]);
        snprintf(t[FEED_SQL_BEFORE], cap, PGSTMT_COLS " AND (%s, %s) > ($2, $3)"
                 " ORDER BY %s ASC, %s ASC LIMIT $4",   /* closest first */
                 q[2], q[3], q[0], q[1], nn[0], q[2], q[3], q[2], q[3]);
        snprintf(t[FEED_PG_TYPES], cap, "SELECT %s, %s FROM %s WHERE false", q[2], q[3], q[0]);
    }
    if (ok && n == 6) {
        snprintf(t[FEED_SQL_MERGE], cap,
                 "SELECT 0::int8, s, i FROM (SELECT %s::int8 AS s, %s::int8 AS i FROM %s"
                 " WHERE %s = $1%s AND (%s, %s) < ($2, $3) ORDER BY %s DESC, %s DESC LIMIT $4) r"
                 " UNION ALL"
                 " SELECT a.k, p.s, p.i FROM unnest($5::int8[]) WITH ORDINALITY AS a(who, k),"
                 " LATERAL (SELECT %s::int8 AS s, %s::int8 AS i FROM %s"
                 " WHERE %s = a.who%s AND (%s, %s) < ($2, $3) ORDER BY %s DESC, %s DESC"
                 " LIMIT $4) p",
                 q[2], q[3], q[0], q[1], nn[0], q[2], q[3], q[2], q[3],
                 q[2], q[3], q[4], q[5], nn[1], q[2], q[3], q[2], q[3]);
        snprintf(t[FEED_PG_AUTHOR_TYPES], cap, "SELECT %s, %s FROM %s WHERE false",
                 q[2], q[3], q[4]);
    }
    /* Filtered pages: at most $4 rows are read past the cursor, however
     * many are hidden (the bound on one statement's work), and the last of
     * them comes back as a row of its own, with how many were read, so
     * that the next statement starts after it. A NULL author hides nothing. */
    if (ok && q[6]) {
        snprintf(t[FEED_SQL_FILTER], cap,
                 "WITH w AS MATERIALIZED (SELECT %s::int8 AS s, %s::int8 AS i, %s::int8 AS a"
                 " FROM %s WHERE %s = $1%s AND (%s, %s) < ($2, $3) ORDER BY %s DESC, %s DESC"
                 " LIMIT $4)"
                 " SELECT 0::int8, s, i, a FROM w WHERE a IS NULL OR a <> ALL($5::int8[])"
                 " UNION ALL SELECT * FROM (SELECT (SELECT count(*) FROM w), s, i, a FROM w"
                 " ORDER BY s, i LIMIT 1) last",
                 q[2], q[3], q[6], q[0], q[1], nn[0], q[2], q[3], q[2], q[3]);
        snprintf(t[FEED_SQL_AUTHORS], cap,
                 "SELECT %s::int8, %s::int8 FROM %s WHERE %s = $1 AND %s = ANY($5::int8[])",
                 q[3], q[6], q[0], q[1], q[3]);
    }
    for (int i = 0; i < 7; i++)
        free(q[i]);
    for (int k = 0; k < FEED_FAM_COUNT; k++)
        free(nn[k]);
    for (int i = 0; i < FEED_PG_TEXTS && !ok; i++) {
        free(t[i]);
        t[i] = NULL;
    }
    return ok ? FEED_OK : feed__msg(p->err, FEED_ENOMEM, "out of memory building SQL");
}

/* The score and id columns must be integers. The statements read them as
 * ::int8, which is exact for smallint, integer and bigint but would round a
 * numeric or double score (1.5 -> 2) and so order the cache differently from
 * SQL: refuse such a table (or view) at once, with its column types named.
 * Costs one prepare and one describe per connection. */
static int pgstmt_check_types(feed_pgstmt *p, const unsigned types[2], const char *table)
{
    const feed_config *cfg = &p->c->cfg;

    for (int i = 0; i < 2; i++) {
        unsigned ty = types[i];
        const char *name = ty == 1700 ? "numeric" : ty == 700 ? "real" :
                           ty == 701 ? "double precision" : ty == 25 ? "text" :
                           ty == 1043 ? "varchar" : "another type";
        if (ty != 20 && ty != 21 && ty != 23) {   /* int8, int2, int4 */
            p->c->stats.pg_errors++;
            return feed__msg(p->err, FEED_EPG, "%s: column \"%s\" of \"%s\" is %s (oid %u);"
                             " the score and id columns must be integer types"
                             " (smallint, integer or bigint)", p->who,
                             i == 0 ? cfg->score_column : cfg->id_column, table, name, ty);
        }
    }
    return FEED_OK;
}

/* Did a failed connect reach a server that refused us (bad password, no
 * such database or user: a configuration error, FEED_EPG), rather than no
 * server, or one not accepting connections now (FEED_EUNAVAILABLE)? libpq
 * keeps the SQLSTATE of a start-up error to itself, but in verbose mode
 * writes it into the message: "FATAL:  3D000: database ...". 57P03 is
 * "cannot connect now": starting up, shutting down, in recovery. A
 * connection that came up and failed after was not refused. */
static int pgstmt_refused(const feed_pgio *io)
{
    const char *m = io->message ? io->message : "";

    if (io->conn_ok || io->needs_password)
        return !io->conn_ok;
    for (const char *p = strstr(m, ":  "); p; p = strstr(p + 1, ":  ")) {
        const char *code = p + 3;
        if (strspn(code, "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ") == 5 && code[5] == ':')
            return strncmp(code, "57P03", 5) != 0;
    }
    return 0;
}

/* Is cell (row, col) a non-NULL int8? Then *v is its value. */
static int pgstmt_int8(const feed_pgio *io, int row, int col, int64_t *v)
{
    const feed_pgcell *cell = &io->cells[(size_t)row * (size_t)io->nfields + (size_t)col];
    uint64_t u = 0;

    for (int i = 0; cell->v && cell->len == 8 && i < 8; i++)
        u = (u << 8) | (unsigned char)cell->v[i];
    *v = (int64_t)u;
    return cell->v && cell->len == 8;
}

/* A score outside the range Redis holds exactly, or a negative id, is an
 * error, never a wrong page. A merge's rows name no owner. */
static int pgstmt_range(feed_pgstmt *p, int64_t score, int64_t id)
{
    char owner[40] = "";

    if (feed__score_ok(score) && id >= 0)
        return FEED_OK;
    if (p->q->stmt != FEED_SQL_MERGE)
        snprintf(owner, sizeof owner, " of owner %lld", (long long)p->q->uid);
    return feed__msg(p->err, FEED_ERANGE, "row%s in SQL has id %lld, score %lld: scores must"
                     " lie within +/-(2^53-1), ids >= 0", owner, (long long)id, (long long)score);
}

static int pgstmt_by_order(const void *x, const void *y)
{
    const feed_item *a = x, *b = y;

    if (a->score != b->score)
        return a->score > b->score ? -1 : 1;
    return a->id > b->id ? -1 : a->id < b->id;
}

/* Row i of FEED_SQL_TOP with a NULL score or id: the one such row the
 * statement carries after the top rows of a table whose columns may be
 * NULL (pgstmt_texts). It has no place in the feed, so it is left out, and
 * named: counted, told to log_fn, and left in the call's message (the
 * page itself is served, from the other rows). */
static void pgstmt_left_out(feed_pgstmt *p, const feed_pgio *io, int i)
{
    const feed_config *cfg = &p->c->cfg;
    const feed_pgcell *row = &io->cells[(size_t)i * (size_t)io->nfields];
    int64_t score = 0, id = 0;
    char which[64];

    pgstmt_int8(io, i, 0, &score);
    pgstmt_int8(io, i, 1, &id);
    if (row[1].v)
        snprintf(which, sizeof which, "the row with id %lld has a NULL", (long long)id);
    else if (row[0].v)
        snprintf(which, sizeof which, "a row with score %lld has a NULL", (long long)score);
    else
        snprintf(which, sizeof which, "a row has a NULL %s and a NULL", cfg->score_column);
    p->c->stats.rows_left_out++;
    feed__msg(p->err, FEED_OK, "%s: table \"%s\", owner %lld: %s %s; a row needs a score and"
              " an id to be in a feed, so it is left out (give it one, or delete it:"
              " docs/schema.md)", p->who, cfg->table, (long long)p->q->uid, which,
              row[1].v ? cfg->score_column : cfg->id_column);
    feed__log(p->c, FEED_LOG_WARN, "%s", p->err);
}

/* Copy a result into rows, checking every value. FEED_SQL_MERGE's rows
 * (source, score, id) go to q->tagged[source], each in (score DESC, id
 * DESC) order (sorted when the server sent them otherwise); the others'
 * (score, id) to q->rows, as they came, but for a FEED_SQL_TOP row with a
 * NULL score or id (pgstmt_left_out). */
static int pgstmt_take_rows(feed_pgstmt *p, const feed_pgio *io)
{
    feed_sql *q = p->q;
    int tag = q->stmt == FEED_SQL_MERGE, n = io->ntuples, rc = FEED_OK;
    size_t nsrc = tag ? q->nauthors + 1 : 1, *count = calloc(nsrc, sizeof *count);
    feed_rows *rows = tag ? q->tagged : &q->rows;
    int64_t src = 0, v;

    if (!count)
        return feed__msg(p->err, FEED_ENOMEM, "out of memory for %d rows", n);
    if (io->nfields != 2 + tag)
        rc = pgstmt_error(p, FEED_EPG, "query", "unexpected result shape");
    if (rc == FEED_OK && q->stmt == FEED_SQL_TOP && p->c->tables[FEED_FAM_FEED].nullable && n > 0 &&
        (!io->cells[(size_t)(n - 1) * 2].v || !io->cells[(size_t)(n - 1) * 2 + 1].v))
        pgstmt_left_out(p, io, --n);    /* the last row only: the probe */
    for (int i = 0; i < n && rc == FEED_OK; i++) {
        for (int c = 0; c < 2 + tag && rc == FEED_OK; c++)
            if (!pgstmt_int8(io, i, c, tag && c == 0 ? &src : &v))
                rc = pgstmt_error(p, FEED_EPG, "query", tag ? "NULL or non-int8 source, score"
                                  " or id" : "NULL or non-int8 score or id");
        if (rc == FEED_OK && (src < 0 || (uint64_t)src >= nsrc))
            rc = pgstmt_error(p, FEED_EPG, "query", "a row of no source asked for");
        if (rc == FEED_OK)
            count[src]++;
    }
    for (size_t k = 0; k < nsrc && rc == FEED_OK; k++)
        if (!(rows[k].items = malloc((count[k] + 1) * sizeof *rows[k].items)))
            rc = feed__msg(p->err, FEED_ENOMEM, "out of memory for %d rows", n);
    for (int i = 0; i < n && rc == FEED_OK; i++) {
        feed_rows *r = &rows[tag && pgstmt_int8(io, i, 0, &src) ? src : 0];
        feed_item *it = &r->items[r->count++];
        pgstmt_int8(io, i, tag, &it->score);    /* each cell checked above */
        pgstmt_int8(io, i, tag + 1, &it->id);
        rc = pgstmt_range(p, it->score, it->id);
    }
    for (size_t k = 0; k < nsrc && rc == FEED_OK && tag; k++)
        for (size_t i = 1; i < rows[k].count; i++)
            if (pgstmt_by_order(&rows[k].items[i - 1], &rows[k].items[i]) >= 0) {
                qsort(rows[k].items, rows[k].count, sizeof *rows[k].items, pgstmt_by_order);
                break;
            }
    for (size_t k = 0; k < nsrc && rc != FEED_OK; k++)
        feed__rows_free(&rows[k]);
    free(count);
    return rc;
}

/* FEED_SQL_FILTER's and FEED_SQL_AUTHORS's rows, each checked: items and
 * their authors (NULL: INT64_MIN) into q->rows and q->row_authors; the
 * filter's last row read into q->last and q->scanned. */
static int pgstmt_take_authored(feed_pgstmt *p, const feed_pgio *io)
{
    feed_sql *q = p->q;
    int filter = q->stmt == FEED_SQL_FILTER, n = io->ntuples, rc = FEED_OK;
    int cols = filter ? 4 : 2;
    size_t k = 0;
    int64_t v[4];

    q->scanned = 0;
    if (io->nfields != cols)
        return pgstmt_error(p, FEED_EPG, "query", "unexpected result shape");
    q->rows.items = malloc(((size_t)n + 1) * sizeof *q->rows.items);
    q->row_authors = malloc(((size_t)n + 1) * sizeof *q->row_authors);
    if (!q->rows.items || !q->row_authors)
        rc = feed__msg(p->err, FEED_ENOMEM, "out of memory for %d rows", n);
    for (int i = 0; i < n && rc == FEED_OK; i++) {
        for (int c = 0; c < cols && rc == FEED_OK; c++)
            if (!pgstmt_int8(io, i, c, &v[c])) {
                if (c == cols - 1 && io->cells[(size_t)i * (size_t)cols + (size_t)c].v == NULL)
                    v[c] = INT64_MIN;           /* a NULL author */
                else
                    rc = pgstmt_error(p, FEED_EPG, "query", "NULL or non-int8 score or id");
            }
        if (rc != FEED_OK)
            break;
        if (!filter) {
            q->rows.items[k] = (feed_item){ 0, v[0] };
            q->row_authors[k++] = v[1];
            continue;
        }
        if ((rc = pgstmt_range(p, v[1], v[2])) != FEED_OK)
            break;
        if (v[0] > 0) {
            q->scanned = v[0];
            q->last = (feed_item){ v[1], v[2] };
        } else if (k > 0 && !feed__item_after((feed_item){ v[1], v[2] },
                                              q->rows.items[k - 1].score,
                                              q->rows.items[k - 1].id)) {
            rc = pgstmt_error(p, FEED_EPG, "query", "filtered rows out of order");
        } else {
            q->rows.items[k] = (feed_item){ v[1], v[2] };
            q->row_authors[k++] = v[3];
        }
    }
    q->rows.count = k;
    if (rc != FEED_OK) {
        feed__rows_free(&q->rows);
        free(q->row_authors);
        q->row_authors = NULL;
    }
    return rc;
}

/* The statement's result, checked. A probe answers one row of text. */
static int pgstmt_take(feed_pgstmt *p, const feed_pgio *io)
{
    feed_sql *q = p->q;

    if (q->stmt >= FEED_SQL_STMTS) {
        if (io->ntuples != 1)
            return pgstmt_error(p, FEED_EPG, "lag probe", "not one row");
        for (int i = 0; i < io->nfields && i < 2; i++)
            snprintf(q->text[i], sizeof q->text[i], "%.*s", io->cells[i].len,
                     io->cells[i].v ? io->cells[i].v : "");
        return FEED_OK;
    }
    if (q->stmt == FEED_SQL_FILTER || q->stmt == FEED_SQL_AUTHORS)
        return pgstmt_take_authored(p, io);
    return pgstmt_take_rows(p, io);
}

void feed__pgstmt_begin(feed_pgstmt *p, feed_core *c, feed_sql *q, char *err, char **texts,
                        feed_pgserver *server, int64_t now)
{
    memset(p, 0, sizeof *p);
    p->c = c;
    p->q = q;
    p->err = err;
    p->texts = texts;
    p->server = server;
    p->who = q->server == FEED_PG_REPLICA ? "PostgreSQL replica" : "PostgreSQL";
    p->deadline = now + c->cfg.pg_timeout_ms;
    q->rows = (feed_rows){ NULL, 0 };
    q->row_authors = NULL;
    q->scanned = 0;
    if (q->stmt == FEED_SQL_MERGE)
        for (size_t k = 0; k <= q->nauthors; k++)
            q->tagged[k] = (feed_rows){ NULL, 0 };
}

void feed__pgstmt_end(feed_pgstmt *p)
{
    free(p->array);
    free(p->quoted);
    p->array = p->quoted = NULL;
}

static enum feed_pwant pgstmt_finish(feed_pgstmt *p, int rc)
{
    /* A statement that could not run is PostgreSQL's failure (FEED_EPG);
     * only a connect (feed_open) tells "no answer" from "refused". */
    if (rc == FEED_EUNAVAILABLE && p->q->stmt >= 0 && p->q->stmt < FEED_SQL_STMTS)
        rc = FEED_EPG;
    feed__pgstmt_end(p);
    p->rc = rc;
    p->q->refused = rc != FEED_OK && p->server->refused;
    p->state = PS_DONE;
    return FEED_P_DONE;
}

/* Fail with the connection dropped, remembering why for the calls held
 * off until the next attempt: refused (the server answered and said no: a
 * configuration error) or not answered. */
static enum feed_pwant pgstmt_fail(feed_pgstmt *p, int rc)
{
    p->drop = 1;
    p->server->refused = rc == FEED_EPG;
    feed__msg_keep(p->server->why, p->err);
    feed__store_failed(p->c, &p->server->failing, p->err);
    return pgstmt_finish(p, rc);
}

/* pg_timeout_ms ran out: cancel whatever runs, count it, and make the
 * next connect wait retry_ms. */
static enum feed_pwant pgstmt_timed_out(feed_pgstmt *p, int64_t now)
{
    const char *what = p->q->stmt >= FEED_SQL_STMTS ? "lag probe" : p->state == PS_CONNECT
                     ? "connect" : p->state == PS_QUERY ? "query" : "prepare";

    p->cancel = 1;
    p->server->attempt_ms = feed__attempt_at(p->c, now);
    p->c->stats.pg_timeouts++;
    p->c->stats.pg_errors++;
    feed__msg(p->err, FEED_EUNAVAILABLE, "%s %s: no answer within pg_timeout_ms (%u ms); "
              "connection dropped", p->who, what, p->c->cfg.pg_timeout_ms);
    return pgstmt_fail(p, FEED_EUNAVAILABLE);
}

/* No connection up: drop what is left of one and connect, once retry_ms
 * has passed since the last attempt. */
static enum feed_pwant pgstmt_connect(feed_pgstmt *p, int64_t now)
{
    feed_core *c = p->c;
    int rc;

    p->drop = 1;
    if (p->q->server == FEED_PG_REPLICA) {
        /* A lag proof holds for the server it was taken on: a new
         * connection may reach another (a multi-host conninfo). So it
         * ends here, and a page sent under it does not connect: only a
         * probe does, and the primary answers this page. */
        c->replica_fresh_until = 0;
        c->replica_probe_ms = 0;
        if (c->cfg.pg_replica_max_lag_ms > 0 && p->q->stmt >= 0 && p->q->stmt < FEED_SQL_STMTS)
            return pgstmt_finish(p, feed__msg(p->err, FEED_EPG, "%s: no connection, and a lag"
                                              " proof holds only on the one it was taken on",
                                              p->who));
    }
    if ((rc = feed__retry_due(c, p->server->attempt_ms, now, p->who, p->server->why,
                              p->server->refused ? FEED_EPG : 0, p->err)) != FEED_OK)
        return pgstmt_finish(p, rc);
    p->server->attempt_ms = feed__attempt_at(c, now);
    c->stats.pg_connects++;
    p->text = p->q->server == FEED_PG_REPLICA ? c->cfg.pg_replica_conninfo : c->cfg.pg_conninfo;
    p->state = PS_CONNECT;
    return FEED_P_CONNECT;
}

/* The authors as an int8[] in text, "{1,2,3}": malloc'd, or NULL. */
static char *pgstmt_int8_array(const int64_t *v, size_t n)
{
    char *text = malloc(n * 22 + 3), *o = text;

    for (size_t i = 0; text && i < n; i++)
        o += sprintf(o, "%s%lld", i ? "," : "{", (long long)v[i]);
    if (text)
        sprintf(o, "%s}", n ? "" : "{");
    return text;
}

/* The statement itself: its parameters, binary int8 (a probe's: text). */
static enum feed_pwant pgstmt_send(feed_pgstmt *p)
{
    static const int lengths[5] = { 8, 8, 8, 8, 0 }, formats[5] = { 1, 1, 1, 1, 0 };
    feed_sql *q = p->q;

    p->c->stats.sql_queries++;
    p->c->stats.replica_queries += q->server == FEED_PG_REPLICA;
    p->state = PS_QUERY;
    if (q->stmt >= FEED_SQL_STMTS) {    /* a lag probe: text in (formats NULL), text out */
        p->name = NULL;
        p->text = q->stmt == FEED_SQL_PROBE_PRIMARY ? "SELECT pg_current_wal_insert_lsn()::text"
                : "SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false),"
                  " coalesce(pg_last_wal_replay_lsn() >= $2::pg_lsn, false)";
        p->nparams = q->stmt == FEED_SQL_PROBE_PRIMARY ? 0 : 2;
        p->values[0] = q->text[0];
        p->values[1] = q->text[1];
        return FEED_P_QUERY;
    }
    for (int i = 0; i < q->nparams; i++) {
        for (int b = 0; b < 8; b++)         /* int8: big-endian, network order */
            p->buf[i][b] = (char)(((uint64_t)q->params[i] >> (56 - 8 * b)) & 0xff);
        p->values[i] = p->buf[i];
    }
    p->name = pgstmt_names[q->stmt];
    p->nparams = q->nparams;
    p->lengths = lengths;
    p->formats = formats;
    if (q->stmt == FEED_SQL_MERGE || q->stmt == FEED_SQL_FILTER || q->stmt == FEED_SQL_AUTHORS) {
        if (!p->array && !(p->array = pgstmt_int8_array(q->authors, q->nauthors)))
            return pgstmt_finish(p, feed__msg(p->err, FEED_ENOMEM,
                                              "out of memory for %zu authors", q->nauthors));
        if (q->stmt == FEED_SQL_MERGE && !q->with_feed)
            p->values[0] = NULL;    /* the feed is no source: no rows of it */
        p->values[4] = p->array;
        p->nparams = 5;
    }
    return FEED_P_QUERY;
}

/* The catalog check of a table: its kind; which of the owner, score and id
 * columns may be NULL; whether a unique index (or primary key) over owner
 * and id, or either alone, holds each (owner, id) once; whether a btree
 * index leads with (owner, score, id), score and id the same way, so that
 * a page is an index seek. $1 is the table as the statements quote it
 * (regclass reads it so), $2..$4 the columns' names. A name that is no
 * column gives no row: the type check then says so in PostgreSQL's words. */
static const char pgstmt_catalog_sql[] =
    "SELECT c.relkind::text,"
    " (SELECT string_agg(a.attname, ', ' ORDER BY a.attnum) FROM pg_attribute a"
    " WHERE a.attrelid = c.oid AND a.attname IN ($2, $3, $4) AND NOT a.attnotnull),"
    " EXISTS (SELECT FROM pg_index i WHERE i.indrelid = c.oid AND i.indisunique"
    " AND i.indpred IS NULL AND NOT EXISTS (SELECT FROM generate_series(0, i.indnkeyatts - 1) k"
    " WHERE i.indkey[k] NOT IN (o.attnum, d.attnum)))::text,"
    " EXISTS (SELECT FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid"
    " JOIN pg_am m ON m.oid = x.relam WHERE i.indrelid = c.oid AND m.amname = 'btree'"
    " AND i.indpred IS NULL AND i.indnkeyatts >= 3 AND i.indkey[0] = o.attnum"
    " AND i.indkey[1] = s.attnum AND i.indkey[2] = d.attnum"
    " AND (i.indoption[1] & 1) = (i.indoption[2] & 1))::text"
    " FROM pg_class c JOIN pg_attribute o ON o.attrelid = c.oid AND o.attname = $2"
    " JOIN pg_attribute s ON s.attrelid = c.oid AND s.attname = $3"
    " JOIN pg_attribute d ON d.attrelid = c.oid AND d.attname = $4"
    " WHERE c.oid = $1::regclass";

int feed__pgstmt_checking(const feed_pgstmt *p)
{
    return p->state == PS_SETUP && (p->step == SU_CATALOG || p->step == SU_AUTHOR_CATALOG);
}

/* Ask the catalog about table fam's table. */
static enum feed_pwant pgstmt_catalog(feed_pgstmt *p, int fam)
{
    const feed_config *cfg = &p->c->cfg;

    free(p->quoted);
    if (!(p->quoted = pgstmt_quote(fam == FEED_FAM_AUTHOR ? cfg->author_table : cfg->table)))
        return pgstmt_fail(p, feed__msg(p->err, FEED_ENOMEM, "out of memory"));
    p->name = NULL;
    p->text = pgstmt_catalog_sql;
    p->values[0] = p->quoted;
    p->values[1] = fam == FEED_FAM_AUTHOR ? cfg->author_column : cfg->owner_column;
    p->values[2] = cfg->score_column;
    p->values[3] = cfg->id_column;
    p->nparams = 4;
    p->lengths = p->formats = NULL;
    return FEED_P_QUERY;
}

/* One warning of the catalog check: to log_fn, and kept for feed_open's
 * message. */
static void pgstmt_warn(feed_pgstmt *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void pgstmt_warn(feed_pgstmt *p, const char *fmt, ...)
{
    char msg[FEED_ERRMSG];
    size_t len = strlen(p->c->warnings);
    va_list ap;

    va_start(ap, fmt);
    feed__vmsg(msg, 0, fmt, ap);
    va_end(ap);
    feed__log(p->c, FEED_LOG_WARN, "%s", msg);
    snprintf(p->c->warnings + len, sizeof p->c->warnings - len, "%s%s", len ? "; " : "", msg);
}

/* What the catalog said of table fam's table. A table (not a view) with
 * no unique index over (owner, id) is refused: a duplicated row would be
 * shown twice on one page and once when walked one item at a time, never
 * the page SQL's order gives. What only costs is a warning, once per
 * handle: columns that may be NULL (such rows are left out, and reported
 * when met), no index for the pages' order (each page past the cache reads
 * the whole feed), a view (nothing of that can be checked). */
static int pgstmt_catalog_answer(feed_pgstmt *p, const feed_pgio *io, int fam)
{
    const feed_config *cfg = &p->c->cfg;
    struct feed_table_facts *t = &p->c->tables[fam];
    const char *table = fam == FEED_FAM_AUTHOR ? cfg->author_table : cfg->table;
    const char *owner = fam == FEED_FAM_AUTHOR ? cfg->author_column : cfg->owner_column;
    const feed_pgcell *cell = io->cells;
    int kept, view;

    if (io->ntuples != 1 || io->nfields != 4 || !cell[0].v)
        return FEED_OK;             /* no such column: the type check tells */
    view = !strchr("rpm", cell[0].v[0]);     /* a table, partitioned, materialized */
    if (!view && !(cell[2].v && cell[2].v[0] == 't')) {
        p->c->stats.pg_errors++;
        return feed__msg(p->err, FEED_EPG, "%s: table \"%s\" has no primary key or unique"
                         " index on (%s, %s), nor on either alone: a feed shows each (owner,"
                         " id) once, and a duplicated row would show twice; add PRIMARY KEY"
                         " (%s, %s) (docs/schema.md)", p->who, table, owner, cfg->id_column,
                         owner, cfg->id_column);
    }
    kept = t->checked;
    t->checked = 1;
    t->nullable = view || cell[1].v != NULL;
    if (kept)
        return FEED_OK;
    if (view)
        pgstmt_warn(p, "%s: \"%s\" is a view: NOT NULL on its columns, one row per (%s, %s)"
                    " and an index for (%s, %s DESC, %s DESC) cannot be checked; rows with a"
                    " NULL %s or %s are left out of feeds (docs/schema.md)", p->who, table,
                    owner, cfg->id_column, owner, cfg->score_column, cfg->id_column,
                    cfg->score_column, cfg->id_column);
    if (!view && cell[1].v)
        pgstmt_warn(p, "%s: table \"%s\": %s may be NULL (no NOT NULL): a row with a NULL"
                    " score or id has no place in a feed and is left out, named when a rebuild"
                    " meets it (docs/schema.md)", p->who, table, cell[1].v);
    if (!view && !(cell[3].v && cell[3].v[0] == 't'))
        pgstmt_warn(p, "%s: table \"%s\" has no index on (%s, %s DESC, %s DESC): each page"
                    " past the cache reads the whole feed from the table (docs/schema.md)",
                    p->who, table, owner, cfg->score_column, cfg->id_column);
    return FEED_OK;
}

/* Set-up step step's text: a type check's, or the statement's. */
static int pgstmt_step_text(int step)
{
    return step < SU_AUTHOR_TYPES ? FEED_PG_TYPES
         : step < SU_PREPARE ? FEED_PG_AUTHOR_TYPES : step - SU_PREPARE;
}

/* Ask for set-up step p->step, or go on once it is all done. A refused
 * prepare is the schema's (no such table or column): retrying will not
 * help (FEED_EPG). A dead connection is an outage. */
static enum feed_pwant pgstmt_setup(feed_pgstmt *p)
{
    static const unsigned types[5] = { 20, 20, 20, 20, 1016 };   /* int8, int8[] */
    static const int nparams[FEED_SQL_STMTS] = { 2, 4, 4, 5, 5, 5 };
    int i = pgstmt_step_text(p->step), stmt = i < FEED_SQL_STMTS;

    p->state = PS_SETUP;
    p->name = stmt ? pgstmt_names[i] : "";      /* a type check is unnamed */
    switch (p->step) {
    case SU_CATALOG:
        return pgstmt_catalog(p, FEED_FAM_FEED);
    case SU_AUTHOR_CATALOG:
        return pgstmt_catalog(p, FEED_FAM_AUTHOR);
    case SU_END:
        p->server->refused = 0;     /* set up: whatever it refused before, it takes now */
        p->server->why[0] = '\0';
        feed__store_back(p->c, &p->server->failing, p->who);
        return p->q->stmt < 0 ? pgstmt_finish(p, FEED_OK) : pgstmt_send(p);
    case SU_DESCRIBE:
    case SU_AUTHOR_DESCRIBE:
        return FEED_P_DESCRIBE;
    default:
        p->c->stats.sql_queries += stmt;
        p->text = p->texts[i];
        p->nparams = stmt ? nparams[i] : 0;
        p->types = types;
        return FEED_P_PREPARE;
    }
}

/* What a set-up step came back with. */
static enum feed_pwant pgstmt_set_up(feed_pgstmt *p, const feed_pgio *io)
{
    const feed_config *cfg = &p->c->cfg;
    int rc, answered = io->how == FEED_PIO_DONE, catalog = feed__pgstmt_checking(p);

    if (!answered || io->status != (catalog ? FEED_PGR_TUPLES : FEED_PGR_COMMAND))
        return pgstmt_fail(p, pgstmt_error(p, answered && io->conn_ok ? FEED_EPG
                                                                      : FEED_EUNAVAILABLE,
                                           catalog ? "table check" : "prepare", io->message));
    if (catalog && (rc = pgstmt_catalog_answer(p, io, p->step == SU_CATALOG ? FEED_FAM_FEED
                                                                          : FEED_FAM_AUTHOR))
                   != FEED_OK)
        return pgstmt_fail(p, rc);
    if (catalog && p->step == SU_CATALOG && !cfg->author_table)
        p->step++;                  /* no authors' table to check */
    if (catalog && p->step == SU_AUTHOR_CATALOG && (rc = pgstmt_texts(p)) != FEED_OK)
        return pgstmt_fail(p, rc);  /* the texts, now that the tables are known */
    if (catalog) {
        p->step++;
        return pgstmt_setup(p);
    }
    if ((p->step == SU_DESCRIBE || p->step == SU_AUTHOR_DESCRIBE) &&
        (rc = pgstmt_check_types(p, io->types, p->step == SU_DESCRIBE ? cfg->table
                                                                      : cfg->author_table))
        != FEED_OK)
        return pgstmt_fail(p, rc);
    do {
        p->step++;
    } while (p->step < SU_END && !p->texts[pgstmt_step_text(p->step)][0]);
    return pgstmt_setup(p);
}

/* What the statement came back with. A server that answered with an error
 * keeps its connection; one that went away under the statement (a restart)
 * is connected again and the statement sent once more, at once, when its
 * connection had been up before. */
static enum feed_pwant pgstmt_answered(feed_pgstmt *p, const feed_pgio *io, int64_t now)
{
    int answered = io->how == FEED_PIO_DONE, probe = p->q->stmt >= FEED_SQL_STMTS, rc;

    if (io->how == FEED_PIO_NOMEM)
        return pgstmt_finish(p, feed__msg(p->err, FEED_ENOMEM, "out of memory for %d rows",
                                          io->ntuples));
    if (answered && io->status == FEED_PGR_TUPLES)
        return pgstmt_finish(p, pgstmt_take(p, io));
    rc = pgstmt_error(p, answered && io->conn_ok ? FEED_EPG : FEED_EUNAVAILABLE,
                      probe ? "lag probe" : "query", io->message);
    if (rc == FEED_EPG)
        return pgstmt_finish(p, rc);
    if (!p->was_up || p->retried || probe)
        return pgstmt_fail(p, rc);
    p->retried = 1;
    p->server->attempt_ms = 0;
    return pgstmt_connect(p, now);
}

enum feed_pwant feed__pgstmt_next(feed_pgstmt *p, const feed_pgio *io, int64_t now)
{
    p->drop = p->cancel = 0;
    if (p->state == PS_DONE)
        return FEED_P_DONE;
    if (io->how == FEED_PIO_TIMEOUT && p->state != PS_START)
        return pgstmt_timed_out(p, now);
    switch (p->state) {
    case PS_START:
        p->was_up = io->had_conn;
        if (!io->conn_ok)
            return pgstmt_connect(p, now);
        return p->q->stmt < 0 ? pgstmt_finish(p, FEED_OK) : pgstmt_send(p);
    case PS_CONNECT:
        if (io->how == FEED_PIO_NOMEM)
            return pgstmt_finish(p, feed__msg(p->err, FEED_ENOMEM, "%s connect: out of memory",
                                              p->who));
        if (io->how != FEED_PIO_DONE)
            return pgstmt_fail(p, pgstmt_error(p, pgstmt_refused(io) ? FEED_EPG
                                                                     : FEED_EUNAVAILABLE,
                                               "connect", io->message));
        p->step = SU_CATALOG;
        return pgstmt_setup(p);
    case PS_SETUP:
        return pgstmt_set_up(p, io);
    default:
        return pgstmt_answered(p, io, now);
    }
}
