/* mhd.c -- feed_server: the example service on libmicrohttpd's thread pool.
 *
 *   GET    /                         an HTML page: a feed with infinite scroll
 *   GET    /users/{uid}/feed?limit=N&cursor=TOKEN   one page of uid's feed
 *   GET    /users/{uid}/feed/newer?cursor=TOKEN&limit=N   items newer than the cursor
 *   POST   /users/{uid}/items        {"id":..,"score":..}   new row, then feed_on_insert
 *   PUT    /users/{uid}/items        {"id":..,"score":..}   new score, then feed_on_insert
 *   PUT    /users/{uid}/items/{id}   {"score":..}           the same, id in the path
 *   DELETE /users/{uid}/items/{id}                           row gone, then feed_on_delete
 *   POST   /items/{id}/fanout        {"score":..,"uids":[..]} one row per uid, then feed_fanout
 *   GET    /metrics                  Prometheus text
 *   GET    /healthz                  whether Redis and PostgreSQL answer
 *   OPTIONS on any of them           Allow, and the CORS preflight answer
 *
 * This file is the adapter: libmicrohttpd's callbacks hand each request to
 * the shared core (server.h), whose answers come back through mhd_send.
 * libmicrohttpd runs --threads worker threads; a request is handled start to
 * end by one of them, over the blocking backend (backend_sync.c): each
 * worker thread owns one feedcache handle and one libpq connection.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "backend_sync.h"

#define MEMORY_LIMIT (256 * 1024)   /* per connection: well above request.c's limits */

const char *progname = "feed_server";

typedef struct mhd_request {
    request          rq;
    struct MHD_Connection *c;
    char            *target;    /* as sent, until the headers are in */
    size_t           target_len;
    int              started;   /* the headers are in */
    enum MHD_Result  ret;       /* of the queued answer */
} mhd_request;

/* The worker of this thread, created with its backend on first use. */
static worker *this_worker(void)
{
    static _Thread_local worker *self;

    if (!self)
        self = worker_new(&backend_sync_ops, backend_sync_new());
    return self;
}

static void mhd_send(request *rq, unsigned status, const char *const *headers, char *body,
                     size_t len)
{
    mhd_request *m = (mhd_request *)rq;
    struct MHD_Response *resp;

    /* body is malloc'd (jansson and sbuf both use malloc): MHD frees it. */
    resp = body ? MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE)
                : MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        free(body);
        m->ret = MHD_NO;
        return;
    }
    for (size_t i = 0; headers[i]; i += 2)
        MHD_add_response_header(resp, headers[i], headers[i + 1]);
    m->ret = MHD_queue_response(m->c, status, resp);
    MHD_destroy_response(resp);
}

static const transport mhd_transport = { mhd_send };

/* ---- libmicrohttpd's hooks ---- */

/* The first line is in: the request starts here, with its target as sent
 * (the url the handler gets is decoded and has lost its query). */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    mhd_request *m = calloc(1, sizeof *m);

    (void)cls;
    if (m) {
        m->rq.start_us = now_us();
        m->c = c;
        m->target_len = strlen(uri);
        if (!(m->target = strdup(uri))) {
            free(m);
            return NULL;
        }
    }
    return m;
}

static enum MHD_Result header_size(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    (void)kind;
    *(size_t *)cls += strlen(key) + (value ? strlen(value) : 0) + 4;   /* ": ", CRLF */
    return MHD_YES;
}

/* The headers are in, no body yet: hand the request over, check its limits. */
static enum MHD_Result on_headers(mhd_request *m, const char *method)
{
    size_t headers = 0;
    int rc = request_begin(&m->rq, &mhd_transport, m, this_worker(), method, m->target,
                           m->target_len);

    free(m->target);
    m->target = NULL;
    if (rc != 0)
        return MHD_NO;
    MHD_get_connection_values(m->c, MHD_HEADER_KIND, header_size, &headers);
    if (request_limits(&m->rq, headers, MHD_lookup_connection_value(m->c, MHD_HEADER_KIND,
                                                      MHD_HTTP_HEADER_CONTENT_LENGTH)))
        return m->ret;
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    mhd_request *m = *con_cls;

    (void)cls;
    (void)c;
    (void)url;
    (void)version;
    if (!m)   /* on_uri ran out of memory */
        return MHD_NO;
    if (!m->started) {
        m->started = 1;
        return on_headers(m, method);
    }
    if (m->rq.done)   /* answered early (413, 414, 431): discard what still arrives */
        return (*upload_data_size = 0, MHD_YES);
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        return request_body(&m->rq, upload_data, n) == 0 ? MHD_YES : MHD_NO;
    }
    m->ret = MHD_NO;
    request_run(&m->rq);
    /* The blocking backend completes before it returns: an answer is queued. */
    return m->rq.done ? m->ret : MHD_NO;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    mhd_request *m = *con_cls;

    (void)cls;
    (void)c;
    (void)toe;
    if (m) {
        free(m->target);
        request_free(&m->rq);
        free(m);
        *con_cls = NULL;
    }
}

/* ---- start and stop ---- */

static struct MHD_Daemon *start_daemon(void)
{
    struct sockaddr_storage ss;
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG;

    server_address(&ss);
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    return MHD_start_daemon(flags, (uint16_t)opt.port, NULL, NULL, on_request, NULL,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned)opt.threads,
                            MHD_OPTION_URI_LOG_CALLBACK, on_uri, NULL,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)MEMORY_LIMIT,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)1000,
                            MHD_OPTION_END);
}

int main(int argc, char **argv)
{
    const union MHD_DaemonInfo *info;
    struct MHD_Daemon *d;
    sigset_t sigs;
    int rc;

    if ((rc = server_start(argc, argv, "worker threads, one feedcache handle each (default 4)",
                           &sigs)) != 0)
        return rc;
    if (!(d = start_daemon())) {
        fprintf(stderr, "%s: cannot listen on %s port %u: %s\n", progname, opt.bind, opt.port,
                strerror(errno));
        return 1;
    }
    info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    server_wait(&sigs, info ? (unsigned)info->port : opt.port, "threads");
    MHD_stop_daemon(d);   /* joins the workers: their backends are ours now */
    workers_close();
    writes_free();
    return 0;
}
