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
 *
 * This file holds what is particular to hot replies: the layout, the order,
 * the seed rows, the writers and the printing. examples/example_common.c,
 * shared with examples/leaderboard.c, does the rest from the description in
 * `hot_replies` below: options, schema, feed_open, the model of what the
 * topic must hold, running each write and telling the cache (ex_write), the
 * walks through feed_page (ex_walk) and the checks.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "example_common.h"
#include "hot_replies_sql.h"   /* hot_replies_sql[]: examples/hot_replies.sql */

/* ------------------------------------------------------------------------
 * The layout: most significant field first, 20 + 17 + 16 = 53 bits.
 * ex_open hands it to feed_layout_init(); feed_score_pack() and
 * feed_score_unpack() then use a->layout.
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

/* A reply: its id and v[LIKES], v[REPLIES], v[DAY] (days since 2020-01-01). */
typedef ex_row reply;
_Static_assert(NFIELDS == EX_NFIELDS, "ex_row holds the three fields");

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

/* ------------------------------------------------------------------------
 * Days, and the printing
 * ------------------------------------------------------------------------ */

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

/* The field columns of a reply, in the walks and after each write. */
static void print_fields(const uint64_t *v)
{
    char day[16];

    printf("%8" PRIu64 " %8" PRIu64 "  %-10s", v[LIKES], v[REPLIES], fmt_day(v[DAY], day));
}

/* ------------------------------------------------------------------------
 * The order the topic must have, from the tuples alone
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

/* ------------------------------------------------------------------------
 * The writers: change a field in SQL, then tell the cache
 * ------------------------------------------------------------------------ */

/* What every statement returns, and what ex_write reads: the id, the three
 * fields in layout order, and the score PostgreSQL computed. ex_write runs
 * the statement with $1 = topic and $2 = reply id, checks that C packs the
 * returned fields into the same score, then calls
 * feed_on_insert(topic, score, reply). */
#define COLUMNS   " reply_id, likes, replies, last_reply_on - DATE '2020-01-01', score"
#define RETURNING " RETURNING" COLUMNS

/* A new reply; its own day is its latest reply day. */
static void post(ex_app *a, const struct seed *s)
{
    char likes[24], replies[24];
    const char *args[3] = { likes, replies, s->day };
    reply got, want = { s->id, { s->likes, s->replies, (uint64_t)parse_day(s->day) } };

    snprintf(likes, sizeof likes, "%" PRIu64, s->likes);
    snprintf(replies, sizeof replies, "%" PRIu64, s->replies);
    ex_say(a, "post   %-15" PRId64, s->id);
    if (!ex_check(a, a->n < EX_MAX_ROWS, "model full") ||
        !ex_check(a, ex_write(a, "INSERT INTO hot_reply"
                                 " (topic_id, reply_id, likes, replies, last_reply_on)"
                                 " VALUES ($1, $2, $3, $4, $5)" RETURNING,
                              s->id, args, 3, &got),
                  "post %" PRId64 ": %s %s", s->id, a->sqlstate, a->errmsg))
        return;
    if (*s->note)
        ex_say(a, "%22s(%s)\n", "", s->note);
    a->model[a->n++] = want;
    ex_expect_row(a, &got, &want);
}

/* n more likes. */
static void like(ex_app *a, int64_t id, int n)
{
    char arg[16];
    const char *args[1] = { arg };
    reply got, *m;

    snprintf(arg, sizeof arg, "%d", n);
    ex_say(a, "like   %" PRId64 " +%-10d", id, n);
    m = ex_find(a, id);
    if (!m ||
        !ex_check(a, ex_write(a, "UPDATE hot_reply SET likes = likes + $3"
                                 " WHERE topic_id = $1 AND reply_id = $2" RETURNING,
                              id, args, 1, &got),
                  "like %" PRId64 ": %s %s", id, a->sqlstate, a->errmsg))
        return;
    m->v[LIKES] += (uint64_t)n;
    ex_expect_row(a, &got, m);
}

/* Someone answers reply id on that day. */
static void answer(ex_app *a, int64_t id, const char *day)
{
    const char *args[1] = { day };
    reply got, *m;
    uint64_t d = (uint64_t)parse_day(day);

    ex_say(a, "answer %" PRId64 " %-10s ", id, day);
    m = ex_find(a, id);
    if (!m ||
        !ex_check(a, ex_write(a, "UPDATE hot_reply SET replies = replies + 1,"
                                 " last_reply_on = greatest(last_reply_on, $3)"
                                 " WHERE topic_id = $1 AND reply_id = $2" RETURNING,
                              id, args, 1, &got),
                  "answer %" PRId64 ": %s %s", id, a->sqlstate, a->errmsg))
        return;
    m->v[REPLIES]++;
    if (d > m->v[DAY])
        m->v[DAY] = d;
    ex_expect_row(a, &got, m);
}

