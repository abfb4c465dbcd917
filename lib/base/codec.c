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

#include "base.h"

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

/* Members: an id as a string whose byte order is the ids' numeric order, so
 * that Redis, which orders members of equal score by memcmp (in a listpack
 * and in a skiplist alike), orders ties by id exactly as SQL does; short for
 * small ids, exact up to INT64_MAX. Three forms, each sorting below the
 * next ('-' 0x2D < '.' 0x2E < '1' 0x31):
 *
 *   id < 10^8          '-', the digit count k (1..8), the k digits:
 *                      42 -> "-242", 123456 -> "-6123456"
 *   10^8 <= id < 10^18 '.', then the id as 8 bytes, big-endian
 *   id >= 10^18        the 19 decimal digits: 1500000000000000000 -> itself
 *
 * Within a form the length is fixed by the prefix (k, 8 bytes, 19 digits),
 * so memcmp compares prefixes first, then numbers of equal width.
 *
 * Why these forms (bench/results/latest/latest.md, "Memory: members, zset
 * encodings, capacity"): a listpack stores a member that parses as an int64
 * as a compact integer (with its entry's header and back-length, a 6-digit
 * id in 5 bytes, a 19-digit one in 10). The first and last forms
 * are canonical integers, so the small ids of a serial key and the 19-digit
 * snowflake ids cost what plain decimal ids cost; only ids of 9 to 18
 * digits, which no integer form can order, take the 9-byte string. The
 * decoder accepts exactly the strings the encoder makes: two strings never
 * name one id, and the old format (19 zero-padded digits) is refused. */
size_t feed__member_encode(int64_t id, char buf[FEED_MEMBER_MAX])
{
    uint64_t v = (uint64_t)id;   /* callers reject id < 0 */
    size_t len;

    if (v < 100000000u) {
        len = feed__i64_to_str(id, buf + 2);
        buf[0] = '-';
        buf[1] = (char)('0' + len);
        len += 2;
    } else if (v < 1000000000000000000u) {
        buf[0] = '.';
        for (int i = 0; i < 8; i++)
            buf[1 + i] = (char)(unsigned char)(v >> (8 * (7 - i)));
        len = 9;
    } else {
        len = feed__i64_to_str(id, buf);
    }
    buf[len] = '\0';
    return len;
}

/* n decimal digits of s into *v; 0 when one is not a digit. n <= 19. */
static int digits(const char *s, size_t n, uint64_t *v)
{
    *v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        *v = *v * 10 + (uint64_t)(s[i] - '0');   /* 19 digits fit uint64 */
    }
    return 1;
}

int feed__member_decode(const char *s, size_t len, int64_t *id)
{
    uint64_t v = 0;

    if (len >= 3 && s[0] == '-') {               /* '-', k, k digits */
        size_t k = (size_t)(s[1] - '0');
        if (s[1] < '1' || s[1] > '8' || len != 2 + k || (k > 1 && s[2] == '0') ||
            !digits(s + 2, k, &v))
            return FEED_EINVAL;
    } else if (len == 9 && s[0] == '.') {        /* 8 bytes, big-endian */
        for (size_t i = 1; i < 9; i++)
            v = v << 8 | (unsigned char)s[i];
        if (v < 100000000u || v >= 1000000000000000000u)
            return FEED_EINVAL;
    } else if (len == 19 && s[0] != '0') {       /* 19 digits */
        if (!digits(s, 19, &v) || v > (uint64_t)INT64_MAX)
            return FEED_EINVAL;
    } else {
        return FEED_EINVAL;
    }
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
