/* tls.c -- TLS to Redis: one client context per handle, and a TLS session
 * begun on every connection the handle opens (lib/io/redis_sync.c,
 * lib/io/redis_async.c), whichever node it goes to: the single Redis, a
 * Sentinel, the primary a Sentinel names, a cluster node, a node a redirect
 * names.
 *
 * The context is OpenSSL's own (SSL_CTX), not hiredis_ssl's redisSSLContext:
 * hiredis_ssl checks the certificate chain but never the name in it, so any
 * certificate a trusted CA signed (for any host) would pass, and with the
 * system's CA store that is anyone's. Here each session is told the name to
 * expect (redis_tls_server_name, else the host connected to: a DNS name, or
 * an IP address matched against the certificate's IP subjectAltNames), and
 * hiredis_ssl gets the session (redisInitiateSSL) to read and write through.
 *
 * Why a handshake failed: OpenSSL keeps it on the thread's error queue. A
 * blocking connect makes the handshake here and says so; on a loop the
 * handshake happens as the first bytes go, and hiredis_ssl reports a
 * failure there as a bare I/O error, so feed__tls_why() reads the queue
 * right after (same thread, same turn of the loop) to name the cause.
 *
 * That queue must be empty before each SSL_read and SSL_write: hiredis_ssl
 * asks SSL_get_error() whether a read or write that returned nothing must
 * wait (a record not yet whole, a full socket) or failed, and
 * SSL_get_error() answers "failed" whenever anything is on the queue, a
 * reason another OpenSSL user on the thread (the application, libpq) left
 * there included; the connection is dropped and that reason named.
 * OpenSSL empties the queue itself at each step of a handshake, hiredis_ssl
 * never does, and on a loop its reads and writes run from the loop's
 * callbacks, where no code of the library runs first. So every TLS
 * connection reads and writes through tls_funcs: hiredis_ssl's function
 * table (redisContextFuncs, the transport table of hiredis.h's public
 * redisContext, copied whole) with read and write wrapped to empty the
 * queue first, on the blocking and the async API alike.
 *
 * Built without hiredis_ssl (FEED_HAVE_TLS 0) no handle has a context:
 * config.c refuses every TLS field first.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"

int feed_tls_supported(void)
{
    return FEED_HAVE_TLS;
}

#if FEED_HAVE_TLS

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <unistd.h>

#include <hiredis/hiredis_ssl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

struct feed_tls {
    SSL_CTX *ctx;
    char    *server_name;       /* NULL: each connection's host */
    int      verify;
    int      has_cert;          /* a client certificate is offered */
};

static pthread_once_t tls_once = PTHREAD_ONCE_INIT;

/* hiredis_ssl's function table as redisInitiateSSL set it (ssl_funcs), and
 * the one every TLS context here gets (tls_funcs): the same, with read and
 * write emptying the thread's error queue first. Filled once, from the
 * first context made. */
static pthread_mutex_t   tls_funcs_lock = PTHREAD_MUTEX_INITIALIZER;
static redisContextFuncs ssl_funcs, tls_funcs;
static const redisContextFuncs *ssl_funcs_from;

static ssize_t tls_read(redisContext *c, char *buf, size_t cap)
{
    ERR_clear_error();
    return ssl_funcs.read(c, buf, cap);
}

static ssize_t tls_write(redisContext *c)
{
    ERR_clear_error();
    return ssl_funcs.write(c);
}

/* c (just given its TLS session) reads and writes through tls_funcs. A
 * table other than the first one seen is left alone (one hiredis_ssl has
 * one). */
static void tls_wrap_io(redisContext *c)
{
    pthread_mutex_lock(&tls_funcs_lock);
    if (!ssl_funcs_from && c->funcs && c->funcs->read && c->funcs->write) {
        ssl_funcs = *c->funcs;
        tls_funcs = ssl_funcs;
        tls_funcs.read = tls_read;
        tls_funcs.write = tls_write;
        ssl_funcs_from = c->funcs;
    }
    if (ssl_funcs_from && c->funcs == ssl_funcs_from)
        c->funcs = &tls_funcs;
    pthread_mutex_unlock(&tls_funcs_lock);
}

static void tls_init_once(void)
{
    redisInitOpenSSL();
}

