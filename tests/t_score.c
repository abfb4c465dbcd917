/* t_score.c -- composite scores: layouts, pack/unpack, order, snowflakes,
 * and the same scores computed by PostgreSQL through sql/score.sql.
 *
 * The pure C part always runs. The SQL part needs FEED_PG_CONNINFO, a
 * database where the sql/ files are loaded; without it that part is skipped
 * with a diagnostic. Random cases come from a fixed seed, printed first; set
 * FEED_TEST_SEED to try another. Checks that loop over thousands of cases
 * report once, with the first failing case as a diagnostic.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "feedcache.h"
#include "tap.h"
#include "testutil.h"

#define PAIRS 5000   /* random pairs per layout in the order tests */
#define ROWS  4000   /* rows per table in the C == SQL tests */

#define TWITTER_EPOCH INT64_C(1288834974657)

/* ------------------------------------------------------------------------
 * Random numbers: splitmix64, the same sequence on every platform.
 * ------------------------------------------------------------------------ */

static uint64_t rng_state;

static uint64_t rnd(void)
{
    return tu_rand(&rng_state);
}

static uint64_t rnd_below(uint64_t n)
{
    return rnd() % n;
}

static uint64_t top_of(unsigned bits)
{
    return (UINT64_C(1) << bits) - 1;
}

/* A value for a field of this width: half the time at a limit (0, 1,
 * top - 1, top), else a small one (for ties) or any. */
static uint64_t pick_value(unsigned bits)
{
    uint64_t top = top_of(bits);
    switch (rnd_below(6)) {
    case 0:  return 0;
    case 1:  return 1;
    case 2:  return top - 1;
    case 3:  return top;
    case 4:  return rnd_below(3) & top;     /* 0, 1, 2: ties */
    default: return rnd() & top;
    }
}

static void pick_tuple(const feed_layout *l, uint64_t *v)
{
    size_t i;
    for (i = 0; i < l->nfields; i++)
        v[i] = pick_value(l->fields[i].bits);
}

static void diag_tuple(const char *what, const feed_layout *l,
                       const uint64_t *v)
{
    char line[1024];
    size_t i, len = 0;
    for (i = 0; i < l->nfields && len < sizeof line - 64; i++)
        len += (size_t)snprintf(line + len, sizeof line - len, " %s%u:%" PRIu64,
                                l->fields[i].order == FEED_SMALLER_FIRST ? "-" : "+",
                                l->fields[i].bits, v[i]);
    tap_diag("%s (field +/-width:value):%s", what, line);
}

/* ------------------------------------------------------------------------
 * Layouts under test
 * ------------------------------------------------------------------------ */

static const feed_field hot_fields[] = {      /* hot replies */
    { "likes",   20, FEED_LARGER_FIRST },
    { "replies", 17, FEED_LARGER_FIRST },
    { "day",     16, FEED_LARGER_FIRST },
};
static const feed_field lead_fields[] = {     /* leaderboard */
    { "points", 22, FEED_LARGER_FIRST },
    { "paid",    1, FEED_LARGER_FIRST },
    { "time",   30, FEED_SMALLER_FIRST },
};
static const feed_field wide_fields[] = { { "n", 53, FEED_LARGER_FIRST } };
static const feed_field wide_rev_fields[] = { { "t", 53, FEED_SMALLER_FIRST } };

enum { L_HOT, L_LEAD, L_WIDE, L_WIDE_REV, L_MANY, L_BITS, L_SMALL, NLAYOUTS };
static const char *layout_name[NLAYOUTS] = {
    "hot 20+17+16", "leaderboard 22+1+30(smaller)", "single 53",
    "single 53 smaller-first", "16 fields 3/4 bits = 53", "16 fields of 1 bit",
    "2+3 bits, mixed",
};
static feed_layout layouts[NLAYOUTS];

/* Make a random valid layout: 1..16 fields, half the time exactly 53 bits,
 * one field taking much of the width. */
static int random_layout(feed_layout *l)
{
    feed_field f[FEED_LAYOUT_MAX_FIELDS];
    size_t n = 1 + (size_t)rnd_below(FEED_LAYOUT_MAX_FIELDS), i;
    size_t heavy = (size_t)rnd_below(n);
    unsigned spare = (unsigned)(FEED_SCORE_BITS - n);
    if (rnd_below(2))
        spare = (unsigned)rnd_below(spare + 1);
    for (i = 0; i < n; i++) {
        f[i].name = NULL;
        f[i].bits = 1;
        f[i].order = rnd_below(2) ? FEED_SMALLER_FIRST : FEED_LARGER_FIRST;
    }
    while (spare-- > 0)
        f[rnd_below(2) ? heavy : (size_t)rnd_below(n)].bits++;
    return feed_layout_init(l, f, n);
}

static int setup_layouts(void)
{
    feed_field many[16], bits1[16], small[2];
    size_t i;
    int rc = 0;
    for (i = 0; i < 16; i++) {
        many[i].name = bits1[i].name = NULL;
        many[i].bits = i < 11 ? 3 : 4;             /* 11*3 + 5*4 = 53 */
        bits1[i].bits = 1;
        many[i].order = bits1[i].order = i % 2 ? FEED_SMALLER_FIRST : FEED_LARGER_FIRST;
    }
    small[0].name = "a", small[0].bits = 2, small[0].order = FEED_SMALLER_FIRST;
    small[1].name = "b", small[1].bits = 3, small[1].order = FEED_LARGER_FIRST;
    rc |= feed_layout_init(&layouts[L_HOT], hot_fields, 3);
    rc |= feed_layout_init(&layouts[L_LEAD], lead_fields, 3);
    rc |= feed_layout_init(&layouts[L_WIDE], wide_fields, 1);
    rc |= feed_layout_init(&layouts[L_WIDE_REV], wide_rev_fields, 1);
    rc |= feed_layout_init(&layouts[L_MANY], many, 16);
    rc |= feed_layout_init(&layouts[L_BITS], bits1, 16);
    rc |= feed_layout_init(&layouts[L_SMALL], small, 2);
    return rc;
}

