/* codec.c -- integers, members and scores as bytes, both ways, strictly.
 *
 * Everything that crosses to Redis travels as text. A Redis score is a
 * double, exact only for integers up to 2^53, so scores are range-checked on
 * the way in and parsed back from the reply's string, checked again, never
 * passed through a lossy conversion. Ids travel as members, exact to
 * INT64_MAX. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int feed__score_ok(int64_t score)
{
    return score >= -FEED_SCORE_MAX && score <= FEED_SCORE_MAX;
}

/* Decimal text of v; buf needs 21 bytes. Returns the length. */
size_t feed__i64_to_str(int64_t v, char *buf)
{
    char tmp[20];
    size_t n = 0, len = 0;
    /* Work on the magnitude as unsigned: -INT64_MIN does not fit int64. */
    uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;

    do {
        tmp[n++] = (char)('0' + mag % 10);
        mag /= 10;
    } while (mag);
    if (v < 0)
        buf[len++] = '-';
    while (n)
        buf[len++] = tmp[--n];
    buf[len] = '\0';
    return len;
}

/* The id as FEED_MEMBER_LEN zero-padded digits: fixed width makes byte order
 * equal numeric order, which is how Redis orders members of equal score. */
size_t feed__member_encode(int64_t id, char buf[FEED_MEMBER_MAX])
{
    uint64_t v = (uint64_t)id;   /* callers reject id < 0 */

    for (int i = FEED_MEMBER_LEN - 1; i >= 0; i--) {
        buf[i] = (char)('0' + v % 10);
        v /= 10;
    }
    buf[FEED_MEMBER_LEN] = '\0';
    return FEED_MEMBER_LEN;
}

int feed__member_decode(const char *s, size_t len, int64_t *id)
{
    uint64_t v = 0;

    if (len != FEED_MEMBER_LEN)
        return FEED_EINVAL;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return FEED_EINVAL;
        v = v * 10 + (uint64_t)(s[i] - '0');   /* 19 digits fit uint64 */
    }
    if (v > (uint64_t)INT64_MAX)
        return FEED_EINVAL;
    *id = (int64_t)v;
    return FEED_OK;
}

/* A decimal int64: optional '-', digits, nothing else, no overflow. */
int feed__parse_i64(const char *s, size_t len, int64_t *out)
{
    size_t i = 0;
    int neg = 0;
    uint64_t v = 0, limit;

    if (len > 0 && s[0] == '-') {
        neg = 1;
        i = 1;
    }
    if (i == len)
        return FEED_EINVAL;
    limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < len; i++) {
        unsigned d;
        if (s[i] < '0' || s[i] > '9')
            return FEED_EINVAL;
        d = (unsigned)(s[i] - '0');
        if (v > (limit - d) / 10)
            return FEED_ERANGE;
        v = v * 10 + d;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return FEED_OK;
}

/* A score as Redis printed it. Redis 7.0 prints integral doubles below 1e17
 * as plain digits ("%.17g"); later versions may choose other spellings of
 * the same double ("1e+15"). Plain digits are parsed exactly; any other
 * spelling goes through strtod, whose result is then accepted only if it is
 * a whole number inside the score range, where doubles are exact. */
int feed__parse_score(const char *s, size_t len, int64_t *out)
{
    char buf[64];
    char *end;
    double d;
    int64_t v;
    int rc = feed__parse_i64(s, len, &v);

    if (rc == FEED_OK) {
        if (!feed__score_ok(v))
            return FEED_ERANGE;
        *out = v;
        return FEED_OK;
    }
    if (len == 0 || len >= sizeof buf)
        return FEED_EINVAL;
    memcpy(buf, s, len);
    buf[len] = '\0';
    errno = 0;
    d = strtod(buf, &end);
    if (end != buf + len || errno != 0 || !isfinite(d))
        return FEED_EINVAL;
    if (d != floor(d) || d < -(double)FEED_SCORE_MAX || d > (double)FEED_SCORE_MAX)
        return FEED_ERANGE;
    *out = (int64_t)d;
    return FEED_OK;
}

/* Is item strictly after the cursor (score, id) in (score DESC, id DESC)? */
int feed__item_after(feed_item item, int64_t score, int64_t id)
{
    return item.score < score || (item.score == score && item.id < id);
}
