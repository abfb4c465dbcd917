#!/usr/bin/env bash
# t_refs.t -- every file a comment or a README names is in the repository
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
n=0; failed=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=$((failed + 1)); fi; }
BUILD=${BUILD:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Every file name we have: sources, and what the build made.
find . \( -name .git -o -name 'corpus' -o -name '.demo' \) -prune -o -type f -print |
    sed 's|^\./||' > "$tmp/files"
sed -n 's|\.in$||p' "$tmp/files" >> "$tmp/files"
sed 's|.*/||' "$tmp/files" | sort -u > "$tmp/names"

ext='c|h|lua|sql|md|mk|sh|t|png|pc|gp|in'
ALLOWED=(
    "README.md: app.c"            # cc app.c $(pkg-config ...): the reader's program
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
            */*) grep -qxF "$r" "$tmp/files" || [ -e "$(dirname "$src")/$r" ] || echo "$src: $ref" >> "$tmp/bad" ;;
            *)   grep -qxF "$r" "$tmp/names" || echo "$src: $ref" >> "$tmp/bad" ;;
        esac
    done < <(refs "$f")
done
[ "$checked" -gt 100 ]; ok $? "found $checked file references in comments and Markdown"
[ ! -s "$tmp/bad" ]; ok $? "every one resolves$( [ -s "$tmp/bad" ] && printf ' (not: %s)' "$(tr '\n' ' ' < "$tmp/bad")")"

echo "1..$n"
[ $failed = 0 ]
