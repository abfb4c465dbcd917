#!/usr/bin/env bash
# t_layers.t -- lib/'s files call one another in layers: api/ -> drive/ ->
# io/ -> core/ -> base/, never upwards, and no two files call each other in
# a circle, however long. Read off the built objects: a file calls another
# when its object needs a symbol the other's object defines (nm).
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

echo "1..$n"
[ $failed = 0 ]
