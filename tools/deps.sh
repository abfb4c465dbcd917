#!/usr/bin/env bash
# Install the Debian 12 packages feedcache needs to build and test, only the
# missing ones. Fast no-op when everything is there (it runs on every
# `make check`). Not root: print the command to run and fail.
set -euo pipefail

PKGS=(
    gcc make pkg-config clang libclang-rt-14-dev   # build, SANITIZE=1 runtime
    perl curl valgrind procps iproute2             # prove, demo, tests, ss/ps
    redis-server redis-tools                       # throwaway Redis + redis-cli
    postgresql postgresql-client postgresql-15-pgtap
    libhiredis-dev libpq-dev libmicrohttpd-dev libjansson-dev
    libevent-dev libuv1-dev                        # the event-loop example (evhttp), the async API
    gnuplot-nox                                    # bench plots
    chromium                                       # tests/t_html.t: the example's page in a browser
)

missing=()
for p in "${PKGS[@]}"; do
    st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [[ $st == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "deps.sh: missing packages: ${missing[*]}" >&2
if [[ $(id -u) -ne 0 ]]; then
    echo "deps.sh: run as root:" >&2
    echo "  sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
fi

# No stdin and noninteractive frontend so nothing can prompt (CI has no stdin);
# keep existing config files if a package asks.
export DEBIAN_FRONTEND=noninteractive
apt-get update </dev/null
apt-get install -y --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
    "${missing[@]}" </dev/null
