#!/usr/bin/env bash
# t_readme.t -- every ```c sample of README.md and of the guides in docs/
# compiles against lib/feedcache.h (and the event-loop headers), so a
# sample that drifts from the API fails `make check`. A sample with a
# main() is a complete program: compiled as it is and linked with the
# library, its adapters and what they need ($BUILD/link-static, written by
# the Makefile: the same hiredis as the build's). Any other is a fragment:
# compiled inside a function body, after a prelude that declares what
# fragments take from the application around them (uid, show(), ...). A
# complete program that names itself in its first line ("/* minimal.c --")
# must also be that file of examples/, word for word.
set -u
# shellcheck source=tests/tap.bash
. "$(dirname "${BASH_SOURCE[0]}")/tap.bash"
BUILD=${BUILD:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CC=${CC:-cc}
# Samples show calls and leave results unused: no warnings about that.
flags="-std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Wpedantic -Werror -Wno-unused -Wno-unused-parameter -Wno-unused-but-set-variable -Ilib -I$(pg_config --includedir 2>/dev/null || echo /usr/include/postgresql)"

# Under `make check SANITIZE=1` the library is the sanitized one.
case "$BUILD" in *asan*) flags="$flags -fsanitize=address,undefined" ;; esac

# Split each Markdown file: sample K goes to $tmp/sample-K.c, its file and
# first line number to $tmp/sample-K.where ("README.md 42").
k=0
for md in README.md docs/*.md; do
    [ -f "$md" ] || continue
    k=$(awk -v dir="$tmp" -v md="$md" -v k="$k" '
        /^```c[ \t]*$/ { k++; inside = 1; print md, NR + 1 > (dir "/sample-" k ".where"); next }
        /^```/ && inside { inside = 0; next }
        inside { print > (dir "/sample-" k ".c") }
        END { print k }
    ' "$md")
done
count=$(ls "$tmp"/sample-*.c 2>/dev/null | wc -l)
[ "$count" -ge 10 ]; verdict $? "README.md and docs/*.md have $count C samples"

cat > "$tmp/prelude.h" <<'C'
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <event2/event.h>
#include "feedcache.h"
#include "feedcache_libevent.h"
#include "feedcache_libuv.h"
/* What the samples take from the application around them. */
static feed *f;
static feed_async *a;
static uv_loop_t *loop;
static void on_done(feed_async *h, int rc, void *arg) { (void)h; (void)rc; (void)arg; }
static int64_t uid, score, article_id, topic_id, reply_id, score_from_sql,
               top_score, top_id;
static const int64_t *follower_uids;
static size_t n;
static uint64_t likes, replies, day;
static void show(int64_t id, int64_t s) { printf("%" PRId64 " %" PRId64 "\n", id, s); }
C

shown=0
for src in $(ls "$tmp"/sample-*.c | sort -t- -k2 -n); do
    k=$(basename "$src" .c); read -r md line < "$tmp/$k.where"
    if grep -q '^int main(' "$src"; then
        # shellcheck disable=SC2046  # the link line is words
        $CC $flags "$src" -o "$tmp/$k" $(cat "$BUILD/link-static") \
            > "$tmp/$k.log" 2>&1
        rc=$?
        what="$md:$line: complete program compiles and links"
        # A program that names itself must be that example, word for word.
        name=$(sed -n '1s|^/\* \([a-z_]*\.c\) --.*|\1|p' "$src")
        if [ -n "$name" ]; then
            [ -f "examples/$name" ] && cmp -s "$src" <(sed -e '$a\' "examples/$name")
            verdict $? "$md:$line: the program is examples/$name, word for word"
            shown=$((shown + 1))
        fi
    else
        { echo "#include \"$tmp/prelude.h\""; echo "int sample(void);"; echo "int sample(void) {";
          echo "#line $line \"$md\""; cat "$src"; echo "return 0; }"; } > "$tmp/$k.wrapped.c"
        $CC $flags -c "$tmp/$k.wrapped.c" -o "$tmp/$k.o" > "$tmp/$k.log" 2>&1
        rc=$?
        what="$md:$line: fragment compiles"
    fi
    verdict $rc "$what"
    [ $rc = 0 ] || sed 's/^/# /' "$tmp/$k.log" | head -20
done
[ "$shown" -ge 1 ]; verdict $? "a complete example program is shown ($shown)"

echo "1..$n"
[ $failed = 0 ]
