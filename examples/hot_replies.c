/* hot_replies.c -- the replies to a topic, hottest first, served by feedcache.
 *
 * A reply ranks by its likes, then by how many replies it drew, then by the
 * day of its latest reply (later first); replies equal on all three come
 * newest reply id first. The three fields are packed into one exact 53-bit
 * score (the layout below). PostgreSQL computes it in a generated column of
 * the hot_reply table (examples/hot_replies.sql), the writer packs the same
 * values in C to show that the two agree, and feedcache serves each topic's
 * feed from that table, ordered by (score DESC, reply_id DESC).
 *
 *   hot_replies [--check] [--topic N] [--limit N]
 *
 * Connects to FEED_REDIS_HOST, FEED_REDIS_PORT and FEED_PG_CONNINFO (libpq
 * defaults when unset). It creates its table if needed, empties topic N
 * (default 1) and its cache, posts a dozen replies, walks the feed N replies
 * a page (default 4), likes and answers a few replies (each write: UPDATE
 * ... RETURNING score, then feed_on_insert with that score), tries two writes
 * that do not fit their fields, and walks again.
 *
 * Then, quietly, it walks again with every page size from 1 to 13, and after
 * a rebuild from SQL.
 *
 * Every page is checked against the order computed from the tuples alone
 * (field by field, then reply id), never from the scores, and every write
 * checks that C packs the values PostgreSQL returned into the score it
 * computed. --check prints only what failed and a one-line summary
 * (tests/t_composite.c runs it). Exit status 0 when every check held, 1
 * otherwise (2: bad arguments).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#include "feedcache.h"
#include "hot_replies_sql.h"   /* hot_replies_sql[]: examples/hot_replies.sql */
#include "score_sql.h"         /* score_sql[]: sql/score.sql */

/* ------------------------------------------------------------------------
 * The layout: most significant field first, 20 + 17 + 16 = 53 bits.
 * ------------------------------------------------------------------------ */

enum { LIKES, REPLIES, DAY, NFIELDS };

static const feed_field hot_fields[NFIELDS] = {
    { "likes",   20, FEED_LARGER_FIRST },  /* 0 .. 1,048,575 */
    { "replies", 17, FEED_LARGER_FIRST },  /* 0 .. 131,071 */
    { "day",     16, FEED_LARGER_FIRST },  /* days since 2020-01-01: up to 2199-06-06 */
};

#define EPOCH_UNIX INT64_C(1577836800)   /* 2020-01-01 00:00:00 UTC: day 0 */

/* The cache keeps the top 9 replies of a topic: small on purpose, so that a
 * walk of 4 a page shows all three sources: page 1 rebuilds the cache, page 2
 * is cut from it, page 3 lies past it and comes from SQL. */
#define MAX_LEN 9

typedef struct reply {
    int64_t  id;
    uint64_t v[NFIELDS];    /* likes, replies, day */
} reply;

/* The demo topic. Days are written as dates; the program counts them. */
static const struct seed {
    int64_t     id;
    uint64_t    likes, replies;
    const char *day;
    const char *note;
} seeds[] = {
    { 101,      12,      3, "2025-03-01", "" },
    { 102,      12,      3, "2025-03-04", "" },
    { 103,      12,      5, "2025-02-11", "" },
    { 104,      40,      0, "2025-01-10", "" },
    { 105,      12,      3, "2025-03-04", "ties with 102: 105 comes first" },
    { 106,       0,      0, "2025-03-05", "" },
    { 107,       3,      1, "2025-03-02", "" },
    { 108, 1048575, 131071, "2199-06-06", "every field at its top: 2^53 - 1" },
    { 109,       3,      1, "2025-03-02", "ties with 107" },
    { 110,       2,      0, "2025-02-20", "" },
    { 111,       0,      0, "2025-03-05", "ties with 106" },
    { 112,       0,      0, "2020-01-01", "every field at 0: score 0" },
};
#define NSEEDS (sizeof seeds / sizeof seeds[0])

