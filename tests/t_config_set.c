/* t_config_set.c -- feed_config_set and the table of fields: every field of
 * feed_config can be set by name (C name or dashed) and reads back where
 * the header puts it; integers are parsed strictly; each integer's limits
 * are the ones feed_open applies (its boundary values open a handle against
 * the test servers, the values past them are refused by both); strings are
 * stored as the caller's pointer, "" as NULL where NULL means none; what
 * feed_config_set refuses, feed_open refuses too. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "testutil.h"

/* The header's fields, written out here rather than read from the library,
 * so that the table is checked against the contract. */
enum kind { S, U, I };                /* const char *, uint32_t, int */
enum empty { KEEP, TO_NULL, REFUSE }; /* what "" from text does to a string */
static const struct want {
    const char *name;
    size_t      off;
    enum kind   kind;
    int64_t     min, max;             /* integers */
    int64_t     dflt;                 /* integers */
    const char *sdflt;                /* strings (NULL: NULL) */
    enum empty  empty;
} want[] = {
#define W(f, k, min, max, d, sd, e) { #f, offsetof(feed_config, f), k, min, max, d, sd, e }
    W(redis_host, S, 0, 0, 0, "127.0.0.1", REFUSE),
    W(redis_port, I, 1, 65535, 6379, NULL, KEEP),
    W(redis_password, S, 0, 0, 0, NULL, TO_NULL),
    W(pg_conninfo, S, 0, 0, 0, "", KEEP),
    W(key_prefix, S, 0, 0, 0, "feed", REFUSE),
    W(table, S, 0, 0, 0, "feed_entry", REFUSE),
    W(owner_column, S, 0, 0, 0, "uid", REFUSE),
    W(score_column, S, 0, 0, 0, "score", REFUSE),
    W(id_column, S, 0, 0, 0, "id", REFUSE),
    W(max_len, U, 1, 10000000, 1000, NULL, KEEP),
    W(max_page, U, 1, 100000, 100, NULL, KEEP),
    W(ttl_seconds, U, 0, UINT32_MAX, 604800, NULL, KEEP),
    W(redis_timeout_ms, U, 1, UINT32_MAX, 250, NULL, KEEP),
    W(lease_ms, U, 1, UINT32_MAX, 3000, NULL, KEEP),
    W(redis_user, S, 0, 0, 0, NULL, TO_NULL),
    W(lease_wait_ms, U, 0, UINT32_MAX, 3000, NULL, KEEP),
    W(retry_ms, U, 0, UINT32_MAX, 1000, NULL, KEEP),
    W(redis_cluster, S, 0, 0, 0, NULL, TO_NULL),
    W(redis_sentinels, S, 0, 0, 0, NULL, TO_NULL),
    W(redis_master_name, S, 0, 0, 0, "mymaster", REFUSE),
    W(pg_replica_conninfo, S, 0, 0, 0, NULL, TO_NULL),
    W(pg_timeout_ms, U, 1, UINT32_MAX, 2000, NULL, KEEP),
    W(empty_ttl_seconds, U, 0, UINT32_MAX, 60, NULL, KEEP),
    W(pg_replica_max_lag_ms, U, 0, UINT32_MAX, 1000, NULL, KEEP),
    W(redis_wait_replicas, U, 0, UINT32_MAX, 0, NULL, KEEP),
    W(redis_wait_timeout_ms, U, 0, UINT32_MAX, 100, NULL, KEEP),
    W(redis_restart_fence, I, 0, 1, 1, NULL, KEEP),
    W(author_table, S, 0, 0, 0, NULL, TO_NULL),
    W(author_column, S, 0, 0, 0, "author", REFUSE),
    W(redis_tls, I, 0, 1, 0, NULL, KEEP),
    W(redis_tls_ca_file, S, 0, 0, 0, NULL, TO_NULL),
    W(redis_tls_ca_dir, S, 0, 0, 0, NULL, TO_NULL),
    W(redis_tls_cert_file, S, 0, 0, 0, NULL, TO_NULL),
    W(redis_tls_key_file, S, 0, 0, 0, NULL, TO_NULL),
    W(redis_tls_server_name, S, 0, 0, 0, NULL, TO_NULL),
    W(redis_tls_verify, I, 0, 1, 1, NULL, KEEP),
    W(item_author_column, S, 0, 0, 0, NULL, TO_NULL),
    W(filter_max_scan, U, 1, 1000000, 10000, NULL, KEEP),
    W(request_timeout_ms, U, 1, 3600000, 5000, NULL, KEEP),
    W(pg_budget, U, 0, 100000, 0, NULL, KEEP),
#undef W
};
#define NWANT (sizeof want / sizeof want[0])

