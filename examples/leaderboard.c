/* leaderboard.c -- a board's players, best first, served by feedcache.
 *
 * A player ranks by points; among equal points a paying player comes first;
 * then whoever reached those points earliest; players equal on all three
 * come larger player id first. The three fields are packed into one exact
 * 53-bit score (the layout below; the time field is smaller-first).
 * PostgreSQL computes it in a generated column of the leaderboard table
 * (examples/leaderboard.sql), the writer packs the same values in C to show
 * that the two agree, and feedcache serves each board from that table,
 * ordered by (score DESC, player_id DESC).
 *
 *   leaderboard [--check] [--board N] [--limit N]
 *
 * Connects to FEED_REDIS_HOST, FEED_REDIS_PORT and FEED_PG_CONNINFO (libpq
 * defaults when unset). It creates its table if needed, empties board N
 * (default 1) and its cache, enters a dozen players, walks the board N
 * players a page (default 4), records a few results and an upgrade (each
 * write: UPDATE ... RETURNING score, then feed_on_insert with that score),
 * tries two writes that do not fit their fields, and walks again. Then,
 * quietly, it walks again with every page size from 1 to 13, and after a
 * rebuild from SQL.
 *
 * Every page is checked against the order computed from the tuples alone
 * (field by field in its direction, then player id), never from the scores,
 * and every write checks that C packs the values PostgreSQL returned into
 * the score it computed. --check prints only what failed and a one-line
 * summary (tests/t_composite.c runs it). Exit status 0 when every check
 * held, 1 otherwise (2: bad arguments).
 *
 * The writes pass their time explicitly so that every run is the same; a
 * real writer would set reached_at = now().
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#include "feedcache.h"
#include "leaderboard_sql.h"   /* leaderboard_sql[]: examples/leaderboard.sql */
#include "score_sql.h"         /* score_sql[]: sql/score.sql */

/* ------------------------------------------------------------------------
 * The layout: most significant field first, 24 + 1 + 28 = 53 bits.
 * ------------------------------------------------------------------------ */

enum { POINTS, PAID, REACHED, NFIELDS };

static const feed_field board_fields[NFIELDS] = {
    { "points",  24, FEED_LARGER_FIRST },   /* 0 .. 16,777,215 */
    { "paid",     1, FEED_LARGER_FIRST },   /* 1 = paid: first among equal points */
    { "reached", 28, FEED_SMALLER_FIRST },  /* seconds since 2025-01-01 UTC, earliest
                                               first: up to 2033-07-04 21:24:15 */
};

#define EPOCH_UNIX INT64_C(1735689600)   /* 2025-01-01 00:00:00 UTC: second 0 */
#define DEMO_DAY   "2025-06-01"          /* every time below is on that day, UTC */
#define DEMO_SEC   INT64_C(13046400)     /* 2025-06-01 00:00:00 in seconds since the epoch */

/* The cache keeps the top 9 players of a board: small on purpose, so that a
 * walk of 4 a page shows all three sources: page 1 rebuilds the cache, page 2
 * is cut from it, page 3 lies past it and comes from SQL. */
#define MAX_LEN 9

typedef struct player {
    int64_t  id;
    uint64_t v[NFIELDS];    /* points, paid (0/1), reached (seconds since the epoch) */
} player;

static const struct seed {
    int64_t     id;
    uint64_t    points, paid;
    const char *at;         /* time of day on DEMO_DAY */
    const char *note;
} seeds[] = {
    { 201, 1500, 1, "10:10:00", "" },
    { 202, 1500, 0, "10:05:00", "earlier than 201, but free: after it" },
    { 203, 1500, 1, "10:03:00", "" },
    { 204, 1500, 1, "10:03:00", "ties with 203: 204 comes first" },
    { 205, 2200, 0, "11:00:00", "" },
    { 206,  900, 0, "09:00:00", "" },
    { 207,  900, 0, "09:00:30", "" },
    { 208,  900, 0, "09:30:00", "" },
    { 209,    0, 0, "08:00:00", "" },
    { 210,    0, 1, "08:00:00", "" },
    { 211, 2200, 1, "11:30:00", "later than 205, but paid: before it" },
    { 212,    0, 0, "08:00:00", "ties with 209" },
};
#define NSEEDS (sizeof seeds / sizeof seeds[0])

typedef struct app {
    PGconn     *pg;
    feed       *f;
    feed_layout layout;
    int64_t     board;
    size_t      limit;
    int         check;        /* --check: print failures and a summary only */
    int         checks, failures;
    player      model[NSEEDS + 4];   /* what the board must hold */
    size_t      n;
} app;