typedef struct app {
    PGconn     *pg;
    feed       *f;
    feed_layout layout;
    int64_t     topic;
    size_t      limit;
    int         check;        /* --check: print failures and a summary only */
    int         checks, failures;
    reply       model[NSEEDS + 4];   /* what the topic must hold */
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

/* Days since 2020-01-01 of a proleptic Gregorian date (H. Hinnant's
 * days_from_civil, shifted to our epoch). */
static int64_t day_of(int y, int m, int d)
{
    int64_t era, yoe, doy, doe;

    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = y - era * 400;
    doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468 - 18262;   /* 18262: 1970-01-01 .. 2020-01-01 */
}

static int64_t parse_day(const char *text)
{
    int y, m, d;

    if (sscanf(text, "%d-%d-%d", &y, &m, &d) != 3)
        return -1;
    return day_of(y, m, d);
}

static const char *fmt_day(uint64_t day, char buf[16])
{
    time_t t = (time_t)(EPOCH_UNIX + (int64_t)day * 86400);
    struct tm tm;

    if (!gmtime_r(&t, &tm) || !strftime(buf, 16, "%Y-%m-%d", &tm))
        snprintf(buf, 16, "day %" PRIu64, day);
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
    res = PQexec(a->pg, "SELECT to_regprocedure('feed_score_pack(bigint[],integer[],boolean[])')"
                        " IS NOT NULL");
    ok = sql_ok(a, res, "looking for feed_score_pack");
    have = ok && PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    ok = ok && (have || exec_ok(a, (const char *)score_sql, "loading sql/score.sql"));
    ok = ok && exec_ok(a, (const char *)hot_replies_sql, "loading examples/hot_replies.sql");
    ok = ok && exec_ok(a, "COMMIT", "committing the schema");
    if (!ok)
        PQclear(PQexec(a->pg, "ROLLBACK"));
    return ok;
}

/* ------------------------------------------------------------------------
 * The model: the order the feed must have, from the tuples alone
 * ------------------------------------------------------------------------ */

/* More likes first, then more replies, then the later day, then the larger
 * reply id. No score involved: this is what the packing must reproduce. */
static int hotter_first(const void *x, const void *y)
{
    const reply *p = x, *q = y;

    for (int i = 0; i < NFIELDS; i++) {
        if (p->v[i] != q->v[i])
            return p->v[i] > q->v[i] ? -1 : 1;
    }
    return p->id == q->id ? 0 : p->id > q->id ? -1 : 1;
}

static void expected(const app *a, reply *out)
{
    memcpy(out, a->model, a->n * sizeof *out);
    qsort(out, a->n, sizeof *out, hotter_first);
}

static reply *model_find(app *a, int64_t id)
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

#define RETURNING " RETURNING reply_id, likes, replies, last_reply_on - DATE '2020-01-01', score"

/* Run one writing statement with the parameters $1 = topic, $2 = reply id,
 * then args. Outside BEGIN ... COMMIT a statement is its own transaction:
 * when it returns, the change is committed, and only then may the hook run.
 * The hook gets the score PostgreSQL computed; the C packing of the values
 * the statement returned must be the same number.
 *
 * Returns 1 and fills *got; or 0 when PostgreSQL refused the statement, with
 * its SQLSTATE in state and its message in msg: the statement changed
 * nothing, so the cache is not told anything. */
static int write_reply(app *a, const char *query, int64_t id,
                       const char *const *args, int nargs,
                       reply *got, char state[6], char *msg, size_t msglen)
{
    char topic_s[24], id_s[24], day[16];
    const char *params[8] = { topic_s, id_s };
    PGresult *res;
    int64_t sql_score, c_score = -1;
    int rc;

    snprintf(topic_s, sizeof topic_s, "%" PRId64, a->topic);
    snprintf(id_s, sizeof id_s, "%" PRId64, id);
    for (int i = 0; i < nargs && i < 6; i++)
        params[2 + i] = args[i];
    res = sql(a, query, 2 + nargs, params);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        const char *s = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        const char *m = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
        snprintf(state, 6, "%s", s ? s : "-----");
        snprintf(msg, msglen, "%s", m ? m : s ? PQresultErrorMessage(res) : "no such reply");
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
          "reply %" PRId64 ": PostgreSQL computed %" PRId64 ", C packs %" PRId64 " (%s)",
          id, sql_score, c_score, feed_strerror(rc));

    rc = feed_on_insert(a->f, a->topic, sql_score, id);
    check(a, rc == FEED_OK, "feed_on_insert(reply %" PRId64 "): %s: %s", id,
          feed_strerror(rc), feed_errmsg(a->f));
    say(a, "%8" PRIu64 " %8" PRIu64 "  %-10s  %16" PRId64 "  %s\n",
        got->v[LIKES], got->v[REPLIES], fmt_day(got->v[DAY], day), sql_score,
        c_score == sql_score ? "the same" : "DIFFERENT");
    return 1;
}

