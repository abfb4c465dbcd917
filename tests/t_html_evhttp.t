#!/usr/bin/env bash
# t_html_evhttp.t -- tests/t_html.t against the event-loop server
# (feed_server_evhttp): headless Chromium scrolls its page to the end of a
# feed and the DOM is checked against SQL; screenshot in
# $BUILD/artifacts/feed_evhttp.png.
BUILD=${BUILD:-build}
export FEED_HTTP_SERVER=$BUILD/examples/feed_server_evhttp FEED_HTML_SHOT=feed_evhttp.png
exec bash "$(dirname "${BASH_SOURCE[0]}")/t_html.t"
