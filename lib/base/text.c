/* text.c -- messages, key names, lease tokens and the clock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base.h"

int feed__vmsg(char *buf, int code, const char *fmt, va_list ap)
{
    vsnprintf(buf, FEED_ERRMSG, fmt, ap);
    /* One line, whatever the servers said (libpq adds "LINE 1: ..."):
     * messages end up in logs. */
    for (char *p = buf; *p; p++)
        if (*p == '\n' || *p == '\r' || *p == '\t')
            *p = ' ';
    return code;
}

int feed__msg(char *buf, int code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    feed__vmsg(buf, code, fmt, ap);
    va_end(ap);
    return code;
}

char *feed__thread_msg(void)
{
    static _Thread_local char msg[FEED_ERRMSG];

    return msg;
}

void feed__msg_keep_n(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);

    memmove(dst, src, n);
    dst[n] = '\0';
}

/* FNV-1a, 64 bits, over the parts, each ended by a byte no text holds. */
static uint64_t key_hash(const char *const *what, size_t n)
{
    uint64_t h = 14695981039346656037ULL;

    for (size_t i = 0; i < n; i++) {
        for (const char *p = what[i] ? what[i] : ""; *p; p++)
            h = (h ^ (unsigned char)*p) * 1099511628211ULL;
        h = (h ^ 0xff) * 1099511628211ULL;
    }
    return h;
}

/* h in n base-32 digits (13 hold 64 bits), most significant first. */
static void key_digits(uint64_t h, int n, char *out)
{
    static const char digits[] = "0123456789abcdefghijklmnopqrstuv";

    for (int i = n - 1; i >= 0; i--, h >>= 5)
        out[i] = digits[h & 31];
    out[n] = '\0';
}

void feed__key_tag(const char *const *what, size_t n, char out[FEED_KEY_TAG_LEN + 1])
{
    key_digits(key_hash(what, n), FEED_KEY_TAG_LEN, out);
}

void feed__key_gen(const char *run_id, const char *replid, char out[FEED_KEY_GEN_LEN + 1])
{
    const char *what[] = { "gen", run_id, replid };
    uint64_t h = key_hash(what, 3);

    key_digits(h ? h : 1, FEED_KEY_GEN_LEN, out);   /* never all zeros: FEED_KEY_GEN_NONE */
}

/* feed__info_id -- the 40 hex digits of a line "<field>:<id>" of INFO text
 * into out. Returns 1, or 0 if no line of info names field with exactly 40
 * hex digits (out is then ""). A field's name is matched at a line's start,
 * so "run_id" is never read out of another field that ends with it. */
int feed__info_id(const char *info, const char *field, char out[41])
{
    size_t len = strlen(field);

    out[0] = '\0';
    for (const char *p = strstr(info, field); p; p = strstr(p + len, field)) {
        const char *v = p + len + 1;

        if ((p == info || p[-1] == '\n') && p[len] == ':' &&
            strspn(v, "0123456789abcdef") == 40 && strchr("\r\n", v[40])) {
            memcpy(out, v, 40);
            out[40] = '\0';
            return 1;
        }
    }
    return 0;
}

char *feed__key_base(const char *prefix, const char *const *what, size_t n)
{
    size_t plen = strlen(prefix);
    char *base = malloc(plen + sizeof ":" FEED_KEY_VERSION ":" + FEED_KEY_TAG_LEN + 1 +
                        FEED_KEY_GEN_LEN + 1);

    if (!base)
        return NULL;
    memcpy(base, prefix, plen);
    memcpy(base + plen, ":" FEED_KEY_VERSION ":", sizeof ":" FEED_KEY_VERSION ":");
    feed__key_tag(what, n, base + strlen(base));
    strcat(base, ":" FEED_KEY_GEN_NONE ":");
    return base;
}

size_t feed__key_gen_at(const char *base)
{
    return strlen(base) - FEED_KEY_GEN_LEN - 1;
}

size_t feed__key_cap(const char *base)
{
    return strlen(base) + sizeof "{-9223372036854775808}:lease";
}

/* Written by hand, not by snprintf: a page names its key every time, and
 * formatting cost more than the rest of the key's work. key and lease_key
 * hold feed__key_cap(base) bytes each: everything fits. */
void feed__family_keys(const char *base, int64_t owner, char *key, char *lease_key)
{
    size_t at = strlen(base);

    memcpy(key, base, at);
    key[at++] = '{';
    at += feed__i64_to_str(owner, key + at);
    key[at++] = '}';
    key[at] = '\0';
    if (lease_key) {
        memcpy(lease_key, key, at);
        memcpy(lease_key + at, ":lease", sizeof ":lease");
    }
}

/* splitmix64: a well-mixed 64-bit value from a counter. */
static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static void hex64(uint64_t v, char *out)
{
    static const char digits[] = "0123456789abcdef";

    for (int i = 15; i >= 0; i--, v >>= 4)
        out[i] = digits[v & 15];
}

/* Tokens need to be unguessable only by accident: they tell leases apart. */
void feed__lease_token(uint64_t seed, uint64_t *seq, char buf[33])
{
    uint64_t n = ++*seq;

    hex64(mix64(seed ^ n), buf);
    hex64(mix64(seed + n), buf + 16);
    buf[32] = '\0';
}

uint64_t feed__random_seed(const void *salt)
{
    uint64_t seed = 0;
    FILE *urandom = fopen("/dev/urandom", "rb");

    if (urandom) {
        if (fread(&seed, sizeof seed, 1, urandom) != 1)
            seed = 0;
        fclose(urandom);
    }
    /* Without /dev/urandom, time, pid and an address still differ between
     * handles; tokens only have to differ. */
    seed ^= (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)salt;
    return mix64(seed);
}

int64_t feed__now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- The Redis protocol ------------------------------------------------
 *
 * Commands are formatted here, not by hiredis: both drivers write them out
 * (redis_sync.c in one send(), redis_async.c as one formatted command),
 * and hiredis's own formatting (sdscatfmt per argument, an sds grown by
 * realloc) cost more than the rest of a cached page's client work. */

/* Append "$<len>\r\n" or "*<n>\r\n" to buf at *at. */
static void put_header(char *buf, size_t *at, char kind, size_t n)
{
    char digits[24];
    size_t k = 0;

    buf[(*at)++] = kind;
    do
        digits[k++] = (char)('0' + n % 10);
    while ((n /= 10) > 0);
    while (k > 0)
        buf[(*at)++] = digits[--k];
    buf[(*at)++] = '\r';
    buf[(*at)++] = '\n';
}

size_t feed__resp_size(int argc, const size_t *lens)
{
    size_t need = 24;

    for (int a = 0; a < argc; a++)
        need += 24 + lens[a] + 2;
    return need;
}

size_t feed__resp_format(char *buf, int argc, const char **argv, const size_t *lens)
{
    size_t at = 0;

    put_header(buf, &at, '*', (size_t)argc);
    for (int a = 0; a < argc; a++) {
        put_header(buf, &at, '$', lens[a]);
        memcpy(buf + at, argv[a], lens[a]);
        at += lens[a];
        buf[at++] = '\r';
        buf[at++] = '\n';
    }
    return at;
}