/* The row PostgreSQL returned must be the one the model predicts. */
static void expect_row(app *a, const reply *got, const reply *want)
{
    check(a, got->id == want->id && memcmp(got->v, want->v, sizeof got->v) == 0,
          "reply %" PRId64 ": PostgreSQL has %" PRId64 " (%" PRIu64 ", %" PRIu64 ", %" PRIu64
          "), expected (%" PRIu64 ", %" PRIu64 ", %" PRIu64 ")", want->id, got->id,
          got->v[0], got->v[1], got->v[2], want->v[0], want->v[1], want->v[2]);
}

/* A new reply; its own day is its latest reply day. */
static void post(app *a, const struct seed *s)
{
    char likes[24], replies[24], state[6], msg[256];
    const char *args[3] = { likes, replies, s->day };
    reply got, want = { s->id, { s->likes, s->replies, (uint64_t)parse_day(s->day) } };

    snprintf(likes, sizeof likes, "%" PRIu64, s->likes);
    snprintf(replies, sizeof replies, "%" PRIu64, s->replies);
    say(a, "post   %-15" PRId64, s->id);
    if (!check(a, a->n < sizeof a->model / sizeof a->model[0], "model full") ||
        !check(a, write_reply(a, "INSERT INTO hot_reply"
                                 " (topic_id, reply_id, likes, replies, last_reply_on)"
                                 " VALUES ($1, $2, $3, $4, $5)" RETURNING,
                              s->id, args, 3, &got, state, msg, sizeof msg),
               "post %" PRId64 ": %s %s", s->id, state, msg))
        return;
    if (*s->note)
        say(a, "%22s(%s)\n", "", s->note);
    a->model[a->n++] = want;
    expect_row(a, &got, &want);
}

/* n more likes. */
static void like(app *a, int64_t id, int n)
{
    char arg[16], state[6], msg[256];
    const char *args[1] = { arg };
    reply got, *m = model_find(a, id);

    snprintf(arg, sizeof arg, "%d", n);
    say(a, "like   %" PRId64 " +%-10d", id, n);
    if (!check(a, m != NULL, "reply %" PRId64 " is not in the model", id) ||
        !check(a, write_reply(a, "UPDATE hot_reply SET likes = likes + $3"
                                 " WHERE topic_id = $1 AND reply_id = $2" RETURNING,
                              id, args, 1, &got, state, msg, sizeof msg),
               "like %" PRId64 ": %s %s", id, state, msg))
        return;
    m->v[LIKES] += (uint64_t)n;
    expect_row(a, &got, m);
}

/* Someone answers reply id on that day. */
static void answer(app *a, int64_t id, const char *day)
{
    char state[6], msg[256];
    const char *args[1] = { day };
    reply got, *m = model_find(a, id);
    uint64_t d = (uint64_t)parse_day(day);

    say(a, "answer %" PRId64 " %-10s ", id, day);
    if (!check(a, m != NULL, "reply %" PRId64 " is not in the model", id) ||
        !check(a, write_reply(a, "UPDATE hot_reply SET replies = replies + 1,"
                                 " last_reply_on = greatest(last_reply_on, $3)"
                                 " WHERE topic_id = $1 AND reply_id = $2" RETURNING,
                              id, args, 1, &got, state, msg, sizeof msg),
               "answer %" PRId64 ": %s %s", id, state, msg))
        return;
    m->v[REPLIES]++;
    if (d > m->v[DAY])
        m->v[DAY] = d;
    expect_row(a, &got, m);
}

/* Writes that do not fit: refused by C (FEED_ERANGE) and by PostgreSQL
 * (SQLSTATE 22003); the row keeps its values and its place. */
