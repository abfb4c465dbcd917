/* score.c -- several ordering fields packed into one exact score.
 *
 * Redis keeps a sorted-set score as an IEEE double, which represents every
 * integer of magnitude up to 2^53 exactly and loses low bits above that. A
 * layout is a list of fields, most significant first, whose widths sum to at
 * most FEED_SCORE_BITS (53). Field i occupies the bits
 *
 *     [shift_i, shift_i + bits_i)   where shift_i = sum of the widths after i
 *
 * and stores a value in [0, 2^bits_i - 1], so the fields never overlap and
 * the packed score lies in [0, 2^total_bits - 1], inside [0, FEED_SCORE_MAX]:
 * it survives the trip through a double unchanged. Because the fields are
 * disjoint and ordered by significance, comparing two packed scores as
 * integers compares their stored tuples lexicographically.
 *
 * A smaller-first field (an earlier time ranks higher) stores the complement
 * top - value, top = 2^bits - 1. That reverses the order within the field and
 * maps [0, top] onto itself, so every integer in [0, 2^total_bits - 1] is the
 * packing of exactly one tuple: unpack needs no check but the range. The
 * complement is its own inverse, so one function serves both directions.
 *
 * The hand-written version of this (shifts and masks) masks a value that does
 * not fit, silently moving a row to a wrong place in every feed; here a value
 * that does not fit is an error, FEED_ERANGE, and nothing is written.
 *
 * sql/score.sql computes the very same scores inside PostgreSQL; any change
 * to the packing here must be made there too (tests/t_score.c checks both).
 */
#include <string.h>

#include "feedcache.h"

/* Largest value a field of this width holds. bits is 1..53 here. */
static uint64_t field_top(unsigned bits)
{
    return (UINT64_C(1) << bits) - 1;
}

/* Checked one at a time before summing, so that the sum cannot wrap. */
static int field_ok(const feed_field *fd)
{
    return fd->bits >= 1 && fd->bits <= FEED_SCORE_BITS &&
           (fd->order == FEED_LARGER_FIRST || fd->order == FEED_SMALLER_FIRST);
}

/* Sum of the widths of fields[0..n), or 0 if some field is invalid. */
static unsigned fields_bits(const feed_field *fields, size_t n)
{
    unsigned total = 0;
    size_t i;
    for (i = 0; i < n; i++) {
        if (!field_ok(&fields[i]))
            return 0;
        total += fields[i].bits;
    }
    return total;
}

/* The layout struct is public, so it may have been filled by hand or not at
 * all: recheck what feed_layout_init() guarantees (cheap, at most 16 fields)
 * instead of trusting total_bits. */
static int layout_ok(const feed_layout *l)
{
    unsigned total;
    if (l->nfields < 1 || l->nfields > FEED_LAYOUT_MAX_FIELDS)
        return 0;
    total = fields_bits(l->fields, l->nfields);
    return total != 0 && total <= FEED_SCORE_BITS && total == l->total_bits;
}

/* Value <-> stored field. An involution: stored(fd, stored(fd, v)) == v. */
static uint64_t stored(const feed_field *fd, uint64_t v)
{
    return fd->order == FEED_SMALLER_FIRST ? field_top(fd->bits) - v : v;
}

int feed_layout_init(feed_layout *l, const feed_field *fields, size_t n)
{
    unsigned total;
    if (!l || !fields || n < 1 || n > FEED_LAYOUT_MAX_FIELDS)
        return FEED_EINVAL;
    total = fields_bits(fields, n);
    if (total == 0 || total > FEED_SCORE_BITS)
        return FEED_EINVAL;
    memset(l, 0, sizeof *l);
    memcpy(l->fields, fields, n * sizeof *fields);
    l->nfields = n;
    l->total_bits = total;
    return FEED_OK;
}

/* Horner's form of sum(stored_i << shift_i): shift in each field below the
 * ones already packed. The total stays below 2^53 at every step, and every
 * value is checked before *score is written, so a refusal leaves it as it was. */
int feed_score_pack(const feed_layout *l, const uint64_t *values,
                    int64_t *score)
{
    uint64_t packed = 0;
    size_t i;
    if (!l || !values || !score || !layout_ok(l))
        return FEED_EINVAL;
    for (i = 0; i < l->nfields; i++) {
        const feed_field *fd = &l->fields[i];
        if (values[i] > field_top(fd->bits))
            return FEED_ERANGE;
        packed = (packed << fd->bits) | stored(fd, values[i]);
    }
    *score = (int64_t)packed;
    return FEED_OK;
}

/* Peel the fields off from the least significant (the last) up. values is
 * written only once the score is known to be valid. */
int feed_score_unpack(const feed_layout *l, int64_t score, uint64_t *values)
{
    uint64_t rest;
    size_t i;
    if (!l || !values || !layout_ok(l))
        return FEED_EINVAL;
    if (score < 0 || (uint64_t)score > field_top(l->total_bits))
        return FEED_ERANGE;
    rest = (uint64_t)score;
    for (i = l->nfields; i-- > 0;) {
        const feed_field *fd = &l->fields[i];
        values[i] = stored(fd, rest & field_top(fd->bits));
        rest >>= fd->bits;
    }
    return FEED_OK;
}

/* The score is a non-decreasing function of the id: a larger id never gets a
 * smaller score, and equal scores fall back to the id. See the header. */
int feed_snowflake_score(int64_t snowflake_id, int timestamp_shift,
                         int64_t epoch_ms, int64_t *score)
{
    int64_t ms;
    if (!score || snowflake_id < 0 || timestamp_shift < 0 ||
        timestamp_shift > 63 || epoch_ms < 0 || epoch_ms > FEED_SCORE_MAX)
        return FEED_EINVAL;
    ms = snowflake_id >> timestamp_shift;   /* id >= 0: no sign to shift in */
    if (ms > FEED_SCORE_MAX - epoch_ms)     /* ms + epoch_ms > MAX, no overflow */
        return FEED_ERANGE;
    *score = ms + epoch_ms;
    return FEED_OK;
}