/* ------------------------------------------------------------------------
 * feed_layout_init
 * ------------------------------------------------------------------------ */

/* feed_layout_init on fields[0..n) must fail with FEED_EINVAL and leave *l
 * as it was. */
static void rejects_layout(const feed_field *fields, size_t n, const char *why)
{
    feed_layout l, before;
    int rc;
    memset(&l, 0xAB, sizeof l);
    before = l;
    rc = feed_layout_init(&l, fields, n);
    ok(rc == FEED_EINVAL && memcmp(&l, &before, sizeof l) == 0,
       "layout refused: %s", why);
    if (rc != FEED_EINVAL)
        tap_diag("returned %d", rc);
}

static void test_layout_init(void)
{
    feed_field f[FEED_LAYOUT_MAX_FIELDS + 1];
    feed_layout l;
    size_t i;

    is_int(layouts[L_HOT].total_bits, 53, "hot: total_bits 53");
    is_int(layouts[L_LEAD].nfields, 3, "leaderboard: 3 fields");
    is_int(layouts[L_SMALL].total_bits, 5, "2+3: total_bits 5");
    ok(layouts[L_HOT].fields[1].bits == 17 &&
       strcmp(layouts[L_HOT].fields[1].name, "replies") == 0,
       "fields are copied in order");

    for (i = 0; i <= FEED_LAYOUT_MAX_FIELDS; i++)
        f[i].name = NULL, f[i].bits = 1, f[i].order = FEED_LARGER_FIRST;
    rejects_layout(f, 0, "no fields");
    rejects_layout(f, FEED_LAYOUT_MAX_FIELDS + 1, "17 fields");
    is_int(feed_layout_init(&l, f, FEED_LAYOUT_MAX_FIELDS), FEED_OK,
           "16 fields accepted");
    is_int(feed_layout_init(NULL, f, 1), FEED_EINVAL, "NULL layout");
    rejects_layout(NULL, 1, "NULL fields");

    f[0].bits = 54;
    rejects_layout(f, 1, "a single width of 54");
    f[0].bits = 53;
    is_int(feed_layout_init(&l, f, 1), FEED_OK, "a single width of 53 accepted");
    f[0].bits = 1, f[1].bits = 0;
    rejects_layout(f, 3, "a width of 0 among others");
    f[1].bits = 54;
    rejects_layout(f, 2, "a width of 54 among others");
    f[0].bits = 27, f[1].bits = 27;
    rejects_layout(f, 2, "27+27 = 54 bits");
    f[0].bits = 26, f[1].bits = 27;
    is_int(feed_layout_init(&l, f, 2), FEED_OK, "26+27 = 53 bits accepted");
    f[0].bits = 20, f[1].bits = 17, f[2].bits = 17;
    rejects_layout(f, 3, "20+17+17 = 54 bits");
    f[0].bits = UINT_MAX, f[1].bits = 2;        /* sums to 1 if unchecked */
    rejects_layout(f, 2, "a width that wraps the sum");
    f[0].bits = 1, f[1].bits = 1, f[2].bits = 1;
    f[1].order = (feed_order)2;
    rejects_layout(f, 3, "order 2");
}

/* ------------------------------------------------------------------------
 * Known answers, round trips, refusals
 * ------------------------------------------------------------------------ */

static int64_t pack3(const feed_layout *l, uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t v[3];
    int64_t s = -1;
    v[0] = a, v[1] = b, v[2] = c;
    if (feed_score_pack(l, v, &s) != FEED_OK)
        return -1;
    return s;
}

static void test_known_scores(void)
{
    const feed_layout *hot = &layouts[L_HOT], *lead = &layouts[L_LEAD];
    uint64_t v[16];
    int64_t s = -1;

    is_int(pack3(hot, 0, 0, 0), 0, "hot (0,0,0) = 0");
    is_int(pack3(hot, 1, 2, 3), (INT64_C(1) << 33) + (INT64_C(2) << 16) + 3,
           "hot (1,2,3) = 1<<33 + 2<<16 + 3");
    is_int(pack3(hot, 1048575, 131071, 65535), FEED_SCORE_MAX,
           "hot at every limit = FEED_SCORE_MAX");
    is_int(pack3(lead, 5, 1, 7),
           (INT64_C(5) << 31) + (INT64_C(1) << 30) + ((INT64_C(1) << 30) - 1 - 7),
           "leaderboard (5,1,7): time stored inverted");
    is_int(pack3(lead, 0, 0, 1073741823), 0,
           "leaderboard: latest time, no points, unpaid = 0");
    v[0] = 0;
    ok(feed_score_pack(&layouts[L_WIDE_REV], v, &s) == FEED_OK &&
       s == FEED_SCORE_MAX, "53-bit smaller-first: 0 packs to FEED_SCORE_MAX");
    memset(v, 0, sizeof v);
    v[0] = 1;
    ok(feed_score_pack(&layouts[L_BITS], v, &s) == FEED_OK &&
       s == (INT64_C(1) << 15) + 0x5555, "16 one-bit fields, alternating");
}

/* Pack, range-check, unpack: 1 when the values come back. */
static int round_trip(const feed_layout *l, const uint64_t *v)
{
    uint64_t back[FEED_LAYOUT_MAX_FIELDS];
    int64_t s = -1;
    if (feed_score_pack(l, v, &s) != FEED_OK)
        return 0;
    if (s < 0 || (uint64_t)s > top_of(l->total_bits))
        return 0;
    if (feed_score_unpack(l, s, back) != FEED_OK)
        return 0;
    return memcmp(back, v, l->nfields * sizeof *v) == 0;
}

/* Every field at 0, 1, top - 1 and top, the others random near their limits;
 * then all at the bottom and all at the top. */
