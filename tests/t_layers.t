#!/usr/bin/env bash
# t_layers.t -- lib/'s files call one another in layers: api/ -> drive/ ->
# io/ -> core/ -> base/, never upwards, and no two files call each other in
# a circle, however long. Read off the built objects: a file calls another
# when its object needs a symbol the other's object defines (nm). And core/
# decides without doing I/O or reading a clock: no core/ object needs a
# Redis I/O call of hiredis, libpq, poll/select/epoll, a sleep, a clock, or
# a file or socket call (nm -u; the filter is first shown to catch each
# kind in a planted object).
set -u
# shellcheck source=tests/tap.bash
. "$(dirname "${BASH_SOURCE[0]}")/tap.bash"
BUILD=${BUILD:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

objs=$(find "$BUILD/lib" -name '*.o' ! -name scripts.o | sort)
[ -n "$objs" ]; verdict $? "the library's objects are built ($(echo "$objs" | wc -l) files)"
for o in $objs; do
    f=${o#"$BUILD"/lib/}
    f=${f%.o}.c
    nm --defined-only "$o" | awk -v f="$f" '$2 ~ /^[TDBR]$/ { print $3 "\t" f }'
done | sort -u > "$tmp/defs"
for o in $objs; do
    f=${o#"$BUILD"/lib/}
    f=${f%.o}.c
    nm --undefined-only "$o" | awk -v f="$f" '{ print $NF "\t" f }'
done | sort -u > "$tmp/uses"
# edges "caller callee", without self edges
join -t "$(printf '\t')" "$tmp/uses" "$tmp/defs" | awk -F'\t' '$2 != $3 { print $2, $3 }' |
    sort -u > "$tmp/edges"
[ -s "$tmp/edges" ]; verdict $? "found $(wc -l < "$tmp/edges") calls between files"

perl -e '
    my %rank = (api => 0, drive => 1, io => 2, core => 3, base => 4);
    my (%g, @up);
    open my $e, "<", $ARGV[0] or die;
    while (<$e>) {
        my ($a, $b) = split;
        push @{$g{$a}}, $b;
        my ($la) = $a =~ m{^(\w+)/}; my ($lb) = $b =~ m{^(\w+)/};
        push @up, "$a -> $b" if $rank{$la} > $rank{$lb};
    }
    # Tarjan: any strongly connected component of two or more files is a circle.
    my ($i, %idx, %low, @st, %on, @cyc) = (0);
    my $sc; $sc = sub {
        my $v = shift; $idx{$v} = $low{$v} = $i++; push @st, $v; $on{$v} = 1;
        for my $w (@{$g{$v} || []}) {
            if (!exists $idx{$w}) { $sc->($w); $low{$v} = $low{$w} if $low{$w} < $low{$v} }
            elsif ($on{$w}) { $low{$v} = $idx{$w} if $idx{$w} < $low{$v} }
        }
        if ($low{$v} == $idx{$v}) {
            my @c; my $w; do { $w = pop @st; $on{$w} = 0; push @c, $w } while ($w ne $v);
            push @cyc, join(" ", sort @c) if @c > 1;
        }
    };
    $sc->($_) for grep { !exists $idx{$_} } sort keys %g;
    open my $u, ">", $ARGV[1]; print $u "$_\n" for @up;
    open my $c, ">", $ARGV[2]; print $c "$_\n" for @cyc;
' "$tmp/edges" "$tmp/up" "$tmp/circles"
[ ! -s "$tmp/up" ]; verdict $? "no call goes up a layer (api > drive > io > core > base)$( [ -s "$tmp/up" ] && printf ': %s' "$(tr '\n' ';' < "$tmp/up")")"
[ ! -s "$tmp/circles" ]; verdict $? "no files call each other in a circle$( [ -s "$tmp/circles" ] && printf ': %s' "$(tr '\n' ';' < "$tmp/circles")")"

# ---- core/ does no I/O and reads no clock ----
# One extended regex over undefined symbols: hiredis I/O, libpq, waiting for
# descriptors, sleeping, clocks, files and sockets (and stdio's printing to
# them). Building replies (redisReply, freeReplyObject) is not I/O.
forbidden='^(redis(Connect|Reconnect|Command|vCommand|Append|GetReply|Buffer(Read|Write)|Async|Free|SetTimeout|EnableKeepAlive)[A-Za-z]*|PQ[A-Za-z]+|lo_[a-z]+|(p)?poll|(p)?select|epoll_[a-z_]+|kqueue|kevent|(u|nano|clock_nano)?sleep|clock_gettime|clock|time|gettimeofday|ftime|timespec_get|(f|fd|fre)?open(at)?(64)?|creat|close|fclose|(p)?read(v)?|(p)?write(v)?|fread|fwrite|fgets|fputs|puts|printf|fprintf|fflush|fsync|lseek|stat|fstat|lstat|unlink|mmap|socket|connect|accept|send(to|msg)?|recv(from|msg)?|getaddrinfo)(@.*)?$'
io_refs() {   # objects...: "file: symbol" for each forbidden reference
    local o
    for o in "$@"; do
        nm -u "$o" | awk '{ print $NF }' | grep -E "$forbidden" | sed "s|^|${o#"$BUILD"/lib/}: |"
    done
}
cat > "$tmp/planted.c" <<'C'
#include <poll.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include <hiredis/hiredis.h>
#include <libpq-fe.h>
int planted(void);
int planted(void)
{
    struct timespec ts;
    FILE *f = fopen("x", "r");
    redisContext *c = redisConnect("h", 1);
    void *r = redisCommand(c, "PING");
    clock_gettime(CLOCK_MONOTONIC, &ts);
    nanosleep(&ts, NULL);
    return (int)PQstatus(NULL) + poll(NULL, 0, 0) + (f != NULL) + (r != NULL);
}
C
planted=$(${CC:-cc} -std=c11 -D_POSIX_C_SOURCE=200809L -I"$(pg_config --includedir 2>/dev/null || echo /usr/include/postgresql)" \
          -c -o "$tmp/planted.o" "$tmp/planted.c" 2>&1 && io_refs "$tmp/planted.o" | sed 's/.*: //' | LC_ALL=C sort | tr "\n" " ")
is "$planted" "PQstatus clock_gettime fopen nanosleep poll redisCommand redisConnect " \
   "the filter catches a planted object's Redis, libpq, poll, sleep, clock and file calls"
core_objs=$(find "$BUILD/lib/core" -name '*.o' | sort)
[ -n "$core_objs" ]; verdict $? "core/'s objects are built ($(echo "$core_objs" | wc -l) files)"
# shellcheck disable=SC2086
io=$(io_refs $core_objs)
[ -z "$io" ]; verdict $? "no core/ object calls Redis, libpq, poll, sleep, a clock or a file$( [ -n "$io" ] && printf ': %s' "$(tr '\n' ';' <<<"$io")")"

echo "1..$n"
[ $failed = 0 ]