static const char **str_of(feed_config *c, const struct want *w)
{
    return (const char **)((char *)c + w->off);
}

static int64_t int_of(const feed_config *c, const struct want *w)
{
    const char *p = (const char *)c + w->off;
    return w->kind == I ? *(const int *)p : (int64_t)*(const uint32_t *)p;
}

/* Write v into the field as a program assigning it would (no check). */
static void int_put(feed_config *c, const struct want *w, int64_t v)
{
    char *p = (char *)c + w->off;
    if (w->kind == I)
        *(int *)p = (int)v;
    else
        *(uint32_t *)p = (uint32_t)v;
}

static void dashed(const char *name, char *out)
{
    for (; *name; name++)
        *out++ = *name == '_' ? '-' : *name;
    *out = '\0';
}

/* feed_open's verdict on c: FEED_EINVAL, or FEED_OK with the handle closed
 * again (any other code is reported as it is). */
static int open_rc(const feed_config *c)
{
    feed *f = NULL;
    int rc = feed_open(&f, c);
    feed_close(f);
    return rc;
}

static void table(void)
{
    size_t n = feed_config_field_count(), named = 0, flags = 0, ranges = 0, helps = 0;

    is_int(n, NWANT, "feed_config_field_count: %zu fields, every field of feed_config", n);
    ok(feed_config_field_get(n) == NULL && feed_config_field_get((size_t)-1) == NULL,
       "  feed_config_field_get past the end: NULL");
    for (size_t i = 0; i < n && i < NWANT; i++) {
        const feed_config_field *d = feed_config_field_get(i);
        char flag[64];
        dashed(want[i].name, flag);
        named += d && strcmp(d->name, want[i].name) == 0;
        flags += d && strcmp(d->flag, flag) == 0;
        ranges += d && (want[i].kind == S
                        ? d->type == FEED_CONFIG_STRING && d->min == 0 && d->max == 0
                        : d->type == FEED_CONFIG_INTEGER && d->min == want[i].min &&
                          d->max == want[i].max);
        helps += d && d->help && *d->help && !strchr(d->help, '\n') && strlen(d->help) <= 60;
        if (d && strcmp(d->name, want[i].name) != 0)
            tap_diag("field %zu: %s, want %s", i, d->name, want[i].name);
    }
    is_int(named, NWANT, "  in declaration order, by their C names");
    is_int(flags, NWANT, "  each flag is the name with dashes");
    is_int(ranges, NWANT, "  types and integer ranges as the header documents them");
    is_int(helps, NWANT, "  each has a help of one short line");
}

static void defaults(void)
{
    feed_config c;
    size_t same = 0, texts = 0;

    memset(&c, 0xa5, sizeof c);
    feed_config_init(&c);
    for (size_t i = 0; i < NWANT; i++) {
        const struct want *w = &want[i];
        const feed_config_field *d = feed_config_field_get(i);
        char text[24];
        if (w->kind == S) {
            const char *v = *str_of(&c, w);
            same += w->sdflt ? v && strcmp(v, w->sdflt) == 0 : v == NULL;
            texts += d && (w->sdflt ? d->dflt && strcmp(d->dflt, w->sdflt) == 0 : !d->dflt);
        } else {
            snprintf(text, sizeof text, "%lld", (long long)w->dflt);
            same += int_of(&c, w) == w->dflt;
            texts += d && d->dflt && strcmp(d->dflt, text) == 0;
        }
    }
    is_int(same, NWANT, "feed_config_init sets every field to the header's default");
    is_int(texts, NWANT, "  and each field's dflt says that default as text");
}

