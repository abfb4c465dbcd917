/* fault.h -- what the fault-injection tests (t_fault_*.c) share: the test
 * servers' fault switches (tools/servers.sh, found through FEED_SERVERS and
 * FEED_SERVERS_DIR, which tests/run.sh exports), a monotonic clock, and the
 * promise that the servers are up again when the test exits, however it
 * exits, so that the tests after it find them running.
 *
 * Header only, like tap.h: include it after tap.h. */
#ifndef FEED_FAULT_H
#define FEED_FAULT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Run "servers.sh <cmd> <dir>"; returns its exit status (0 = done). quiet
 * drops its complaints too. */
static inline int fault_srv(const char *cmd, int quiet)
{
    const char *srv = getenv("FEED_SERVERS"), *dir = getenv("FEED_SERVERS_DIR");
    char line[4096];
    int st;

    if (!srv || !dir) {
        tap_bail("FEED_SERVERS / FEED_SERVERS_DIR not set: run me through tests/run.sh");
        exit(255);
    }
    snprintf(line, sizeof line, "'%s' %s '%s' >/dev/null%s", srv, cmd, dir,
             quiet ? " 2>&1" : "");
    fflush(stdout);
    st = system(line);
    return st == 0 ? 0 : (st > 0 ? st : -1);
}

/* Inject a fault and count it; a switch that does not work fails the test. */
static int fault_count;

static inline void fault_inject(const char *cmd)
{
    int rc = fault_srv(cmd, 0);

    if (strcmp(cmd, "redis-stop") == 0 || strcmp(cmd, "redis-freeze") == 0 ||
        strcmp(cmd, "pg-stop") == 0 || strcmp(cmd, "pg-freeze") == 0 ||
        strcmp(cmd, "replica-stop") == 0 || strcmp(cmd, "replica-freeze") == 0)
        fault_count++;
    if (rc != 0) {
        char why[128];
        snprintf(why, sizeof why, "servers.sh %s failed (%d)", cmd, rc);
        tap_bail(why);
        exit(255);
    }
}

/* atexit: thaw and start whatever a test stopped (no-ops when running).
 * A replica a test started is its own to stop. */
static inline void fault_restore(void)
{
    fault_srv("redis-thaw", 1);
    fault_srv("redis-start", 0);
    fault_srv("pg-thaw", 1);
    fault_srv("pg-start", 0);
    fault_srv("replica-thaw", 1);
}

static inline void fault_setup(void)
{
    atexit(fault_restore);
}

static inline double fault_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static inline void fault_sleep_ms(double ms)
{
    struct timespec ts;

    if (ms <= 0)
        return;
    ts.tv_sec = (time_t)(ms / 1e3);
    ts.tv_nsec = (long)((ms - (double)ts.tv_sec * 1e3) * 1e6);
    nanosleep(&ts, NULL);
}

/* Slack for the "does not hang" bounds: a call may take the configured
 * timeout plus this. Generous (the machine is shared); larger under
 * valgrind (FEED_TEST_SLOW=1). These bound hangs, they measure no speed. */
static inline double fault_slack_ms(void)
{
    const char *slow = getenv("FEED_TEST_SLOW");

    return slow && *slow && *slow != '0' ? 5000.0 : 1000.0;
}

#endif /* FEED_FAULT_H */
