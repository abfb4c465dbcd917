#!/usr/bin/env bash
# t_install.t -- `make install` with PREFIX and DESTDIR gives a header, both
# libraries, sql/*.sql under share/feedcache and a pkg-config file with which
# an outside program builds (shared and static) and reads a page from the test
# servers; the event-loop adapters come as their own libraries and
# pkg-config modules (feedcache-libevent, feedcache-libuv), and a program of
# the blocking API links no event loop.
set -u
# shellcheck source=tests/tap.bash
. "$(dirname "${BASH_SOURCE[0]}")/tap.bash"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
prefix=/opt/feedcache-test
# The build's own hiredis (make HIREDIS=DIR): the Makefile wrote which.
hiredis=$(cat "${BUILD:-build}/hiredis-dir" 2>/dev/null || true)
make -s install PREFIX=$prefix DESTDIR="$stage" BUILD="${BUILD:-build}" ${hiredis:+HIREDIS="$hiredis"} >/dev/null 2>&1
verdict $? "make install PREFIX=$prefix DESTDIR=..."
root=$stage$prefix
for f in include/feedcache.h lib/libfeedcache.a lib/libfeedcache.so lib/libfeedcache.so.0 \
         lib/pkgconfig/feedcache.pc \
         include/feedcache_libevent.h lib/libfeedcache-libevent.a lib/libfeedcache-libevent.so \
         lib/libfeedcache-libevent.so.0 lib/pkgconfig/feedcache-libevent.pc \
         include/feedcache_libuv.h lib/libfeedcache-libuv.a lib/libfeedcache-libuv.so \
         lib/libfeedcache-libuv.so.0 lib/pkgconfig/feedcache-libuv.pc; do
    test -e "$root/$f"; verdict $? "installed $f"
done
grep -q "^prefix=$prefix\$" "$root/lib/pkgconfig/feedcache.pc"
verdict $? "feedcache.pc names the real prefix, not the staging folder"
grep -q "^License: BSD-3-Clause\$" "$root/lib/pkgconfig/feedcache.pc"
verdict $? "feedcache.pc names the licence"
for f in schema.sql score.sql authors.sql; do
    cmp -s "sql/$f" "$root/share/feedcache/$f"; verdict $? "installed share/feedcache/$f, same as sql/$f"
done
test ! -e "$prefix/share/feedcache"; verdict $? "  under DESTDIR only, not in $prefix itself"

cat > "$stage/app.c" <<'C'
#include <feedcache.h>
#include <stdio.h>
#include <stdlib.h>
int main(void)
{
    feed_config cfg;
    feed *f;
    feed_result r;
    feed_config_init(&cfg);
    cfg.redis_port = atoi(getenv("FEED_REDIS_PORT"));
    cfg.pg_conninfo = getenv("FEED_PG_CONNINFO");
    if (feed_open(&f, &cfg) != FEED_OK) { fprintf(stderr, "%s\n", feed_errmsg(NULL)); return 1; }
    if (feed_page(f, 424242, FEED_FIRST, 0, 10, &r) != FEED_OK) { fprintf(stderr, "%s\n", feed_errmsg(f)); return 1; }
    printf("%zu %d\n", r.count, (int)r.source);
    feed_result_free(&r);
    feed_close(f);
    return 0;
}
C
export PKG_CONFIG_PATH=$root/lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$stage
# The static links take the libraries' flags as installed, hiredis's -L (a
# build with HIREDIS=DIR names DIR) included: the sysroot would move that -L
# into the staging folder too, so the staged paths are given as variables.
pc_static() {
    PKG_CONFIG_SYSROOT_DIR= pkg-config --define-variable=libdir="$root/lib" \
        --define-variable=includedir="$root/include" --static "$@"
}
# Under `make check SANITIZE=1` the installed library is the sanitized one,
# and a program linking it needs the sanitizer runtimes too.
case "${BUILD:-build}" in *asan*) san=-fsanitize=address,undefined ;; *) san= ;; esac
psql "$FEED_PG_CONNINFO" -qc "DELETE FROM feed_entry WHERE uid = 424242;
    INSERT INTO feed_entry VALUES (424242, 1, 1), (424242, 2, 2)" >/dev/null
