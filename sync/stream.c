/* stream.c -- the PostgreSQL side of feedcache-sync (see stream.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <time.h>

#include "pgoutput.h"
#include "stream.h"

/* One line, whatever libpq said. */
static int fail(sync_pg *s, int code, const char *fmt, const char *what, const char *detail)
{
    snprintf(s->err, sizeof s->err, fmt, what, detail ? detail : "");
    for (char *p = s->err; *p; p++)
        if (*p == '\n' || *p == '\r' || *p == '\t')
            *p = ' ';
    for (size_t n = strlen(s->err); n > 0 && s->err[n - 1] == ' '; n--)
        s->err[n - 1] = '\0';
    return code;
}

/* A failed statement: worth retrying when the connection or the server is
 * the problem (class 08 connection, 57 operator intervention such as a
 * shutdown, 53 resources, 55006 object in use: the slot is still held by a
 * walsender of a process that just died); fatal otherwise. */
static int classify(sync_pg *s, PGconn *c, PGresult *r, const char *what)
{
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    int code = SPG_FATAL;

    if (PQstatus(c) != CONNECTION_OK || !state || strncmp(state, "08", 2) == 0 ||
        strncmp(state, "57", 2) == 0 || strncmp(state, "53", 2) == 0 ||
        strcmp(state, "55006") == 0)
        code = SPG_RETRY;
    fail(s, code, "%s: %s", what, r ? PQresultErrorMessage(r) : PQerrorMessage(c));
    PQclear(r);
    return code;
}

static PGconn *connect_to(sync_pg *s, const char *conninfo, int replication)
{
    const char *keys[] = { "dbname", "replication", "fallback_application_name", NULL };
    const char *vals[] = { conninfo, replication ? "database" : NULL,
                           "feedcache-sync", NULL };
    PGconn *c;

    if (!replication) {
        keys[1] = "fallback_application_name";
        vals[1] = "feedcache-sync";
        keys[2] = NULL;
    }
    c = PQconnectdbParams(keys, vals, 1);
    if (!c) {
        fail(s, SPG_RETRY, "%s: %s", "PostgreSQL connect", "out of memory");
        return NULL;
    }
    if (PQstatus(c) != CONNECTION_OK) {
        fail(s, SPG_RETRY, "%s: %s", "PostgreSQL connect", PQerrorMessage(c));
        PQfinish(c);
        return NULL;
    }
    return c;
}

/* Run a statement with text parameters; *out gets the result of a query. */
static int run(sync_pg *s, const char *what, const char *sql, int n,
               const char *const *params, PGresult **out)
{
    PGresult *r = PQexecParams(s->sql, sql, n, NULL, params, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(r);

    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK)
        return classify(s, s->sql, r, what);
    if (out)
        *out = r;
    else
        PQclear(r);
    return SPG_OK;
}

/* The table as the library names it: one identifier, quoted. Its schema is
 * what the Relation messages will carry: into *schema. */
static int find_table(sync_pg *s, const char *table, char **schema)
{
    const char *p[1] = { table };
    PGresult *r;
    int rc = run(s, "looking up the table",
                 "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                 " WHERE c.oid = to_regclass(quote_ident($1)) AND c.relkind IN ('r', 'p')",
                 1, p, &r);

    if (rc != SPG_OK)
        return rc;
    if (PQntuples(r) != 1) {
        PQclear(r);
        return fail(s, SPG_FATAL, "%s: %s", table,
                    "no such table in the search path (a view cannot be published: "
                    "feedcache-sync needs the table itself)");
    }
    free(*schema);
    *schema = strdup(PQgetvalue(r, 0, 0));
    PQclear(r);
    return *schema ? SPG_OK : fail(s, SPG_FATAL, "%s%s", "out of memory", "");
}

/* Does the existing publication pub publish table as we need it? SPG_OK,
 * SPG_FATAL with what to do, or SPG_RETRY; *exists = 0 when there is no
 * such publication. */
