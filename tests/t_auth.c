/* t_auth.c -- Redis AUTH against a server that requires it: this test starts
 * its own redis-server (a password for the default user, and ACL users) on
 * a free loopback port in a temporary folder, and stops it at exit, however
 * the test ends (atexit, and the server dies with us: PR_SET_PDEATHSIG).
 *
 *   - no password, a wrong password, a wrong or unknown ACL user: feed_open
 *     gives FEED_EREDIS with Redis's reason, and never echoes the password;
 *   - the right password, and an ACL user with its password: pages come from
 *     the cache, equal to SQL; AUTH is sent again after a restart;
 *   - an ACL user without rights on the feed keys: pages come from SQL, hooks
 *     give FEED_EREDIS (NOPERM), nothing crashes. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tap.h"
#include "testutil.h"

#define PASSWORD  "s3cret default pass"   /* spaces: AUTH takes it as one argument */
#define ALICE_PW  "alice-pw-123"
#define BOB_PW    "bob-pw-456"

static PGconn *pg;
static char dir[256], conf[300];
static int port;
static pid_t server = -1;

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static void stop_server(void)
{
    if (server > 0) {
        kill(server, SIGKILL);
        waitpid(server, NULL, 0);
        server = -1;
    }
}

static void cleanup(void)
{
    stop_server();
    if (conf[0])
        unlink(conf);
    if (dir[0])
        rmdir(dir);
}