static void test_round_trip_limits(const char *name, const feed_layout *l)
{
    uint64_t v[FEED_LAYOUT_MAX_FIELDS];
    size_t k, i, cases = 0, bad = 0;
    int j, r;
    for (k = 0; k < l->nfields; k++) {
        uint64_t top = top_of(l->fields[k].bits);
        uint64_t lim[4];
        lim[0] = 0, lim[1] = 1, lim[2] = top - 1, lim[3] = top;
        for (j = 0; j < 4; j++)
            for (r = 0; r < 25; r++) {
                pick_tuple(l, v);
                v[k] = lim[j];
                cases++;
                if (!round_trip(l, v) && bad++ == 0)
                    diag_tuple("first failure", l, v);
            }
    }
    for (i = 0; i < l->nfields; i++)
        v[i] = 0;
    cases++, bad += !round_trip(l, v);
    for (i = 0; i < l->nfields; i++)
        v[i] = top_of(l->fields[i].bits);
    cases++, bad += !round_trip(l, v);
    ok(bad == 0, "%s: %zu round trips at the limits", name, cases);
}

/* Every field given a value that does not fit: FEED_ERANGE, score kept. */
static void test_out_of_range(const char *name, const feed_layout *l)
{
    uint64_t v[FEED_LAYOUT_MAX_FIELDS];
    size_t k, cases = 0, bad = 0;
    int j;
    for (k = 0; k < l->nfields; k++) {
        uint64_t top = top_of(l->fields[k].bits);
        uint64_t over[6];
        over[0] = top + 1, over[1] = top + 2, over[2] = top << 1;
        over[3] = UINT64_C(1) << 63, over[4] = UINT64_MAX;
        over[5] = top + 1 + rnd_below(UINT64_MAX - top - 1);
        for (j = 0; j < 6; j++) {
            int64_t s = 12345;
            int rc;
            pick_tuple(l, v);
            v[k] = over[j];
            rc = feed_score_pack(l, v, &s);
            cases++;
            if ((rc != FEED_ERANGE || s != 12345) && bad++ == 0) {
                diag_tuple("accepted", l, v);
                tap_diag("rc %d, score %" PRId64, rc, s);
            }
        }
    }
    ok(bad == 0, "%s: %zu values too wide refused, score untouched", name, cases);
}

/* Scores outside [0, 2^total - 1]: FEED_ERANGE, values untouched. */
static void test_unpack_range(const char *name, const feed_layout *l)
{
    int64_t limit = (int64_t)top_of(l->total_bits);
    int64_t bad_scores[6];
    uint64_t v[FEED_LAYOUT_MAX_FIELDS];
    size_t i, j, bad = 0;
    bad_scores[0] = -1, bad_scores[1] = INT64_MIN, bad_scores[2] = limit + 1;
    bad_scores[3] = INT64_MAX;
    bad_scores[4] = limit + 1 + (int64_t)rnd_below((uint64_t)(INT64_MAX - limit - 1));
    bad_scores[5] = -1 - (int64_t)rnd_below(UINT64_C(1) << 62);
    for (i = 0; i < 6; i++) {
        int rc;
        for (j = 0; j < FEED_LAYOUT_MAX_FIELDS; j++)
            v[j] = 777;
        rc = feed_score_unpack(l, bad_scores[i], v);
        for (j = 0; j < FEED_LAYOUT_MAX_FIELDS; j++)
            if (v[j] != 777)
                rc = 999;
        if (rc != FEED_ERANGE && bad++ == 0)
            tap_diag("score %" PRId64 ": rc %d", bad_scores[i], rc);
    }
    ok(bad == 0, "%s: scores outside [0, 2^%u-1] refused by unpack", name,
       l->total_bits);
}

static void test_bad_arguments(void)
{
    feed_layout l = layouts[L_HOT];
    uint64_t v[3] = { 1, 2, 3 };
    int64_t s = 42;

    is_int(feed_score_pack(NULL, v, &s), FEED_EINVAL, "pack: NULL layout");
    is_int(feed_score_pack(&l, NULL, &s), FEED_EINVAL, "pack: NULL values");
    is_int(feed_score_pack(&l, v, NULL), FEED_EINVAL, "pack: NULL score");
    is_int(feed_score_unpack(NULL, 0, v), FEED_EINVAL, "unpack: NULL layout");
    is_int(feed_score_unpack(&l, 0, NULL), FEED_EINVAL, "unpack: NULL values");

    memset(&l, 0, sizeof l);
    is_int(feed_score_pack(&l, v, &s), FEED_EINVAL, "pack: zeroed layout");
    l = layouts[L_HOT];
    l.total_bits = 52;
    is_int(feed_score_pack(&l, v, &s), FEED_EINVAL, "pack: total_bits tampered");
    l = layouts[L_HOT];
    l.fields[0].bits = 21;                        /* 21+17+16 = 54 */
    l.total_bits = 54;
    is_int(feed_score_pack(&l, v, &s), FEED_EINVAL, "pack: hand-made 54-bit layout");
    is_int(feed_score_unpack(&l, 0, v), FEED_EINVAL, "unpack: hand-made 54-bit layout");
    l = layouts[L_HOT];
    l.nfields = FEED_LAYOUT_MAX_FIELDS + 1;
    is_int(feed_score_pack(&l, v, &s), FEED_EINVAL, "pack: nfields 17");
    is_int(s, 42, "score untouched by the refusals");
}

/* ------------------------------------------------------------------------
 * Order: comparing scores == comparing tuples field by field
 * ------------------------------------------------------------------------ */

/* +1 when a ranks higher than b, -1 when lower, 0 when equal. */
static int rank_cmp(const feed_layout *l, const uint64_t *a, const uint64_t *b)
{
    size_t i;
    for (i = 0; i < l->nfields; i++) {
        int c;
        if (a[i] == b[i])
            continue;
        c = a[i] > b[i] ? 1 : -1;
        return l->fields[i].order == FEED_SMALLER_FIRST ? -c : c;
    }
    return 0;
}

/* Two tuples equal up to a random field k, often adjacent values at k, so
 * that every field gets to decide. */