static int check_publication(sync_pg *s, const char *table, const char *pub, int *exists)
{
    const char *p[2] = { pub, table };
    char sql[1024];
    PGresult *r;
    int rc;

    rc = run(s, "looking up the publication",
             "SELECT pubinsert AND pubupdate AND pubdelete AND pubtruncate,"
             " EXISTS (SELECT 1 FROM pg_publication_tables t WHERE t.pubname = p.pubname"
             "  AND format('%I.%I', t.schemaname, t.tablename)::regclass"
             "      = to_regclass(quote_ident($2))),"
             " pubviaroot OR (SELECT relkind FROM pg_class"
             "                WHERE oid = to_regclass(quote_ident($2))) <> 'p'"
             " FROM pg_publication p WHERE pubname = $1", 2, p, &r);
    if (rc != SPG_OK)
        return rc;
    *exists = PQntuples(r) == 1;
    if (*exists) {
        int all = PQgetvalue(r, 0, 0)[0] == 't', has = PQgetvalue(r, 0, 1)[0] == 't';
        int root = PQgetvalue(r, 0, 2)[0] == 't';
        PQclear(r);
        if (!has) {
            snprintf(sql, sizeof sql, "publication \"%s\" does not publish table \"%s\": "
                     "ALTER PUBLICATION ... ADD TABLE, or choose another with --publication",
                     pub, table);
            return fail(s, SPG_FATAL, "%s%s", sql, "");
        }
        if (!root) {
            /* Otherwise changes carry the partitions' names, not the table's. */
            snprintf(sql, sizeof sql, "publication \"%s\" publishes the partitions of \"%s\" "
                     "under their own names: ALTER PUBLICATION ... SET "
                     "(publish_via_partition_root = true)", pub, table);
            return fail(s, SPG_FATAL, "%s%s", sql, "");
        }
        if (!all) {
            snprintf(sql, sizeof sql, "publication \"%s\" must publish insert, update, delete "
                     "and truncate (ALTER PUBLICATION ... SET (publish = ...))", pub);
            return fail(s, SPG_FATAL, "%s%s", sql, "");
        }
        return SPG_OK;
    }
    PQclear(r);
    return SPG_OK;
}

/* The publication of the tables (the feed table, and the authors' table
 * when there is one): checked if it exists, created otherwise. */
static int ensure_publication(sync_pg *s, const char *const *tables, int ntables,
                              const char *pub)
{
    char *qpub, *qtable[2] = { NULL, NULL }, sql[1024];
    int rc = SPG_OK, exists = 0;

    for (int i = 0; i < ntables && rc == SPG_OK; i++)
        rc = check_publication(s, tables[i], pub, &exists);
    if (rc != SPG_OK || exists)
        return rc;
    qpub = PQescapeIdentifier(s->sql, pub, strlen(pub));
    for (int i = 0; i < ntables; i++)
        qtable[i] = PQescapeIdentifier(s->sql, tables[i], strlen(tables[i]));
    if (!qpub || !qtable[0] || (ntables > 1 && !qtable[1])) {
        PQfreemem(qpub);
        PQfreemem(qtable[0]);
        PQfreemem(qtable[1]);
        return fail(s, SPG_FATAL, "%s: %s", "quoting names", PQerrorMessage(s->sql));
    }
    /* Via the root: a partitioned table's changes then carry its own name. */
    snprintf(sql, sizeof sql, "CREATE PUBLICATION %s FOR TABLE %s%s%s"
             " WITH (publish_via_partition_root = true)", qpub, qtable[0],
             ntables > 1 ? ", " : "", ntables > 1 ? qtable[1] : "");
    PQfreemem(qpub);
    PQfreemem(qtable[0]);
    PQfreemem(qtable[1]);
    rc = run(s, "creating the publication (the role must own the table and have CREATE "
             "on the database)", sql, 0, NULL, NULL);
    if (rc == SPG_OK)
        fprintf(stderr, "feedcache-sync: created publication \"%s\" for table%s \"%s\"%s%s%s\n",
                pub, ntables > 1 ? "s" : "", tables[0], ntables > 1 ? " and \"" : "",
                ntables > 1 ? tables[1] : "", ntables > 1 ? "\"" : "");
    return rc;
}

