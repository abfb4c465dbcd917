/* fuzz_cursor.c -- cursor tokens, as an HTTP client may send anything.
 *
 * Any bytes (as a C string, so also with an early NUL) go to
 * feed_cursor_decode: it must refuse or accept without reading past the
 * string, and what it accepts must be a valid cursor that encodes back to
 * the very same token (one token per cursor: no two spellings of a page).
 * The first 16 bytes are also read as a (score, id) pair: encoding, when
 * accepted, must decode back to the same pair.
 *
 * Ranked tokens (issue 15): feed_cursor_decode_ranked accepts every token
 * feed_cursor_decode does (rank -1) and ranked ones, which
 * feed_cursor_decode refuses; what it accepts encodes back to the very same
 * token through feed_cursor_encode_ranked. Bytes 16-17 are also read as a
 * rank: (score, id, rank), when encoded, decodes back to the same three. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "feedcache.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *token = malloc(size + 1), buf[64];
    int64_t score = 7, id = 7;
    int rc;

    if (!token)
        return 0;
    memcpy(token, data, size);
    token[size] = '\0';
    rc = feed_cursor_decode(token, &score, &id);
    FUZZ_CHECK(rc == FEED_OK || rc == FEED_EINVAL);
    if (rc == FEED_OK) {
        FUZZ_CHECK(score >= -FEED_SCORE_MAX && score <= FEED_SCORE_MAX && id >= 0);
        FUZZ_CHECK(feed_cursor_encode(score, id, buf, sizeof buf) == FEED_OK);
        FUZZ_CHECK(strcmp(buf, token) == 0);
    } else {
        FUZZ_CHECK(score == 7 && id == 7);       /* untouched on error */
    }
    {
        int64_t rs = 7, ri = 7, rr = 7;
        int rc2 = feed_cursor_decode_ranked(token, &rs, &ri, &rr);
        FUZZ_CHECK(rc2 == FEED_OK || rc2 == FEED_EINVAL);
        if (rc == FEED_OK)
            FUZZ_CHECK(rc2 == FEED_OK && rs == score && ri == id && rr == -1);
        if (rc2 == FEED_OK) {
            FUZZ_CHECK(rs >= -FEED_SCORE_MAX && rs <= FEED_SCORE_MAX && ri >= 0);
            FUZZ_CHECK(rr >= -1 && rr <= FEED_CURSOR_RANK_MAX);
            FUZZ_CHECK(feed_cursor_encode_ranked(rs, ri, rr, buf, sizeof buf) == FEED_OK);
            FUZZ_CHECK(strcmp(buf, token) == 0);
        } else {
            FUZZ_CHECK(rs == 7 && ri == 7 && rr == 7);
        }
    }
    free(token);

    if (size >= 16) {
        int64_t s, i, s2, i2;
        uint64_t us = 0, ui = 0;
        for (int k = 0; k < 8; k++) {
            us = us << 8 | data[k];
            ui = ui << 8 | data[8 + k];
        }
        s = (int64_t)us;
        i = (int64_t)ui;
        rc = feed_cursor_encode(s, i, buf, sizeof buf);
        if (i < 0)
            FUZZ_CHECK(rc == FEED_EINVAL);
        else if (s < -FEED_SCORE_MAX || s > FEED_SCORE_MAX)
            FUZZ_CHECK(rc == FEED_ERANGE);
        else
            FUZZ_CHECK(rc == FEED_OK);
        if (rc == FEED_OK) {
            FUZZ_CHECK(strlen(buf) == FEED_CURSOR_LEN);
            FUZZ_CHECK(strspn(buf, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                   "0123456789-_") == FEED_CURSOR_LEN);
            FUZZ_CHECK(feed_cursor_decode(buf, &s2, &i2) == FEED_OK && s2 == s && i2 == i);
        }
        if (size >= 18) {
            int64_t r = (int64_t)(data[16] << 8 | data[17]) - 1, s3, i3, r3;   /* -1..65534 */
            int rc3 = feed_cursor_encode_ranked(s, i, r, buf, sizeof buf);
            FUZZ_CHECK(rc3 == rc);
            if (rc3 == FEED_OK) {
                FUZZ_CHECK(strlen(buf) == FEED_CURSOR_LEN);
                FUZZ_CHECK(feed_cursor_decode_ranked(buf, &s3, &i3, &r3) == FEED_OK &&
                           s3 == s && i3 == i && r3 == (r > FEED_CURSOR_RANK_MAX ? -1 : r));
            }
        }
    }
    return 0;
}