static void overflow(app *a)
{
    char state[6] = "", msg[256] = "";
    const char *one[1] = { "1" }, *before_epoch[1] = { "2019-12-31" };
    reply got, *top = model_find(a, 108);
    uint64_t v[NFIELDS];
    int64_t score = -1;
    int rc, refused;

    say(a, "\nWrites that do not fit their fields:\n");
    if (!check(a, top != NULL, "reply 108 is not in the model"))
        return;
    memcpy(v, top->v, sizeof v);
    v[LIKES]++;
    rc = feed_score_pack(&a->layout, v, &score);
    check(a, rc == FEED_ERANGE && score == -1,
          "C packed %" PRIu64 " likes into 20 bits: %s", v[LIKES], feed_strerror(rc));
    say(a, "like   108 +1 in C:   feed_score_pack(likes %" PRIu64 ", ...) = %s (%s)\n",
        v[LIKES], rc == FEED_ERANGE ? "FEED_ERANGE" : "?", feed_strerror(rc));

    say(a, "like   108 +1 in SQL: ");
    refused = !write_reply(a, "UPDATE hot_reply SET likes = likes + $3"
                              " WHERE topic_id = $1 AND reply_id = $2" RETURNING,
                           108, one, 1, &got, state, msg, sizeof msg);
    check(a, refused && strcmp(state, "22003") == 0,
          "UPDATE past 20 bits of likes: SQLSTATE %s, expected 22003", refused ? state : "none");

    say(a, "post   113 2019-12-31 (before day 0): ");
    refused = !write_reply(a, "INSERT INTO hot_reply (topic_id, reply_id, last_reply_on)"
                              " VALUES ($1, $2, $3)" RETURNING,
                           113, before_epoch, 1, &got, state, msg, sizeof msg);
    check(a, refused && strcmp(state, "22003") == 0,
          "INSERT dated before 2020-01-01: SQLSTATE %s, expected 22003", refused ? state : "none");
    say(a, "Neither statement changed anything, and the cache was not told anything.\n");
}

/* ------------------------------------------------------------------------
 * Reading: walk the feed through feed_page, check it against the model
 * ------------------------------------------------------------------------ */

