/* t_range.c -- exactness at the edges: scores at +/-(2^53-1) and ids near
 * INT64_MAX survive the round trip through Redis bit for bit; anything out of
 * range is refused, never masked; the reply parsers are strict. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "tap.h"
#include "testutil.h"

static PGconn *pg;
static redisContext *r;

/* How many ZCOUNTs Redis has run, scripts' included: page.lua's slow seek
 * counts, its fast one does not. */
static long long zcount_calls(void)
{
    redisReply *rep = tu_redis_cmd(r, "INFO commandstats");
    const char *at = strstr(rep->str, "cmdstat_zcount:calls=");
    long long n = at ? atoll(at + strlen("cmdstat_zcount:calls=")) : 0;

    freeReplyObject(rep);
    return n;
}

static void extremes_round_trip(void)
{
    const int64_t scores[] = { FEED_SCORE_MAX, FEED_SCORE_MAX - 1, 0, -FEED_SCORE_MAX + 1,
                               -FEED_SCORE_MAX, FEED_SCORE_MAX };
    const int64_t ids[] = { INT64_MAX, INT64_MAX - 1, 9007199254740993LL /* 2^53 + 1 */, 0, 1,
                            INT64_MAX - 2 };
    feed *f = tu_open(NULL);
    feed_result res;
    tu_walk_info info;
    redisReply *rep;
    long long zc;

    for (int i = 0; i < 6; i++)
        tu_insert(pg, 1, scores[i], ids[i]);
    ok(tu_walk_equals_sql(f, pg, 1, 2, &info), "extreme scores and ids: cold walk equals SQL");
    zc = zcount_calls();
    ok(tu_walk_equals_sql(f, pg, 1, 2, &info), "warm walk equals SQL");
    is_int(info.sources[FEED_SOURCE_CACHE], (long long)info.pages, "  every page from the cache");
    /* Every cursor of that walk is cached at its score, from 2^53-1 down to
     * -(2^53-1): page.lua compares the score as text, so Redis must spell
     * each one as the library does, or the page takes the slow seek. */
    is_int(zcount_calls() - zc, 0, "  every page after a cursor by the fast seek");

    is_int(feed_page(f, 1, FEED_FIRST, 0, 10, &res), FEED_OK, "one page of all six");
    ok(res.count == 6 && res.items[0].score == FEED_SCORE_MAX && res.items[0].id == INT64_MAX &&
       res.items[1].score == FEED_SCORE_MAX && res.items[1].id == INT64_MAX - 2 &&
       res.items[2].score == FEED_SCORE_MAX - 1 && res.items[2].id == INT64_MAX - 1 &&
       res.items[3].score == 0 && res.items[3].id == 9007199254740993LL &&
       res.items[5].score == -FEED_SCORE_MAX && res.items[5].id == 1,
       "  +/-(2^53-1) and INT64_MAX come back bit for bit");
    feed_result_free(&res);

    /* The cursor at the extremes. */
    is_int(feed_page(f, 1, FEED_SCORE_MAX, INT64_MAX, 10, &res), FEED_OK,
           "cursor (2^53-1, INT64_MAX)");
    ok(res.count == 5 && res.items[0].id == INT64_MAX - 2, "  continues after it");
    feed_result_free(&res);
    is_int(feed_page(f, 1, -FEED_SCORE_MAX, 1, 10, &res), FEED_OK, "cursor at the very last item");
    ok(res.count == 0 && !res.has_more, "  empty, nothing more");
    feed_result_free(&res);

    /* What Redis holds is the exact decimal. */
    {
        char m[FEED_MEMBER_MAX];
        size_t mlen = tu_member(INT64_MAX, m);
        rep = tu_redis_cmd(r, "ZSCORE %s %b", tu_key(1, ""), m, mlen);
    }
    is_str(rep->str, "9007199254740991", "Redis holds 2^53-1 exactly for member INT64_MAX");
    freeReplyObject(rep);

    is_int(feed_on_insert(f, 1, FEED_SCORE_MAX, 5), FEED_OK, "insert hook at 2^53-1");
    is_int(feed_on_insert(f, 1, FEED_SCORE_MAX + 1, 5), FEED_ERANGE, "2^53 refused (ERANGE)");
    ok(strstr(feed_errmsg(f), "outside") != NULL, "  with a message: %s", feed_errmsg(f));
    is_int(feed_on_insert(f, 1, -FEED_SCORE_MAX - 1, 5), FEED_ERANGE, "-(2^53) refused");
    is_int(feed_on_insert(f, 1, INT64_MIN, 5), FEED_ERANGE, "INT64_MIN refused");
    is_int(feed_fanout(f, (int64_t[]){ 1 }, 1, FEED_SCORE_MAX + 1, 5), FEED_ERANGE,
           "fanout with 2^53 refused");
    is_int(feed_page(f, 1, FEED_SCORE_MAX + 1, 0, 10, &res), FEED_ERANGE,
           "a cursor score of 2^53 refused");
    ok(res.items == NULL && res.count == 0, "  and the result is zeroed");
    is_int(feed_page(f, 1, INT64_MIN, 0, 10, &res), FEED_ERANGE, "a cursor score of INT64_MIN");
    feed_close(f);
}

