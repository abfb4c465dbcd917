/* fuzz_cursor.c -- cursor tokens, as an HTTP client may send anything.
 *
 * Any bytes (as a C string, so also with an early NUL) go to
 * feed_cursor_decode: it must refuse or accept without reading past the
 * string, and what it accepts must be a valid cursor that encodes back to
 * the very same token (one token per cursor: no two spellings of a page).
 * The first 16 bytes are also read as a (score, id) pair: encoding, when
 * accepted, must decode back to the same pair. */
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
    }
    return 0;
}