static int ensure_slot(sync_pg *s, const char *slot, int *created)
{
    const char *p[1] = { slot };
    PGresult *r;
    int rc;

    *created = 0;
    rc = run(s, "looking up the replication slot",
             "SELECT plugin = 'pgoutput', database = current_database()"
             " FROM pg_replication_slots WHERE slot_name = $1", 1, p, &r);
    if (rc != SPG_OK)
        return rc;
    if (PQntuples(r) == 1) {
        int plugin = PQgetvalue(r, 0, 0)[0] == 't', db = PQgetvalue(r, 0, 1)[0] == 't';
        PQclear(r);
        if (!plugin || !db)
            return fail(s, SPG_FATAL, "replication slot \"%s\" %s", slot,
                        !plugin ? "exists but is not a logical slot of plugin pgoutput"
                                : "belongs to another database");
        return SPG_OK;
    }
    PQclear(r);
    rc = run(s, "creating the replication slot (needs wal_level = logical, a free "
             "max_replication_slots entry, and a role with the REPLICATION attribute)",
             "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", 1, p, NULL);
    if (rc == SPG_OK) {
        *created = 1;
        fprintf(stderr, "feedcache-sync: created logical replication slot \"%s\" (pgoutput)\n",
                slot);
    }
    return rc;
}

static int start(sync_pg *s, const char *slot, const char *pub)
{
    char sql[512];
    PGresult *r;

    /* Both names are checked by the caller: [a-z0-9_] only. LSN 0/0 means
     * the slot's confirmed position. */
    snprintf(sql, sizeof sql, "START_REPLICATION SLOT \"%s\" LOGICAL 0/0 "
             "(proto_version '1', publication_names '\"%s\"')", slot, pub);
    r = PQexec(s->repl, sql);
    if (PQresultStatus(r) != PGRES_COPY_BOTH)
        return classify(s, s->repl, r, "START_REPLICATION");
    PQclear(r);
    return SPG_OK;
}

int spg_open(sync_pg *s, const char *conninfo, const char *table, const char *author_table,
             const char *slot, const char *publication, int *created)
{
    const char *tables[2] = { table, author_table };
    int rc;

    spg_close(s);
    *created = 0;
    if (!(s->sql = connect_to(s, conninfo, 0)))
        return SPG_RETRY;
    /* The publication first: pgoutput reads it as of each change it
     * decodes, so it must exist before the slot's first change. */
    if ((rc = find_table(s, table, &s->schema)) != SPG_OK ||
        (author_table && (rc = find_table(s, author_table, &s->author_schema)) != SPG_OK) ||
        (rc = ensure_publication(s, tables, author_table ? 2 : 1, publication)) != SPG_OK ||
        (rc = ensure_slot(s, slot, created)) != SPG_OK)
        return rc;
    if (!(s->repl = connect_to(s, conninfo, 1)))
        return SPG_RETRY;
    return SPG_OK;
}

int spg_start(sync_pg *s, const char *slot, const char *publication)
{
    return start(s, slot, publication);
}

int spg_drop_slot(sync_pg *s, const char *slot)
{
    const char *p[1] = { slot };

    return run(s, "dropping the replication slot",
               "SELECT pg_drop_replication_slot($1)", 1, p, NULL);
}

void spg_close(sync_pg *s)
{
    if (s->repl) {
        PQfinish(s->repl);
        s->repl = NULL;
    }
    if (s->sql) {
        PQfinish(s->sql);
        s->sql = NULL;
    }
}

