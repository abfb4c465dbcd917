#!/usr/bin/env bash
# tests/sim/mutants.sh -- what `make sim-mutants` runs: for each mutant of
# tests/sim/mutants.txt, a copy of the tree with that one change, its
# simulation built, and run until some schedule breaks the invariant
# (SIM_SCHEDULES per mutant, default 20000). Prints how many schedules each
# took and where its shrunk trace is; exits 0 only when every mutant is
# found. MUTANTS="lease cut" runs only those.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
OUT=$ROOT/$BUILD/mutants
budget=${SIM_SCHEDULES:-20000}
mkdir -p "$OUT"
missed=0
total=0
while IFS='|' read -r name file from to what; do
    trim() { sed -e 's/^ *//' -e 's/ *$//' <<<"$1"; }
    name=$(trim "$name")
    [[ -z $name || $name == \#* ]] && continue
    [[ -n ${MUTANTS:-} && " $MUTANTS " != *" $name "* ]] && continue
    file=$(trim "$file")
    from=$(trim "$from")
    to=$(trim "$to")
    what=$(trim "$what")
    total=$((total + 1))
    tree=$OUT/$name
    rm -rf "$tree"
    mkdir -p "$tree/tests"
    cp -r Makefile lib lua tools "$tree/"
    cp -r tests/sim tests/*.h "$tree/tests/"
    FROM=$from TO=$to python3 - "$tree/$file" <<'PY' || { echo "mutant $name: no longer applies to $file" >&2; exit 1; }
import os, sys
p = sys.argv[1]
s = open(p).read()
if s.count(os.environ["FROM"]) != 1:
    sys.exit(1)
open(p, "w").write(s.replace(os.environ["FROM"], os.environ["TO"]))
PY
    make -s -C "$tree" -j2 BUILD=build build/tests/feedsim >"$tree/build.log" 2>&1 ||
        { cat "$tree/build.log" >&2; echo "mutant $name: does not build" >&2; exit 1; }
    start=$SECONDS
    if SIM_EXPECT=violation SIM_SCHEDULES=$budget "$tree/build/tests/feedsim" default >"$tree/trace.txt" 2>&1; then
        found=$(grep -m1 '^# seed ' "$tree/trace.txt" | sed -e 's/^# //')
        echo "mutant $name ($what): found in $((SECONDS - start)) s: $found; shrunk trace: $tree/trace.txt"
    else
        echo "mutant $name ($what): NOT found in $budget schedules"
        missed=$((missed + 1))
    fi
done < tests/sim/mutants.txt
echo "$((total - missed)) of $total mutants found"
((missed == 0 && total > 0))
