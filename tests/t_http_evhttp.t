#!/usr/bin/env bash
# t_http_evhttp.t -- tests/t_http.t, every check of the HTTP API, against the
# event-loop server (feed_server_evhttp, examples/server/evhttp.c): the same
# routes, JSON, statuses, metrics, outages and shutdown as the threaded one.
BUILD=${BUILD:-build}
export FEED_HTTP_SERVER=$BUILD/examples/feed_server_evhttp FEED_HTTP_EVHTTP=1
exec bash "$(dirname "${BASH_SOURCE[0]}")/t_http.t"
