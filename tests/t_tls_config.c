/* t_tls_config.c -- the TLS fields' refusals at open, on either build: in a
 * build without TLS (hiredis 0.14) every TLS field is FEED_EINVAL with a
 * message naming why, on the blocking and the async open; in a build with
 * TLS, the fields that go together. No server is reached: each open is
 * refused before connecting. */
#include <stdio.h>
#include <string.h>

#include <event2/event.h>

#include "tap.h"
#include "feedcache.h"
#include "feedcache_libevent.h"

static struct event_base *base;

/* Both opens refuse cfg with FEED_EINVAL and a message holding want. */
static void refused(const feed_config *cfg, const char *what, const char *want)
{
    feed *f = NULL;
    feed_async *a = NULL;
    int rc = feed_open(&f, cfg);

    if (!ok(rc == FEED_EINVAL && f == NULL && strstr(feed_errmsg(NULL), want),
            "%s: feed_open is FEED_EINVAL saying \"%s\"", what, want))
        tap_diag("rc %d: %s", rc, feed_errmsg(NULL));
    if (rc == FEED_OK)
        feed_close(f);
    rc = feed_async_open_libevent(&a, cfg, base);
    if (!ok(rc == FEED_EINVAL && a == NULL && strstr(feed_async_errmsg(NULL), want),
            "%s: feed_async_open_libevent too", what))
        tap_diag("rc %d: %s", rc, feed_async_errmsg(NULL));
    if (rc == FEED_OK)
        feed_async_close(a);
}

static void base_config(feed_config *cfg)
{
    feed_config_init(cfg);
    cfg->redis_port = 1;        /* never reached */
    cfg->pg_conninfo = "host=127.0.0.1 port=1 connect_timeout=1";
}

int main(void)
{
    feed_config cfg;

    base = event_base_new();
    base_config(&cfg);
    is_int(cfg.redis_tls, 0, "redis_tls defaults to 0");
    is_int(cfg.redis_tls_verify, 1, "redis_tls_verify defaults to 1");
    ok(!cfg.redis_tls_ca_file && !cfg.redis_tls_ca_dir && !cfg.redis_tls_cert_file &&
       !cfg.redis_tls_key_file && !cfg.redis_tls_server_name,
       "the TLS strings default to NULL");
    ok(feed_config_set(&cfg, "redis-tls", "1") == FEED_OK && cfg.redis_tls == 1,
       "feed_config_set takes --redis-tls 1 (on any build: the open judges)");
    ok(feed_config_set(&cfg, "redis-tls-verify", "2") == FEED_EINVAL,
       "  and refuses redis-tls-verify 2 (0..1)");
    ok(feed_config_set(&cfg, "redis-tls-ca-file", "") == FEED_OK && !cfg.redis_tls_ca_file,
       "  \"\" for redis-tls-ca-file stores NULL (none)");

    if (!feed_tls_supported()) {
        const char *want = "need a build with TLS";
        tap_diag("this build has no TLS: its refusals");
        base_config(&cfg);
        cfg.redis_tls = 1;
        refused(&cfg, "redis_tls = 1", want);
        base_config(&cfg);
        cfg.redis_tls_ca_file = "/etc/ssl/certs/ca-certificates.crt";
        refused(&cfg, "redis_tls_ca_file alone", want);
        base_config(&cfg);
        cfg.redis_tls_verify = 0;
        refused(&cfg, "redis_tls_verify = 0", want);
        base_config(&cfg);
        cfg.redis_tls = 1;
        cfg.redis_tls_server_name = "redis.example.org";
        refused(&cfg, "redis_tls_server_name", "feed_tls_supported() is 0");
    } else {
        tap_diag("this build has TLS: the fields that go together");
        base_config(&cfg);
        cfg.redis_tls_ca_file = "/etc/ssl/certs/ca-certificates.crt";
        refused(&cfg, "redis_tls_ca_file without redis_tls", "need redis_tls = 1");
        base_config(&cfg);
        cfg.redis_tls_verify = 0;
        refused(&cfg, "redis_tls_verify = 0 without redis_tls", "need redis_tls = 1");
        base_config(&cfg);
        cfg.redis_tls = 1;
        cfg.redis_tls_cert_file = "/nonexistent/client.crt";
        refused(&cfg, "a client certificate without its key", "go together");
        base_config(&cfg);
        cfg.redis_tls = 1;
        cfg.redis_tls_key_file = "/nonexistent/client.key";
        refused(&cfg, "a key without its certificate", "go together");
        base_config(&cfg);
        cfg.redis_tls = 1;
        cfg.redis_tls_ca_dir = "/nonexistent";
        refused(&cfg, "a CA folder that is not there", "redis_tls_ca_dir \"/nonexistent\"");
    }
    base_config(&cfg);
    cfg.redis_tls = 2;
    refused(&cfg, "redis_tls = 2", "redis_tls must be 0..1");
    event_base_free(base);
    return tap_done();
}
