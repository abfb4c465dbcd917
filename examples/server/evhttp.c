/* evhttp.c -- feed_server_evhttp: the example service on event loops, with
 * libevent's evhttp. The same HTTP API as feed_server (mhd.c), from the same
 * core (server.h); this file is the adapter.
 *
 * --threads N loops, one thread each, all accepting on one listening
 * socket. A loop owns one worker: its backend (backend_loop.c: feedcache,
 * and the write transactions on libpq's asynchronous calls, pg_async.c) is
 * used by that loop's thread only. A request is handed to the core once
 * evhttp has read it whole; its answer comes back through ev_send, at once
 * or from a later turn of the loop.
 *
 * What evhttp answers itself, with its own HTML page: a request it cannot
 * parse (400), headers or a target over MAX_HEAD (400), a body over
 * --max-body (413; refused before it is sent when the client declares its
 * length and sends "Expect: 100-continue"). libevent 2.1 has no hook before
 * the body is read; request.c's JSON 414 and 431 come first, below MAX_HEAD.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/queue.h>   /* TAILQ_FOREACH over evhttp's headers */
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/thread.h>

#include "backend_loop.h"

#define MAX_HEAD (256 * 1024)   /* evhttp's bound on target and headers: well above request.c's */

const char *progname = "feed_server_evhttp";

typedef struct loop {
    struct event_base *base;
    struct evhttp     *http;
    worker            *w;        /* created with the loop's first request */
    pthread_t          thread;
} loop;

typedef struct ev_request {
    request                rq;
    struct evhttp_request *req;
} ev_request;

static const char *method_name(enum evhttp_cmd_type cmd)
{
    switch (cmd) {
    case EVHTTP_REQ_GET:     return "GET";
    case EVHTTP_REQ_POST:    return "POST";
    case EVHTTP_REQ_HEAD:    return "HEAD";
    case EVHTTP_REQ_PUT:     return "PUT";
    case EVHTTP_REQ_DELETE:  return "DELETE";
    case EVHTTP_REQ_OPTIONS: return "OPTIONS";
    case EVHTTP_REQ_TRACE:   return "TRACE";
    case EVHTTP_REQ_CONNECT: return "CONNECT";
    case EVHTTP_REQ_PATCH:   return "PATCH";
    default:                 return "UNKNOWN";
    }
}

static void free_body(const void *data, size_t len, void *arg)
{
    (void)len;
    (void)arg;
    free((void *)data);
}

/* Queue the answer and free the request: the core is done with it. */
static void ev_send(request *rq, unsigned status, const char *const *headers, char *body,
                    size_t len)
{
    ev_request *e = (ev_request *)rq;
    struct evkeyvalq *out = evhttp_request_get_output_headers(e->req);
    struct evbuffer *buf = evbuffer_new();

    for (size_t i = 0; headers[i]; i += 2)
        evhttp_add_header(out, headers[i], headers[i + 1]);
    /* evhttp would send a HEAD answer's body: give it none. */
    if (buf && body && len && strcmp(rq->method, "HEAD") != 0 &&
        evbuffer_add_reference(buf, body, len, free_body, NULL) == 0)
        body = NULL;
    free(body);
    evhttp_send_reply(e->req, (int)status, NULL, buf);
    if (buf)
        evbuffer_free(buf);
    request_free(rq);
    free(e);
}

static const transport ev_transport = { ev_send };

/* evhttp has read the request whole: hand it to the core. */
static void on_request(struct evhttp_request *req, void *arg)
{
    loop *l = arg;
    ev_request *e = calloc(1, sizeof *e);
    const char *target = evhttp_request_get_uri(req);
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    struct evkeyval *h;
    size_t headers = 0, n = evbuffer_get_length(in);

    if (e)
        e->rq.start_us = now_us();
    if (!l->w)
        l->w = worker_new(&backend_loop_ops, backend_loop_new(l->base));
    if (!e || request_begin(&e->rq, &ev_transport, e, l->w,
                            method_name(evhttp_request_get_command(req)), target,
                            strlen(target)) != 0) {
        if (e)
            request_free(&e->rq);
        free(e);
        evhttp_send_error(req, 500, NULL);
        return;
    }
    e->req = req;
    TAILQ_FOREACH(h, evhttp_request_get_input_headers(req), next)
        headers += strlen(h->key) + strlen(h->value) + 4;   /* ": ", CRLF */
    if (request_limits(&e->rq, headers, NULL))
        return;
    if (n && request_body(&e->rq, (const char *)evbuffer_pullup(in, (ev_ssize_t)n), n) != 0) {
        respond_error(&e->rq, 500, "out of memory");
        return;
    }
    request_run(&e->rq);
}

