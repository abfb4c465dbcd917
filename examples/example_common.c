/* example_common.c -- the plumbing the two composite-score examples share
 * (see example_common.h). Nothing here knows replies or players: the words,
 * the table, the columns, the order and the printing come from the
 * example's ex_domain.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "example_common.h"
#include "score_sql.h"         /* score_sql[]: sql/score.sql */

/* ------------------------------------------------------------------------
 * Output and checks
 * ------------------------------------------------------------------------ */

void ex_say(const ex_app *a, const char *fmt, ...)
{
    va_list ap;

    if (a->check)
        return;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
}

int ex_check(ex_app *a, int cond, const char *fmt, ...)
{
    va_list ap;

    a->checks++;
    if (cond)
        return 1;
    if (++a->failures > 20) {   /* the first ones tell the story */
        if (a->failures == 21)
            printf("FAIL: ... (only the first 20 failures are shown)\n");
        return 0;
    }
    printf("FAIL: ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    return 0;
}

static const char *source_name(feed_source s)
{
    switch (s) {
    case FEED_SOURCE_CACHE:   return "cache";
    case FEED_SOURCE_REBUILD: return "rebuild";
    case FEED_SOURCE_DB:      return "sql";
    }
    return "?";
}

/* ------------------------------------------------------------------------
 * PostgreSQL
 * ------------------------------------------------------------------------ */

/* One statement with text parameters. The caller checks and clears. */
static PGresult *sql(ex_app *a, const char *query, int n, const char *const *params)
{
    return PQexecParams(a->pg, query, n, NULL, params, NULL, NULL, 0);
}

/* One statement whose only parameter is the owner. */
static PGresult *sql_owner(ex_app *a, const char *query)
{
    char owner_s[24];
    const char *params[1] = { owner_s };

    snprintf(owner_s, sizeof owner_s, "%" PRId64, a->owner);
    return sql(a, query, 1, params);
}

static int sql_ok(ex_app *a, PGresult *res, const char *what)
{
    ExecStatusType st = PQresultStatus(res);

    return ex_check(a, st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK,
                    "%s: %s", what, PQresultErrorMessage(res));
}

static int exec_ok(ex_app *a, const char *query, const char *what)
{
    PGresult *res = PQexec(a->pg, query);
    int ok = sql_ok(a, res, what);

    PQclear(res);
    return ok;
}

/* Row i of a result in the columns id, the fields, score. Returns the score. */
static int64_t get_row(PGresult *res, int i, ex_row *row)
{
    row->id = strtoll(PQgetvalue(res, i, 0), NULL, 10);
    for (int j = 0; j < EX_NFIELDS; j++)
        row->v[j] = strtoull(PQgetvalue(res, i, 1 + j), NULL, 10);
    return strtoll(PQgetvalue(res, i, 1 + EX_NFIELDS), NULL, 10);
}

/* The table, and sql/score.sql first when the database lacks the function
 * the table needs. One transaction under an advisory lock: two programs
 * starting at once do not race on CREATE. */
static int load_schema(ex_app *a)
{
    const ex_domain *d = a->d;
    char query[160], what[80];
    PGresult *res;
    int ok, have;

    if (!exec_ok(a, "BEGIN; SET LOCAL client_min_messages = warning;"
                    " SELECT pg_advisory_xact_lock(hashtext('feedcache examples schema'))",
                 "starting the schema transaction"))
        return 0;
    snprintf(query, sizeof query, "SELECT to_regprocedure('%s') IS NOT NULL", d->needs);
    snprintf(what, sizeof what, "looking for %.*s", (int)strcspn(d->needs, "("), d->needs);
    res = PQexec(a->pg, query);
    ok = sql_ok(a, res, what);
    have = ok && PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    ok = ok && (have || exec_ok(a, (const char *)score_sql, "loading sql/score.sql"));
    snprintf(what, sizeof what, "loading %s", d->schema_file);
    ok = ok && exec_ok(a, d->schema, what);
    ok = ok && exec_ok(a, "COMMIT", "committing the schema");
    if (!ok)
        PQclear(PQexec(a->pg, "ROLLBACK"));
    return ok;
}

/* ------------------------------------------------------------------------
 * Start and finish
 * ------------------------------------------------------------------------ */

static const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);

    return v && *v ? v : dflt;
}