static void near_pair(const feed_layout *l, uint64_t *a, uint64_t *b)
{
    size_t k = (size_t)rnd_below(l->nfields), i;
    uint64_t top = top_of(l->fields[k].bits);
    pick_tuple(l, a);
    memcpy(b, a, l->nfields * sizeof *a);
    for (i = k; i < l->nfields; i++)
        b[i] = pick_value(l->fields[i].bits);
    if (rnd_below(2))
        b[k] = a[k] < top && rnd_below(2) ? a[k] + 1 : a[k] > 0 ? a[k] - 1 : a[k];
}

static int pair_agrees(const feed_layout *l, const uint64_t *a, const uint64_t *b)
{
    int64_t sa, sb;
    int want = rank_cmp(l, a, b);
    if (feed_score_pack(l, a, &sa) != FEED_OK || feed_score_pack(l, b, &sb) != FEED_OK)
        return 0;
    return (sa > sb) - (sa < sb) == want;
}

/* One field decides by the least step, and every later field pulls the
 * other way as hard as it can: no carry may cross into the deciding field. */
static int carry_cases(const feed_layout *l, size_t *cases)
{
    uint64_t hi[FEED_LAYOUT_MAX_FIELDS], lo[FEED_LAYOUT_MAX_FIELDS];
    size_t k, i;
    int bad = 0;
    for (k = 0; k < l->nfields; k++) {
        pick_tuple(l, hi);
        memcpy(lo, hi, l->nfields * sizeof *hi);
        if (hi[k] == 0)
            hi[k] = 1, lo[k] = 0;
        else
            lo[k] = hi[k] - 1;
        if (l->fields[k].order == FEED_SMALLER_FIRST) {
            uint64_t t = hi[k];             /* smaller ranks higher: swap */
            hi[k] = lo[k], lo[k] = t;
        }
        for (i = k + 1; i < l->nfields; i++) {
            uint64_t top = top_of(l->fields[i].bits);
            int smaller = l->fields[i].order == FEED_SMALLER_FIRST;
            hi[i] = smaller ? top : 0;      /* hi: worst below k */
            lo[i] = smaller ? 0 : top;      /* lo: best below k */
        }
        ++*cases;
        if (!pair_agrees(l, hi, lo) || rank_cmp(l, hi, lo) != 1) {
            if (bad++ == 0)
                diag_tuple("carry case, higher", l, hi), diag_tuple("lower", l, lo);
        }
    }
    return bad;
}

static void test_order(const char *name, const feed_layout *l)
{
    uint64_t a[FEED_LAYOUT_MAX_FIELDS], b[FEED_LAYOUT_MAX_FIELDS];
    size_t n, cases = 0, bad = 0;
    for (n = 0; n < PAIRS; n++) {
        near_pair(l, a, b);
        cases++;
        if (!pair_agrees(l, a, b) && bad++ == 0)
            diag_tuple("disagree: a", l, a), diag_tuple("b", l, b);
    }
    bad += (size_t)carry_cases(l, &cases);
    ok(bad == 0, "%s: score order == field order for %zu pairs", name, cases);
}

/* Random layouts: everything above again, briefly, on each. */
static void test_random_layouts(void)
{
    feed_layout l;
    uint64_t a[FEED_LAYOUT_MAX_FIELDS], b[FEED_LAYOUT_MAX_FIELDS];
    size_t n, r, refused = 0, bad_trip = 0, bad_order = 0, bad_range = 0;
    for (n = 0; n < 1000; n++) {
        if (random_layout(&l) != FEED_OK) {
            refused++;
            continue;
        }
        for (r = 0; r < 20; r++) {
            near_pair(&l, a, b);
            if (!round_trip(&l, a) && bad_trip++ == 0)
                diag_tuple("round trip", &l, a);
            if (!pair_agrees(&l, a, b) && bad_order++ == 0)
                diag_tuple("order: a", &l, a), diag_tuple("b", &l, b);
        }
        {
            int64_t s = 99;
            size_t k = (size_t)rnd_below(l.nfields);
            a[k] = top_of(l.fields[k].bits) + 1;
            if ((feed_score_pack(&l, a, &s) != FEED_ERANGE || s != 99) &&
                bad_range++ == 0)
                diag_tuple("too wide accepted", &l, a);
        }
    }
    is_int(refused, 0, "1000 random valid layouts accepted");
    is_int(bad_trip, 0, "random layouts: 20000 round trips");
    is_int(bad_order, 0, "random layouts: 20000 pairs in order");
    is_int(bad_range, 0, "random layouts: a too-wide value refused in each");
}

/* ------------------------------------------------------------------------
 * Snowflake scores
 * ------------------------------------------------------------------------ */

static int cmp_i64_desc(const void *pa, const void *pb)
{
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    return (a < b) - (a > b);
}

/* A random snowflake id: anywhere, near INT64_MAX, or near a millisecond
 * boundary (where the score steps). */
static int64_t pick_snowflake(void)
{
    int64_t ms = 1 + (int64_t)(rnd() >> 24);  /* 1 .. 2^40 */
    switch (rnd_below(3)) {
    case 0:  return (int64_t)(rnd() >> 1);
    case 1:  return INT64_MAX - (int64_t)rnd_below(UINT64_C(1) << 24);
    default: return (ms << 22) - 2 + (int64_t)rnd_below(4);
    }
}

/* Sorted by id DESC, the rows must also be sorted by (score DESC, id DESC):
 * the two orders are the same. */
static void test_snowflake_order(void)
{
    static int64_t ids[20000];
    size_t n = sizeof ids / sizeof *ids, i, bad = 0;
    int64_t prev_s = INT64_MAX, prev_id = INT64_MAX, s;
    for (i = 0; i < n; i++)
        ids[i] = pick_snowflake();
    qsort(ids, n, sizeof *ids, cmp_i64_desc);
    for (i = 0; i < n; i++) {
        if (feed_snowflake_score(ids[i], 22, TWITTER_EPOCH, &s) != FEED_OK ||
            s != ids[i] / 4194304 + TWITTER_EPOCH || (int64_t)(double)s != s) {
            if (bad++ == 0)
                tap_diag("id %" PRId64 ": score %" PRId64, ids[i], s);
            continue;
        }
        if (i > 0 && !(s < prev_s || (s == prev_s && ids[i] <= prev_id)) &&
            bad++ == 0)
            tap_diag("id %" PRId64 " (score %" PRId64 ") after id %" PRId64
                     " (score %" PRId64 ")", ids[i], s, prev_id, prev_s);
        prev_s = s, prev_id = ids[i];
    }
    ok(bad == 0, "snowflake: %zu ids, (score, id) DESC == id DESC, scores exact", n);
}