/* Every field set by both spellings: it reads back, nothing else moves. */
static void every_field(void)
{
    static char sval[] = "127.0.0.1:7001";   /* a value every string field takes */
    size_t good = 0;

    for (size_t i = 0; i < NWANT; i++) {
        const struct want *w = &want[i];
        feed_config c, expect;
        char flag[64];
        int fine = 1;

        dashed(w->name, flag);
        for (int spelling = 0; spelling < 2; spelling++) {
            const char *name = spelling ? flag : w->name;
            int64_t v = w->kind == S ? 0 : w->dflt == w->max ? w->min : w->dflt + 1;
            char text[24];

            feed_config_init(&c);
            expect = c;
            if (w->kind == S) {
                *str_of(&expect, w) = sval;
                fine &= feed_config_set(&c, name, sval) == FEED_OK && *str_of(&c, w) == sval;
            } else {
                snprintf(text, sizeof text, "%lld", (long long)v);
                int_put(&expect, w, v);
                fine &= feed_config_set(&c, name, text) == FEED_OK && int_of(&c, w) == v;
            }
            fine &= memcmp(&c, &expect, sizeof c) == 0 && *feed_errmsg(NULL) == '\0';
        }
        if (!fine)
            tap_diag("%s: not set as expected (%s)", w->name, feed_errmsg(NULL));
        good += fine;
    }
    is_int(good, NWANT, "every field is set by its C name and by its dashed name, reads "
           "back there (strings: the caller's pointer), and no other field moves");
}

/* An integer field: its limits in feed_config_set are feed_open's. */
static void integer_bounds(const struct want *w)
{
    static const char *const junk[] = {
        "", "-1", "+1", " 1", "1 ", "12x", "0x10", "1e3", "1.0", "- 1",
        "99999999999999999999", "18446744073709551616", "4294967296",
    };
    feed_config base, c;
    char text[32];
    size_t refused = 0;
    int set_rc;

    tu_config(&base);
    /* The TLS fields: redis_tls_verify goes with redis_tls = 1, and a build
     * without TLS refuses them off their defaults (t_tls_config). */
    int tls = strncmp(w->name, "redis_tls", 9) == 0;
    if (tls && strcmp(w->name, "redis_tls") != 0 && feed_tls_supported())
        base.redis_tls = 1;
    /* min and max: taken, and feed_open opens a handle with them. */
    for (int end = 0; end < 2; end++) {
        int64_t v = end ? w->max : w->min;
        int opens = !tls || feed_tls_supported() || v == w->dflt;
        c = base;
        snprintf(text, sizeof text, "%lld", (long long)v);
        set_rc = feed_config_set(&c, w->name, text);
        ok(set_rc == FEED_OK && int_of(&c, w) == v &&
           (open_rc(&c) == FEED_OK) == opens,
           "%s %s (%s): feed_config_set takes it and feed_open %s%s%s", w->name,
           end ? "max" : "min", text, opens ? "opens with it" : "refuses it (no TLS here)",
           set_rc ? ": " : "", feed_errmsg(NULL));
    }
    /* Just past each end: refused by both, *cfg unchanged. */
    for (int end = 0; end < 2; end++) {
        int64_t v = end ? w->max + 1 : w->min - 1;
        c = base;
        snprintf(text, sizeof text, "%lld", (long long)v);
        set_rc = feed_config_set(&c, w->name, text);
        if (v < 0 || (w->kind == U && v > UINT32_MAX) || (w->kind == I && v > INT32_MAX)) {
            /* not representable in the field: feed_config_set refuses it */
            ok(set_rc == FEED_EINVAL && memcmp(&c, &base, sizeof c) == 0,
               "%s %s: refused (the field cannot hold it)", w->name, text);
            if (v == -1 && w->kind == I) {   /* an int field can: feed_open refuses it */
                int_put(&c, w, v);
                is_int(open_rc(&c), FEED_EINVAL, "  and feed_open refuses %s = -1", w->name);
            }
            continue;
        }
        ok(set_rc == FEED_EINVAL && memcmp(&c, &base, sizeof c) == 0,
           "%s %s: feed_config_set refuses it, *cfg unchanged (%s)", w->name, text,
           feed_errmsg(NULL));
        int_put(&c, w, v);
        is_int(open_rc(&c), FEED_EINVAL, "  and feed_open refuses it (%s)", feed_errmsg(NULL));
    }
    /* Not a count at all. */
    for (size_t j = 0; j < sizeof junk / sizeof junk[0]; j++) {
        c = base;
        if (feed_config_set(&c, w->name, junk[j]) == FEED_EINVAL &&
            memcmp(&c, &base, sizeof c) == 0 && *feed_errmsg(NULL))
            refused++;
        else
            tap_diag("%s \"%s\" was taken", w->name, junk[j]);
    }
    is_int(refused, sizeof junk / sizeof junk[0],
           "%s: signs, blanks, junk after the digits, hex, overflow: all refused", w->name);
}

