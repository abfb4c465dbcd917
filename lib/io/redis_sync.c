/* redis_sync.c -- blocking hiredis connections, for the blocking driver.
 *
 * One connection per node, with the configured timeout on connect and on
 * every read and write. A trip's commands go out in one write, its replies
 * are read in order and handed over one by one. A connection that fails
 * (I/O error, timeout, protocol error) is reported and never reused: the
 * driver closes it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "io/io.h"

redisContext *feed__rs_connect(const feed_addr *a, const feed_tls *tls, uint32_t timeout_ms,
                               char *why, size_t cap)
{
    struct timeval tv = { .tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000 };
    redisContext *c = redisConnectWithTimeout(a->host, a->port, tv);

    if (!c) {
        snprintf(why, cap, "out of memory");
        return NULL;
    }
    /* The timeout is set before the TLS handshake, which it bounds too
     * (a plaintext server may never answer a ClientHello). */
    if (c->err || redisSetTimeout(c, tv) != REDIS_OK) {
        feed__msg_keep_n(why, cap, c->errstr[0] ? c->errstr : "connect failed");
        redisFree(c);
        return NULL;
    }
    if (feed__tls_begin(tls, c, a->host, why, cap) != 0) {
        redisFree(c);
        return NULL;
    }
    return c;
}

void feed__rs_close(redisContext *c)
{
    redisFree(c);       /* NULL: nothing (hiredis >= 0.14) */
}

/* Did the server close a connection (a restart)? Then one retry on a
 * fresh connection is worth it. A timeout is not: a frozen server would
 * only double the wait. */
static int closed_by_peer(const redisContext *c, int err)
{
    return c->err == REDIS_ERR_EOF ||
           (c->err == REDIS_ERR_IO && (err == ECONNRESET || err == EPIPE));
}

static void failed(redisContext *c, feed_trip *t, int err)
{
    t->io = closed_by_peer(c, err) ? FEED_IO_CLOSED : FEED_IO_FAILED;
    if (feed__tls_on(c))    /* a TLS alert reads as a close: name it */
        feed__tls_why(c, 0, t->why, sizeof t->why);
    else
        feed__msg_keep_n(t->why, sizeof t->why, c->errstr[0] ? c->errstr : "connection lost");
}

/* A trip's commands are small, most of the time: formatted here on the
 * stack and written in one send(), instead of through hiredis's output
 * buffer. hiredis grows that buffer by realloc for every command and frees
 * it once written, and on glibc that pattern, repeated call after call,
 * fills the thread cache for its size, after which every free lands next to
 * the heap's top and consolidates the whole heap (malloc_consolidate): a
 * read by score cost 64k client instructions instead of 48k
 * (bench/client_cpu, callgrind). hiredis's own formatting (sdscatfmt per
 * argument) costs a further 1-2k per call. */
#define DIRECT_MAX 1024

/* May a trip's commands bypass hiredis and go straight to the socket? Only
 * with nothing of hiredis's own waiting in its output buffer (order), and
 * only on a plain connection: hiredis >= 1.0 may carry TLS (hiredis_ssl
 * keeps its state in privctx, documented in hiredis's main header as the SSL context),
 * where c->fd is the encrypted stream and only hiredis may write to it.
 * obuf and privctx are fields of the public redisContext in 0.14 and 1.x. */
static int direct_ok(const redisContext *c)
{
#if defined(HIREDIS_MAJOR) && HIREDIS_MAJOR >= 1
    if (c->privctx)
        return 0;
#endif
    return c->obuf[0] == '\0';
}

static int send_all(redisContext *c, const char *buf, size_t len)
{
    for (size_t done = 0; done < len;) {
        /* MSG_NOSIGNAL: a peer that went away is an EPIPE here, handled
         * as any failed write, not a SIGPIPE that ends the process. */
        ssize_t w = send(c->fd, buf + done, len - done, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            c->err = REDIS_ERR_IO;
            feed__msg_keep_n(c->errstr, sizeof c->errstr,
                             w < 0 ? strerror(errno) : "write returned 0");
            return -1;
        }
        done += (size_t)w;
    }
    return 0;
}

void feed__rs_write(redisContext *c, feed_trip *t)
{
    char buf[DIRECT_MAX];
    size_t at = 0;
    int direct = direct_ok(c), done = 0;

    t->io = FEED_IO_OK;
    t->got = 0;
    for (size_t k = 0; k < t->n; k++) {
        const char **argv;
        const size_t *lens;
        int argc = t->cmd(t->arg, k, &argv, &lens);
        if (direct && at + feed__resp_size(argc, lens) <= sizeof buf) {
            at += feed__resp_format(buf + at, argc, argv, lens);    /* lib/base/text.c */
            continue;
        }
        /* Too large (or no direct write): what is formatted goes first
         * through hiredis, then this command and the rest. */
        if ((at > 0 && redisAppendFormattedCommand(c, buf, at) != REDIS_OK) ||
            redisAppendCommandArgv(c, argc, argv, lens) != REDIS_OK) {
            t->io = FEED_IO_FAILED;
            snprintf(t->why, sizeof t->why, "out of memory");
            return;
        }
        direct = 0;
        at = 0;
    }
    if (at > 0) {
        if (send_all(c, buf, at) != 0)
            failed(c, t, errno);
        return;
    }
    while (!done) {
        if (redisBufferWrite(c, &done) != REDIS_OK) {
            failed(c, t, errno);
            return;
        }
    }
}

void feed__rs_read(redisContext *c, feed_trip *t)
{
    if (t->io != FEED_IO_OK)
        return;
    for (size_t k = 0; k < t->n; k++) {
        redisReply *r = NULL;
        if (redisGetReply(c, (void **)&r) != REDIS_OK || !r) {
            failed(c, t, errno);
            return;
        }
        t->got++;
        t->reply(t->arg, k, r);
        freeReplyObject(r);
    }
}
