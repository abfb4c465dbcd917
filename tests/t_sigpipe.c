/* t_sigpipe.c -- a write to Redis on the loop never ends the process with
 * SIGPIPE. The async driver makes every write to Redis through
 * feed__ra_nopipe (lib/io/redis_async.c), which blocks SIGPIPE on the
 * thread around it and takes off one the write raised, as libpq does around
 * send(). Here the write goes to a socket whose peer is closed (a kernel
 * socket pair, not a server: the point is the signal, which the kernel
 * raises on the first write to it), with SIGPIPE's default action, which
 * would end this process, and with a program that keeps SIGPIPE blocked and
 * already has one pending, which must be left to it. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "io/redis_async.h"
#include "tap.h"

static int fds[2];
static int write_errno;
static ssize_t write_rc;

/* The write the guard wraps: to fds[0], whose peer fds[1] is closed. */
static void write_to_closed(redisAsyncContext *ac)
{
    (void)ac;
    errno = 0;
    write_rc = write(fds[0], "PING\r\n", 6);
    write_errno = errno;
}

static void closed_pair(void)
{
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) {
        tap_bail("socketpair failed");
        exit(255);
    }
    close(fds[1]);
}

static int pending(void)
{
    sigset_t p;

    return sigpending(&p) == 0 && sigismember(&p, SIGPIPE);
}

static int blocked(void)
{
    sigset_t m;

    return pthread_sigmask(SIG_BLOCK, NULL, &m) == 0 && sigismember(&m, SIGPIPE);
}

static void take_pending(void)
{
    sigset_t s;
    struct timespec zero = { 0, 0 };

    sigemptyset(&s);
    sigaddset(&s, SIGPIPE);
    while (sigtimedwait(&s, NULL, &zero) < 0 && errno == EINTR)
        ;
}

int main(void)
{
    sigset_t pipe_set, none;

    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigemptyset(&none);

    /* The control: the write raises SIGPIPE (seen pending while blocked). */
    signal(SIGPIPE, SIG_DFL);
    closed_pair();
    pthread_sigmask(SIG_BLOCK, &pipe_set, NULL);
    write_to_closed(NULL);
    ok(write_rc < 0 && write_errno == EPIPE && pending(),
       "control: a write to a socket whose peer is closed fails with EPIPE and raises SIGPIPE"
       " (%s)", strerror(write_errno));
    take_pending();
    ok(!pending(), "  taken off");
    pthread_sigmask(SIG_UNBLOCK, &pipe_set, NULL);
    close(fds[0]);

    /* SIGPIPE's default action, not blocked: the guarded write returns. */
    closed_pair();
    feed__ra_nopipe(write_to_closed, NULL);
    ok(write_rc < 0 && write_errno == EPIPE,
       "SIGPIPE's default action: the guarded write fails with EPIPE and the process goes on (%s)",
       strerror(write_errno));
    ok(!pending() && !blocked(), "  no SIGPIPE left pending, and the signal mask as it was");
    feed__ra_nopipe(write_to_closed, NULL);
    ok(write_rc < 0 && write_errno == EPIPE && !pending() && !blocked(),
       "  a second write alike");
    close(fds[0]);

    /* A program that keeps SIGPIPE blocked, with one of its own pending. */
    closed_pair();
    pthread_sigmask(SIG_BLOCK, &pipe_set, NULL);
    raise(SIGPIPE);
    ok(pending(), "a program's own SIGPIPE, blocked: pending");
    feed__ra_nopipe(write_to_closed, NULL);
    ok(write_rc < 0 && write_errno == EPIPE && pending() && blocked(),
       "  the guarded write fails with EPIPE; the program's SIGPIPE is still pending and blocked");
    take_pending();
    pthread_sigmask(SIG_SETMASK, &none, NULL);
    close(fds[0]);

    /* Ignored: nothing changes either. */
    signal(SIGPIPE, SIG_IGN);
    closed_pair();
    feed__ra_nopipe(write_to_closed, NULL);
    ok(write_rc < 0 && write_errno == EPIPE && !pending() && !blocked(),
       "SIGPIPE ignored: EPIPE, nothing pending, the mask as it was");
    close(fds[0]);
    return tap_done();
}