/* feed_snowflake_score must return want and, on error, keep *score. */
static void snowflake_is(int64_t id, int shift, int64_t epoch, int want_rc,
                         int64_t want, const char *name)
{
    int64_t s = -7;
    int rc = feed_snowflake_score(id, shift, epoch, &s);
    if (want_rc != FEED_OK)
        want = -7;
    ok(rc == want_rc && s == want, "snowflake: %s", name);
    if (rc != want_rc || s != want)
        tap_diag("rc %d score %" PRId64 ", want rc %d score %" PRId64,
                 rc, s, want_rc, want);
}

static void test_snowflake(void)
{
    const int64_t two53 = INT64_C(1) << 53;
    snowflake_is(INT64_MAX, 22, TWITTER_EPOCH, FEED_OK, INT64_C(3487858230208),
                 "INT64_MAX, Twitter layout: exact");
    snowflake_is(INT64_MAX - ((INT64_C(1) << 22) - 1), 22, TWITTER_EPOCH, FEED_OK,
                 INT64_C(3487858230208), "same millisecond as INT64_MAX");
    snowflake_is(INT64_MAX - (INT64_C(1) << 22), 22, TWITTER_EPOCH, FEED_OK,
                 INT64_C(3487858230207), "one millisecond before");
    snowflake_is(0, 22, TWITTER_EPOCH, FEED_OK, TWITTER_EPOCH, "id 0 is the epoch");
    snowflake_is(INT64_C(1541815603606036480), 22, TWITTER_EPOCH, FEED_OK,
                 (INT64_C(1541815603606036480) >> 22) + TWITTER_EPOCH, "a real-sized id");
    snowflake_is(INT64_MAX, 10, 0, FEED_OK, FEED_SCORE_MAX,
                 "INT64_MAX >> 10 is FEED_SCORE_MAX");
    snowflake_is(INT64_MAX, 10, 1, FEED_ERANGE, 0, "one past FEED_SCORE_MAX");
    snowflake_is(two53 - 1, 0, 0, FEED_OK, FEED_SCORE_MAX, "shift 0, 2^53-1");
    snowflake_is(two53, 0, 0, FEED_ERANGE, 0, "shift 0, 2^53");
    snowflake_is(INT64_MAX, 0, TWITTER_EPOCH, FEED_ERANGE, 0, "shift 0, INT64_MAX");
    snowflake_is(-1, 22, TWITTER_EPOCH, FEED_EINVAL, 0, "negative id");
    snowflake_is(INT64_MIN, 22, TWITTER_EPOCH, FEED_EINVAL, 0, "INT64_MIN id");
    snowflake_is(1, -1, 0, FEED_EINVAL, 0, "shift -1");
    snowflake_is(1, 64, 0, FEED_EINVAL, 0, "shift 64");
    snowflake_is(1, 22, -1, FEED_EINVAL, 0, "negative epoch");
    snowflake_is(1, 22, FEED_SCORE_MAX + 1, FEED_EINVAL, 0, "epoch past 2^53-1");
    is_int(feed_snowflake_score(1, 22, 0, NULL), FEED_EINVAL, "snowflake: NULL score");
    test_snowflake_order();
}

/* ------------------------------------------------------------------------
 * C == SQL (sql/score.sql)
 * ------------------------------------------------------------------------ */

/* A growing string for COPY data. */
typedef struct sbuf { char *p; size_t len, cap; int failed; } sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || b->failed)
        return;
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = (b->cap ? b->cap * 2 : 4096) + (size_t)n;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p, b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static int exec_ok(PGconn *c, const char *q)
{
    PGresult *r = PQexec(c, q);
    ExecStatusType st = PQresultStatus(r);
    int good = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
    if (!good)
        tap_diag("%s: %s", q, PQresultErrorMessage(r));
    PQclear(r);
    return good;
}

/* The SQLSTATE running q ends with: "00000" when it succeeds. */
static const char *sql_state(PGconn *c, const char *q)
{
    static char state[8];
    PGresult *r = PQexec(c, q);
    ExecStatusType st = PQresultStatus(r);
    const char *s = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
        s = "00000";
    snprintf(state, sizeof state, "%s", s ? s : "none");
    PQclear(r);
    return state;
}

/* The one value q returns, copied into out ("" if not exactly one). */
static void sql_value(PGconn *c, const char *q, char *out, size_t outlen)
{
    PGresult *r = PQexec(c, q);
    out[0] = '\0';
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 &&
        PQnfields(r) == 1)
        snprintf(out, outlen, "%s", PQgetvalue(r, 0, 0));
    else
        tap_diag("%s: %s", q, PQresultErrorMessage(r));
    PQclear(r);
}

/* COPY the rows in b into a table: one round trip, not one per row. */
static int copy_in(PGconn *c, const char *copy_sql, const sbuf *b)
{
    PGresult *r = PQexec(c, copy_sql);
    int good = PQresultStatus(r) == PGRES_COPY_IN;
    if (!good)
        tap_diag("%s: %s", copy_sql, PQresultErrorMessage(r));
    PQclear(r);
    if (!good)
        return 0;
    good = !b->failed && b->len <= INT_MAX &&
           PQputCopyData(c, b->p, (int)b->len) == 1;
    if (PQputCopyEnd(c, good ? NULL : "t_score: building the rows failed") != 1)
        good = 0;
    while ((r = PQgetResult(c)) != NULL) {
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            tap_diag("%s: %s", copy_sql, PQresultErrorMessage(r));
            good = 0;
        }
        PQclear(r);
    }
    return good;
}

/* Run q, whose rows are (i, score...) ORDER BY i, and count the scores that
 * differ from want[i] (a NULL differs from everything). A failed query or a
 * wrong number of rows counts n + 1. */