/* ---- start and stop ---- */

/* The listening socket of --bind and --port, non-blocking; -1 (errno). */
static int listen_socket(void)
{
    struct sockaddr_storage ss;
    socklen_t len = server_address(&ss);
    int fd, one = 1;

    if ((fd = socket(ss.ss_family, SOCK_STREAM, 0)) < 0)
        return -1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, 1024) != 0 ||
        evutil_make_socket_nonblocking(fd) != 0 || evutil_make_socket_closeonexec(fd) != 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

static unsigned bound_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;

    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return opt.port;
    return ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                          : ((struct sockaddr_in *)&ss)->sin_port);
}

/* A loop accepting on (a duplicate of) fd. 0, or -1. */
static int loop_init(loop *l, int fd)
{
    int dup_fd;

    if (!(l->base = event_base_new()) || !(l->http = evhttp_new(l->base)))
        return -1;
    evhttp_set_gencb(l->http, on_request, l);
    evhttp_set_allowed_methods(l->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                               EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS |
                               EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
    evhttp_set_default_content_type(l->http, NULL);   /* a 204 has none */
    evhttp_set_max_headers_size(l->http, MAX_HEAD);
    evhttp_set_max_body_size(l->http, (ev_ssize_t)opt.max_body);
    evhttp_set_timeout(l->http, 30);
    /* Each loop closes its own descriptor of the one listening socket. */
    if ((dup_fd = dup(fd)) < 0)
        return -1;
    if (evhttp_accept_socket(l->http, dup_fd) != 0) {
        close(dup_fd);
        return -1;
    }
    return 0;
}

static void *loop_main(void *arg)
{
    loop *l = arg;

    event_base_dispatch(l->base);
    return NULL;
}

int main(int argc, char **argv)
{
    loop *loops;
    sigset_t sigs;
    unsigned started = 0;
    int rc, fd;

    if ((rc = server_start(argc, argv, "event loops, one thread, feedcache handle and write "
                           "connection each (default 4)", &sigs)) != 0)
        return rc;
    if (!(loops = calloc(opt.threads, sizeof *loops)) ||
        evthread_use_pthreads() != 0) {   /* loopexit from the main thread */
        fprintf(stderr, "%s: out of memory\n", progname);
        return 1;
    }
    if ((fd = listen_socket()) < 0) {
        fprintf(stderr, "%s: cannot listen on %s port %u: %s\n", progname, opt.bind, opt.port,
                strerror(errno));
        return 1;
    }
    for (; started < opt.threads; started++)
        if (loop_init(&loops[started], fd) != 0 ||
            pthread_create(&loops[started].thread, NULL, loop_main, &loops[started]) != 0) {
            fprintf(stderr, "%s: cannot start event loop %u\n", progname, started + 1);
            break;
        }
    if (started == opt.threads)
        server_wait(&sigs, bound_port(fd), "event loops");

    for (unsigned i = 0; i < started; i++)
        event_base_loopexit(loops[i].base, NULL);
    for (unsigned i = 0; i < started; i++)
        pthread_join(loops[i].thread, NULL);
    /* The loops have stopped: their workers are ours. Pending transactions
     * complete (and answer into evhttp) before evhttp is freed. */
    workers_close();
    for (unsigned i = 0; i <= started && i < opt.threads; i++) {
        if (loops[i].http)
            evhttp_free(loops[i].http);
        if (loops[i].base)
            event_base_free(loops[i].base);
    }
    close(fd);
    free(loops);
    writes_free();
    libevent_global_shutdown();
    return started == opt.threads ? 0 : 1;
}
