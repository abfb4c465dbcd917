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
 *
 * This file holds what is particular to a leaderboard: the layout, the
 * order, the seed rows, the writers and the printing.
 * examples/example_common.c, shared with examples/hot_replies.c, does the
 * rest from the description in `leaderboard` below: options, schema,
 * feed_open, the model of what the board must hold, running each write and
 * telling the cache (ex_write), the walks through feed_page (ex_walk) and
 * the checks.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "example_common.h"
#include "leaderboard_sql.h"   /* leaderboard_sql[]: examples/leaderboard.sql */

/* ------------------------------------------------------------------------
 * The layout: most significant field first, 24 + 1 + 28 = 53 bits.
 * ex_open hands it to feed_layout_init(); feed_score_pack() and
 * feed_score_unpack() then use a->layout.
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

/* A player: its id and v[POINTS], v[PAID] (0/1), v[REACHED] (seconds since
 * the epoch). */
typedef ex_row player;
_Static_assert(NFIELDS == EX_NFIELDS, "ex_row holds the three fields");

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

/* ------------------------------------------------------------------------
 * Times, and the printing
 * ------------------------------------------------------------------------ */

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

/* The field columns of a player, in the walks and after each write. */
static void print_fields(const uint64_t *v)
{
    char at[24];

    printf("%8" PRIu64 "  %-4s  %-19s", v[POINTS], v[PAID] ? "paid" : "free",
           fmt_time(v[REACHED], at));
}

/* ------------------------------------------------------------------------
 * The order the board must have, from the tuples alone
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

/* ------------------------------------------------------------------------
 * The writers: change a field in SQL, then tell the cache
 * ------------------------------------------------------------------------ */

/* What every statement returns, and what ex_write reads: the id, the three
 * fields in layout order, and the score PostgreSQL computed. ex_write runs
 * the statement with $1 = board and $2 = player id, checks that C packs the
 * returned fields into the same score, then calls
 * feed_on_insert(board, score, player). */
#define COLUMNS   " player_id, points, paid::int, leaderboard_seconds(reached_at), score"
#define RETURNING " RETURNING" COLUMNS

/* The player scores $3 more points at time $4. */
#define ADD_POINTS "UPDATE leaderboard SET points = points + $3, reached_at = $4" \
                   " WHERE board_id = $1 AND player_id = $2" RETURNING

/* A new player on the board. */
static void enter(ex_app *a, const struct seed *s)
{
    char points[24], at[40];
    const char *args[3] = { points, s->paid ? "true" : "false", at };
    player got, want = { s->id, { s->points, s->paid, (uint64_t)parse_time(s->at) } };

    snprintf(points, sizeof points, "%" PRIu64, s->points);
    snprintf(at, sizeof at, "%s %s+00", DEMO_DAY, s->at);
    ex_say(a, "enter  %-19" PRId64, s->id);
    if (!ex_check(a, a->n < EX_MAX_ROWS, "model full") ||
        !ex_check(a, ex_write(a, "INSERT INTO leaderboard"
                                 " (board_id, player_id, points, paid, reached_at)"
                                 " VALUES ($1, $2, $3, $4, $5)" RETURNING,
                              s->id, args, 3, &got),
                  "enter %" PRId64 ": %s %s", s->id, a->sqlstate, a->errmsg))
        return;
    if (*s->note)
        ex_say(a, "%26s(%s)\n", "", s->note);
    a->model[a->n++] = want;
    ex_expect_row(a, &got, &want);
}

/* The player scores more points at that time (hh:mm:ss on DEMO_DAY). */
static void score_points(ex_app *a, int64_t id, int points, const char *hms)
{
    char pts[16], at[40], label[64];
    const char *args[2] = { pts, at };
    player got, *m;

    snprintf(pts, sizeof pts, "%d", points);
    snprintf(at, sizeof at, "%s %s+00", DEMO_DAY, hms);
    snprintf(label, sizeof label, "score  %" PRId64 " +%d %s", id, points, hms);
    ex_say(a, "%-26s", label);
    m = ex_find(a, id);
    if (!m ||
        !ex_check(a, ex_write(a, ADD_POINTS, id, args, 2, &got),
                  "score %" PRId64 ": %s %s", id, a->sqlstate, a->errmsg))
        return;
    m->v[POINTS] += (uint64_t)points;
    m->v[REACHED] = (uint64_t)parse_time(hms);
    ex_expect_row(a, &got, m);
}

/* The player starts paying: only the flag changes, the time stays. */
static void pay(ex_app *a, int64_t id)
{
    player got, *m;

    ex_say(a, "pay    %-19" PRId64, id);
    m = ex_find(a, id);
    if (!m ||
        !ex_check(a, ex_write(a, "UPDATE leaderboard SET paid = true"
                                 " WHERE board_id = $1 AND player_id = $2" RETURNING,
                              id, NULL, 0, &got),
                  "pay %" PRId64 ": %s %s", id, a->sqlstate, a->errmsg))
        return;
    m->v[PAID] = 1;
    ex_expect_row(a, &got, m);
}