static size_t score_mismatches(PGconn *c, const char *q, const int64_t *want,
                               size_t n)
{
    PGresult *r = PQexec(c, q);
    size_t bad = 0;
    int i, j;
    if (PQresultStatus(r) != PGRES_TUPLES_OK || (size_t)PQntuples(r) != n) {
        tap_diag("%s: %s(%d rows)", q, PQresultErrorMessage(r), PQntuples(r));
        PQclear(r);
        return n + 1;
    }
    for (i = 0; i < PQntuples(r); i++)
        for (j = 1; j < PQnfields(r); j++) {
            long long row = strtoll(PQgetvalue(r, i, 0), NULL, 10);
            long long got = strtoll(PQgetvalue(r, i, j), NULL, 10);
            if ((row != i || PQgetisnull(r, i, j) || got != want[i]) &&
                bad++ == 0)
                tap_diag("row %lld, %s: SQL %s, C %" PRId64, row, PQfname(r, j),
                         PQgetisnull(r, i, j) ? "NULL" : PQgetvalue(r, i, j),
                         want[i]);
        }
    PQclear(r);
    return bad;
}

/* l's score over the columns v0, v1, ... as one feed_score_pack() call. */
static void expr_array(sbuf *b, const feed_layout *l)
{
    size_t i;
    sb_printf(b, "feed_score_pack(ARRAY[");
    for (i = 0; i < l->nfields; i++)
        sb_printf(b, "%sv%zu", i ? ", " : "", i);
    sb_printf(b, "], '{");
    for (i = 0; i < l->nfields; i++)
        sb_printf(b, "%s%u", i ? "," : "", l->fields[i].bits);
    sb_printf(b, "}', '{");
    for (i = 0; i < l->nfields; i++)
        sb_printf(b, "%s%c", i ? "," : "",
                  l->fields[i].order == FEED_SMALLER_FIRST ? 't' : 'f');
    sb_printf(b, "}')");
}

/* The same score as a sum of shifted fields: a field's shift is the sum of
 * the widths after it. */
static void expr_fields(sbuf *b, const feed_layout *l)
{
    unsigned shift = l->total_bits;
    size_t i;
    for (i = 0; i < l->nfields; i++) {
        shift -= l->fields[i].bits;
        sb_printf(b, "%s(feed_pack_field(v%zu, %u, %s) << %u)", i ? " + " : "",
                  i, l->fields[i].bits,
                  l->fields[i].order == FEED_SMALLER_FIRST ? "true" : "false",
                  shift);
    }
}

/* A temp table with the layout's fields as columns v0, v1, ... and two
 * generated scores, one per SQL form; ROWS random tuples copied in; both
 * scores read back must be the ones C packs. */
static void sql_layout_table(PGconn *c, const char *name, size_t which)
{
    static int64_t want[ROWS];
    const feed_layout *l = &layouts[which];
    uint64_t v[FEED_LAYOUT_MAX_FIELDS];
    sbuf q = { 0 }, rows = { 0 };
    size_t i, k, unpackable = 0;

    sb_printf(&q, "CREATE TEMP TABLE score_l%zu (i int PRIMARY KEY", which);
    for (k = 0; k < l->nfields; k++)
        sb_printf(&q, ", v%zu bigint NOT NULL", k);
    sb_printf(&q, ", score_array bigint NOT NULL GENERATED ALWAYS AS (");
    expr_array(&q, l);
    sb_printf(&q, ") STORED, score_fields bigint NOT NULL GENERATED ALWAYS AS (");
    expr_fields(&q, l);
    sb_printf(&q, ") STORED)");
    ok(!q.failed && exec_ok(c, q.p), "SQL %s: table with generated scores", name);

    for (i = 0; i < ROWS; i++) {
        pick_tuple(l, v);
        unpackable += feed_score_pack(l, v, &want[i]) != FEED_OK;
        sb_printf(&rows, "%zu", i);
        for (k = 0; k < l->nfields; k++)
            sb_printf(&rows, "\t%" PRIu64, v[k]);
        sb_printf(&rows, "\n");
    }
    q.len = 0;
    sb_printf(&q, "COPY score_l%zu (i", which);
    for (k = 0; k < l->nfields; k++)
        sb_printf(&q, ", v%zu", k);
    sb_printf(&q, ") FROM STDIN");
    ok(unpackable == 0 && copy_in(c, q.p, &rows), "SQL %s: %d rows copied in",
       name, ROWS);
    q.len = 0;
    sb_printf(&q, "SELECT i, score_array, score_fields FROM score_l%zu ORDER BY i",
              which);
    is_int(score_mismatches(c, q.p, want, ROWS), 0,
           "SQL %s: both SQL scores == C score, %d rows", name, ROWS);
    free(q.p);
    free(rows.p);
}

/* Parse "{1,2,3}" into v[0..n): 1 when it holds exactly n numbers. */
static int parse_array(const char *s, uint64_t *v, size_t n)
{
    size_t i;
    char *end;
    if (*s++ != '{')
        return 0;
    for (i = 0; i < n; i++) {
        v[i] = strtoull(s, &end, 10);
        if (end == s || *end != (i + 1 < n ? ',' : '}'))
            return 0;
        s = end + 1;
    }
    return *s == '\0';
}

static size_t unpack_mismatches(PGconn *c, const feed_layout *ls,
                                const int64_t *probe)
{
    PGresult *r = PQexec(c, "SELECT i, unpacked FROM score_rand ORDER BY i");
    uint64_t got[FEED_LAYOUT_MAX_FIELDS], want[FEED_LAYOUT_MAX_FIELDS];
    size_t bad = 0;
    int i;
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != ROWS) {
        tap_diag("unpacked: %s", PQresultErrorMessage(r));
        PQclear(r);
        return ROWS + 1;
    }
    for (i = 0; i < ROWS; i++) {
        const feed_layout *l = &ls[i];
        if (feed_score_unpack(l, probe[i], want) != FEED_OK ||
            !parse_array(PQgetvalue(r, i, 1), got, l->nfields) ||
            memcmp(got, want, l->nfields * sizeof *got) != 0) {
            if (bad++ == 0) {
                tap_diag("probe %" PRId64 ": SQL %s", probe[i], PQgetvalue(r, i, 1));
                diag_tuple("C", l, want);
            }
        }
    }
    PQclear(r);
    return bad;
}

