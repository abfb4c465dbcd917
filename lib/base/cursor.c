/* cursor.c -- opaque, URL-safe cursor tokens for HTTP APIs.
 *
 * A token is 18 bytes in base64url (RFC 4648 section 5, no padding: 18 bytes
 * are exactly 24 characters): a version byte, the score and the id as 8-byte
 * big-endian two's complement, and a CRC-8 over the rest. The check turns
 * a truncated, edited or mistyped token into FEED_EINVAL rather than into a
 * page from somewhere else. It is not a signature: a client can still
 * forge a token, and a forged cursor only ever selects a page of the feed the
 * server already chose by uid.
 *
 * A ranked token (feed_cursor_encode_ranked) also carries a rank hint in the
 * same 24 characters; a forged rank costs a round trip, never a wrong page
 * (lib/core/page.c proves every page it reads at a rank).
 */
#include <string.h>

#include "base.h"

#define TOKEN_VERSION  1
#define RANKED_VERSION 2       /* the first 4 bits of a ranked token (below) */
#define TOKEN_BYTES    18

static const char b64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static int b64_value(char c)
{
    const char *p = c ? strchr(b64, c) : NULL;

    return p ? (int)(p - b64) : -1;
}

/* CRC-8 (polynomial x^8 + x^2 + x + 1) over the first 17 bytes. A CRC of
 * degree 8 detects every burst of up to 8 flipped bits, and one edited
 * base64 character flips at most 6 adjacent bits: so no single-character
 * edit of a token decodes to another cursor. */
static unsigned char check_byte(const unsigned char *raw)
{
    unsigned crc = 0;

    for (int i = 0; i < TOKEN_BYTES - 1; i++) {
        crc ^= raw[i];
        for (int bit = 0; bit < 8; bit++)
            crc = (crc & 0x80) ? ((crc << 1) ^ 0x07) & 0xff : (crc << 1) & 0xff;
    }
    return (unsigned char)crc;
}

/* Write the low n bits of v at bit *at of raw (zeroed), most significant
 * first. */
static void put_bits(unsigned char *raw, int *at, int n, uint64_t v)
{
    for (int b = n - 1; b >= 0; b--, (*at)++)
        if (v >> b & 1)
            raw[*at / 8] |= (unsigned char)(0x80 >> (*at % 8));
}

static uint64_t get_bits(const unsigned char *raw, int *at, int n)
{
    uint64_t v = 0;

    for (int b = 0; b < n; b++, (*at)++)
        v = v << 1 | (uint64_t)(raw[*at / 8] >> (7 - *at % 8) & 1);
    return v;
}

/* The 18 bytes as a token: check byte set, FEED_CURSOR_LEN characters and
 * a NUL into buf. */
static void put_token(unsigned char *raw, char *buf)
{
    raw[17] = check_byte(raw);
    for (int i = 0, o = 0; i < TOKEN_BYTES; i += 3, o += 4) {
        uint32_t v = (uint32_t)raw[i] << 16 | (uint32_t)raw[i + 1] << 8 | raw[i + 2];
        buf[o] = b64[v >> 18];
        buf[o + 1] = b64[(v >> 12) & 63];
        buf[o + 2] = b64[(v >> 6) & 63];
        buf[o + 3] = b64[v & 63];
    }
    buf[FEED_CURSOR_LEN] = '\0';
}

/* A refused token: FEED_EINVAL, and why in the thread's message (a server
 * logs why it turned a client's token down). */
static int refused(const char *fn, const char *why)
{
    return feed__msg(feed__thread_msg(), FEED_EINVAL, "%s: %s", fn, why);
}

/* A token's 18 bytes, its length, alphabet and check byte verified. */
static int get_token(const char *fn, const char *token, unsigned char *raw)
{
    size_t len = token ? strnlen(token, FEED_CURSOR_LEN + 1) : 0;

    feed__thread_msg()[0] = '\0';
    if (!token)
        return refused(fn, "token is NULL");
    if (len != FEED_CURSOR_LEN)
        return refused(fn, len > FEED_CURSOR_LEN ? "token too long: a cursor token has 24"
                           " characters" : "token too short: a cursor token has 24 characters");
    for (int c = 0, o = 0; c < FEED_CURSOR_LEN; c += 4, o += 3) {
        int v[4];
        uint32_t w;
        for (int k = 0; k < 4; k++)
            if ((v[k] = b64_value(token[c + k])) < 0)
                return refused(fn, "not a cursor token: a character outside A-Z a-z 0-9 - _");
        w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        raw[o] = (unsigned char)(w >> 16);
        raw[o + 1] = (unsigned char)(w >> 8);
        raw[o + 2] = (unsigned char)w;
    }
    if (raw[17] != check_byte(raw))
        return refused(fn, "the token's check byte does not match: it was changed, cut or"
                           " mistyped");
    return FEED_OK;
}