/* Writes that do not fit: refused by C (FEED_ERANGE) and by PostgreSQL
 * (SQLSTATE 22003); the row keeps its values and its place. */
static void overflow(ex_app *a)
{
    const char *one[1] = { "1" }, *before_epoch[1] = { "2019-12-31" };
    reply *top;
    uint64_t v[NFIELDS];
    int64_t score = -1;
    int rc;

    ex_say(a, "\nWrites that do not fit their fields:\n");
    top = ex_find(a, 108);
    if (!top)
        return;
    memcpy(v, top->v, sizeof v);
    v[LIKES]++;
    rc = feed_score_pack(&a->layout, v, &score);
    ex_check(a, rc == FEED_ERANGE && score == -1,
             "C packed %" PRIu64 " likes into 20 bits: %s", v[LIKES], feed_strerror(rc));
    ex_say(a, "like   108 +1 in C:   feed_score_pack(likes %" PRIu64 ", ...) = %s (%s)\n",
           v[LIKES], rc == FEED_ERANGE ? "FEED_ERANGE" : "?", feed_strerror(rc));

    ex_say(a, "like   108 +1 in SQL: ");
    ex_refused(a, "UPDATE past 20 bits of likes",
               "UPDATE hot_reply SET likes = likes + $3"
               " WHERE topic_id = $1 AND reply_id = $2" RETURNING, 108, one, 1);

    ex_say(a, "post   113 2019-12-31 (before day 0): ");
    ex_refused(a, "INSERT dated before 2020-01-01",
               "INSERT INTO hot_reply (topic_id, reply_id, last_reply_on)"
               " VALUES ($1, $2, $3)" RETURNING, 113, before_epoch, 1);
    ex_say(a, "Neither statement changed anything, and the cache was not told anything.\n");
}

/* ------------------------------------------------------------------------
 * The feed, for the shared code
 * ------------------------------------------------------------------------ */

static const ex_domain hot_replies = {
    .name = "hot_replies",
    .owner = "topic", .noun = "reply", .nouns = "replies",

    /* feedcache reads the feed straight from hot_reply: keys hot:{topic}. */
    .table = "hot_reply", .owner_column = "topic_id", .id_column = "reply_id",
    .key_prefix = "hot",
    .max_len = MAX_LEN,
    .fields = hot_fields, .nfields = NFIELDS,

    .schema = (const char *)hot_replies_sql,
    .schema_file = "examples/hot_replies.sql",
    .needs = "feed_score_pack(bigint[],integer[],boolean[])",

    .by_fields = "SELECT" COLUMNS " FROM hot_reply WHERE topic_id = $1"
                 " ORDER BY likes DESC, replies DESC, last_reply_on DESC, reply_id DESC",
    .order = hotter_first,
    .order_text = "(likes, replies, day, reply id) DESC",

    .print_fields = print_fields,
    .walk_header = "page  source   reply    likes  replies  last reply             score",
    .id_pad = 1,
};

int main(int argc, char **argv)
{
    ex_app a;
    int rc = ex_open(&a, &hot_replies, argc, argv);   /* and an empty topic */

    if (rc != 0)
        return rc;

    ex_say(&a, "Hot replies: likes (20 bits), then replies (17), then latest reply day (16),\n"
               "then reply id, all descending. The cache keeps the top %d of a topic.\n\n",
           MAX_LEN);
    ex_say(&a, "%-22s%8s %8s  %-10s  %16s  %s\n", "", "likes", "replies", "last reply",
           "score", "C pack");
    for (size_t i = 0; i < NSEEDS; i++)
        post(&a, &seeds[i]);
    ex_walk(&a, "Walk 1", a.limit, 1);

    ex_say(&a, "\nWriters: UPDATE ... RETURNING score,"
               " then feed_on_insert(topic, score, reply)\n");
    ex_say(&a, "%-22s%8s %8s  %-10s  %16s  %s\n", "", "likes", "replies", "last reply",
           "score", "C pack");
    like(&a, 110, 45);               /* 47 likes: second, above 104's 40 */
    answer(&a, 101, "2025-03-06");   /* (12, 4, 03-06): after 103's 5 replies */
    like(&a, 112, 3);                /* from the bottom ... */
    answer(&a, 112, "2025-03-02");   /* ... to (3, 1, 03-02), a tie with 107 and 109 */
    overflow(&a);
    ex_walk(&a, "Walk 2", a.limit, 1);

    /* Quietly: every page size from 1 to 13, then after a rebuild, then the
     * rows as PostgreSQL sorts them by their fields. */
    ex_recheck(&a, NSEEDS + 1);
    return ex_finish(&a);
}
