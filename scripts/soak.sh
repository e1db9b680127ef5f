#!/usr/bin/env bash
# Soaks the model-based failure test for hours.
#
# tests/failures/test_model.c (binary test_failures_model) runs random programs
# of create / write / launch / injected faults / read / release / cleanup / sync
# on weft and on a reference model, one program per seed. CI runs seeds
# 1..8000 (3000 under ASan). This script runs increasing seed ranges after
# those: batch k runs seeds BASE + k*BATCH .. BASE + (k+1)*BATCH - 1 (through
# WEFT_MODEL_SEED_BASE and WEFT_MODEL_SEEDS), cycling the program length
# (WEFT_MODEL_STEPS) through 400, 1500 and 150 commands unless --steps is
# given, until the time is up or a program disagrees with the model. At the
# first failure it stops, prints the failing seed and step and the command
# that replays that seed alone, and keeps the batch's log.
#
# Usage: scripts/soak.sh [--hours H] [--asan] [--base SEED] [--batch N]
#                        [--steps S] [--jobs J] [--log-dir DIR]
#        scripts/soak.sh --hunt [--hours H]
#   --hours H    how long to run (default 1; fractions are fine: --hours 0.1)
#   --hunt       hunt lost wake-ups instead, for H hours: scripts/hunt.sh --hours H
#                (the stress programs and this model test pinned to one core, both
#                scheduler modes, hunting build, WEFT_STRICT_WAKEUPS=1)
#   --asan       build and run the ASan+UBSan build (build-asan) instead of build
#   --base SEED  the first seed (default 100000)
#   --batch N    seeds per run of the test binary (default 2000; 500 with --asan)
#   --steps S    commands per program, every batch (default: cycle 400/1500/150)
#   --jobs J     Criterion jobs (default 2: the test's two halves run in parallel)
#   --log-dir D  where batch logs go (default <build dir>/soak-logs)
# WEFT_BUILD_DIR overrides the build directory.
#
# Exit status: 0 when the time ran out with every program agreeing, 1 on a
# mismatch, a crash or a timeout (the log says which), 2 on a usage or build
# error.
set -euo pipefail
cd "$(dirname "$0")/.."

hours=1 asan=0 base=100000 batch="" steps="" jobs=2 logdir="" hunt=0
usage() { sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --hours) hours=${2:?}; shift 2 ;;
    --hunt) hunt=1; shift ;;
    --asan) asan=1; shift ;;
    --base) base=${2:?}; shift 2 ;;
    --batch) batch=${2:?}; shift 2 ;;
    --steps) steps=${2:?}; shift 2 ;;
    --jobs) jobs=${2:?}; shift 2 ;;
    --log-dir) logdir=${2:?}; shift 2 ;;
    -h|--help) usage ;;
    *) echo "soak.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
for v in "$base" "$jobs" ${batch:+"$batch"} ${steps:+"$steps"}; do
  [[ "$v" =~ ^[0-9]+$ ]] || { echo "soak.sh: '$v' is not a count" >&2; exit 2; }
done
[[ "$hours" =~ ^[0-9]*\.?[0-9]+$ ]] || { echo "soak.sh: --hours '$hours' is not a number" >&2; exit 2; }
if [ "$hunt" = 1 ]; then exec ./scripts/hunt.sh --hours "$hours"; fi

if [ "$asan" = 1 ]; then
  build=${WEFT_BUILD_DIR:-build-asan} san=address,undefined batch=${batch:-500}
else
  build=${WEFT_BUILD_DIR:-build} san="" batch=${batch:-2000}
fi
logdir=${logdir:-$build/soak-logs}

echo "soak: building test_failures_model in $build${san:+ ($san)}"
if ! { cmake -S . -B "$build" -G Ninja -DWEFT_BUILD_TESTS=ON -DWEFT_SANITIZE="$san" >/dev/null &&
       cmake --build "$build" --target test_failures_model >/dev/null; }; then
  echo "soak: the build failed" >&2
  exit 2
fi
bin="$build/tests/test_failures_model"
mkdir -p "$logdir"

start=$(date +%s)
deadline=$(awk -v s="$start" -v h="$hours" 'BEGIN { printf "%d", s + h * 3600 }')
cycle=(400 1500 150)
k=0 programs=0
echo "soak: $hours h from seed $base, $batch seeds per batch, logs in $logdir"
while [ "$(date +%s)" -lt "$deadline" ]; do
  s=${steps:-${cycle[$((k % 3))]}}
  first=$((base + k * batch))
  log="$logdir/batch-$first.log"
  t0=$(date +%s)
  rc=0
  WEFT_MODEL_SEED_BASE=$first WEFT_MODEL_SEEDS=$batch WEFT_MODEL_STEPS=$s \
    "$bin" --jobs "$jobs" --color=never >"$log" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ] || ! grep -q 'Failing: 0 | Crashing: 0' "$log"; then
    echo "soak: FAILED in batch $k (seeds $first..$((first + batch - 1)), $s steps), exit $rc"
    mismatch=$(grep -m1 'MODEL MISMATCH' "$log" || true)
    if [ -n "$mismatch" ]; then
      seed=$(sed -E 's/.*seed ([0-9]+).*/\1/' <<<"$mismatch")
      echo "soak: $mismatch"
      grep -m1 -A2 'MODEL MISMATCH' "$log" | tail -n +2
      echo "soak: replay: WEFT_MODEL_SEED_BASE=$seed WEFT_MODEL_SEEDS=1 WEFT_MODEL_STEPS=$s" \
        "WEFT_MODEL_TRACE=1 $bin --filter 'model/*part_0'"
    else
      echo "soak: no model mismatch reported (a crash, a sanitizer report or a timeout):"
      tail -n 30 "$log"
    fi
    echo "soak: full log: $log"
    exit 1
  fi
  rm -f "$log"
  programs=$((programs + batch))
  echo "soak: batch $k ok: seeds $first..$((first + batch - 1)), $s steps," \
    "$(( $(date +%s) - t0 )) s; $programs programs in $(( $(date +%s) - start )) s"
  k=$((k + 1))
done
echo "soak: done: $programs programs (seeds $base..$((base + k * batch - 1))) agreed with the model"