static void integers(void)
{
    for (size_t i = 0; i < NWANT; i++)
        if (want[i].kind != S)
            integer_bounds(&want[i]);
}

/* "" as each string field's rule says; what set refuses, open refuses. */
static void strings(void)
{
    feed_config base, c;

    tu_config(&base);
    for (size_t i = 0; i < NWANT; i++) {
        const struct want *w = &want[i];
        int rc;
        if (w->kind != S)
            continue;
        c = base;
        rc = feed_config_set(&c, w->name, "");
        switch (w->empty) {
        case KEEP:
            ok(rc == FEED_OK && *str_of(&c, w) && **str_of(&c, w) == '\0',
               "%s \"\": kept as \"\"", w->name);
            break;
        case TO_NULL:
            *str_of(&base, w) = "x";   /* from a value: "" turns the field off */
            c = base;
            rc = feed_config_set(&c, w->name, "");
            ok(rc == FEED_OK && *str_of(&c, w) == NULL, "%s \"\": NULL (none)", w->name);
            *str_of(&base, w) = NULL;
            break;
        case REFUSE:
            ok(rc == FEED_EINVAL && memcmp(&c, &base, sizeof c) == 0 &&
               strcmp(feed_errmsg(NULL), "") != 0,
               "%s \"\": refused, *cfg unchanged (%s)", w->name, feed_errmsg(NULL));
            /* feed_open refuses it where the field is used. */
            *str_of(&c, w) = "";
            if (strcmp(w->name, "redis_master_name") == 0)
                c.redis_sentinels = "127.0.0.1:1";
            if (strcmp(w->name, "author_column") == 0)
                c.author_table = "feed_entry";
            is_int(open_rc(&c), FEED_EINVAL, "  and feed_open refuses it (%s)",
                   feed_errmsg(NULL));
            break;
        }
    }

    /* Syntax feed_open checks, checked at once. */
    static const struct { const char *name, *value; } bad[] = {
        { "redis_cluster", "127.0.0.1" }, { "redis_cluster", "h:1,,h:2" },
        { "redis_cluster", "h:99999" }, { "redis_sentinels", "h" },
        { "redis_sentinels", ":1" }, { "key_prefix", "a{b" }, { "key_prefix", "}" },
    };
    for (size_t j = 0; j < sizeof bad / sizeof bad[0]; j++) {
        const struct want *w = NULL;
        for (size_t i = 0; i < NWANT; i++)
            if (strcmp(want[i].name, bad[j].name) == 0)
                w = &want[i];
        c = base;
        ok(feed_config_set(&c, bad[j].name, bad[j].value) == FEED_EINVAL &&
           memcmp(&c, &base, sizeof c) == 0,
           "%s \"%s\": refused (%s)", bad[j].name, bad[j].value, feed_errmsg(NULL));
        *str_of(&c, w) = bad[j].value;
        is_int(open_rc(&c), FEED_EINVAL, "  and feed_open refuses it");
    }
    c = base;
    ok(feed_config_set(&c, "redis_sentinels", "127.0.0.1:1,localhost:2") == FEED_OK &&
       strcmp(c.redis_sentinels, "127.0.0.1:1,localhost:2") == 0, "a list of host:port is taken");
    c = base;
    ok(feed_config_set(&c, "key_prefix", "app:feed") == FEED_OK &&
       strcmp(c.key_prefix, "app:feed") == 0, "key_prefix with a colon is taken");

    /* Ties between fields are feed_open's: set in any order, checked at open. */
    c = base;
    ok(feed_config_set(&c, "redis_user", "app") == FEED_OK && open_rc(&c) == FEED_EINVAL,
       "redis_user alone: set, then refused by feed_open (needs redis_password)");
    c = base;
    ok(feed_config_set(&c, "redis_wait_replicas", "1") == FEED_OK &&
       feed_config_set(&c, "redis_wait_timeout_ms", "250") == FEED_OK &&
       open_rc(&c) == FEED_EINVAL && strstr(feed_errmsg(NULL), "redis_wait_timeout_ms"),
       "redis_wait_timeout_ms = redis_timeout_ms with WAIT on: set, refused by feed_open");
}