/* The reason OpenSSL recorded last on this thread, or NULL; the queue is
 * emptied so that a later failure never reads this one. */
static const char *tls_reason(void)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;

    ERR_clear_error();
    return r;
}

/* The first of cfg's files that cannot be read at all, as *bad (its field)
 * and *what (its name), the reason in errno_why. */
static int unreadable(const feed_config *cfg, const char **bad, const char **what,
                      char *errno_why, size_t len)
{
    const char *field[4] = { "redis_tls_ca_file", "redis_tls_cert_file", "redis_tls_key_file",
                             "redis_tls_ca_dir" };
    const char *path[4] = { cfg->redis_tls_ca_file, cfg->redis_tls_cert_file,
                            cfg->redis_tls_key_file, cfg->redis_tls_ca_dir };

    errno_why[0] = '\0';
    for (int i = 0; i < 4; i++) {
        if (!path[i] || access(path[i], i < 3 ? R_OK : R_OK | X_OK) == 0)
            continue;
        feed__msg_keep_n(errno_why, len, strerror(errno));
        *bad = field[i];
        *what = path[i];
        return 1;
    }
    return 0;
}

int feed__tls_open(const feed_config *cfg, feed_tls **out, char *why, size_t cap)
{
    feed_tls *t;
    const char *bad = NULL, *what = NULL;
    char errno_why[128];

    *out = NULL;
    if (!cfg->redis_tls)
        return FEED_OK;
    pthread_once(&tls_once, tls_init_once);
    if (!(t = calloc(1, sizeof *t)) || !(t->ctx = SSL_CTX_new(TLS_client_method())) ||
        (cfg->redis_tls_server_name && !(t->server_name = strdup(cfg->redis_tls_server_name)))) {
        feed__tls_free(t);
        snprintf(why, cap, "out of memory for the TLS context");
        return FEED_ENOMEM;
    }
    t->verify = cfg->redis_tls_verify;
    t->has_cert = cfg->redis_tls_cert_file != NULL;
    ERR_clear_error();
    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(t->ctx, t->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    /* A partial write is retried by hiredis_ssl from its own buffer,
     * which may have moved since. */
    SSL_CTX_set_mode(t->ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (unreadable(cfg, &bad, &what, errno_why, sizeof errno_why)) {
        /* said with errno: OpenSSL's own reason would be "system lib" */
    } else if (cfg->redis_tls_ca_file || cfg->redis_tls_ca_dir) {
        if (SSL_CTX_load_verify_locations(t->ctx, cfg->redis_tls_ca_file,
                                          cfg->redis_tls_ca_dir) != 1) {
            bad = cfg->redis_tls_ca_file ? "redis_tls_ca_file" : "redis_tls_ca_dir";
            what = cfg->redis_tls_ca_file ? cfg->redis_tls_ca_file : cfg->redis_tls_ca_dir;
        }
    } else if (SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
        bad = "the system's CA store";
        what = "";
    }
    if (!bad && cfg->redis_tls_cert_file) {
        if (SSL_CTX_use_certificate_chain_file(t->ctx, cfg->redis_tls_cert_file) != 1) {
            bad = "redis_tls_cert_file";
            what = cfg->redis_tls_cert_file;
        } else if (SSL_CTX_use_PrivateKey_file(t->ctx, cfg->redis_tls_key_file,
                                               SSL_FILETYPE_PEM) != 1 ||
                   SSL_CTX_check_private_key(t->ctx) != 1) {
            bad = "redis_tls_key_file";
            what = cfg->redis_tls_key_file;
        }
    }
    if (bad) {
        const char *r = errno_why[0] ? errno_why : tls_reason();
        if (*what)
            snprintf(why, cap, "%s \"%s\" cannot be loaded: %s", bad, what,
                     r ? r : "unknown error");
        else
            snprintf(why, cap, "%s cannot be loaded: %s", bad, r ? r : "unknown error");
        feed__tls_free(t);
        return FEED_EINVAL;
    }
    *out = t;
    return FEED_OK;
}

void feed__tls_free(feed_tls *t)
{
    if (!t)
        return;
    if (t->ctx)
        SSL_CTX_free(t->ctx);
    free(t->server_name);
    free(t);
}

/* The name the certificate must carry, set on session s. */
static int tls_expect(const feed_tls *t, SSL *s, const char *host)
{
    const char *name = t->server_name ? t->server_name : host;
    unsigned char ip[16];
    int is_ip = inet_pton(AF_INET, name, ip) == 1 || inet_pton(AF_INET6, name, ip) == 1;

    /* SNI carries a DNS name only (RFC 6066). */
    if (!is_ip && SSL_set_tlsext_host_name(s, name) != 1)
        return -1;
    if (!t->verify)
        return 0;
    if (is_ip)
        return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(s), name) == 1 ? 0 : -1;
    SSL_set_hostflags(s, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    return SSL_set1_host(s, name) == 1 ? 0 : -1;
}

int feed__tls_begin(const feed_tls *t, redisContext *c, const char *host, char *why, size_t cap)
{
    SSL *s;

    if (!t)
        return 0;
    ERR_clear_error();
    if (!(s = SSL_new(t->ctx)) || tls_expect(t, s, host) != 0) {
        const char *r = tls_reason();
        if (s)
            SSL_free(s);
        snprintf(why, cap, "TLS set-up failed: %s", r ? r : "out of memory");
        return -1;
    }
    /* Blocking: the handshake is made now, within the context's timeout;
     * non-blocking: begun, and finished as the first bytes go. On success
     * the session is hiredis's, freed with the context; not on failure. */
    if (redisInitiateSSL(c, s) != REDIS_OK) {
        SSL_free(s);
        feed__tls_why(c, 1, why, cap);
        return -1;
    }
    tls_wrap_io(c);
    /* For feed__tls_why (hiredis leaves privdata to its user: not freed). */
    c->privdata = (void *)t;
    return 0;
}

void feed__tls_why(const redisContext *c, int handshake, char *why, size_t cap)
{
    const feed_tls *t = c->privdata;
    const char *r = tls_reason();
    const char *what = handshake ? "TLS handshake failed" : "TLS";
    const char *errstr = c->errstr[0] ? c->errstr : "connection lost";

    if (r) {
        /* A plaintext Redis answers a ClientHello with an error line,
         * which reads as a record of no known version. */
        int plain = strstr(r, "wrong version number") || strstr(r, "packet length too long") ||
                    strstr(r, "record layer failure");
        snprintf(why, cap, "%s: %s%s", what, r, plain ? " (is this port plaintext, not TLS?)" : "");
    } else if (handshake && strstr(errstr, "temporarily unavailable")) {
        /* A plaintext Redis may also wait for the rest of a "command". */
        snprintf(why, cap, "TLS handshake timed out (is this port plaintext, not TLS?)");
    } else if (t && !t->has_cert && (c->err == REDIS_ERR_EOF || strstr(errstr, "reset"))) {
        /* Under TLS 1.3 a server checks the client's certificate after
         * the client's handshake is done, and closes at once when there is
         * none: its alert, if it came before the close, would have been
         * the reason above. */
        snprintf(why, cap, "%s: %s (over TLS without a client certificate: does the server "
                 "require one, tls-auth-clients?)", what, errstr);
    } else if (handshake) {
        snprintf(why, cap, "%s: %s", what, errstr);
    } else {
        /* hiredis_ssl's read or write failed with nothing recorded: its
         * own text (a close, a timeout, strerror). */
        feed__msg_keep_n(why, cap, errstr);
    }
}

int feed__tls_on(const redisContext *c)
{
    /* hiredis 1.x keeps the TLS session there; a plain socket has none. */
    return c->privctx != NULL;
}

#else /* !FEED_HAVE_TLS */

int feed__tls_open(const feed_config *cfg, feed_tls **out, char *why, size_t cap)
{
    (void)cfg, (void)why, (void)cap;
    *out = NULL;
    return FEED_OK;
}

void feed__tls_free(feed_tls *t)
{
    (void)t;
}

int feed__tls_begin(const feed_tls *t, redisContext *c, const char *host, char *why, size_t cap)
{
    (void)t, (void)c, (void)host, (void)why, (void)cap;
    return 0;
}

void feed__tls_why(const redisContext *c, int handshake, char *why, size_t cap)
{
    (void)handshake;
    feed__msg_keep_n(why, cap, c->errstr[0] ? c->errstr : "connection lost");
}

int feed__tls_on(const redisContext *c)
{
    (void)c;
    return 0;
}

#endif /* FEED_HAVE_TLS */