int feed_cursor_encode(int64_t score, int64_t id, char *buf, size_t buflen)
{
    unsigned char raw[TOKEN_BYTES] = { 0 };
    int at = 0;

    if (!buf || buflen < FEED_CURSOR_SIZE || id < 0)
        return FEED_EINVAL;
    if (!feed__score_ok(score))
        return FEED_ERANGE;
    put_bits(raw, &at, 8, TOKEN_VERSION);
    put_bits(raw, &at, 64, (uint64_t)score);
    put_bits(raw, &at, 64, (uint64_t)id);
    put_token(raw, buf);
    return FEED_OK;
}

/* The plain token's fields, its bytes checked: fn names the call. */
static int decode_plain(const char *fn, const unsigned char *raw, int64_t *score, int64_t *id)
{
    int64_t s, i;
    int at = 8;

    s = (int64_t)get_bits(raw, &at, 64);
    i = (int64_t)get_bits(raw, &at, 64);
    if (!feed__score_ok(s) || i < 0)
        return refused(fn, "the token's score or id is out of range: it was not made by"
                           " feed_cursor_encode");
    *score = s;
    *id = i;
    return FEED_OK;
}

int feed_cursor_decode(const char *token, int64_t *score, int64_t *id)
{
    static const char fn[] = "feed_cursor_decode";
    unsigned char raw[TOKEN_BYTES];
    int rc;

    if ((rc = get_token(fn, token, raw)) != FEED_OK)
        return rc;
    if (!score || !id)
        return refused(fn, "score or id is NULL");
    if (raw[0] >> 4 == RANKED_VERSION)
        return refused(fn, "a ranked token (feed_cursor_encode_ranked): read it with"
                           " feed_cursor_decode_ranked");
    if (raw[0] != TOKEN_VERSION)
        return refused(fn, "a token of a version this library does not know");
    return decode_plain(fn, raw, score, id);
}

/* ---- ranked tokens -----------------------------------------------------
 *
 * The same 18 bytes, packed as bits, most significant first: 4 bits of
 * version (RANKED_VERSION; a plain token's first byte is 1, so its first 4
 * bits are 0), the score plus FEED_SCORE_MAX (54 bits: scores are within
 * +/-(2^53-1)), the id (63 bits: never negative), the rank (15 bits), and
 * the check byte. Every field is exact, and every bit pattern that decodes
 * is the one encoding of its cursor and rank. */

#define SCORE_BITS     54
#define ID_BITS        63
#define RANK_BITS      15

int feed_cursor_encode_ranked(int64_t score, int64_t id, int64_t rank, char *buf,
                              size_t buflen)
{
    unsigned char raw[TOKEN_BYTES] = { 0 };
    int at = 0;

    if (rank < -1 || !buf || buflen < FEED_CURSOR_SIZE || id < 0)
        return FEED_EINVAL;
    if (rank == -1 || rank > FEED_CURSOR_RANK_MAX)
        return feed_cursor_encode(score, id, buf, buflen);
    if (!feed__score_ok(score))
        return FEED_ERANGE;
    put_bits(raw, &at, 4, RANKED_VERSION);
    put_bits(raw, &at, SCORE_BITS, (uint64_t)(score + FEED_SCORE_MAX));
    put_bits(raw, &at, ID_BITS, (uint64_t)id);
    put_bits(raw, &at, RANK_BITS, (uint64_t)rank);
    put_token(raw, buf);
    return FEED_OK;
}

int feed_cursor_decode_ranked(const char *token, int64_t *score, int64_t *id, int64_t *rank)
{
    static const char fn[] = "feed_cursor_decode_ranked";
    unsigned char raw[TOKEN_BYTES];
    uint64_t s;
    int64_t i, r;
    int at = 4, rc;

    if ((rc = get_token(fn, token, raw)) != FEED_OK)
        return rc;
    if (!score || !id || !rank)
        return refused(fn, "score, id or rank is NULL");
    if (raw[0] == TOKEN_VERSION) {
        if ((rc = decode_plain(fn, raw, score, id)) != FEED_OK)
            return rc;
        *rank = -1;
        return FEED_OK;
    }
    if (raw[0] >> 4 != RANKED_VERSION)
        return refused(fn, "a token of a version this library does not know");
    s = get_bits(raw, &at, SCORE_BITS);
    i = (int64_t)get_bits(raw, &at, ID_BITS);
    r = (int64_t)get_bits(raw, &at, RANK_BITS);
    if (s > 2 * (uint64_t)FEED_SCORE_MAX)
        return refused(fn, "the token's score is out of range: it was not made by"
                           " feed_cursor_encode_ranked");
    *score = (int64_t)s - FEED_SCORE_MAX;
    *id = i;
    *rank = r;
    return FEED_OK;
}