static void names_and_nulls(void)
{
    static const char *const unknown[] = {
        "", "no_such_field", "REDIS_PORT", "redis_port ", " redis_port", "redis__port",
        "redis_port_", "redis", "redis-port-", "--redis-port", "redis.port",
    };
    feed_config base, c;
    size_t refused = 0;

    feed_config_init(&base);
    for (size_t j = 0; j < sizeof unknown / sizeof unknown[0]; j++) {
        c = base;
        if (feed_config_set(&c, unknown[j], "1") == FEED_EINVAL &&
            memcmp(&c, &base, sizeof c) == 0 && strstr(feed_errmsg(NULL), "not a field"))
            refused++;
        else
            tap_diag("name \"%s\" was taken", unknown[j]);
    }
    is_int(refused, sizeof unknown / sizeof unknown[0],
           "unknown names (case, blanks, doubled or trailing separators, prefixes): refused");
    c = base;
    ok(feed_config_set(&c, "redis-wait_replicas", "3") == FEED_OK && c.redis_wait_replicas == 3,
       "each '-' reads as '_', so a mixed spelling names the field too");
    is_int(feed_config_set(NULL, "redis_port", "1"), FEED_EINVAL, "cfg NULL: FEED_EINVAL");
    ok(strstr(feed_errmsg(NULL), "NULL") != NULL, "  %s", feed_errmsg(NULL));
    is_int(feed_config_set(&c, NULL, "1"), FEED_EINVAL, "name NULL: FEED_EINVAL");
    c = base;
    is_int(feed_config_set(&c, "redis_host", NULL), FEED_EINVAL, "value NULL: FEED_EINVAL");
    ok(memcmp(&c, &base, sizeof c) == 0, "  *cfg unchanged");

    /* The message: the name as given first, for a program's own spelling. */
    c = base;
    feed_config_set(&c, "redis-port", "0");
    is_str(feed_errmsg(NULL), "redis-port must be 1..65535, not \"0\"",
           "the message starts with the name as given");
    {   /* a key prefix longer than the fence's key and SCAN pattern hold */
        char longest[FEED_KEY_PREFIX_MAX + 2];
        memset(longest, 'p', sizeof longest - 1);
        longest[sizeof longest - 1] = '\0';
        is_int(feed_config_set(&c, "key_prefix", longest), FEED_EINVAL,
               "key_prefix of FEED_KEY_PREFIX_MAX + 1 bytes: FEED_EINVAL");
        is_str(feed_errmsg(NULL), "key_prefix must be at most 200 bytes", "  saying the limit");
        c = base;
        c.key_prefix = longest;
        is_int(open_rc(&c), FEED_EINVAL, "  and feed_open refuses it");
        longest[FEED_KEY_PREFIX_MAX] = '\0';
        is_int(feed_config_set(&c, "key_prefix", longest), FEED_OK,
               "key_prefix of FEED_KEY_PREFIX_MAX bytes: FEED_OK");
        c = base;
    }
    feed_config_set(&c, "key_prefix", "a{");
    is_str(feed_errmsg(NULL), "key_prefix must not contain '{' or '}'", "  (a string's)");
    ok(feed_config_set(&c, "max_len", "5") == FEED_OK && *feed_errmsg(NULL) == '\0',
       "  and a call that succeeds clears it");
    c = base;
    c.max_page = 0;
    open_rc(&c);
    is_str(feed_errmsg(NULL), "feed_open: max_page must be 1..100000",
           "feed_open's message names the same limits");
}

int main(void)
{
    PQfinish(tu_begin(NULL));
    table();
    defaults();
    every_field();
    integers();
    strings();
    names_and_nulls();
    return tap_done();
}