static int usage(const ex_app *a, const char *argv0)
{
    fprintf(stderr, "usage: %s [--check] [--%s N] [--limit N]\n", argv0, a->d->owner);
    return 2;
}

int ex_open(ex_app *a, const ex_domain *d, int argc, char **argv)
{
    feed_config cfg;
    char query[128], what[64];
    PGresult *res;
    int rc;

    memset(a, 0, sizeof *a);
    a->d = d;
    a->owner = 1;
    a->limit = 4;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--check") == 0)
            a->check = 1;
        else if (strncmp(argv[i], "--", 2) == 0 && strcmp(argv[i] + 2, d->owner) == 0 &&
                 i + 1 < argc)
            a->owner = strtoll(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--limit") == 0 && i + 1 < argc)
            a->limit = strtoul(argv[++i], NULL, 10);
        else
            return usage(a, argv[0]);
    }
    if (a->owner < 0 || a->limit < 1 || a->limit > 100)
        return usage(a, argv[0]);

    rc = feed_layout_init(&a->layout, d->fields, d->nfields);
    if (rc != FEED_OK) {
        printf("FAIL: feed_layout_init: %s\n", feed_strerror(rc));
        return 1;
    }

    /* The schema first: feed_open prepares its queries against the table. */
    a->pg = PQconnectdb(env_or("FEED_PG_CONNINFO", ""));
    if (PQstatus(a->pg) != CONNECTION_OK) {
        printf("FAIL: PostgreSQL: %s", PQerrorMessage(a->pg));
        PQfinish(a->pg);
        return 1;
    }
    if (!load_schema(a)) {
        PQfinish(a->pg);
        return 1;
    }

    /* feedcache reads the feed straight from the example's table. */
    feed_config_init(&cfg);
    cfg.redis_host = env_or("FEED_REDIS_HOST", "127.0.0.1");
    cfg.redis_port = atoi(env_or("FEED_REDIS_PORT", "6379"));
    cfg.pg_conninfo = env_or("FEED_PG_CONNINFO", "");
    cfg.key_prefix = d->key_prefix;
    cfg.table = d->table;
    cfg.owner_column = d->owner_column;
    cfg.score_column = "score";
    cfg.id_column = d->id_column;
    cfg.max_len = d->max_len;
    rc = feed_open(&a->f, &cfg);
    if (rc != FEED_OK) {
        printf("FAIL: feed_open: %s: %s\n", feed_strerror(rc), feed_errmsg(NULL));
        PQfinish(a->pg);
        return 1;
    }

    /* A fresh feed: no rows, no cached copy. */
    snprintf(query, sizeof query, "DELETE FROM %s WHERE %s = $1", d->table, d->owner_column);
    res = sql_owner(a, query);
    snprintf(what, sizeof what, "emptying the %s", d->owner);
    sql_ok(a, res, what);
    PQclear(res);
    rc = feed_invalidate(a->f, a->owner);
    ex_check(a, rc == FEED_OK, "feed_invalidate: %s: %s", feed_strerror(rc),
             feed_errmsg(a->f));
    return 0;
}

int ex_finish(ex_app *a)
{
    if (a->failures)
        printf("%s: %d of %d checks FAILED\n", a->d->name, a->failures, a->checks);
    else
        printf("%s: all %d checks passed: the walks follow %s\n", a->d->name, a->checks,
               a->d->order_text);
    feed_close(a->f);
    PQfinish(a->pg);
    return a->failures ? 1 : 0;
}

/* ------------------------------------------------------------------------
 * The model: the order the feed must have, from the tuples alone
 * ------------------------------------------------------------------------ */

static void expected(const ex_app *a, ex_row *out)
{
    memcpy(out, a->model, a->n * sizeof *out);
    qsort(out, a->n, sizeof *out, a->d->order);
}

