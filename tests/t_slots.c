/* t_slots.c -- the Redis Cluster decisions of lib/base/slots.c, without a
 * server: slots (CRC16/XMODEM and the hash tag rule, checked against the
 * values the cluster specification and Redis give), the seed list, what a
 * reply means, the back-off and a CLUSTER SLOTS reply. The routing itself
 * runs against a real cluster in t_*:cluster. */
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "../lib/internal.h"

static unsigned slot_of(const char *key)
{
    return feed__key_slot(key, strlen(key));
}

static redisReply *error_reply(const char *text)
{
    static redisReply r;
    static char buf[128];

    snprintf(buf, sizeof buf, "%s", text);
    memset(&r, 0, sizeof r);
    r.type = REDIS_REPLY_ERROR;
    r.str = buf;
    r.len = strlen(buf);
    return &r;
}

static void slots(void)
{
    /* CRC16("123456789") = 0x31C3 (the spec's check value) -> 12739. */
    is_int(slot_of("123456789"), 12739, "CRC16/XMODEM check value");
    is_int(slot_of("foo"), 12182, "foo: slot 12182 (CLUSTER KEYSLOT)");
    is_int(slot_of("bar"), 5061, "bar: slot 5061");
    is_int(slot_of("{user1000}.following"), slot_of("{user1000}.followers"),
           "a hash tag puts keys on one slot");
    ok(slot_of("foo{}{bar}") != slot_of("bar"), "an empty first tag: the whole key is hashed");
    is_int(slot_of("foo{{bar}}zap"), slot_of("{bar"), "foo{{bar}}zap hashes \"{bar\"");
    is_int(slot_of("foo{bar}{zap}"), slot_of("bar"), "the first tag counts");
    is_int(slot_of("feed:{42}"), feed__uid_slot(42), "feed:{uid} is on the uid's slot");
    is_int(slot_of("feed:{42}:lease"), feed__uid_slot(42), "and so is its lease");
    is_int(slot_of("feed:{-9223372036854775808}:stage:x"), feed__uid_slot(INT64_MIN),
           "and a rebuild's staging set, for any uid");
    {
        const char *argv[5] = { "EVALSHA", "0123", "2", "feed:{7}", "feed:{7}:lease" };
        const char *del[2] = { "DEL", "feed:{9}" };
        is_int(feed__command_slot(5, argv, NULL), feed__uid_slot(7), "EVALSHA: routed by KEYS[1]");
        is_int(feed__command_slot(2, del, NULL), feed__uid_slot(9), "DEL: routed by argv[1]");
    }
}

static void seeds(void)
{
    feed_addr *a = NULL;
    size_t n = 0;

    is_int(feed__parse_addrs("127.0.0.1:7000,example.org:7001", &a, &n), FEED_OK, "two seeds");
    ok(n == 2 && strcmp(a[0].host, "127.0.0.1") == 0 && a[0].port == 7000 &&
       strcmp(a[1].host, "example.org") == 0 && a[1].port == 7001, "hosts and ports");
    free(a);
    is_int(feed__parse_addrs("::1:7000", NULL, NULL), FEED_OK, "the port follows the last ':'");
    static const char *bad[] = { "", "host", "host:", ":7000", "host:0", "host:65536",
                                 "host:70x", "a:1,", "a:1,,b:2" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        is_int(feed__parse_addrs(bad[i], NULL, NULL), FEED_EINVAL, "rejected: \"%s\"", bad[i]);
}

static void verdicts(void)
{
    feed_addr to;
    redisReply ok_reply = { .type = REDIS_REPLY_INTEGER, .integer = 1 };

    is_int(feed__classify(&ok_reply, "h", &to), FEED_V_DONE, "an answer is done");
    is_int(feed__classify(error_reply("MOVED 3999 10.0.0.2:6381"), "h", &to), FEED_V_MOVED,
           "MOVED");
    ok(strcmp(to.host, "10.0.0.2") == 0 && to.port == 6381, "  to its node");
    is_int(feed__classify(error_reply("ASK 3999 :6390"), "10.0.0.9", &to), FEED_V_ASK,
           "ASK with no host");
    ok(strcmp(to.host, "10.0.0.9") == 0 && to.port == 6390, "  the answering node's host");
    is_int(feed__classify(error_reply("TRYAGAIN Multiple keys request during rehashing of slot"),
                          "h", &to), FEED_V_TRYAGAIN, "TRYAGAIN");
    is_int(feed__classify(error_reply("CLUSTERDOWN Hash slot not served"), "h", &to),
           FEED_V_TRYAGAIN, "CLUSTERDOWN");
    is_int(feed__classify(error_reply("NOSCRIPT No matching script"), "h", &to),
           FEED_V_NOSCRIPT, "NOSCRIPT");
    is_int(feed__classify(error_reply("MOVEDX 1 h:1"), "h", &to), FEED_V_DONE,
           "a word that only starts like MOVED is an error reply");
    is_int(feed__classify(error_reply("MOVED 1 nonsense"), "h", &to), FEED_V_DONE,
           "a MOVED without a target is an error reply, not a loop");
    is_int(feed__classify(error_reply("ERR wrong type"), "h", &to), FEED_V_DONE, "ERR is final");

    ok(feed__backoff_ms(1, 0, 100) == 1 && feed__backoff_ms(3, 0, 100) == 4 &&
       feed__backoff_ms(20, 0, 100) == 32, "back-off 1, 2, 4 ... 32 ms");
    is_int(feed__backoff_ms(1, 100, 100), -1, "no try past the deadline");
}

static int ranges, last_from, last_to, last_port;

static int each(void *arg, unsigned from, unsigned to, const feed_addr *owner)
{
    (void)arg;
    ranges++;
    last_from = (int)from;
    last_to = (int)to;
    last_port = owner->port;
    return strcmp(owner->host, "10.0.0.5") == 0 ? FEED_OK : FEED_EINVAL;
}

static void slot_map(void)
{
    redisReply host = { .type = REDIS_REPLY_STRING, .str = (char *)"", .len = 0 };
    redisReply port = { .type = REDIS_REPLY_INTEGER, .integer = 7002 };
    redisReply from = { .type = REDIS_REPLY_INTEGER, .integer = 100 };
    redisReply to = { .type = REDIS_REPLY_INTEGER, .integer = 200 };
    redisReply *node_el[2] = { &host, &port };
    redisReply node = { .type = REDIS_REPLY_ARRAY, .elements = 2, .element = node_el };
    redisReply *range_el[3] = { &from, &to, &node };
    redisReply range = { .type = REDIS_REPLY_ARRAY, .elements = 3, .element = range_el };
    redisReply *all_el[1] = { &range };
    redisReply all = { .type = REDIS_REPLY_ARRAY, .elements = 1, .element = all_el };

    is_int(feed__slot_map_parse(&all, "10.0.0.5", each, NULL), FEED_OK, "CLUSTER SLOTS parsed");
    ok(ranges == 1 && last_from == 100 && last_to == 200 && last_port == 7002,
       "  one range, its owner (an empty host is the answering node)");
    to.integer = 16384;
    is_int(feed__slot_map_parse(&all, "10.0.0.5", each, NULL), FEED_EINVAL,
           "a slot past 16383 is refused");
    to.integer = 50;
    is_int(feed__slot_map_parse(&all, "10.0.0.5", each, NULL), FEED_EINVAL,
           "a range that ends before it starts is refused");
}

int main(void)
{
    slots();
    seeds();
    verdicts();
    slot_map();
    return tap_done();
}
