# tap.bash -- TAP for the bash tests (tests/*.t), sourced by them:
# pass, fail, is, like, ok, verdict, bail; n counts the tests, failed the
# failures.
# A test ends with: echo "1..$n"; ((failed == 0))
n=0
failed=0
pass() { n=$((n + 1)); echo "ok $n - $1"; }
fail() {
    local d
    n=$((n + 1)); failed=$((failed + 1))
    echo "not ok $n - $1"
    shift
    for d in "$@"; do printf '#   %s\n' "${d:0:600}"; done
}
is() {   # got want name
    if [[ $1 == "$2" ]]; then pass "$3"; else fail "$3" "got:  $1" "want: $2"; fi
}
like() {   # got regex name
    if [[ $1 =~ $2 ]]; then pass "$3"; else fail "$3" "got:  $1" "want: /$2/"; fi
}
ok() {   # name command...: passes when the command succeeds
    local name=$1
    shift
    if "$@"; then pass "$name"; else fail "$name" "failed: $*"; fi
}
verdict() {   # status name: passes when the status is 0 (after a command: verdict $? name)
    if [[ $1 == 0 ]]; then pass "$2"; else fail "$2"; fi
}
bail() { echo "Bail out! $*"; exit 1; }
# The Redis key of a cached copy (tests/keyname.c; keys name the rows a copy
# holds): fkey UID [SUFFIX] of a reader's feed in the default table, akey
# AUTHOR [SUFFIX] of an author's posts in the tests' author_post.
fkey() { "${BUILD:-build}/tests/keyname" "$@"; }
akey() { "${BUILD:-build}/tests/keyname" --author --author-table author_post "$@"; }