redis-cli -h "$FEED_REDIS_HOST" -p "$FEED_REDIS_PORT" DEL "$(fkey 424242)" >/dev/null
cc -std=c11 -Wall -Werror $san "$stage/app.c" -o "$stage/app" $(pkg-config --cflags --libs feedcache) 2>&1
verdict $? "an outside program builds with pkg-config (shared)"
out=$(LD_LIBRARY_PATH=$root/lib "$stage/app" 2>&1)
[ "$out" = "2 2" ]; verdict $? "  and reads a page of 2 items, rebuilt (got: $out)"
loops=$(readelf -d "$stage/app" "$root/lib/libfeedcache.so" | grep -E 'NEEDED.*(libevent|libuv)' | tr -s ' ')
[ -z "$loops" ]; verdict $? "  neither it nor libfeedcache.so links an event loop${loops:+: $loops}"
! pkg-config --libs --static feedcache | grep -qE -- '-l(event|uv)'
verdict $? "  pkg-config --static feedcache names no event loop"
# The command examples/minimal.c gives; libpq's flags without the staging
# sysroot, which only the staged feedcache.pc needs.
cc -std=c11 -Wall -Werror $san examples/minimal.c -o "$stage/minimal" $(pkg-config --cflags --libs feedcache) \
    $(PKG_CONFIG_SYSROOT_DIR= pkg-config --cflags --libs libpq) 2>&1
verdict $? "examples/minimal.c builds with pkg-config feedcache libpq, as its comment says"
cc -std=c11 -Wall -Werror $san "$stage/app.c" -o "$stage/app-static" \
    $(pkg-config --cflags feedcache) "$root/lib/libfeedcache.a" $(pc_static --libs feedcache | sed "s/-lfeedcache //") 2>&1
verdict $? "builds against the static library with pkg-config --static"
out=$("$stage/app-static" 2>&1)
[ "$out" = "2 1" ]; verdict $? "  and reads the same page from the cache (got: $out)"
# The asynchronous API from the installed headers, on libevent.
cat > "$stage/async.c" <<'C'
#include <feedcache.h>
#include <feedcache_libevent.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
static void got(feed_async *a, int rc, feed_result *page, void *arg)
{
    if (rc == FEED_OK)
        printf("%zu %d\n", page->count, (int)page->source);
    else
        printf("error %s\n", feed_async_errmsg(a));
    feed_result_free(page);
    event_base_loopbreak(arg);
}
int main(void)
{
    struct event_base *base = event_base_new();
    feed_config cfg;
    feed_async *a;
    feed_config_init(&cfg);
    cfg.redis_port = atoi(getenv("FEED_REDIS_PORT"));
    cfg.pg_conninfo = getenv("FEED_PG_CONNINFO");
    if (feed_async_open_libevent(&a, &cfg, base) != FEED_OK) return 1;
    if (feed_async_page(a, 424242, FEED_FIRST, 0, 10, got, base) != FEED_OK) return 1;
    event_base_dispatch(base);
    feed_async_close(a);
    event_base_free(base);
    return 0;
}
C
cc -std=c11 -Wall -Werror $san "$stage/async.c" -o "$stage/async" $(pkg-config --cflags --libs feedcache-libevent) 2>&1
verdict $? "an event-loop program builds with feedcache_libevent.h and pkg-config feedcache-libevent"
out=$(LD_LIBRARY_PATH=$root/lib "$stage/async" 2>&1)
[ "$out" = "2 1" ]; verdict $? "  and reads the page on its loop (got: $out)"
readelf -d "$stage/async" | grep -q 'NEEDED.*\[libfeedcache-libevent\.so\.0\]'
verdict $? "  it links libfeedcache-libevent.so.0"
cc -std=c11 -Wall -Werror $san "$stage/async.c" -o "$stage/async-static" $(pkg-config --cflags feedcache-libevent) \
    "$root/lib/libfeedcache-libevent.a" "$root/lib/libfeedcache.a" \
    $(pc_static --libs feedcache-libevent | sed -e "s/-lfeedcache-libevent //" -e "s/-lfeedcache //") 2>&1
verdict $? "  and against the static libraries with pkg-config --static feedcache-libevent"
out=$("$stage/async-static" 2>&1)
[ "$out" = "2 1" ]; verdict $? "  which read the page too (got: $out)"
cat > "$stage/uv.c" <<'C'
#include <feedcache.h>
#include <feedcache_libuv.h>
int main(void)
{
    feed_config cfg;
    feed_async *a;
    feed_config_init(&cfg);
    /* A NULL loop is refused: the adapter's library answers. */
    return feed_async_open_libuv(&a, &cfg, NULL) == FEED_EINVAL && a == NULL ? 0 : 1;
}
C
cc -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Werror $san "$stage/uv.c" -o "$stage/uv" $(pkg-config --cflags --libs feedcache-libuv) 2>&1
verdict $? "a libuv program builds with feedcache_libuv.h and pkg-config feedcache-libuv (uv.h wants POSIX)"
LD_LIBRARY_PATH=$root/lib "$stage/uv"; verdict $? "  and runs (a NULL loop refused)"
psql "$FEED_PG_CONNINFO" -qc "DELETE FROM feed_entry WHERE uid = 424242" >/dev/null

echo "1..$n"
[ $failed = 0 ]