ex_row *ex_find(ex_app *a, int64_t id)
{
    ex_row *m = NULL;

    for (size_t i = 0; i < a->n && !m; i++) {
        if (a->model[i].id == id)
            m = &a->model[i];
    }
    ex_check(a, m != NULL, "%s %" PRId64 " is not in the model", a->d->noun, id);
    return m;
}

void ex_expect_row(ex_app *a, const ex_row *got, const ex_row *want)
{
    ex_check(a, got->id == want->id && memcmp(got->v, want->v, sizeof got->v) == 0,
             "%s %" PRId64 ": PostgreSQL has %" PRId64 " (%" PRIu64 ", %" PRIu64 ", %" PRIu64
             "), expected (%" PRIu64 ", %" PRIu64 ", %" PRIu64 ")", a->d->noun, want->id,
             got->id, got->v[0], got->v[1], got->v[2], want->v[0], want->v[1], want->v[2]);
}

/* ------------------------------------------------------------------------
 * The writer: change a field in SQL, then tell the cache
 * ------------------------------------------------------------------------ */

/* Outside BEGIN ... COMMIT a statement is its own transaction: when it
 * returns, the change is committed, and only then may the hook run. The
 * hook gets the score PostgreSQL computed; the C packing of the values the
 * statement returned must be the same number. When PostgreSQL refuses the
 * statement, it changed nothing, so the cache is not told anything. */
int ex_write(ex_app *a, const char *query, int64_t id,
             const char *const *args, int nargs, ex_row *got)
{
    const char *noun = a->d->noun;
    char owner_s[24], id_s[24];
    const char *params[8] = { owner_s, id_s };
    PGresult *res;
    int64_t sql_score, c_score = -1;
    int rc;

    snprintf(owner_s, sizeof owner_s, "%" PRId64, a->owner);
    snprintf(id_s, sizeof id_s, "%" PRId64, id);
    for (int i = 0; i < nargs && i < 6; i++)
        params[2 + i] = args[i];
    res = sql(a, query, 2 + nargs, params);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        const char *s = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        const char *m = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
        snprintf(a->sqlstate, sizeof a->sqlstate, "%s", s ? s : "-----");
        if (m || s)
            snprintf(a->errmsg, sizeof a->errmsg, "%s", m ? m : PQresultErrorMessage(res));
        else
            snprintf(a->errmsg, sizeof a->errmsg, "no such %s", noun);
        PQclear(res);
        ex_say(a, "ERROR %s: %s\n", a->sqlstate, a->errmsg);
        return 0;
    }
    sql_score = get_row(res, 0, got);
    PQclear(res);

    rc = feed_score_pack(&a->layout, got->v, &c_score);
    ex_check(a, rc == FEED_OK && c_score == sql_score,
             "%s %" PRId64 ": PostgreSQL computed %" PRId64 ", C packs %" PRId64 " (%s)",
             noun, id, sql_score, c_score, feed_strerror(rc));

    rc = feed_on_insert(a->f, a->owner, sql_score, id);
    ex_check(a, rc == FEED_OK, "feed_on_insert(%s %" PRId64 "): %s: %s", noun, id,
             feed_strerror(rc), feed_errmsg(a->f));
    if (!a->check) {
        a->d->print_fields(got->v);
        printf("  %16" PRId64 "  %s\n", sql_score,
               c_score == sql_score ? "the same" : "DIFFERENT");
    }
    return 1;
}

void ex_refused(ex_app *a, const char *what, const char *query, int64_t id,
                const char *const *args, int nargs)
{
    ex_row got;
    int refused = !ex_write(a, query, id, args, nargs, &got);

    ex_check(a, refused && strcmp(a->sqlstate, "22003") == 0,
             "%s: SQLSTATE %s, expected 22003", what, refused ? a->sqlstate : "none");
}

/* ------------------------------------------------------------------------
 * Reading: walk the feed through feed_page, check it against the model
 * ------------------------------------------------------------------------ */