/* Start redis-server on port; 1 when it answers, 0 if it exited (port taken). */
static int launch(void)
{
    struct timeval tv = { 0, 200 * 1000 };

    server = fork();
    if (server < 0)
        return 0;
    if (server == 0) {
        int null = open("/dev/null", O_WRONLY);
        prctl(PR_SET_PDEATHSIG, SIGKILL);   /* never outlive the test */
        if (null >= 0) {
            dup2(null, 1);
            dup2(null, 2);
        }
        execlp("redis-server", "redis-server", conf, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 100; i++) {
        redisContext *c;
        if (waitpid(server, NULL, WNOHANG) == server) {
            server = -1;
            return 0;
        }
        c = redisConnectWithTimeout("127.0.0.1", port, tv);
        if (c && !c->err) {
            redisReply *rep = redisCommand(c, "PING");
            int up = rep != NULL;      /* NOAUTH is an answer too */
            freeReplyObject(rep);
            redisFree(c);
            if (up)
                return 1;
        } else if (c) {
            redisFree(c);
        }
        sleep_ms(100);
    }
    stop_server();
    return 0;
}

static void start_server(void)
{
    FILE *cf;
    const char *tmp = getenv("TMPDIR");

    snprintf(dir, sizeof dir, "%s/feedcache-auth.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        dir[0] = '\0';
        tap_bail("mkdtemp failed");
        exit(255);
    }
    snprintf(conf, sizeof conf, "%s/redis.conf", dir);
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    for (int attempt = 0; attempt < 10; attempt++) {
        port = 20000 + rand() % 40000;
        cf = fopen(conf, "w");
        if (!cf)
            break;
        fprintf(cf,
                "bind 127.0.0.1\nport %d\ndaemonize no\nsave \"\"\nappendonly no\n"
                "dir %s\nlogfile \"\"\n"
                "user default on \">" PASSWORD "\" ~* &* +@all\n"
                "user alice on >" ALICE_PW " ~* &* +@all\n"
                "user bob on >" BOB_PW " ~elsewhere:* &* +@all\n",
                port, dir);
        fclose(cf);
        if (launch())
            return;
    }
    tap_bail("could not start a redis-server with AUTH");
    exit(255);
}

static void config(feed_config *cfg, const char *user, const char *password)
{
    tu_config(cfg);
    cfg->redis_port = port;
    cfg->redis_user = user;
    cfg->redis_password = password;
    cfg->retry_ms = 200;
}

static int opens_with(const char *user, const char *password, int want, const char *what)
{
    feed_config cfg;
    feed *f = NULL;
    int rc;

    config(&cfg, user, password);
    rc = feed_open(&f, &cfg);
    ok(rc == want && (want != FEED_OK) == (f == NULL), "%s: %s (%s)", what,
       feed_strerror(rc), rc ? feed_errmsg(NULL) : "open");
    if (rc != FEED_OK && password && *password)
        ok(!strstr(feed_errmsg(NULL), password), "  the message does not echo the password");
    feed_close(f);
    return rc;
}

static void works(const char *user, const char *password, const char *what)
{
    feed_config cfg;
    feed *f;
    tu_walk_info info;

    config(&cfg, user, password);
    f = tu_open(&cfg);
    ok(tu_walk_equals_sql(f, pg, 42, 6, &info) && tu_walk_equals_sql(f, pg, 42, 6, &info) &&
       info.sources[FEED_SOURCE_CACHE] == (int)info.pages,
       "%s: walks equal SQL, the second from the cache", what);
    feed_close(f);
}

int main(void)
{
    feed_config cfg;
    feed *f;
    feed_result res;
    tu_walk_info info;
    redisContext *r;
    int rc;

    atexit(cleanup);
    pg = tu_begin(&r);
    redisFree(r);
    tu_insert_rows(pg, 42, 30, tu_score_by10, tu_id_seq);
    start_server();
    tap_diag("redis-server with AUTH on port %d", port);

    rc = opens_with(NULL, NULL, FEED_EREDIS, "no password");
    ok(rc == FEED_EREDIS && (strstr(feed_errmsg(NULL), "NOAUTH") || strstr(feed_errmsg(NULL), "uth")),
       "  the message says authentication is required");
    opens_with(NULL, "wrong password", FEED_EREDIS, "a wrong password");
    opens_with(NULL, "", FEED_EREDIS, "an empty password");
    opens_with("alice", "wrong password", FEED_EREDIS, "user alice, a wrong password");
    opens_with("alice", PASSWORD, FEED_EREDIS, "user alice, the default user's password");
    opens_with("mallory", ALICE_PW, FEED_EREDIS, "an unknown user");
    opens_with("alice", NULL, FEED_EINVAL, "a user without a password");
    works(NULL, PASSWORD, "the right password");
    works("alice", ALICE_PW, "user alice with her password");
    works("default", PASSWORD, "user default with its password");

    /* bob may log in but not touch feed:* keys. */
    config(&cfg, "bob", BOB_PW);
    rc = feed_open(&f, &cfg);
    is_int(rc, FEED_OK, "user bob, no rights on the feed keys: feed_open works");
    if (rc == FEED_OK) {
        rc = feed_page(f, 42, FEED_FIRST, 0, 10, &res);
        ok(rc == FEED_OK && res.source == FEED_SOURCE_DB && res.count == 10 && res.items[0].id == 30,
           "  pages come from SQL, right");
        ok(strstr(feed_errmsg(f), "NOPERM") || strstr(feed_errmsg(f), "ermission"),
           "  with Redis's refusal in feed_errmsg: %s", feed_errmsg(f));
        feed_result_free(&res);
        is_int(feed_on_insert(f, 42, 1, 1000), FEED_EREDIS, "  a hook: FEED_EREDIS");
        feed_close(f);
    }

    /* AUTH again after a restart. */
    config(&cfg, "alice", ALICE_PW);
    f = tu_open(&cfg);
    ok(tu_walk_equals_sql(f, pg, 42, 6, &info), "alice's handle walks");
    stop_server();
    if (!launch()) {
        tap_bail("could not restart the AUTH redis-server");
        exit(255);
    }
    sleep_ms(250);
    rc = feed_page(f, 42, FEED_FIRST, 0, 10, &res);
    ok(rc == FEED_OK && res.source == FEED_SOURCE_REBUILD,
       "after a restart of the server the handle authenticates again and rebuilds (source %d)",
       rc == FEED_OK ? (int)res.source : rc);
    feed_result_free(&res);
    ok(tu_walk_equals_sql(f, pg, 42, 6, &info) && info.sources[FEED_SOURCE_CACHE] == (int)info.pages,
       "  then walks from the cache");
    feed_close(f);

    PQfinish(pg);
    return tap_done();
}
