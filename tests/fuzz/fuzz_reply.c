/* fuzz_reply.c -- Redis replies as bytes: the protocol reader (hiredis's,
 * the one the library uses) builds whatever replies the bytes hold, and
 * every string and integer in them goes through the strict parsers of
 * lib/base/codec.c that turn reply strings into ids and scores:
 *
 *   feed__member_decode  accepts exactly the strings feed__member_encode
 *                        makes: what it accepts encodes back to the same
 *                        bytes, so two members never name one id; and
 *                        members sort by their bytes as their ids sort by
 *                        value (checked on every accepted pair, and on ids
 *                        drawn from the input's bytes)
 *   feed__parse_i64      accepts exactly the decimal int64s; re-printing
 *                        what it accepts and parsing again gives the same
 *   feed__parse_score    accepts only whole numbers within +/-(2^53-1),
 *                        however Redis spells them ("1e+15" included)
 *
 * The first byte sets the reader's buffer handling: the bytes arrive in
 * chunks of 1..8, as a socket may deliver them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "internal.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Byte order of two members, as Redis orders equal scores: memcmp, then
 * the shorter first. */
static int member_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);

    return c != 0 ? c : (alen > blen) - (alen < blen);
}

static int sign(int64_t a, int64_t b)
{
    return (a > b) - (a < b);
}

static int cmp_sign(int c)
{
    return (c > 0) - (c < 0);
}

/* An id from up to 8 bytes of s, spread over every member form: the first
 * byte picks a magnitude, so small ids come up as often as huge ones. */
static int64_t id_from(const char *s, size_t len)
{
    uint64_t v = 0;

    for (size_t i = 0; i < len && i < 8; i++)
        v = v << 8 | (unsigned char)s[i];
    v &= (uint64_t)INT64_MAX;
    return len > 0 ? (int64_t)(v >> ((unsigned char)s[0] % 63)) : 0;
}

static void check_member(const char *s, size_t len)
{
    static char prev[FEED_MEMBER_MAX];
    static size_t prev_len;
    static int64_t prev_id = -1;
    char member[FEED_MEMBER_MAX], other[FEED_MEMBER_MAX];
    int64_t v, w, u = id_from(s, len), x = id_from(s + len / 2, len - len / 2);
    size_t n, m;

    if (feed__member_decode(s, len, &v) == FEED_OK) {
        FUZZ_CHECK(v >= 0 && len < FEED_MEMBER_MAX);
        n = feed__member_encode(v, member);
        FUZZ_CHECK(n == len && memcmp(member, s, len) == 0);
        if (prev_id >= 0)
            FUZZ_CHECK(cmp_sign(member_cmp(prev, prev_len, s, len)) == sign(prev_id, v));
        memcpy(prev, s, len);
        prev_len = len;
        prev_id = v;
    }
    /* Ids drawn from the bytes: each round-trips, and two compare as
     * their members do. */
    n = feed__member_encode(u, member);
    m = feed__member_encode(x, other);
    FUZZ_CHECK(n < FEED_MEMBER_MAX && feed__member_decode(member, n, &w) == FEED_OK && w == u);
    FUZZ_CHECK(m < FEED_MEMBER_MAX && feed__member_decode(other, m, &w) == FEED_OK && w == x);
    FUZZ_CHECK(cmp_sign(member_cmp(member, n, other, m)) == sign(u, x));
    FUZZ_CHECK(feed__member_decode(FEED_END_MEMBER, strlen(FEED_END_MEMBER), &w) != FEED_OK);
}

static void check_string(const char *s, size_t len)
{
    int64_t v, w;
    char text[24];
    int rc;

    check_member(s, len);
    rc = feed__parse_i64(s, len, &v);
    FUZZ_CHECK(rc == FEED_OK || rc == FEED_EINVAL || rc == FEED_ERANGE);
    if (rc == FEED_OK) {
        size_t n = feed__i64_to_str(v, text);
        FUZZ_CHECK(n < sizeof text && feed__parse_i64(text, n, &w) == FEED_OK && w == v);
        /* Only an optional '-' and digits were accepted. */
        for (size_t i = 0; i < len; i++)
            FUZZ_CHECK((s[i] >= '0' && s[i] <= '9') || (i == 0 && s[i] == '-'));
    }
    rc = feed__parse_score(s, len, &v);
    FUZZ_CHECK(rc == FEED_OK || rc == FEED_EINVAL || rc == FEED_ERANGE);
    if (rc == FEED_OK)
        FUZZ_CHECK(feed__score_ok(v));
}

static void walk(const redisReply *r, int depth)
{
    FUZZ_CHECK(depth < 16);
    switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
        FUZZ_CHECK(r->str != NULL && r->str[r->len] == '\0');
        check_string(r->str, r->len);
        break;
    case REDIS_REPLY_ARRAY:
        for (size_t i = 0; i < r->elements; i++)
            walk(r->element[i], depth + 1);
        break;
    default:
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    redisReader *rd;
    size_t chunk, at = 1;
    int failed = 0;

    if (size < 1 || !fuzz_counts_sane(data + 1, size - 1))
        return 0;
    /* Also the raw bytes, as one string, whatever the protocol says. */
    check_string((const char *)data + 1, size - 1);
    chunk = 1 + data[0] % 8;
    rd = redisReaderCreate();
    if (!rd)
        return 0;
    while (at < size && !failed) {
        size_t n = size - at < chunk ? size - at : chunk;
        void *reply = NULL;
        if (redisReaderFeed(rd, (const char *)data + at, n) != REDIS_OK)
            break;
        at += n;
        for (;;) {
            if (redisReaderGetReply(rd, &reply) != REDIS_OK) {
                failed = 1;      /* a protocol error: the library drops the connection */
                break;
            }
            if (!reply)
                break;
            walk(reply, 0);
            freeReplyObject(reply);
        }
    }
    redisReaderFree(rd);
    return 0;
}
