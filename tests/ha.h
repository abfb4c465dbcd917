/* ha.h -- what the Sentinel tests (t_ha_*.c) share: the Sentinel set of
 * tools/servers.sh (1 primary, 1 replica, 3 Sentinels), started on demand,
 * and a handle configured to find the primary through it.
 *
 * Header only, like fault.h: include it after tap.h, testutil.h, fault.h. */
#ifndef FEED_HA_H
#define FEED_HA_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <hiredis/hiredis.h>

static char ha_sentinels[1024];

/* Output of "servers.sh <cmd> <dir>" (first line) as a port; 0 on failure. */
static inline int ha_port(const char *cmd)
{
    char line[4096], out[64] = "";
    FILE *p;

    snprintf(line, sizeof line, "'%s' %s '%s' 2>/dev/null", getenv("FEED_SERVERS"), cmd,
             getenv("FEED_SERVERS_DIR"));
    fflush(stdout);
    if (!(p = popen(line, "r")))
        return 0;
    if (!fgets(out, sizeof out, p))
        out[0] = '\0';
    pclose(p);
    return atoi(out);
}

static inline void ha_thaw_quietly(void)
{
    fault_srv("ha-thaw-replica", 1);
}

/* Start (or heal) the Sentinel set and learn the Sentinels' addresses. */
static inline void ha_start(void)
{
    char path[4096], line[1024];
    FILE *env;
    static int once;

    if (!once++)
        atexit(ha_thaw_quietly);
    fault_inject("sentinel-start");
    snprintf(path, sizeof path, "%s/ha.env", getenv("FEED_SERVERS_DIR"));
    if (!(env = fopen(path, "r"))) {
        tap_bail("no ha.env after servers.sh sentinel-start");
        exit(255);
    }
    while (fgets(line, sizeof line, env))
        if (strncmp(line, "export FEED_SENTINELS=", 22) == 0) {
            snprintf(ha_sentinels, sizeof ha_sentinels, "%s", line + 22);
            ha_sentinels[strcspn(ha_sentinels, "\n")] = '\0';
        }
    fclose(env);
    if (!ha_sentinels[0]) {
        tap_bail("ha.env names no Sentinels");
        exit(255);
    }
}

/* Defaults, the test PostgreSQL, and the Sentinels instead of redis_host. */
static inline void ha_config(feed_config *cfg)
{
    tu_config(cfg);
    cfg->redis_sentinels = ha_sentinels;
    cfg->redis_master_name = "mymaster";
}

/* A plain connection to a node, for the test's own commands. */
static inline redisContext *ha_node(int port)
{
    struct timeval tv = { 2, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);

    if (!c || c->err) {
        tap_bail("cannot reach a Sentinel-set node");
        exit(255);
    }
    redisSetTimeout(c, tv);
    return c;
}

/* Wait until the Sentinels name a primary other than old; its port, 0 on
 * timeout. */
static inline int ha_wait_new_primary(int old, double ms)
{
    double end = fault_now_ms() + ms;

    while (fault_now_ms() < end) {
        int p = ha_port("ha-primary");
        if (p > 0 && p != old)
            return p;
        fault_sleep_ms(100);
    }
    return 0;
}

#endif /* FEED_HA_H */