int spg_read(sync_pg *s, char **buf, int timeout_ms)
{
    int consumed = 0;

    for (;;) {
        int n = PQgetCopyData(s->repl, buf, 1);
        if (n > 0)
            return n;
        if (n == -1) {
            classify(s, s->repl, PQgetResult(s->repl), "replication stream ended");
            return SPG_RETRY;   /* whatever the reason: reconnect and resume */
        }
        if (n == -2)
            return fail(s, SPG_RETRY, "%s: %s", "replication stream", PQerrorMessage(s->repl));
        /* Nothing complete buffered: take what the socket has, without
         * waiting, once; then wait up to timeout_ms for more. */
        if (!consumed) {
            consumed = 1;
            if (!PQconsumeInput(s->repl))
                return fail(s, SPG_RETRY, "%s: %s", "replication stream", PQerrorMessage(s->repl));
            continue;
        }
        if (timeout_ms <= 0)
            return 0;

        fd_set in;
        int fd = PQsocket(s->repl);
        struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };
        FD_ZERO(&in);
        FD_SET(fd, &in);
        n = select(fd + 1, &in, NULL, NULL, &tv);
        if (n < 0 && errno != EINTR)
            return fail(s, SPG_RETRY, "%s: %s", "select", strerror(errno));
        if (n <= 0)
            return 0;     /* timed out, or a signal: let the caller look */
        consumed = 0;
        timeout_ms = 0;   /* data came: read what is complete, then return */
    }
}

static int64_t now_pg_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000 - PGO_EPOCH_DIFF_US;
}

int spg_status(sync_pg *s, uint64_t received, uint64_t applied)
{
    uint8_t msg[PGO_STATUS_LEN];

    pgo_status_encode(msg, received, applied, applied, now_pg_us(), 0);
    if (PQputCopyData(s->repl, (const char *)msg, sizeof msg) != 1 || PQflush(s->repl) != 0)
        return fail(s, SPG_RETRY, "%s: %s", "sending a status update", PQerrorMessage(s->repl));
    return SPG_OK;
}

int spg_visible(sync_pg *s, const uint32_t *xids, size_t n)
{
    /* The snapshot's in-progress list, in 64-bit form; our xids are the low
     * 32 bits (in-progress xids all lie within 2^31 of each other, so the
     * low bits name one transaction). */
    char *list, *p;
    const char *params[1];
    PGresult *r;
    int rc;

    if (n == 0)
        return 1;
    if (!(list = malloc(n * 11 + 3)))
        return fail(s, SPG_RETRY, "%s%s", "out of memory", "");
    p = list;
    *p++ = '{';
    for (size_t i = 0; i < n; i++)
        p += sprintf(p, "%s%u", i ? "," : "", (unsigned)xids[i]);
    *p++ = '}';
    *p = '\0';
    params[0] = list;
    rc = run(s, "visibility check",
             "SELECT count(*) FROM pg_snapshot_xip(pg_current_snapshot()) x"
             " WHERE (x::text::numeric % 4294967296)::bigint = ANY ($1::bigint[])",
             1, params, &r);
    free(list);
    if (rc != SPG_OK)
        return SPG_RETRY;
    rc = strcmp(PQgetvalue(r, 0, 0), "0") == 0;
    PQclear(r);
    return rc;
}

int spg_slot_position(sync_pg *s, const char *slot, uint64_t *wal_end, uint64_t *confirmed)
{
    const char *p[1] = { slot };
    PGresult *r;

    if (run(s, "slot position",
            "SELECT (pg_current_wal_lsn() - '0/0')::text,"
            " coalesce((confirmed_flush_lsn - '0/0')::text, '0')"
            " FROM pg_replication_slots WHERE slot_name = $1", 1, p, &r) != SPG_OK)
        return SPG_RETRY;
    if (PQntuples(r) != 1) {
        PQclear(r);
        return fail(s, SPG_RETRY, "replication slot \"%s\" %s", slot, "is gone");
    }
    *wal_end = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
    *confirmed = strtoull(PQgetvalue(r, 0, 1), NULL, 10);
    PQclear(r);
    return SPG_OK;
}
