#!/usr/bin/env bash
# Hunts lost wake-ups: builds with the hunting instrumentation (-DWEFT_HUNT=ON,
# core/hunt.h) and runs the stress programs (under TSan) and the model test
# pinned to one core (taskset -c 0), in both scheduler modes, with
# WEFT_STRICT_WAKEUPS=1: a parked thread that recovers a lost wake-up fails
# the run and prints, once, what it found and the threads, streams and queue
# counters it saw.
#
# Each round first runs the hunting suite (tests/hunt/: the item-8 window and
# the late-versus-lost cases, and the proof that STRICT fails every run whose
# notifications are dropped on purpose and passes the same runs without
# drops), then, for each scheduler mode, each chaos level (random yields,
# spins and sleeps at every hunt point, 1 in WEFT_CHAOS: 16 and 256), and
# once more (1 in 64) with the timed parks made effectively infinite
# (WEFT_PARK_MS: a lost wake-up becomes a hang, caught by the time limit):
#   stress_submit and stress_replay (TSan build), taskset -c 0
#   test_failures_model (hunting build; Criterion cannot run under TSan),
#   taskset -c 0
#
# Usage: scripts/hunt.sh [--ci] [--hours H] [--no-tsan] [--log-dir DIR]
#   --ci        one small round (a few minutes on 2 cores): what CI runs
#   --hours H   rounds until H hours have passed, the seeds moving on each
#               round, at a larger scale (default: one round)
#   --no-tsan   run the stress programs from the plain hunting build
#   --log-dir D where the logs go (default build-hunt/hunt-logs)
# Builds: build-hunt (WEFT_HUNT=ON) and build-hunt-thread (WEFT_HUNT=ON,
# WEFT_SANITIZE=thread, clang).
#
# Exit status: 0 when every run passed, 1 on the first failure (its log is
# printed and kept), 2 on a usage or build error.
set -euo pipefail
cd "$(dirname "$0")/.."

ci=0 hours="" tsan=1 logdir=""
usage() { sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --ci) ci=1; shift ;;
    --hours) hours=${2:?}; shift 2 ;;
    --no-tsan) tsan=0; shift ;;
    --log-dir) logdir=${2:?}; shift 2 ;;
    -h|--help) usage ;;
    *) echo "hunt.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
if [ -n "$hours" ] && ! [[ "$hours" =~ ^[0-9]*\.?[0-9]+$ ]]; then
  echo "hunt.sh: --hours '$hours' is not a number" >&2
  exit 2
fi

./scripts/install-deps.sh >/dev/null
plain=build-hunt
thread=build-hunt-thread
logdir=${logdir:-$plain/hunt-logs}
mkdir -p "$logdir"
build() { # dir, extra cmake arguments..., then -- targets
  local dir=$1; shift
  local args=()
  while [ "$1" != "--" ]; do args+=("$1"); shift; done
  shift
  cmake -S . -B "$dir" -G Ninja -DWEFT_BUILD_TESTS=ON -DWEFT_HUNT=ON -DWEFT_BUILD_BENCH=OFF \
    -DWEFT_BUILD_EXAMPLES=OFF "${args[@]}" >/dev/null && cmake --build "$dir" --target "$@" >/dev/null
}
echo "hunt: building $plain$([ "$tsan" = 1 ] && echo " and $thread (TSan)")"
if ! build "$plain" -- weft_static test_hunt_wakeups test_failures_model stress_stress_submit \
     stress_stress_replay; then
  echo "hunt: the build failed" >&2
  exit 2
fi
stress=$plain/tests
if [ "$tsan" = 1 ]; then
  if ! build "$thread" -DWEFT_SANITIZE=thread -DCMAKE_C_COMPILER=clang -- stress_stress_submit \
       stress_stress_replay; then
    echo "hunt: the TSan build failed" >&2
    exit 2
  fi
  stress=$thread/tests
fi
export TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/tests/stress/tsan.supp"
export WEFT_STRICT_WAKEUPS=1

runs=0
# run NAME LIMIT_S ENV... -- COMMAND...: one pinned run, its log kept on failure.
run() {
  local name=$1 limit=$2; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local log="$logdir/$name.log" t0 rc=0
  t0=$(date +%s)
  env "${envs[@]}" timeout "$limit" taskset -c 0 "$@" >"$log" 2>&1 || rc=$?
  runs=$((runs + 1))
  if [ "$rc" -ne 0 ]; then
    local why=""
    if [ "$rc" = 124 ]; then why=": past ${limit} s, a hang"; fi
    echo "hunt: FAILED: $name (exit $rc$why)"
    echo "hunt: environment: ${envs[*]} WEFT_STRICT_WAKEUPS=1; command: taskset -c 0 $*"
    tail -n 60 "$log"
    echo "hunt: full log: $log"
    exit 1
  fi
  echo "hunt: ok $name ($(( $(date +%s) - t0 )) s)"
  rm -f "$log"
}

round() { # k: the round number (moves the seeds)
  local k=$1 scale seeds steps rounds limit
  if [ "$ci" = 1 ]; then
    scale=0.15 rounds=1000 seeds=300 steps=400 limit=240
  else
    scale=1 rounds=3000 seeds=2000 steps=400 limit=1800
  fi
  (cd "$plain" && ctest --output-on-failure -j2 -R '^hunt_' >"../$logdir/suite.log" 2>&1) || {
    echo "hunt: FAILED: the hunting suite (ctest -R '^hunt_' in $plain)"
    tail -n 60 "$logdir/suite.log"
    exit 1
  }
  echo "hunt: ok the hunting suite (ctest -R '^hunt_')"
  rm -f "$logdir/suite.log"
  local seed=$((0x5eed + k)) base=$((500000 + k * seeds))
  for mode in thread combining; do
    for setting in 16 256 64:infinite; do
      local chaos=${setting%%:*} park=WEFT_PARK_MS= tag="chaos$setting"
      if [ "$setting" != "$chaos" ]; then park=WEFT_PARK_MS=100000000 tag="chaos$chaos-infinite-parks"; fi
      local e=(WEFT_SCHEDULER=$mode WEFT_CHAOS=$chaos "$park")
      run "r$k-$mode-$tag-submit" "$limit" "${e[@]}" -- "$stress/stress_stress_submit" "$scale" "$seed"
      run "r$k-$mode-$tag-replay" "$limit" "${e[@]}" -- "$stress/stress_stress_replay" "$rounds"
      run "r$k-$mode-$tag-model" "$limit" "${e[@]}" WEFT_MODEL_SEED_BASE=$base \
        WEFT_MODEL_SEEDS="$seeds" WEFT_MODEL_STEPS="$steps" -- "$plain/tests/test_failures_model" \
        --jobs 1 --color=never
    done
  done
}

start=$(date +%s)
if [ -z "$hours" ]; then
  round 0
else
  deadline=$(awk -v s="$start" -v h="$hours" 'BEGIN { printf "%d", s + h * 3600 }')
  k=0
  while [ "$(date +%s)" -lt "$deadline" ]; do
    round "$k"
    k=$((k + 1))
  done
fi
echo "hunt: done: $runs pinned runs passed in $(( $(date +%s) - start )) s, no lost wake-up"