void ex_walk(ex_app *a, const char *title, size_t limit, int print)
{
    const ex_domain *d = a->d;
    ex_row want[EX_MAX_ROWS];
    int64_t last_score = FEED_FIRST, last_id = 0;
    size_t k = 0, page = 0;

    expected(a, want);
    print = print && !a->check;
    if (print) {
        printf("\n%s: %s %" PRId64 ", %zu %s a page\n", title, d->owner, a->owner, limit,
               d->nouns);
        printf("%s\n", d->walk_header);
    }
    for (;;) {
        feed_result r;
        int rc = feed_page(a->f, a->owner, last_score, last_id, limit, &r);

        if (!ex_check(a, rc == FEED_OK, "%s: page %zu: %s: %s", title, page + 1,
                      feed_strerror(rc), feed_errmsg(a->f)))
            return;
        page++;
        for (size_t i = 0; i < r.count; i++) {
            uint64_t v[EX_NFIELDS] = { 0 };
            int64_t want_score = -1;
            int urc = feed_score_unpack(&a->layout, r.items[i].score, v);

            if (print && i == 0)
                printf("%4zu  %-7s", page, source_name(r.source));
            else if (print)
                printf("%4s  %-7s", "", "");
            if (print) {
                printf("%*s%6" PRId64 "%*s", d->id_pad, "", r.items[i].id, d->id_pad, "");
                d->print_fields(v);
                printf("  %16" PRId64 "\n", r.items[i].score);
            }
            if (!ex_check(a, k < a->n, "%s: more than the %zu %s expected", title, a->n,
                          d->nouns))
                break;
            feed_score_pack(&a->layout, want[k].v, &want_score);
            ex_check(a, urc == FEED_OK && r.items[i].id == want[k].id &&
                        r.items[i].score == want_score &&
                        memcmp(v, want[k].v, sizeof v) == 0,
                     "%s, limit %zu: position %zu is %s %" PRId64 " (score %" PRId64
                     "), expected %s %" PRId64 " (%" PRIu64 ", %" PRIu64 ", %" PRIu64 ")",
                     title, limit, k + 1, d->noun, r.items[i].id, r.items[i].score, d->noun,
                     want[k].id, want[k].v[0], want[k].v[1], want[k].v[2]);
            k++;
        }
        if (!r.has_more || page > 1000) {
            feed_result_free(&r);
            break;
        }
        last_score = r.next_score;
        last_id = r.next_id;
        feed_result_free(&r);
    }
    ex_check(a, k == a->n, "%s, limit %zu: the walk gave %zu %s, expected %zu", title,
             limit, k, d->nouns, a->n);
}

/* PostgreSQL sorting the rows by the fields themselves agrees too. */
static void check_sql_order(ex_app *a)
{
    const ex_domain *d = a->d;
    ex_row want[EX_MAX_ROWS];
    char what[64];
    PGresult *res;
    int n;

    expected(a, want);
    res = sql_owner(a, d->by_fields);
    n = PQntuples(res);
    snprintf(what, sizeof what, "reading the %s", d->owner);
    if (sql_ok(a, res, what) &&
        ex_check(a, (size_t)n == a->n, "SQL has %d %s, expected %zu", n, d->nouns, a->n)) {
        for (int i = 0; i < n; i++) {
            ex_row got;
            int64_t c_score = -1, sql_score = get_row(res, i, &got);

            ex_expect_row(a, &got, &want[i]);
            feed_score_pack(&a->layout, got.v, &c_score);
            ex_check(a, c_score == sql_score, "%s %" PRId64 ": SQL score %" PRId64
                     ", C packs %" PRId64, d->noun, got.id, sql_score, c_score);
        }
    }
    PQclear(res);
}

void ex_recheck(ex_app *a, size_t max_limit)
{
    int rc;

    for (size_t lim = 1; lim <= max_limit; lim++)
        ex_walk(a, "Walk 2 again", lim, 0);
    rc = feed_invalidate(a->f, a->owner);
    ex_check(a, rc == FEED_OK, "feed_invalidate: %s: %s", feed_strerror(rc), feed_errmsg(a->f));
    ex_walk(a, "Walk 2 after a rebuild", 3, 0);
    ex_walk(a, "Walk 2 after a rebuild", 100, 0);
    check_sql_order(a);
}