/* Each row its own random layout, given to SQL as arrays: packs, unpacks of
 * the packed score, and unpacks of an arbitrary valid score (probe). */
static void sql_random_layouts(PGconn *c)
{
    static feed_layout ls[ROWS];
    static int64_t want[ROWS], probe[ROWS];
    uint64_t v[FEED_LAYOUT_MAX_FIELDS];
    sbuf rows = { 0 };
    size_t i, k, bad = 0;
    char n[64];

    ok(exec_ok(c, "CREATE TEMP TABLE score_rand (i int PRIMARY KEY,"
                  " vals bigint[] NOT NULL, bits int[] NOT NULL,"
                  " sf boolean[] NOT NULL, probe bigint NOT NULL,"
                  " score bigint NOT NULL GENERATED ALWAYS AS"
                  "  (feed_score_pack(vals, bits, sf)) STORED,"
                  " unpacked bigint[] NOT NULL GENERATED ALWAYS AS"
                  "  (feed_score_unpack(probe, bits, sf)) STORED)"),
       "SQL random layouts: table");
    for (i = 0; i < ROWS; i++) {
        const feed_layout *l = &ls[i];
        bad += random_layout(&ls[i]) != FEED_OK;
        pick_tuple(l, v);
        bad += feed_score_pack(l, v, &want[i]) != FEED_OK;
        probe[i] = (int64_t)(rnd() & top_of(l->total_bits));
        sb_printf(&rows, "%zu\t{", i);
        for (k = 0; k < l->nfields; k++)
            sb_printf(&rows, "%s%" PRIu64, k ? "," : "", v[k]);
        sb_printf(&rows, "}\t{");
        for (k = 0; k < l->nfields; k++)
            sb_printf(&rows, "%s%u", k ? "," : "", l->fields[k].bits);
        sb_printf(&rows, "}\t{");
        for (k = 0; k < l->nfields; k++)
            sb_printf(&rows, "%s%c", k ? "," : "",
                      l->fields[k].order == FEED_SMALLER_FIRST ? 't' : 'f');
        sb_printf(&rows, "}\t%" PRId64 "\n", probe[i]);
    }
    ok(bad == 0 && copy_in(c, "COPY score_rand (i, vals, bits, sf, probe) FROM STDIN",
                           &rows),
       "SQL random layouts: %d rows copied in", ROWS);
    is_int(score_mismatches(c, "SELECT i, score FROM score_rand ORDER BY i",
                            want, ROWS), 0,
           "SQL random layouts: scores == C for %d rows", ROWS);
    sql_value(c, "SELECT count(*) FROM score_rand"
                 " WHERE feed_score_unpack(score, bits, sf) <> vals", n, sizeof n);
    is_str(n, "0", "SQL random layouts: unpack(pack(values)) == values");
    is_int(unpack_mismatches(c, ls, probe), 0,
           "SQL random layouts: unpack of any valid score == C's, %d rows", ROWS);
    free(rows.p);
}

static void sql_snowflakes(PGconn *c)
{
    static int64_t want[ROWS];
    sbuf rows = { 0 };
    size_t i, bad = 0;
    ok(exec_ok(c, "CREATE TEMP TABLE score_snow (i int PRIMARY KEY,"
                  " id bigint NOT NULL, score bigint NOT NULL GENERATED ALWAYS"
                  " AS (feed_snowflake_score(id, 22, 1288834974657)) STORED)"),
       "SQL snowflakes: table");
    for (i = 0; i < ROWS; i++) {
        int64_t id = i == 0 ? INT64_MAX : pick_snowflake();
        bad += feed_snowflake_score(id, 22, TWITTER_EPOCH, &want[i]) != FEED_OK;
        sb_printf(&rows, "%zu\t%" PRId64 "\n", i, id);
    }
    ok(bad == 0 && copy_in(c, "COPY score_snow (i, id) FROM STDIN", &rows),
       "SQL snowflakes: %d rows copied in", ROWS);
    is_int(score_mismatches(c, "SELECT i, score FROM score_snow ORDER BY i",
                            want, ROWS), 0,
           "SQL snowflakes: scores == C for %d ids", ROWS);
    free(rows.p);
}

/* What SQL must refuse, and with which SQLSTATE. score_l<n> is the table of
 * layouts[n] made by sql_layout_table(). */