static void walk(app *a, const char *title, size_t limit, int print)
{
    reply want[sizeof a->model / sizeof a->model[0]];
    int64_t last_score = FEED_FIRST, last_id = 0;
    size_t k = 0, page = 0;
    char day[16];

    expected(a, want);
    print = print && !a->check;
    if (print) {
        printf("\n%s: topic %" PRId64 ", %zu replies a page\n", title, a->topic, limit);
        printf("page  source   reply    likes  replies  last reply             score\n");
    }
    for (;;) {
        feed_result r;
        int rc = feed_page(a->f, a->topic, last_score, last_id, limit, &r);

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
                printf(" %6" PRId64 " %8" PRIu64 " %8" PRIu64 "  %-10s  %16" PRId64 "\n",
                       r.items[i].id, v[LIKES], v[REPLIES], fmt_day(v[DAY], day),
                       r.items[i].score);
            if (!check(a, k < a->n, "%s: more than the %zu replies expected", title, a->n))
                break;
            feed_score_pack(&a->layout, want[k].v, &want_score);
            check(a, urc == FEED_OK && r.items[i].id == want[k].id &&
                     r.items[i].score == want_score &&
                     memcmp(v, want[k].v, sizeof v) == 0,
                  "%s, limit %zu: position %zu is reply %" PRId64 " (score %" PRId64
                  "), expected reply %" PRId64 " (%" PRIu64 ", %" PRIu64 ", %" PRIu64 ")",
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
    check(a, k == a->n, "%s, limit %zu: the walk gave %zu replies, expected %zu", title,
          limit, k, a->n);
}

/* PostgreSQL sorting the rows by the fields themselves agrees too. */
static void check_sql_order(app *a)
{
    reply want[sizeof a->model / sizeof a->model[0]];
    char topic_s[24];
    const char *params[1] = { topic_s };
    PGresult *res;
    int n;

    expected(a, want);
    snprintf(topic_s, sizeof topic_s, "%" PRId64, a->topic);
    res = sql(a, "SELECT reply_id, likes, replies, last_reply_on - DATE '2020-01-01', score"
                 " FROM hot_reply WHERE topic_id = $1"
                 " ORDER BY likes DESC, replies DESC, last_reply_on DESC, reply_id DESC",
              1, params);
    n = PQntuples(res);
    if (sql_ok(a, res, "reading the topic") &&
        check(a, (size_t)n == a->n, "SQL has %d replies, expected %zu", n, a->n)) {
        for (int i = 0; i < n; i++) {
            reply got;
            int64_t c_score = -1, sql_score = strtoll(PQgetvalue(res, i, 4), NULL, 10);
            got.id = strtoll(PQgetvalue(res, i, 0), NULL, 10);
            for (int j = 0; j < NFIELDS; j++)
                got.v[j] = strtoull(PQgetvalue(res, i, 1 + j), NULL, 10);
            expect_row(a, &got, &want[i]);
            feed_score_pack(&a->layout, got.v, &c_score);
            check(a, c_score == sql_score, "reply %" PRId64 ": SQL score %" PRId64
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
    fprintf(stderr, "usage: %s [--check] [--topic N] [--limit N]\n", argv0);
    return 2;
}

int main(int argc, char **argv)
{
    app a;
    feed_config cfg;
    int rc;

    memset(&a, 0, sizeof a);
    a.topic = 1;
    a.limit = 4;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--check") == 0)
            a.check = 1;
        else if (strcmp(argv[i], "--topic") == 0 && i + 1 < argc)
            a.topic = strtoll(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--limit") == 0 && i + 1 < argc)
            a.limit = strtoul(argv[++i], NULL, 10);
        else
            return usage(argv[0]);
    }
    if (a.topic < 0 || a.limit < 1 || a.limit > 100)
        return usage(argv[0]);

    rc = feed_layout_init(&a.layout, hot_fields, NFIELDS);
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

    /* feedcache reads the feed straight from hot_reply. */
    feed_config_init(&cfg);
    cfg.redis_host = env_or("FEED_REDIS_HOST", "127.0.0.1");
    cfg.redis_port = atoi(env_or("FEED_REDIS_PORT", "6379"));
    cfg.pg_conninfo = env_or("FEED_PG_CONNINFO", "");
    cfg.key_prefix = "hot";             /* keys hot:{topic} */
    cfg.table = "hot_reply";
    cfg.owner_column = "topic_id";
    cfg.score_column = "score";
    cfg.id_column = "reply_id";
    cfg.max_len = MAX_LEN;
    rc = feed_open(&a.f, &cfg);
    if (rc != FEED_OK) {
        printf("FAIL: feed_open: %s: %s\n", feed_strerror(rc), feed_errmsg(NULL));
        PQfinish(a.pg);
        return 1;
    }

    /* A fresh topic: no rows, no cached copy. */
    {
        char topic_s[24];
        const char *params[1] = { topic_s };
        PGresult *res;

        snprintf(topic_s, sizeof topic_s, "%" PRId64, a.topic);
        res = sql(&a, "DELETE FROM hot_reply WHERE topic_id = $1", 1, params);
        sql_ok(&a, res, "emptying the topic");
        PQclear(res);
        rc = feed_invalidate(a.f, a.topic);
        check(&a, rc == FEED_OK, "feed_invalidate: %s: %s", feed_strerror(rc),
              feed_errmsg(a.f));
    }

    say(&a, "Hot replies: likes (20 bits), then replies (17), then latest reply day (16),\n"
            "then reply id, all descending. The cache keeps the top %d of a topic.\n\n",
        MAX_LEN);
    say(&a, "%-22s%8s %8s  %-10s  %16s  %s\n", "", "likes", "replies", "last reply", "score",
        "C pack");
    for (size_t i = 0; i < NSEEDS; i++)
        post(&a, &seeds[i]);
    walk(&a, "Walk 1", a.limit, 1);

    say(&a, "\nWriters: UPDATE ... RETURNING score, then feed_on_insert(topic, score, reply)\n");
    say(&a, "%-22s%8s %8s  %-10s  %16s  %s\n", "", "likes", "replies", "last reply", "score",
        "C pack");
    like(&a, 110, 45);               /* 47 likes: second, above 104's 40 */
    answer(&a, 101, "2025-03-06");   /* (12, 4, 03-06): after 103's 5 replies */
    like(&a, 112, 3);                /* from the bottom ... */
    answer(&a, 112, "2025-03-02");   /* ... to (3, 1, 03-02), a tie with 107 and 109 */
    overflow(&a);
    walk(&a, "Walk 2", a.limit, 1);

    /* Quietly: every page size over the cache the hooks kept; the same from
     * a fresh rebuild (what SQL holds now); the rows as PostgreSQL sorts
     * them by their fields. */
    for (size_t lim = 1; lim <= NSEEDS + 1; lim++)
        walk(&a, "Walk 2 again", lim, 0);
    rc = feed_invalidate(a.f, a.topic);
    check(&a, rc == FEED_OK, "feed_invalidate: %s: %s", feed_strerror(rc), feed_errmsg(a.f));
    walk(&a, "Walk 2 after a rebuild", 3, 0);
    walk(&a, "Walk 2 after a rebuild", 100, 0);
    check_sql_order(&a);

    if (a.failures)
        printf("hot_replies: %d of %d checks FAILED\n", a.failures, a.checks);
    else
        printf("hot_replies: all %d checks passed: the walks follow (likes, replies, day, "
               "reply id) DESC\n", a.checks);
    feed_close(a.f);
    PQfinish(a.pg);
    return a.failures ? 1 : 0;
}