/* A row SQL holds but Redis could not: a clear error, not a rounded page. */
static void out_of_range_row_in_sql(void)
{
    feed *f = tu_open(NULL);
    feed_result res;

    tu_insert(pg, 2, 10, 1);
    tu_insert(pg, 2, 9007199254740992LL, 2);   /* 2^53 */
    is_int(feed_page(f, 2, FEED_FIRST, 0, 10, &res), FEED_ERANGE,
           "a row with score 2^53 in SQL: FEED_ERANGE");
    ok(strstr(feed_errmsg(f), "owner 2") && strstr(feed_errmsg(f), "id 2"),
       "  the message names the owner and the id: %s", feed_errmsg(f));
    is_int(tu_redis_int(r, "EXISTS %s", tu_key(2, ":lease")), 0,
           "  the failed rebuild released its lease");
    is_int(feed_reload(f, 2), FEED_ERANGE, "  feed_reload refuses it too");
    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = 2 AND id = 2");
    is_int(feed_page(f, 2, FEED_FIRST, 0, 10, &res), FEED_OK, "  fixed in SQL: pages work again");
    feed_result_free(&res);
    tu_insert(pg, 2, 10, 1);
    tu_sql(pg, "UPDATE feed_entry SET id = -5 WHERE uid = 2 AND id = 1");
    feed_invalidate(f, 2);
    is_int(feed_page(f, 2, FEED_FIRST, 0, 10, &res), FEED_ERANGE, "a negative id in SQL: refused");
    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = 2");
    feed_close(f);
}

/* The member of id is want (wlen bytes), and decodes back to id. */
static void member_is(int64_t id, const char *want, size_t wlen, const char *what)
{
    char m[FEED_MEMBER_MAX];
    size_t n = feed__member_encode(id, m);
    int64_t v = -1;

    ok(n == wlen && memcmp(m, want, n) == 0 && m[n] == '\0' &&
       feed__member_decode(m, n, &v) == FEED_OK && v == id, "member of %s", what);
}

/* Byte order of members, as Redis orders equal scores. */
static int member_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);

    return c != 0 ? c : (alen > blen) - (alen < blen);
}

/* Strings that are no member: none may decode. */
static const struct { const char *s; size_t len; const char *why; } refused[] = {
    { "0000000000000000042", 19, "the old format (19 zero-padded digits)" },
    { "9999999999999999999", 19, "19 nines (> INT64_MAX)" },
    { "-202", 4, "a leading zero" },
    { "-300", 4, "a length that lies" },
    { "-942", 4, "a length above 8" },
    { "-00", 3, "length 0" },
    { "-2-4", 4, "a non-digit" },
    { ".\0\0\0\0\0\0\0\x2a", 9, "an 8-byte form of a short id" },
    { ".\x0d\xe0\xb6\xb3\xa7\x64\0\0", 9, "an 8-byte form of 10^18" },
    { ".\0\0\0\0\x05\xf5\xe1", 8, "7 bytes" },
    { "42", 2, "plain digits" },
    { "", 0, "empty" },
    { "end", 3, "the end marker" },
};

