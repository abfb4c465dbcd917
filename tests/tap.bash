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

# http_get URL: a GET through bash's /dev/tcp, no process started (the walks
# of the HTTP tests ask thousands of pages; a curl per page was most of their
# CPU). Sets STATUS (000 when nothing answered within 30 s), CTYPE (the
# Content-Type's value), HEADERS (the status line and the headers, CRs
# removed) and BODY (trailing newlines removed, as $(cat) does). HTTP/1.1
# with Connection: close, so the body is all that comes before the server
# closes; a chunked body would keep its chunk sizes and fail the JSON
# checks that read it, never pass them. URL: http://HOST:PORT/PATH.
http_get() {
    local rest=${1#http://} fd line code
    local hostport=${rest%%/*} path=/${rest#*/}
    STATUS=000 CTYPE='' HEADERS='' BODY=''
    { exec {fd}<>"/dev/tcp/${hostport%:*}/${hostport##*:}"; } 2>/dev/null || return 0
    printf 'GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' "$path" "$hostport" >&"$fd"
    if IFS= read -r -t 30 line <&"$fd" && [[ ${line%$'\r'} =~ ^HTTP/1\.[01]\ ([0-9]{3}) ]]; then
        code=${BASH_REMATCH[1]} HEADERS=${line%$'\r'}
        while IFS= read -r -t 30 line <&"$fd"; do
            line=${line%$'\r'}
            [[ -z $line ]] && break
            HEADERS+=$'\n'$line
            if [[ ${line,,} == content-type:* ]]; then
                CTYPE=${line#*:}
                CTYPE=${CTYPE#"${CTYPE%%[! ]*}"}
            fi
        done
        # read returns 1 at the end of the stream (the whole body read),
        # more than 128 when the 30 s ran out first (no answer, as curl's).
        IFS= read -r -d '' -t 30 BODY <&"$fd"
        if (($? > 128)); then HEADERS='' CTYPE='' BODY=''; else STATUS=$code; fi
        while [[ $BODY == *$'\n' ]]; do BODY=${BODY%$'\n'}; done
    fi
    exec {fd}>&-
    return 0
}
