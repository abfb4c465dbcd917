#!/usr/bin/env bash
# t_commands.t -- every compile and link command line written in README.md,
# docs/ and the public headers (lib/*.h) is run, as written, against a
# `make install` into a temporary home (PREFIX=$HOME/.local, the README's
# install without root), and the program it builds runs against the test
# servers. A command is a line or a `backtick span` that starts with "cc "
# (in a comment, a sh block or a sentence), or a span "pkg-config ...".
# The program it names: minimal.c is examples/minimal.c, walk_async.c the
# sample of that name in docs/using.md, any other (app.c) a small program
# of the API its pkg-config modules name (blocking, libevent, libuv).
set -u
# shellcheck source=tests/tap.bash
. "$(dirname "${BASH_SOURCE[0]}")/tap.bash"
BUILD=${BUILD:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
hiredis=$(cat "$BUILD/hiredis-dir" 2>/dev/null || true)
export HOME=$tmp/home
mkdir -p "$HOME" "$tmp/work"
make -s install PREFIX="$HOME/.local" BUILD="$BUILD" ${hiredis:+HIREDIS="$hiredis"} >"$tmp/install.log" 2>&1
verdict $? "make install PREFIX=\$HOME/.local (a temporary home)"
export PKG_CONFIG_PATH=$HOME/.local/lib/pkgconfig LD_LIBRARY_PATH=$HOME/.local/lib

# Under `make check SANITIZE=1` the installed library is the sanitized one:
# every cc of a command gets the sanitizers too.
case "$BUILD" in *asan*) san="-fsanitize=address,undefined" ;; *) san= ;; esac
cc() { command cc $san "$@"; }

# The commands: one a line, "file:line: command".
perl -ne '
    BEGIN { $/ = undef }
    my $f = $ARGV;
    my $text = $_;
    my %seen;
    my $emit = sub { my ($at, $c) = @_; $c =~ s/\s+/ /g; $c =~ s/\s+$//;
                     my $l = 1 + (substr($text, 0, $at) =~ tr/\n//);
                     print "$f:$l: $c\n" unless $seen{$c}++ };
    while ($text =~ /`((?:cc|pkg-config) [^`]+)`/g) { $emit->($-[1], $1) }
    while ($text =~ /^[ \t]*(?:[*#\/]+[ \t]*)?(cc [^\n`]+\.c[^\n`]*)$/mg) { $emit->($-[1], $1) }
' README.md docs/*.md lib/*.h >"$tmp/commands"
n_cmd=$(wc -l <"$tmp/commands")
((n_cmd >= 6)); verdict $? "found $n_cmd command lines in README.md, docs/ and lib/*.h"

# The programs.
awk '/^```c$/ { on = 1; buf = ""; next } on && /^```$/ { on = 0; if (buf ~ /walk_async\.c/) { printf "%s", buf; exit } next }
     on { buf = buf $0 "\n" }' docs/using.md >"$tmp/work/walk_async.c"
grep -q 'int main' "$tmp/work/walk_async.c"; verdict $? "docs/using.md's walk_async.c sample found"
cp examples/minimal.c "$tmp/work/minimal.c"
cat >"$tmp/blocking.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <feedcache.h>
int main(void)
{
    feed_config cfg;
    feed *f;
    feed_result r;
    feed_config_init(&cfg);
    cfg.redis_port = atoi(getenv("FEED_REDIS_PORT"));
    cfg.pg_conninfo = getenv("FEED_PG_CONNINFO");
    if (feed_open(&f, &cfg) != FEED_OK || feed_page(f, 424250, FEED_FIRST, 0, 5, &r) != FEED_OK)
        return 1;
    printf("%zu items\n", r.count);
    feed_result_free(&r);
    feed_close(f);
    return 0;
}
C
cat >"$tmp/libevent.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <event2/event.h>
#include <feedcache.h>
#include <feedcache_libevent.h>
static int result = 1;
static void got(feed_async *a, int rc, feed_result *page, void *arg)
{
    (void)a;
    result = rc != FEED_OK;
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
    if (!base || feed_async_open_libevent(&a, &cfg, base) != FEED_OK ||
        feed_async_page(a, 424250, FEED_FIRST, 0, 5, got, base) != FEED_OK)
        return 1;
    event_base_dispatch(base);
    feed_async_close(a);
    event_base_free(base);
    return result;
}
C
cat >"$tmp/libuv.c" <<'C'
#include <stdlib.h>
#include <uv.h>
#include <feedcache.h>
#include <feedcache_libuv.h>
static int result = 1;
static void got(feed_async *a, int rc, feed_result *page, void *arg)
{
    result = rc != FEED_OK;
    feed_result_free(page);
    feed_async_close(a);
    (void)arg;
}
int main(void)
{
    uv_loop_t loop;
    feed_config cfg;
    feed_async *a;
    feed_config_init(&cfg);
    cfg.redis_port = atoi(getenv("FEED_REDIS_PORT"));
    cfg.pg_conninfo = getenv("FEED_PG_CONNINFO");
    if (uv_loop_init(&loop) != 0 || feed_async_open_libuv(&a, &cfg, &loop) != FEED_OK ||
        feed_async_page(a, 424250, FEED_FIRST, 0, 5, got, NULL) != FEED_OK)
        return 1;
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return result;
}
C

k=0
while IFS= read -r line; do
    where=${line%%: *}
    cmd=${line#*: }
    k=$((k + 1))
    if [[ $cmd == pkg-config* ]]; then
        out=$(eval "$cmd" 2>&1)
        verdict $? "$where: \`$cmd\` runs ($out)"
        continue
    fi
    src=$(grep -oE '[A-Za-z0-9_./-]+\.c' <<<"$cmd" | head -n1)
    bin=$(sed -nE 's/.* -o ([^ ]+).*/\1/p' <<<"$cmd")
    dir=$tmp/run$k
    mkdir -p "$dir"
    case $(basename "$src") in
    minimal.c | walk_async.c) cp "$tmp/work/$(basename "$src")" "$dir/$src" ;;
    *) case $cmd in
       *feedcache-libevent*) cp "$tmp/libevent.c" "$dir/$src" ;;
       *feedcache-libuv*) cp "$tmp/libuv.c" "$dir/$src" ;;
       *) cp "$tmp/blocking.c" "$dir/$src" ;;
       esac ;;
    esac
    (cd "$dir" && eval "$cmd") >"$dir/cc.log" 2>&1
    if ! verdict $? "$where: \`$cmd\` builds"; then
        sed 's/^/#   /' "$dir/cc.log" | head -n 8
        continue
    fi
    exe=$dir/${bin:-a.out}
    case $(basename "$src") in
    minimal.c) args=424251 ;;
    walk_async.c) args="424250 424251" ;;
    *) args= ;;
    esac
    # shellcheck disable=SC2086  # args: words
    out=$("$exe" $args 2>&1)
    verdict $? "  and the program runs against the test servers ($(tail -n1 <<<"$out"))"
done <"$tmp/commands"

echo "1..$n"
((failed == 0))
