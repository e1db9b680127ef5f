#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang, ASan+UBSan) and runs them.
#
# Usage: scripts/fuzz.sh [--ci] [--hours H] [--jobs J] [--target NAME]... [--out DIR]
#   --ci          bounded run for CI: every target for WEFT_FUZZ_CI_SECONDS
#                 (default 25), two at a time on 2 cores (three rounds for the
#                 five targets: about 80 s after the build); any crash, leak,
#                 timeout or failed model check fails the script
#   --hours H     the long run (default 1): the time is split evenly over the
#                 targets, each one run in turn with J jobs (default: the
#                 number of cores)
#   --target NAME only this target (repeatable): fuzz_api, fuzz_error_json, ...
#   --out DIR     where corpora grow and crashes land (default build-fuzz/fuzz-out)
#
# Each target starts from its seed corpus in tests/fuzz/corpus/<target>/ (read
# only: new inputs go to DIR/corpus/<target>) and its dictionary in
# tests/fuzz/dict/ when there is one. A crash is saved as
# DIR/crash/<target>/crash-<sha1>; replay it with
#   build-fuzz/tests/fuzz/<target> DIR/crash/<target>/crash-<sha1>
# (FZ_TRACE=1 makes fuzz_api print every call). docs/fuzzing.md says how to
# turn one into a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."

ci=0
hours=1
jobs=$(nproc)
targets=()
out=""
while [ $# -gt 0 ]; do
  case "$1" in
  --ci) ci=1 ;;
  --hours) hours=$2; shift ;;
  --jobs) jobs=$2; shift ;;
  --target) targets+=("$2"); shift ;;
  --out) out=$2; shift ;;
  -h | --help) sed -n '2,22p' "$0"; exit 0 ;;
  *) echo "fuzz.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done

./scripts/install-deps.sh
BUILD=${WEFT_BUILD_DIR:-build-fuzz}
out=${out:-$BUILD/fuzz-out}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_C_COMPILER=clang -DWEFT_BUILD_FUZZ=ON \
  -DWEFT_BUILD_TESTS=OFF -DWEFT_BUILD_BENCH=OFF -DWEFT_BUILD_EXAMPLES=OFF >/dev/null
if [ "${#targets[@]}" -eq 0 ]; then
  for src in tests/fuzz/fuzz_*.c; do targets+=("$(basename "$src" .c)"); done
fi
cmake --build "$BUILD" --target "${targets[@]}"

if [ "$ci" -eq 1 ]; then
  # Two targets at a time, one process each: 2 cores, ceil(n / 2) rounds.
  per=${WEFT_FUZZ_CI_SECONDS:-25}
  parallel=2
  jobs=1
else
  per=$(awk -v h="$hours" -v n="${#targets[@]}" 'BEGIN { printf "%d", h * 3600 / n }')
  parallel=1
fi

# Sanitizer reports fail the input; leaks are checked per input by libFuzzer.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# Runs target $1 for $per seconds; its log is $out/$1.log.
run_one() {
  local t=$1 corpus="$out/corpus/$1" crashes="$out/crash/$1"
  mkdir -p "$corpus" "$crashes"
  local args=(-max_total_time="$per" -timeout=20 -rss_limit_mb=2560 -max_len=4096
              -print_final_stats=1 -artifact_prefix="$crashes/")
  [ -f "tests/fuzz/dict/$t.dict" ] && args+=(-dict="tests/fuzz/dict/$t.dict")
  # -fork stops at the first crash (ignore_crashes=0), like a single process.
  [ "$jobs" -gt 1 ] && args+=(-fork="$jobs")
  "$BUILD/tests/fuzz/$t" "${args[@]}" "$corpus" "tests/fuzz/corpus/$t" >"$out/$t.log" 2>&1
}

report() {
  local t=$1 rc=$2 log="$out/$1.log"
  local execs
  execs=$(awk '/stat::number_of_executed_units:/ { s += $2 } END { print s + 0 }' "$log")
  if [ "$rc" -ne 0 ]; then
    failed+=("$t")
    grep -E "ERROR|SUMMARY|fuzz check failed|^  [A-Za-z]" "$log" | head -n 20 || true
    echo "fuzz.sh: $t FAILED after $execs executions; log $log, inputs in $out/crash/$t" >&2
  else
    echo "fuzz.sh: $t: $execs executions in ${per}s on $jobs core(s), no crash"
  fi
}

mkdir -p "$out"
failed=()
start=$(date +%s)
i=0
while [ "$i" -lt "${#targets[@]}" ]; do
  pids=()
  names=()
  for ((k = 0; k < parallel && i < ${#targets[@]}; k++, i++)); do
    t=${targets[$i]}
    echo "== $t: ${per}s =="
    run_one "$t" &
    pids+=($!)
    names+=("$t")
  done
  for ((k = 0; k < ${#pids[@]}; k++)); do
    rc=0
    wait "${pids[$k]}" || rc=$?
    report "${names[$k]}" "$rc"
  done
done
echo "fuzzing took $(( $(date +%s) - start )) s"
if [ "${#failed[@]}" -ne 0 ]; then
  echo "fuzz.sh: failed: ${failed[*]}" >&2
  exit 1
fi