static void members(void)
{
    static const int64_t edges[] = {
        0, 1, 9, 10, 99, 100, 127, 128, 99999, 100000, 999999, 1000000,
        99999999, 100000000, 4294967295LL, 999999999999999999LL,
        1000000000000000000LL, INT64_MAX - 1, INT64_MAX
    };
    uint64_t seed = 13;
    int64_t v = 0;
    int bad = 0;

    member_is(0, "-10", 3, "0: '-', one digit, the digit");
    member_is(42, "-242", 4, "42");
    member_is(123456, "-6123456", 8, "123456: a 24-bit integer in a listpack, like 123456");
    member_is(99999999, "-899999999", 10, "99999999, the last id of the short form");
    member_is(100000000, ".\0\0\0\0\5\365\341\0", 9, "10^8: '.' and 8 bytes, big-endian");
    member_is(999999999999999999LL, ".\r\340\266\263\247c\377\377", 9, "10^18 - 1");
    member_is(1000000000000000000LL, "1000000000000000000", 19, "10^18: its 19 digits");
    member_is(INT64_MAX, "9223372036854775807", 19, "INT64_MAX");

    /* Byte order is numeric order: the edges pairwise, then random ids of
     * every magnitude against their neighbours. */
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++)
        for (size_t j = 0; j < sizeof edges / sizeof *edges; j++) {
            char a[FEED_MEMBER_MAX], b[FEED_MEMBER_MAX];
            size_t an = feed__member_encode(edges[i], a), bn = feed__member_encode(edges[j], b);
            int c = member_cmp(a, an, b, bn);
            if ((c > 0) - (c < 0) != (i > j) - (i < j))
                bad++;
        }
    for (int i = 0; i < 100000; i++) {
        int64_t x = (int64_t)(tu_rand(&seed) >> (1 + tu_rand(&seed) % 63));
        int64_t y = x - (int64_t)(tu_rand(&seed) % 3);   /* a neighbour, or x */
        char a[FEED_MEMBER_MAX], b[FEED_MEMBER_MAX];
        size_t an, bn;
        int c;
        if (y < 0)
            y = 0;
        an = feed__member_encode(x, a);
        bn = feed__member_encode(y, b);
        c = member_cmp(a, an, b, bn);
        if ((c > 0) - (c < 0) != (x > y) - (x < y) ||
            feed__member_decode(a, an, &v) != FEED_OK || v != x)
            bad++;
    }
    is_int(bad, 0, "member byte order is id order, and every member decodes back");

    /* Only the encoder's own strings decode: one id, one member. */
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        is_int(feed__member_decode(refused[i].s, refused[i].len, &v), FEED_EINVAL,
               "%s refused", refused[i].why);
}

static void parsers(void)
{
    int64_t v = 0;
    char num[21];

    is_int(feed__parse_score("9007199254740991", 16, &v), FEED_OK, "parse 2^53-1");
    is_int(v, FEED_SCORE_MAX, "  exactly");
    is_int(feed__parse_score("-9007199254740991", 17, &v), FEED_OK, "parse -(2^53-1)");
    is_int(feed__parse_score("9007199254740992", 16, &v), FEED_ERANGE, "2^53 is out of range");
    is_int(feed__parse_score("1e+15", 5, &v), FEED_OK, "another spelling of a whole number");
    is_int(v, 1000000000000000LL, "  read exactly");
    is_int(feed__parse_score("1.5", 3, &v), FEED_ERANGE, "a fraction is refused");
    is_int(feed__parse_score("9.1e15", 6, &v), FEED_ERANGE, "a spelling beyond 2^53 is refused");
    is_int(feed__parse_score("inf", 3, &v), FEED_EINVAL, "inf is refused");
    is_int(feed__parse_score("-inf", 4, &v), FEED_EINVAL, "-inf is refused");
    is_int(feed__parse_score("nan", 3, &v), FEED_EINVAL, "nan is refused");
    is_int(feed__parse_score("", 0, &v), FEED_EINVAL, "empty is refused");
    is_int(feed__parse_score("12 ", 3, &v), FEED_EINVAL, "trailing space is refused");
    is_int(feed__parse_score("12\0003", 4, &v), FEED_EINVAL, "an embedded NUL is refused");
    is_int(feed__parse_i64("9223372036854775807", 19, &v), FEED_OK, "INT64_MAX parses");
    is_int(feed__parse_i64("9223372036854775808", 19, &v), FEED_ERANGE, "INT64_MAX+1 overflows");
    is_int(feed__parse_i64("-9223372036854775808", 20, &v), FEED_OK, "INT64_MIN parses");
    is_int(v, INT64_MIN, "  exactly");
    is_int(feed__parse_i64("-", 1, &v), FEED_EINVAL, "a lone minus is refused");

    members();
    feed__i64_to_str(INT64_MIN, num);
    is_str(num, "-9223372036854775808", "INT64_MIN as text");
}

int main(void)
{
    pg = tu_begin(&r);
    extremes_round_trip();
    out_of_range_row_in_sql();
    parsers();
    PQfinish(pg);
    redisFree(r);
    return tap_done();
}
