/* cursor.c -- opaque, URL-safe cursor tokens for HTTP APIs.
 *
 * A token is 18 bytes in base64url (RFC 4648 section 5, no padding: 18 bytes
 * are exactly 24 characters): a version byte, the score and the id as 8-byte
 * big-endian two's complement, and a CRC-8 over the rest. The check turns
 * a truncated, edited or mistyped token into FEED_EINVAL rather than into a
 * page from somewhere else. It is not a signature: a client can still
 * forge a token, and a forged cursor only ever selects a page of the feed the
 * server already chose by uid.
 */
#include <string.h>

#include "internal.h"

#define TOKEN_VERSION 1
#define TOKEN_BYTES   18

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

static void put64(unsigned char *p, int64_t v)
{
    uint64_t u = (uint64_t)v;

    for (int i = 7; i >= 0; i--, u >>= 8)
        p[i] = (unsigned char)(u & 0xff);
}

static int64_t get64(const unsigned char *p)
{
    uint64_t u = 0;

    for (int i = 0; i < 8; i++)
        u = (u << 8) | p[i];
    return (int64_t)u;
}

int feed_cursor_encode(int64_t score, int64_t id, char *buf, size_t buflen)
{
    unsigned char raw[TOKEN_BYTES];

    if (!buf || buflen < FEED_CURSOR_SIZE || id < 0)
        return FEED_EINVAL;
    if (!feed__score_ok(score))
        return FEED_ERANGE;
    raw[0] = TOKEN_VERSION;
    put64(raw + 1, score);
    put64(raw + 9, id);
    raw[17] = check_byte(raw);
    for (int i = 0, o = 0; i < TOKEN_BYTES; i += 3, o += 4) {
        uint32_t v = (uint32_t)raw[i] << 16 | (uint32_t)raw[i + 1] << 8 | raw[i + 2];
        buf[o] = b64[v >> 18];
        buf[o + 1] = b64[(v >> 12) & 63];
        buf[o + 2] = b64[(v >> 6) & 63];
        buf[o + 3] = b64[v & 63];
    }
    buf[FEED_CURSOR_LEN] = '\0';
    return FEED_OK;
}

int feed_cursor_decode(const char *token, int64_t *score, int64_t *id)
{
    unsigned char raw[TOKEN_BYTES];
    int64_t s, i;

    if (!token || !score || !id || strnlen(token, FEED_CURSOR_LEN + 1) != FEED_CURSOR_LEN)
        return FEED_EINVAL;
    for (int c = 0, o = 0; c < FEED_CURSOR_LEN; c += 4, o += 3) {
        int v0 = b64_value(token[c]), v1 = b64_value(token[c + 1]);
        int v2 = b64_value(token[c + 2]), v3 = b64_value(token[c + 3]);
        uint32_t v;
        if (v0 < 0 || v1 < 0 || v2 < 0 || v3 < 0)
            return FEED_EINVAL;
        v = (uint32_t)v0 << 18 | (uint32_t)v1 << 12 | (uint32_t)v2 << 6 | (uint32_t)v3;
        raw[o] = (unsigned char)(v >> 16);
        raw[o + 1] = (unsigned char)(v >> 8);
        raw[o + 2] = (unsigned char)v;
    }
    if (raw[0] != TOKEN_VERSION || raw[17] != check_byte(raw))
        return FEED_EINVAL;
    s = get64(raw + 1);
    i = get64(raw + 9);
    if (!feed__score_ok(s) || i < 0)
        return FEED_EINVAL;
    *score = s;
    *id = i;
    return FEED_OK;
}