/* Writes that do not fit: refused by C (FEED_ERANGE) and by PostgreSQL
 * (SQLSTATE 22003); the row keeps its values and its place. */
static void overflow(ex_app *a)
{
    const char *points_args[2] = { "16777215", DEMO_DAY " 12:10:00+00" };
    const char *late_args[2] = { "10", "2024-12-31 23:59:59+00" };
    player *p;
    uint64_t v[NFIELDS];
    int64_t score = -1;
    int rc;

    ex_say(a, "\nWrites that do not fit their fields:\n");
    p = ex_find(a, 205);
    if (!p)
        return;
    memcpy(v, p->v, sizeof v);
    v[POINTS] += 16777215;
    v[REACHED] = (uint64_t)parse_time("12:10:00");
    rc = feed_score_pack(&a->layout, v, &score);
    ex_check(a, rc == FEED_ERANGE && score == -1,
             "C packed %" PRIu64 " points into 24 bits: %s", v[POINTS], feed_strerror(rc));
    ex_say(a, "score  205 +16777215 in C:   feed_score_pack(points %" PRIu64
              ", ...) = %s (%s)\n",
           v[POINTS], rc == FEED_ERANGE ? "FEED_ERANGE" : "?", feed_strerror(rc));

    ex_say(a, "score  205 +16777215 in SQL: ");
    ex_refused(a, "UPDATE past 24 bits of points", ADD_POINTS, 205, points_args, 2);

    ex_say(a, "score  212 +10 at 2024-12-31 23:59:59 (before second 0): ");
    ex_refused(a, "UPDATE dated before 2025-01-01", ADD_POINTS, 212, late_args, 2);
    ex_say(a, "Neither statement changed anything, and the cache was not told anything.\n");
}

/* ------------------------------------------------------------------------
 * The feed, for the shared code
 * ------------------------------------------------------------------------ */

static const ex_domain leaderboard = {
    .name = "leaderboard",
    .owner = "board", .noun = "player", .nouns = "players",

    /* feedcache reads the board straight from leaderboard: keys lb:{board}. */
    .table = "leaderboard", .owner_column = "board_id", .id_column = "player_id",
    .key_prefix = "lb",
    .max_len = MAX_LEN,
    .fields = board_fields, .nfields = NFIELDS,

    .schema = (const char *)leaderboard_sql,
    .schema_file = "examples/leaderboard.sql",
    .needs = "feed_pack_field(bigint,integer,boolean)",

    .by_fields = "SELECT" COLUMNS " FROM leaderboard WHERE board_id = $1"
                 " ORDER BY points DESC, paid DESC, reached_at ASC, player_id DESC",
    .order = better_first,
    .order_text = "points DESC, paid DESC, reached ASC, player id DESC",

    .print_fields = print_fields,
    .walk_header = "page  source   player    points  paid  reached (UTC)                   score",
    .id_pad = 2,
};

int main(int argc, char **argv)
{
    ex_app a;
    int rc = ex_open(&a, &leaderboard, argc, argv);   /* and an empty board */

    if (rc != 0)
        return rc;

    ex_say(&a, "Leaderboard: points (24 bits), then paid first (1), then earliest time first\n"
               "(28 bits of seconds since 2025-01-01 UTC), then player id descending.\n"
               "The cache keeps the top %d of a board.\n\n", MAX_LEN);
    ex_say(&a, "%-26s%8s  %-4s  %-19s  %16s  %s\n", "", "points", "paid", "reached (UTC)",
           "score", "C pack");
    for (size_t i = 0; i < NSEEDS; i++)
        enter(&a, &seeds[i]);
    ex_walk(&a, "Walk 1", a.limit, 1);

    ex_say(&a, "\nWriters: UPDATE ... RETURNING score,"
               " then feed_on_insert(board, score, player)\n");
    ex_say(&a, "%-26s%8s  %-4s  %-19s  %16s  %s\n", "", "points", "paid", "reached (UTC)",
           "score", "C pack");
    score_points(&a, 202, 800, "12:00:00");    /* 2300: first */
    pay(&a, 208);                              /* first of the 900s, same time */
    score_points(&a, 206, 600, "12:05:00");    /* (1500, free, 12:05) ... */
    score_points(&a, 209, 1500, "12:05:00");   /* ... and a tie: 209 before 206 */
    overflow(&a);
    ex_walk(&a, "Walk 2", a.limit, 1);

    /* Quietly: every page size from 1 to 13, then after a rebuild, then the
     * rows as PostgreSQL sorts them by their fields. */
    ex_recheck(&a, NSEEDS + 1);
    return ex_finish(&a);
}