static void sql_refusals(PGconn *c)
{
    static const struct { const char *q, *state, *why; } cases[] = {
        { "SELECT feed_pack_field(1048576, 20, false)", "22003", "2^20 in 20 bits" },
        { "SELECT feed_pack_field(-1, 20, true)", "22003", "a negative value" },
        { "SELECT feed_pack_field(9007199254740992, 53, false)", "22003", "2^53 in 53 bits" },
        { "SELECT feed_pack_field(1, 0, false)", "22023", "width 0" },
        { "SELECT feed_pack_field(1, 54, false)", "22023", "width 54" },
        { "SELECT feed_score_pack('{1,1}', '{27,27}', '{f,f}')", "22023", "27+27 bits" },
        { "SELECT feed_score_pack('{1,2}', '{10,10}', '{f}')", "22023", "lengths differ" },
        { "SELECT feed_score_pack('{1}', '{10,10}', '{f,f}')", "22023", "too few values" },
        { "SELECT feed_score_pack('{}', '{}', '{}')", "22023", "no fields" },
        { "SELECT feed_score_pack(array_fill(0::bigint, ARRAY[17]),"
          " array_fill(1, ARRAY[17]), array_fill(false, ARRAY[17]))", "22023", "17 fields" },
        { "SELECT feed_score_pack('{1,2}', '{10,NULL}', '{f,f}')", "22023", "a NULL width" },
        { "SELECT feed_score_pack('{1,2}', '{10,10}', '{f,NULL}')", "22023", "a NULL direction" },
        { "SELECT feed_score_pack('{{1,2}}', '{10,10}', '{f,f}')", "22023", "2-D values" },
        { "SELECT feed_score_pack('{1,131072,0}', '{20,17,16}', '{f,f,f}')", "22003", "2^17 in 17 bits" },
        { "SELECT feed_score_unpack(9007199254740992, '{20,17,16}', '{f,f,f}')", "22003", "unpack 2^53" },
        { "SELECT feed_score_unpack(32, '{2,3}', '{t,f}')", "22003", "unpack 2^5 in 5 bits" },
        { "SELECT feed_score_unpack(-1, '{53}', '{f}')", "22003", "unpack -1" },
        { "SELECT feed_snowflake_score(-1, 22, 0)", "22023", "snowflake: negative id" },
        { "SELECT feed_snowflake_score(1, 64, 0)", "22023", "snowflake: shift 64" },
        { "SELECT feed_snowflake_score(1, 22, -1)", "22023", "snowflake: negative epoch" },
        { "SELECT feed_snowflake_score(9223372036854775807, 0, 0)", "22003", "snowflake: past 2^53-1" },
        { "INSERT INTO score_l0 (i, v0, v1, v2) VALUES (-1, 1048576, 0, 0)", "22003",
          "insert with likes 2^20: the generated column refuses" },
        { "INSERT INTO score_l1 (i, v0, v1, v2) VALUES (-1, 0, 2, 0)", "22003",
          "insert with paid 2 in 1 bit" },
        { "INSERT INTO score_l3 (i, v0) VALUES (-1, 9007199254740992)", "22003",
          "insert with 2^53 in a 53-bit smaller-first field" },
        { "INSERT INTO score_l0 (i, v0, v1, v2) VALUES (-1, 1048575, 131071, 65535)", "00000",
          "insert at every limit is accepted (control)" },
    };
    size_t i;
    for (i = 0; i < sizeof cases / sizeof *cases; i++)
        is_str(sql_state(c, cases[i].q), cases[i].state, "SQL refuses: %s",
               cases[i].why);
}

/* Attributes a generated column and pg_dump depend on. */
static void sql_function_attributes(PGconn *c)
{
    char got[256], schema[64], q[1024];
    sql_value(c, "SELECT count(*) FROM pg_proc WHERE proname IN"
                 " ('feed_pack_field', 'feed_score_pack', 'feed_score_unpack',"
                 "  'feed_snowflake_score')"
                 " AND provolatile = 'i' AND proisstrict AND proparallel = 's'",
              got, sizeof got);
    is_str(got, "4", "SQL: the 4 functions are IMMUTABLE STRICT PARALLEL SAFE");
    sql_value(c, "SELECT feed_pack_field(NULL, 20, false) IS NULL"
                 " AND feed_score_pack('{1,NULL}', '{3,3}', '{f,f}') IS NULL",
              got, sizeof got);
    is_str(got, "t", "SQL: a NULL value gives a NULL score");

    /* pg_dump restores with an empty search_path: the functions must not
     * depend on it. */
    sql_value(c, "SELECT quote_ident(n.nspname) FROM pg_proc p JOIN pg_namespace n"
                 " ON n.oid = p.pronamespace WHERE p.proname = 'feed_score_pack'",
              schema, sizeof schema);
    snprintf(q, sizeof q,
             "SELECT %s.feed_score_pack('{5,6}', '{10,10}', '{t,f}')"
             " + (%s.feed_score_unpack(1, '{53}', '{t}'))[1]"
             " + %s.feed_snowflake_score(4194304, 22, 0)"
             " + %s.feed_pack_field(1, 1, true)", schema, schema, schema, schema);
    ok(exec_ok(c, "BEGIN") && exec_ok(c, "SET LOCAL search_path = ''"), "SQL: search_path ''");
    sql_value(c, q, got, sizeof got);
    exec_ok(c, "COMMIT");
    /* ((1023-5) << 10 | 6) + (2^53 - 2) + 1 + 0 */
    is_str(got, "9007199255783429", "SQL: the functions work with search_path ''");
}

static void test_sql(void)
{
    const char *conninfo = getenv("FEED_PG_CONNINFO");
    PGconn *c;
    size_t w;
    if (!conninfo || !*conninfo) {
        tap_diag("FEED_PG_CONNINFO is not set: skipping the SQL tests");
        return;
    }
    c = PQconnectdb(conninfo);
    if (!ok(PQstatus(c) == CONNECTION_OK, "SQL: connected")) {
        tap_diag("%s", PQerrorMessage(c));
        PQfinish(c);
        return;
    }
    exec_ok(c, "SET client_min_messages = warning");
    sql_function_attributes(c);
    for (w = 0; w < NLAYOUTS; w++)
        sql_layout_table(c, layout_name[w], w);
    sql_random_layouts(c);
    sql_snowflakes(c);
    sql_refusals(c);
    PQfinish(c);
}

int main(void)
{
    const char *env = getenv("FEED_TEST_SEED");
    uint64_t seed = env && *env ? strtoull(env, NULL, 0) : 20240601;
    size_t w;
    int rc;

    rng_state = seed;
    tap_diag("seed %" PRIu64 " (FEED_TEST_SEED=n to try another)", seed);
    rc = setup_layouts();
    is_int(rc, FEED_OK, "the test layouts are accepted");
    if (rc != FEED_OK) {
        tap_bail("cannot build the test layouts");
        return 1;
    }
    test_layout_init();
    test_known_scores();
    for (w = 0; w < NLAYOUTS; w++) {
        test_round_trip_limits(layout_name[w], &layouts[w]);
        test_out_of_range(layout_name[w], &layouts[w]);
        test_unpack_range(layout_name[w], &layouts[w]);
        test_order(layout_name[w], &layouts[w]);
    }
    test_bad_arguments();
    test_random_layouts();
    test_snowflake();
    test_sql();
    return tap_done();
}
