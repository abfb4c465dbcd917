/* fuzz_reply.c -- Redis replies as bytes: the protocol reader (hiredis's,
 * the one the library uses) builds whatever replies the bytes hold, and
 * every string and integer in them goes through the strict parsers of
 * lib/codec.c that turn reply strings into ids and scores:
 *
 *   feed__member_decode  accepts exactly 19 digits <= INT64_MAX; what it
 *                        accepts encodes back to the same bytes
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

static void check_string(const char *s, size_t len)
{
    int64_t v, w;
    char member[FEED_MEMBER_MAX], text[24];
    int rc;

    if (feed__member_decode(s, len, &v) == FEED_OK) {
        FUZZ_CHECK(v >= 0 && len == FEED_MEMBER_LEN);
        feed__member_encode(v, member);
        FUZZ_CHECK(memcmp(member, s, FEED_MEMBER_LEN) == 0);
    }
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
