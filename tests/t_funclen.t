#!/usr/bin/env bash
# t_funclen.t -- no function in lib/ is longer than 80 lines, counted from
# the line that starts with its "{" to the next line that starts with "}",
# both included (the style opens and closes every function in column 0). A
# function that long does more than one thing: split it where its comments
# change subject. The counter is first shown to count a planted file right.
set -u
# shellcheck source=tests/tap.bash
. "$(dirname "${BASH_SOURCE[0]}")/tap.bash"
MAX=80
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# "file:line name length" for every function of the files given; the name
# is the identifier before "(" on the last column-0 line above the "{".
lengths() {
    awk '
        FNR == 1 { sig = ""; open_at = 0 }
        /^[A-Za-z_].*\(/ && !open_at { sig = $0 }
        /^\{/ && !open_at {
            open_at = FNR; name = sig
            sub(/\(.*/, "", name); sub(/.*[^A-Za-z0-9_]/, "", name)
            next
        }
        /^\}/ && open_at { print FILENAME ":" open_at, name, FNR - open_at + 1; open_at = 0; sig = "" }
    ' "$@"
}

{
    printf 'static int eighty(void)\n{\n'
    for i in $(seq 78); do printf '    (void)%d;\n' "$i"; done
    printf '}\n\nstatic const int table[] = {\n    1,\n};\n\nint\neighty_one(int x)\n{\n'
    for i in $(seq 79); do printf '    x += %d;\n' "$i"; done
    printf '}\n'
} > "$tmp/planted.c"
is "$(lengths "$tmp/planted.c" | awk '{ print $2, $3 }' | tr '\n' ' ')" "eighty 80 eighty_one 81 " \
   "the counter reads a planted file: 80 and 81 lines, the names, no initializer counted"

files=$(find lib -name '*.c' -o -name '*.h' | sort)
# shellcheck disable=SC2086
lengths $files > "$tmp/all"
count=$(wc -l < "$tmp/all")
[ "$count" -ge 300 ]; verdict $? "read $count functions in lib/"

long=$(awk -v max=$MAX '$3 > max' "$tmp/all")
[ -z "$long" ]
verdict $? "every function in lib/ is at most $MAX lines${long:+: $(tr '\n' ';' <<<"$long")}"

echo "1..$n"
[ $failed = 0 ]