/* ------------------------------------------------------------------------
 * Output and checks
 * ------------------------------------------------------------------------ */

static void say(const app *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void say(const app *a, const char *fmt, ...)
{
    va_list ap;

    if (a->check)
        return;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
}

/* Count a check; print why when it fails. Returns cond. */
static int check(app *a, int cond, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int check(app *a, int cond, const char *fmt, ...)
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

/* "hh:mm:ss" on DEMO_DAY -> seconds since the epoch. */
static int64_t parse_time(const char *text)
{
    int h, m, s;

    if (sscanf(text, "%d:%d:%d", &h, &m, &s) != 3)
        return -1;
    return DEMO_SEC + h * 3600 + m * 60 + s;
}

static const char *fmt_time(uint64_t sec, char buf[24])
{
    time_t t = (time_t)(EPOCH_UNIX + (int64_t)sec);
    struct tm tm;

    if (!gmtime_r(&t, &tm) || !strftime(buf, 24, "%Y-%m-%d %H:%M:%S", &tm))
        snprintf(buf, 24, "second %" PRIu64, sec);
    return buf;
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
static PGresult *sql(app *a, const char *query, int n, const char *const *params)
{
    return PQexecParams(a->pg, query, n, NULL, params, NULL, NULL, 0);
}

static int sql_ok(app *a, PGresult *res, const char *what)
{
    ExecStatusType st = PQresultStatus(res);

    return check(a, st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK,
                 "%s: %s", what, PQresultErrorMessage(res));
}

static int exec_ok(app *a, const char *query, const char *what)
{
    PGresult *res = PQexec(a->pg, query);
    int ok = sql_ok(a, res, what);

    PQclear(res);
    return ok;
}

/* The table, and sql/score.sql first when the database lacks it. One
 * transaction under an advisory lock: two programs starting at once do not
 * race on CREATE. */
static int load_schema(app *a)
{
    PGresult *res;
    int ok, have;

    if (!exec_ok(a, "BEGIN; SET LOCAL client_min_messages = warning;"
                    " SELECT pg_advisory_xact_lock(hashtext('feedcache examples schema'))",
                 "starting the schema transaction"))
        return 0;
    res = PQexec(a->pg, "SELECT to_regprocedure('feed_pack_field(bigint,integer,boolean)')"
                        " IS NOT NULL");
    ok = sql_ok(a, res, "looking for feed_pack_field");
    have = ok && PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    ok = ok && (have || exec_ok(a, (const char *)score_sql, "loading sql/score.sql"));
    ok = ok && exec_ok(a, (const char *)leaderboard_sql, "loading examples/leaderboard.sql");
    ok = ok && exec_ok(a, "COMMIT", "committing the schema");
    if (!ok)
        PQclear(PQexec(a->pg, "ROLLBACK"));
    return ok;
}

/* ------------------------------------------------------------------------
 * The model: the order the board must have, from the tuples alone
 * ------------------------------------------------------------------------ */

/* More points first, then paid before free, then the earlier time, then the
 * larger player id. No score involved: this is what the packing must
 * reproduce. */
static int better_first(const void *x, const void *y)
{
    const player *p = x, *q = y;

    if (p->v[POINTS] != q->v[POINTS])
        return p->v[POINTS] > q->v[POINTS] ? -1 : 1;
    if (p->v[PAID] != q->v[PAID])
        return p->v[PAID] > q->v[PAID] ? -1 : 1;
    if (p->v[REACHED] != q->v[REACHED])
        return p->v[REACHED] < q->v[REACHED] ? -1 : 1;
    return p->id == q->id ? 0 : p->id > q->id ? -1 : 1;
}

static void expected(const app *a, player *out)
{
    memcpy(out, a->model, a->n * sizeof *out);
    qsort(out, a->n, sizeof *out, better_first);
}

static player *model_find(app *a, int64_t id)
{
    for (size_t i = 0; i < a->n; i++) {
        if (a->model[i].id == id)
            return &a->model[i];
    }
    return NULL;
}

/* ------------------------------------------------------------------------
 * The writer: change a field in SQL, then tell the cache
 * ------------------------------------------------------------------------ */

#define RETURNING " RETURNING player_id, points, paid::int, leaderboard_seconds(reached_at), score"

/* Run one writing statement with the parameters $1 = board, $2 = player id,
 * then args. Outside BEGIN ... COMMIT a statement is its own transaction:
 * when it returns, the change is committed, and only then may the hook run.
 * The hook gets the score PostgreSQL computed; the C packing of the values
 * the statement returned must be the same number.
 *
 * Returns 1 and fills *got; or 0 when PostgreSQL refused the statement, with
 * its SQLSTATE in state and its message in msg: the statement changed
 * nothing, so the cache is not told anything. */
static int write_player(app *a, const char *query, int64_t id,
                        const char *const *args, int nargs,
                        player *got, char state[6], char *msg, size_t msglen)
{
    char board_s[24], id_s[24], at[24];
    const char *params[8] = { board_s, id_s };
    PGresult *res;
    int64_t sql_score, c_score = -1;
    int rc;

    snprintf(board_s, sizeof board_s, "%" PRId64, a->board);
    snprintf(id_s, sizeof id_s, "%" PRId64, id);
    for (int i = 0; i < nargs && i < 6; i++)
        params[2 + i] = args[i];
    res = sql(a, query, 2 + nargs, params);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        const char *s = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        const char *m = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
        snprintf(state, 6, "%s", s ? s : "-----");
        snprintf(msg, msglen, "%s", m ? m : s ? PQresultErrorMessage(res) : "no such player");
        PQclear(res);
        say(a, "ERROR %s: %s\n", state, msg);
        return 0;
    }
    got->id = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    for (int i = 0; i < NFIELDS; i++)
        got->v[i] = strtoull(PQgetvalue(res, 0, 1 + i), NULL, 10);
    sql_score = strtoll(PQgetvalue(res, 0, 4), NULL, 10);
    PQclear(res);

    rc = feed_score_pack(&a->layout, got->v, &c_score);
    check(a, rc == FEED_OK && c_score == sql_score,
          "player %" PRId64 ": PostgreSQL computed %" PRId64 ", C packs %" PRId64 " (%s)",
          id, sql_score, c_score, feed_strerror(rc));

    rc = feed_on_insert(a->f, a->board, sql_score, id);
    check(a, rc == FEED_OK, "feed_on_insert(player %" PRId64 "): %s: %s", id,
          feed_strerror(rc), feed_errmsg(a->f));
    say(a, "%8" PRIu64 "  %-4s  %-19s  %16" PRId64 "  %s\n", got->v[POINTS],
        got->v[PAID] ? "paid" : "free", fmt_time(got->v[REACHED], at), sql_score,
        c_score == sql_score ? "the same" : "DIFFERENT");
    return 1;
}

/* The row PostgreSQL returned must be the one the model predicts. */
static void expect_row(app *a, const player *got, const player *want)
{
    check(a, got->id == want->id && memcmp(got->v, want->v, sizeof got->v) == 0,
          "player %" PRId64 ": PostgreSQL has %" PRId64 " (%" PRIu64 ", %" PRIu64 ", %" PRIu64
          "), expected (%" PRIu64 ", %" PRIu64 ", %" PRIu64 ")", want->id, got->id,
          got->v[0], got->v[1], got->v[2], want->v[0], want->v[1], want->v[2]);
}

/* A new player on the board. */
static void enter(app *a, const struct seed *s)
{
    char points[24], at[40], state[6], msg[256];
    const char *args[3] = { points, s->paid ? "true" : "false", at };
    player got, want = { s->id, { s->points, s->paid, (uint64_t)parse_time(s->at) } };

    snprintf(points, sizeof points, "%" PRIu64, s->points);
    snprintf(at, sizeof at, "%s %s+00", DEMO_DAY, s->at);
    say(a, "enter  %-19" PRId64, s->id);
    if (!check(a, a->n < sizeof a->model / sizeof a->model[0], "model full") ||
        !check(a, write_player(a, "INSERT INTO leaderboard"
                                  " (board_id, player_id, points, paid, reached_at)"
                                  " VALUES ($1, $2, $3, $4, $5)" RETURNING,
                               s->id, args, 3, &got, state, msg, sizeof msg),
               "enter %" PRId64 ": %s %s", s->id, state, msg))
        return;
    if (*s->note)
        say(a, "%26s(%s)\n", "", s->note);
    a->model[a->n++] = want;
    expect_row(a, &got, &want);
}

/* The player scores more points at that time (hh:mm:ss on DEMO_DAY). */
static void score_points(app *a, int64_t id, int points, const char *hms)
{
    char pts[16], at[40], label[64], state[6], msg[256];
    const char *args[2] = { pts, at };
    player got, *m = model_find(a, id);

    snprintf(pts, sizeof pts, "%d", points);
    snprintf(at, sizeof at, "%s %s+00", DEMO_DAY, hms);
    snprintf(label, sizeof label, "score  %" PRId64 " +%d %s", id, points, hms);
    say(a, "%-26s", label);
    if (!check(a, m != NULL, "player %" PRId64 " is not in the model", id) ||
        !check(a, write_player(a, "UPDATE leaderboard SET points = points + $3, reached_at = $4"
                                  " WHERE board_id = $1 AND player_id = $2" RETURNING,
                               id, args, 2, &got, state, msg, sizeof msg),
               "score %" PRId64 ": %s %s", id, state, msg))
        return;
    m->v[POINTS] += (uint64_t)points;
    m->v[REACHED] = (uint64_t)parse_time(hms);
    expect_row(a, &got, m);
}

/* The player starts paying: only the flag changes, the time stays. */
static void pay(app *a, int64_t id)
{
    char state[6], msg[256];
    player got, *m = model_find(a, id);

    say(a, "pay    %-19" PRId64, id);
    if (!check(a, m != NULL, "player %" PRId64 " is not in the model", id) ||
        !check(a, write_player(a, "UPDATE leaderboard SET paid = true"
                                  " WHERE board_id = $1 AND player_id = $2" RETURNING,
                               id, NULL, 0, &got, state, msg, sizeof msg),
               "pay %" PRId64 ": %s %s", id, state, msg))
        return;
    m->v[PAID] = 1;
    expect_row(a, &got, m);
}

/* Writes that do not fit: refused by C (FEED_ERANGE) and by PostgreSQL
 * (SQLSTATE 22003); the row keeps its values and its place. */
static void overflow(app *a)
{
    char state[6] = "", msg[256] = "";
    const char *points_args[2] = { "16777215", DEMO_DAY " 12:10:00+00" };
    const char *late_args[2] = { "10", "2024-12-31 23:59:59+00" };
    player got, *p = model_find(a, 205);
    uint64_t v[NFIELDS];
    int64_t score = -1;
    int rc, refused;

    say(a, "\nWrites that do not fit their fields:\n");
    if (!check(a, p != NULL, "player 205 is not in the model"))
        return;
    memcpy(v, p->v, sizeof v);
    v[POINTS] += 16777215;
    v[REACHED] = (uint64_t)parse_time("12:10:00");
    rc = feed_score_pack(&a->layout, v, &score);
    check(a, rc == FEED_ERANGE && score == -1,
          "C packed %" PRIu64 " points into 24 bits: %s", v[POINTS], feed_strerror(rc));
    say(a, "score  205 +16777215 in C:   feed_score_pack(points %" PRIu64 ", ...) = %s (%s)\n",
        v[POINTS], rc == FEED_ERANGE ? "FEED_ERANGE" : "?", feed_strerror(rc));

    say(a, "score  205 +16777215 in SQL: ");
    refused = !write_player(a, "UPDATE leaderboard SET points = points + $3, reached_at = $4"
                               " WHERE board_id = $1 AND player_id = $2" RETURNING,
                            205, points_args, 2, &got, state, msg, sizeof msg);
    check(a, refused && strcmp(state, "22003") == 0,
          "UPDATE past 24 bits of points: SQLSTATE %s, expected 22003",
          refused ? state : "none");

    say(a, "score  212 +10 at 2024-12-31 23:59:59 (before second 0): ");
    refused = !write_player(a, "UPDATE leaderboard SET points = points + $3, reached_at = $4"
                               " WHERE board_id = $1 AND player_id = $2" RETURNING,
                            212, late_args, 2, &got, state, msg, sizeof msg);
    check(a, refused && strcmp(state, "22003") == 0,
          "UPDATE dated before 2025-01-01: SQLSTATE %s, expected 22003",
          refused ? state : "none");
    say(a, "Neither statement changed anything, and the cache was not told anything.\n");
}

/* ------------------------------------------------------------------------
 * Reading: walk the board through feed_page, check it against the model
 * ------------------------------------------------------------------------ */

static void walk(app *a, const char *title, size_t limit, int print)
{
    player want[sizeof a->model / sizeof a->model[0]];
    int64_t last_score = FEED_FIRST, last_id = 0;
    size_t k = 0, page = 0;
    char at[24];

    expected(a, want);
    print = print && !a->check;
    if (print) {
        printf("\n%s: board %" PRId64 ", %zu players a page\n", title, a->board, limit);
        printf("page  source   player    points  paid  reached (UTC)                   score\n");
    }
    for (;;) {
        feed_result r;
        int rc = feed_page(a->f, a->board, last_score, last_id, limit, &r);

        if (!check(a, rc == FEED_OK, "%s: page %zu: %s: %s", title, page + 1,
                   feed_strerror(rc), feed_errmsg(a->f)))
            return;
        page++;
        for (size_t i = 0; i < r.count; i++) {
            uint64_t v[NFIELDS] = { 0, 0, 0 };
            int64_t want_score = -1;
            int urc = feed_score_unpack(&a->layout, r.items[i].score, v);

            if (print && i == 0)
                printf("%4zu  %-7s", page, source_name(r.source));
            else if (print)
                printf("%4s  %-7s", "", "");
            if (print)
                printf("  %6" PRId64 "  %8" PRIu64 "  %-4s  %-19s  %16" PRId64 "\n",
                       r.items[i].id, v[POINTS], v[PAID] ? "paid" : "free",
                       fmt_time(v[REACHED], at), r.items[i].score);
            if (!check(a, k < a->n, "%s: more than the %zu players expected", title, a->n))
                break;
            feed_score_pack(&a->layout, want[k].v, &want_score);
            check(a, urc == FEED_OK && r.items[i].id == want[k].id &&
                     r.items[i].score == want_score &&
                     memcmp(v, want[k].v, sizeof v) == 0,
                  "%s, limit %zu: position %zu is player %" PRId64 " (score %" PRId64
                  "), expected player %" PRId64 " (%" PRIu64 ", %" PRIu64 ", %" PRIu64 ")",
                  title, limit, k + 1, r.items[i].id, r.items[i].score, want[k].id,
                  want[k].v[0], want[k].v[1], want[k].v[2]);
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
    check(a, k == a->n, "%s, limit %zu: the walk gave %zu players, expected %zu", title,
          limit, k, a->n);
}

/* PostgreSQL sorting the rows by the fields themselves agrees too. */
static void check_sql_order(app *a)
{
    player want[sizeof a->model / sizeof a->model[0]];
    char board_s[24];
    const char *params[1] = { board_s };
    PGresult *res;
    int n;

    expected(a, want);
    snprintf(board_s, sizeof board_s, "%" PRId64, a->board);
    res = sql(a, "SELECT player_id, points, paid::int, leaderboard_seconds(reached_at), score"
                 " FROM leaderboard WHERE board_id = $1"
                 " ORDER BY points DESC, paid DESC, reached_at ASC, player_id DESC",
              1, params);
    n = PQntuples(res);
    if (sql_ok(a, res, "reading the board") &&
        check(a, (size_t)n == a->n, "SQL has %d players, expected %zu", n, a->n)) {
        for (int i = 0; i < n; i++) {
            player got;
            int64_t c_score = -1, sql_score = strtoll(PQgetvalue(res, i, 4), NULL, 10);
            got.id = strtoll(PQgetvalue(res, i, 0), NULL, 10);
            for (int j = 0; j < NFIELDS; j++)
                got.v[j] = strtoull(PQgetvalue(res, i, 1 + j), NULL, 10);
            expect_row(a, &got, &want[i]);
            feed_score_pack(&a->layout, got.v, &c_score);
            check(a, c_score == sql_score, "player %" PRId64 ": SQL score %" PRId64
                  ", C packs %" PRId64, got.id, sql_score, c_score);
        }
    }
    PQclear(res);
}

/* ------------------------------------------------------------------------ */

static const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);

    return v && *v ? v : dflt;
}

static int usage(const char *argv0)
{
    fprintf(stderr, "usage: %s [--check] [--board N] [--limit N]\n", argv0);
    return 2;
}

int main(int argc, char **argv)
{
    app a;
    feed_config cfg;
    int rc;

    memset(&a, 0, sizeof a);
    a.board = 1;
    a.limit = 4;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--check") == 0)
            a.check = 1;
        else if (strcmp(argv[i], "--board") == 0 && i + 1 < argc)
            a.board = strtoll(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--limit") == 0 && i + 1 < argc)
            a.limit = strtoul(argv[++i], NULL, 10);
        else
            return usage(argv[0]);
    }
    if (a.board < 0 || a.limit < 1 || a.limit > 100)
        return usage(argv[0]);

    rc = feed_layout_init(&a.layout, board_fields, NFIELDS);
    if (rc != FEED_OK) {
        printf("FAIL: feed_layout_init: %s\n", feed_strerror(rc));
        return 1;
    }

    /* The schema first: feed_open prepares its queries against the table. */
    a.pg = PQconnectdb(env_or("FEED_PG_CONNINFO", ""));
    if (PQstatus(a.pg) != CONNECTION_OK) {
        printf("FAIL: PostgreSQL: %s", PQerrorMessage(a.pg));
        PQfinish(a.pg);
        return 1;
    }
    if (!load_schema(&a)) {
        PQfinish(a.pg);
        return 1;
    }

    /* feedcache reads the board straight from leaderboard. */
    feed_config_init(&cfg);
    cfg.redis_host = env_or("FEED_REDIS_HOST", "127.0.0.1");
    cfg.redis_port = atoi(env_or("FEED_REDIS_PORT", "6379"));
    cfg.pg_conninfo = env_or("FEED_PG_CONNINFO", "");
    cfg.key_prefix = "lb";              /* keys lb:{board} */
    cfg.table = "leaderboard";
    cfg.owner_column = "board_id";
    cfg.score_column = "score";
    cfg.id_column = "player_id";
    cfg.max_len = MAX_LEN;
    rc = feed_open(&a.f, &cfg);
    if (rc != FEED_OK) {
        printf("FAIL: feed_open: %s: %s\n", feed_strerror(rc), feed_errmsg(NULL));
        PQfinish(a.pg);
        return 1;
    }

    /* A fresh board: no rows, no cached copy. */
    {
        char board_s[24];
        const char *params[1] = { board_s };
        PGresult *res;

        snprintf(board_s, sizeof board_s, "%" PRId64, a.board);
        res = sql(&a, "DELETE FROM leaderboard WHERE board_id = $1", 1, params);
        sql_ok(&a, res, "emptying the board");
        PQclear(res);
        rc = feed_invalidate(a.f, a.board);
        check(&a, rc == FEED_OK, "feed_invalidate: %s: %s", feed_strerror(rc),
              feed_errmsg(a.f));
    }

    say(&a, "Leaderboard: points (24 bits), then paid first (1), then earliest time first\n"
            "(28 bits of seconds since 2025-01-01 UTC), then player id descending.\n"
            "The cache keeps the top %d of a board.\n\n", MAX_LEN);
    say(&a, "%-26s%8s  %-4s  %-19s  %16s  %s\n", "", "points", "paid", "reached (UTC)",
        "score", "C pack");
    for (size_t i = 0; i < NSEEDS; i++)
        enter(&a, &seeds[i]);
    walk(&a, "Walk 1", a.limit, 1);

    say(&a, "\nWriters: UPDATE ... RETURNING score, then feed_on_insert(board, score, player)\n");
    say(&a, "%-26s%8s  %-4s  %-19s  %16s  %s\n", "", "points", "paid", "reached (UTC)",
        "score", "C pack");
    score_points(&a, 202, 800, "12:00:00");    /* 2300: first */
    pay(&a, 208);                              /* first of the 900s, same time */
    score_points(&a, 206, 600, "12:05:00");    /* (1500, free, 12:05) ... */
    score_points(&a, 209, 1500, "12:05:00");   /* ... and a tie: 209 before 206 */
    overflow(&a);
    walk(&a, "Walk 2", a.limit, 1);

    /* Quietly: every page size over the cache the hooks kept; the same from
     * a fresh rebuild (what SQL holds now); the rows as PostgreSQL sorts
     * them by their fields. */
    for (size_t lim = 1; lim <= NSEEDS + 1; lim++)
        walk(&a, "Walk 2 again", lim, 0);
    rc = feed_invalidate(a.f, a.board);
    check(&a, rc == FEED_OK, "feed_invalidate: %s: %s", feed_strerror(rc), feed_errmsg(a.f));
    walk(&a, "Walk 2 after a rebuild", 3, 0);
    walk(&a, "Walk 2 after a rebuild", 100, 0);
    check_sql_order(&a);

    if (a.failures)
        printf("leaderboard: %d of %d checks FAILED\n", a.failures, a.checks);
    else
        printf("leaderboard: all %d checks passed: the walks follow points DESC, paid DESC, "
               "reached ASC, player id DESC\n", a.checks);
    feed_close(a.f);
    PQfinish(a.pg);
    return a.failures ? 1 : 0;
}
