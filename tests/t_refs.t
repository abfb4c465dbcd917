#!/usr/bin/env bash
# t_refs.t -- every file a comment or a README names is in the repository,
# and every link of the README and docs/ leads to a file and heading
# (or built from it): no pointers to notes that live elsewhere (API pages,
# design notes outside the tree) or to files renamed away. Looked at: comment
# lines of the sources, scripts and makefiles, and the Markdown files. A name
# with a folder must exist at that path (from the top or from the file's
# folder); a bare name must be some file's name. Built files count (any
# path under build/, which the build or a test run makes, and a file made
# from its .in template); system headers do not appear:
# #include lines are not comments. Names that stand for the reader's own
# files are listed in ALLOWED, with where they appear.
set -u
# shellcheck source=tests/tap.bash
. "$(dirname "${BASH_SOURCE[0]}")/tap.bash"
BUILD=${BUILD:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Every file name we have: sources, and what the build made.
find . \( -name .git -o -name 'corpus' -o -name '.demo' \) -prune -o -type f -print |
    sed 's|^\./||' > "$tmp/files"
sed -n 's|\.in$||p' "$tmp/files" >> "$tmp/files"
# A bare name may also be a system header the code includes (hiredis.h).
{ sed 's|.*/||' "$tmp/files"; find /usr/include -name '*.h' -printf '%f\n' 2>/dev/null; } |
    sort -u > "$tmp/names"

ext='c|h|lua|sql|md|mk|sh|t|png|pc|gp|in'
ALLOWED=(
    "README.md: app.c"            # cc app.c $(pkg-config ...): the reader's program
    "docs/using.md: walk_async.c" # the async sample, saved as the reader's own file
    "docs/using.md: app.c"        # the link lines: the reader's program
    "lib/feedcache_libevent.h: app.c"
    "lib/feedcache_libuv.h: app.c"
    "tests/t_commands.t: app.c"   # it runs those link lines on programs of its own
    "tests/t_commands.t: walk_async.c"
    "docs/performance.md: storm.png" # the chart each run of section storm writes
    "tools/embed.c: lua/a.lua"    # its usage line: any scripts
    "tools/embed.c: lua/b.lua"
)
refs() {  # file -> "file<TAB>reference" for each path-like word of its comments
    local f=$1 lines
    case "$f" in
        *.md) lines=$(grep -v '^    \|^\$ ' "$f") ;;
        *) lines=$(grep -E '^\s*(/\*|\*|//|--|#($|[^i!]))' "$f") ;;
    esac
    grep -oE "(^|[^A-Za-z0-9_./\$<>{*-])[A-Za-z0-9_][A-Za-z0-9_./-]*\.($ext)\b" <<<"$lines" |
        sed -E 's/^[^A-Za-z0-9_]//' | sort -u | sed "s|^|$f	|"
}
checked=0
: > "$tmp/bad"
for f in $(grep -E "^(lib|lua|tests|examples|tools|bench|sql|sync)/.*\.($ext)\$|^Makefile\$|^[^/]*\.md\$|^[^/]*/[^/]*\.md\$" "$tmp/files" |
           grep -v "^$BUILD/\|^build\|\.png\$"); do
    while IFS=$'\t' read -r src ref; do
        [ -n "$ref" ] || continue
        checked=$((checked + 1))
        r=${ref#./}
        for a in "${ALLOWED[@]}"; do [ "$a" = "$src: $ref" ] && continue 2; done
        case "$r" in
            build/* | build-*/* | "$BUILD"/*) ;;   # made by the build or a test run
            */*) grep -qxF "$r" "$tmp/files" || [ -e "$r" ] || [ -e "$(dirname "$src")/$r" ] ||
                 echo "$src: $ref" >> "$tmp/bad" ;;
            *)   grep -qxF "$r" "$tmp/names" || echo "$src: $ref" >> "$tmp/bad" ;;
        esac
    done < <(refs "$f")
done
[ "$checked" -gt 100 ]; verdict $? "found $checked file references in comments and Markdown"
[ ! -s "$tmp/bad" ]; verdict $? "every one resolves$( [ -s "$tmp/bad" ] && printf ' (not: %s)' "$(tr '\n' ' ' < "$tmp/bad")")"

# Every link of the README and the guides in docs/: [text](target) and
# ![alt](target), outside code. A relative target must exist (from the
# Markdown file's folder); a #fragment must name a heading of its file, as
# GitHub makes anchors of headings (lower case, punctuation dropped, spaces
# to hyphens, -1, -2 ... after repeats). Web addresses are not fetched.
# shellcheck disable=SC2016  # the Perl program is in single quotes on purpose
mapfile -t links < <(ls README.md docs/*.md 2>/dev/null)
perl -CSD -Mutf8 -e '
    use strict; use warnings;
    my (%anchors, $n, $bad);
    sub anchors {
        my ($file) = @_;
        return $anchors{$file} if $anchors{$file};
        my (%seen, %set, $fence);
        open(my $in, "<:encoding(UTF-8)", $file) or return $anchors{$file} = {};
        while (<$in>) {
            $fence = !$fence if /^\s*```/;
            next if $fence || !/^#{1,6}\s+(.*?)\s*#*\s*$/;
            (my $s = lc $1) =~ s/\[([^\]]*)\]\([^)]*\)/$1/g;
            $s =~ s/[^\p{L}\p{N}\p{M}\p{Pc} -]//g;
            $s =~ s/ /-/g;
            my $k = $seen{$s}++;
            $set{$k ? "$s-$k" : $s} = 1;
        }
        return $anchors{$file} = \%set;
    }
    for my $md (@ARGV) {
        open(my $in, "<:encoding(UTF-8)", $md) or die "$md: $!";
        (my $dir = $md) =~ s{[^/]*$}{};
        my $fence;
        while (my $line = <$in>) {
            $fence = !$fence if $line =~ /^\s*```/;
            next if $fence;
            $line =~ s/`[^`]*`//g;                  # inline code is not a link
            while ($line =~ /!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g) {
                my $t = $1;
                $n++;
                next if $t =~ m{^[a-z]+:}i;          # http:, https:, mailto:
                my ($path, $frag) = $t =~ /^([^#]*)(?:#(.*))?$/;
                my $file = $path eq "" ? $md : "$dir$path";
                if ($path ne "" && !-e $file) {
                    print "$md:$.: $t (no such file)\n"; $bad++; next;
                }
                if (defined $frag && ($file !~ /\.md$/ || !anchors($file)->{$frag})) {
                    print "$md:$.: $t (no such heading)\n"; $bad++;
                }
            }
        }
    }
    print STDERR "links: $n\n";
' "${links[@]}" > "$tmp/badlinks" 2> "$tmp/nlinks"
nlinks=$(sed -n 's/^links: //p' "$tmp/nlinks")
[ "${nlinks:-0}" -gt 20 ]; verdict $? "found ${nlinks:-0} links in README.md and docs/"
[ ! -s "$tmp/badlinks" ]; verdict $? "every one leads somewhere$( [ -s "$tmp/badlinks" ] && printf ' (not: %s)' "$(tr '\n' ' ' < "$tmp/badlinks")")"

echo "1..$n"
[ $failed = 0 ]
