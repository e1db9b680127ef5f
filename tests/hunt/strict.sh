#!/usr/bin/env bash
# Runs a stress program with WEFT_STRICT_WAKEUPS=1 and checks the verdict.
#
#   strict.sh fail PROGRAM [ARGS...]   the run must fail on a lost wake-up: exit 1, with
#                                      weft's first-occurrence report (the parked thread's
#                                      finding, then the scheduler's and the pool's state)
#   strict.sh pass PROGRAM [ARGS...]   the run must succeed, with no report
#
# The hunting variables (WEFT_HUNT_DROP, WEFT_CHAOS, WEFT_PARK_MS...) come from the
# environment (tests/CMakeLists.txt sets them per test).
set -u
want=$1
shift
log=$(mktemp)
trap 'rm -f "$log"' EXIT
WEFT_STRICT_WAKEUPS=1 "$@" >"$log" 2>&1
rc=$?
tail -n 40 "$log"
report='WEFT_STRICT_WAKEUPS: a parked thread recovered a lost wake-up'
case "$want" in
  fail)
    if [ "$rc" -ne 1 ]; then echo "strict.sh: expected exit 1 (a lost wake-up), got $rc"; exit 1; fi
    grep -q "$report" "$log" || { echo "strict.sh: no first-occurrence report"; exit 1; }
    grep -q 'pool: ready queue' "$log" || { echo "strict.sh: the report has no pool state"; exit 1; }
    ;;
  pass)
    if [ "$rc" -ne 0 ]; then echo "strict.sh: expected success, got exit $rc"; exit 1; fi
    if grep -q "$report" "$log"; then echo "strict.sh: a correct run reported a lost wake-up"; exit 1; fi
    ;;
  *) echo "usage: strict.sh fail|pass PROGRAM [ARGS...]"; exit 2 ;;
esac
echo "strict.sh: $want as expected"
