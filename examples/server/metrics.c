/* metrics.c -- GET /metrics: Prometheus text.
 *
 * Every counter of feed_stats, summed over the workers' handles, as
 * feedcache_<name>_total, by feed_stats_count()/feed_stats_name(): a counter
 * the library adds appears here with no change (tests/t_http.t compares the
 * names with the fields of struct feed_stats in lib/feedcache.h). Then the
 * server's own: failed hooks, requests by route and status, latency.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

static void metric(sbuf *b, const char *name, const char *type, const char *help)
{
    sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* ---- the workers ---- */

static pthread_mutex_t workers_lock = PTHREAD_MUTEX_INITIALIZER;
static worker *workers;

worker *worker_new(const backend_ops *ops, void *be)
{
    worker *w = calloc(1, sizeof *w);

    if (!w || !be || !(w->c.stats = calloc(feed_stats_count() + 1, sizeof *w->c.stats))) {
        free(w);
        if (be)
            ops->close(be);
        return NULL;
    }
    w->ops = ops;
    w->be = be;
    pthread_mutex_init(&w->lock, NULL);
    pthread_mutex_lock(&workers_lock);
    w->next = workers;
    workers = w;
    pthread_mutex_unlock(&workers_lock);
    return w;
}

void workers_close(void)
{
    pthread_mutex_lock(&workers_lock);
    while (workers) {
        worker *w = workers;
        workers = w->next;
        w->ops->close(w->be);
        pthread_mutex_destroy(&w->lock);
        free(w->c.stats);
        free(w);
    }
    pthread_mutex_unlock(&workers_lock);
}

size_t workers_sum(counters *sum, size_t nstats)
{
    size_t nworkers = 0;

    pthread_mutex_lock(&workers_lock);
    for (worker *w = workers; w; w = w->next) {
        pthread_mutex_lock(&w->lock);
        for (size_t i = 0; i < nstats; i++)
            sum->stats[i] += w->c.stats[i];
        for (size_t r = 0; r < R_COUNT; r++)
            for (size_t s = 0; s < N_STATUS; s++)
                sum->requests[r][s] += w->c.requests[r][s];
        for (size_t k = 0; k <= N_BUCKETS; k++)
            sum->buckets[k] += w->c.buckets[k];
        sum->latency_count += w->c.latency_count;
        sum->latency_sum_us += w->c.latency_sum_us;
        sum->hook_failures += w->c.hook_failures;
        sum->invalidations += w->c.invalidations;
        pthread_mutex_unlock(&w->lock);
        nworkers++;
    }
    pthread_mutex_unlock(&workers_lock);
    return nworkers;
}

static void requests(sbuf *b, const counters *sum)
{
    uint64_t cum = 0;

    metric(b, "feed_server_requests_total", "counter", "HTTP requests, by route and status.");
    for (size_t r = 0; r < R_COUNT; r++)
        for (size_t s = 0; s < N_STATUS; s++) {
            if (!sum->requests[r][s])
                continue;
            sb_printf(b, "feed_server_requests_total{route=\"%s\",code=\"", route_names[r]);
            if (s < N_STATUS - 1)
                sb_printf(b, "%u", status_codes[s]);
            else
                sb_printf(b, "other");
            sb_printf(b, "\"} %" PRIu64 "\n", sum->requests[r][s]);
        }
    metric(b, "feed_server_request_duration_seconds", "histogram",
           "Time from a request's first line to its queued response (this scrape excluded).");
    for (size_t k = 0; k < N_BUCKETS; k++) {
        cum += sum->buckets[k];
        sb_printf(b, "feed_server_request_duration_seconds_bucket{le=\"%g\"} %" PRIu64 "\n",
                  (double)bucket_us[k] / 1e6, cum);
    }
    cum += sum->buckets[N_BUCKETS];
    sb_printf(b, "feed_server_request_duration_seconds_bucket{le=\"+Inf\"} %" PRIu64 "\n", cum);
    sb_printf(b, "feed_server_request_duration_seconds_sum %.6f\n", (double)sum->latency_sum_us / 1e6);
    sb_printf(b, "feed_server_request_duration_seconds_count %" PRIu64 "\n", sum->latency_count);
}

void get_metrics(request *rq)
{
    size_t nstats = feed_stats_count(), nworkers;
    counters sum;
    sbuf b = { 0 };

    memset(&sum, 0, sizeof sum);
    if (!(sum.stats = calloc(nstats ? nstats : 1, sizeof *sum.stats))) {
        respond_error(rq, 500, "out of memory");
        return;
    }
    nworkers = workers_sum(&sum, nstats);
    for (size_t i = 0; i < nstats; i++) {
        char name[96], help[160];
        snprintf(name, sizeof name, "feedcache_%s_total", feed_stats_name(i));
        snprintf(help, sizeof help, "feed_stats.%s, summed over the workers' handles.",
                 feed_stats_name(i));
        metric(&b, name, "counter", help);
        sb_printf(&b, "%s %" PRIu64 "\n", name, sum.stats[i]);
    }
    free(sum.stats);
    metric(&b, "feed_server_hook_failures_total", "counter",
           "Write hooks that failed after their row committed.");
    sb_printf(&b, "feed_server_hook_failures_total %" PRIu64 "\n", sum.hook_failures);
    metric(&b, "feed_server_invalidations_total", "counter",
           "Cached copies this server dropped after a failed hook.");
    sb_printf(&b, "feed_server_invalidations_total %" PRIu64 "\n", sum.invalidations);
    metric(&b, "feed_server_workers", "gauge", "Workers (threads, or event loops) that have served a request.");
    sb_printf(&b, "feed_server_workers %zu\n", nworkers);
    requests(&b, &sum);
    if (b.failed) {
        free(b.data);
        respond_error(rq, 500, "out of memory");
        return;
    }
    respond(rq, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len, NULL);
}
