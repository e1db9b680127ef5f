#!/usr/bin/env bash
# The GPU check: builds weft (Release, build-gpu), runs the CUDA suites and the
# cuda_* benchmarks against the machine's real CUDA driver, and writes the logs
# and a summary to OUTDIR (default ./gpu-results). Needs no network. See
# tests/gpu/README.md.
#
#   tests/gpu/run.sh [--fake] [--no-install] [OUTDIR]
#   tests/gpu/run.sh --bundle DIR [--from BUILD] [--self-test] [--no-install]
#
#   --fake        build the fake driver (tests/fake_cuda) and run against it
#                 instead of libcuda.so.1 (for trying the script without a GPU)
#   --no-install  never try scripts/install-deps.sh when something is missing
#   --bundle DIR  build (Release, build-gpu-bundle) and fill DIR with the CUDA
#                 test programs, weft-bench, the libraries they need beyond
#                 glibc and a runner, DIR/run.sh, for a machine that has the
#                 NVIDIA driver and nothing else (tests/gpu/bundle_run.sh)
#   --from BUILD  with --bundle: take the programs from BUILD, an existing
#                 build tree with the CUDA backend, instead of building
#   --self-test   with --bundle: then run a copy of DIR elsewhere against the
#                 bundle's fake driver, in an empty environment, with the
#                 build trees and the system's copies of the bundled libraries
#                 hidden where a private mount namespace allows
#
# Exit status: 0 everything ran and passed; 1 a build, suite or benchmark
# failed; 2 a prerequisite is missing (named on stderr and in OUTDIR/summary.txt
# when OUTDIR could be made); 3 nothing failed but the CUDA path was not
# exercised (the benchmarks skipped, or every suite test skipped). With
# --bundle: 0 the bundle is made (and its self-test passed), 1 it could not be
# made, is over its size limit or its self-test failed, 2 as above.
set -uo pipefail

START=$(date +%s)
BUDGET_S=${WEFT_GPU_BUDGET_S:-570} # stay under 10 minutes in all

usage() { sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; }

FAKE=0
INSTALL=1
OUTDIR=""
BUNDLE=""
FROM=""
SELF_TEST=0
while [ $# -gt 0 ]; do
  case "$1" in
  --fake) FAKE=1 ;;
  --no-install) INSTALL=0 ;;
  --self-test) SELF_TEST=1 ;;
  --bundle | --from)
    if [ $# -lt 2 ] || [ -z "$2" ]; then
      echo "run.sh: $1 needs a directory" >&2
      exit 2
    fi
    if [ "$1" = --bundle ]; then BUNDLE=$2; else FROM=$2; fi
    shift
    ;;
  -h | --help)
    usage
    exit 0
    ;;
  -*)
    echo "run.sh: unknown option '$1'" >&2
    usage >&2
    exit 2
    ;;
  *)
    if [ -n "$OUTDIR" ]; then
      echo "run.sh: more than one OUTDIR ('$OUTDIR', '$1')" >&2
      exit 2
    fi
    OUTDIR=$1
    ;;
  esac
  shift
done
if [ -z "$BUNDLE" ] && { [ -n "$FROM" ] || [ "$SELF_TEST" = 1 ]; }; then
  echo "run.sh: --from and --self-test go with --bundle DIR" >&2
  exit 2
fi
if [ -n "$BUNDLE" ] && { [ "$FAKE" = 1 ] || [ -n "$OUTDIR" ]; }; then
  echo "run.sh: --bundle takes no --fake or OUTDIR (the bundle's own run.sh does)" >&2
  exit 2
fi
# DIR and BUILD are relative to the caller's directory (the script works in the root).
case "$BUNDLE" in "" | /*) ;; *) BUNDLE=$PWD/$BUNDLE ;; esac
if [ -n "$FROM" ]; then
  FROM=$(cd "$FROM" 2>/dev/null && pwd) || {
    echo "run.sh: --from: no such directory" >&2
    exit 2
  }
fi
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${WEFT_GPU_BUILD_DIR:-$ROOT/build-gpu}
if [ -n "$BUNDLE" ]; then
  BUILD=${WEFT_GPU_BUILD_DIR:-$ROOT/build-gpu-bundle}
  [ -n "$FROM" ] && BUILD=$FROM
  OUTDIR=$BUILD/bundle-logs # the bundle step's own logs, beside its build
fi
OUTDIR=${OUTDIR:-gpu-results}
mkdir -p "$OUTDIR" || {
  echo "run.sh: cannot create $OUTDIR" >&2
  exit 2
}
OUTDIR=$(cd "$OUTDIR" && pwd)
cd "$ROOT" || exit 2

SUMMARY=$OUTDIR/summary.txt
: >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
log() { echo "run.sh: $*" >&2; }
elapsed() { echo $(($(date +%s) - START)); }
# The seconds a step may take: its own cap, but never past the overall budget.
cap() {
  local left=$((BUDGET_S - $(elapsed)))
  [ "$left" -lt 10 ] && left=10
  [ "$1" -lt "$left" ] && echo "$1" || echo "$left"
}
HAVE_TIMEOUT=0
command -v timeout >/dev/null 2>&1 && HAVE_TIMEOUT=1
limit() { # limit SECONDS cmd...: runs cmd, killed after SECONDS (status 124)
  local s=$1
  shift
  if [ "$HAVE_TIMEOUT" = 1 ]; then timeout --kill-after=10 "$s" "$@"; else "$@"; fi
}

# ---- prerequisites ------------------------------------------------------------------------

JOBS=$(nproc 2>/dev/null || echo 4)
CUDA_INC=""
GEN=""
MISSING=()
JEMALLOC=ON

find_cuda_headers() {
  CUDA_INC=""
  local d
  for d in ${CUDA_HOME:+"$CUDA_HOME/include"} ${CUDA_PATH:+"$CUDA_PATH/include"} \
    /usr/local/cuda/include /usr/local/cuda-*/include /opt/cuda/include /usr/include; do
    if [ -f "$d/cuda.h" ] && [ -f "$d/cudaTypedefs.h" ]; then
      CUDA_INC=$d
      return 0
    fi
  done
  return 1
}

check_prereqs() {
  MISSING=()
  if ! command -v cmake >/dev/null 2>&1; then
    MISSING+=("cmake (3.25 or newer; Debian: cmake)")
  else
    local v
    v=$(cmake --version | sed -n '1s/[^0-9]*\([0-9][0-9.]*\).*/\1/p')
    if ! printf '3.25\n%s\n' "$v" | sort -V -C; then
      MISSING+=("cmake 3.25 or newer (found $v)")
    fi
  fi
  if command -v ninja >/dev/null 2>&1; then
    GEN=Ninja
  elif command -v make >/dev/null 2>&1; then
    GEN="Unix Makefiles"
  else
    GEN=""
    MISSING+=("ninja or make (Debian: ninja-build)")
  fi
  command -v "${CC:-gcc}" >/dev/null 2>&1 || MISSING+=("a C compiler: ${CC:-gcc} (Debian: gcc)")
  if ! command -v pkg-config >/dev/null 2>&1; then
    MISSING+=("pkg-config (Debian: pkg-config), needed to find criterion and ck")
  else
    pkg-config --exists criterion || MISSING+=("criterion: pkg-config criterion (Debian: libcriterion-dev)")
    pkg-config --exists ck || MISSING+=("ck: pkg-config ck (Debian: libck-dev)")
    if pkg-config --exists jemalloc; then JEMALLOC=ON; else JEMALLOC=OFF; fi
  fi
  find_cuda_headers || MISSING+=("the CUDA headers: cuda.h and cudaTypedefs.h (the CUDA toolkit's include directory; searched \$CUDA_HOME/include, \$CUDA_PATH/include, /usr/local/cuda*/include, /opt/cuda/include, /usr/include; set CUDA_HOME)")
}

if [ -n "$FROM" ]; then
  # shellcheck source=tests/gpu/bundle.sh
  . "$ROOT/tests/gpu/bundle.sh"
  make_bundle
  exit $?
fi
check_prereqs
if [ "${#MISSING[@]}" -gt 0 ] && [ "$INSTALL" = 1 ] && [ -x scripts/install-deps.sh ] &&
  command -v apt-get >/dev/null 2>&1 &&
  { [ "$(id -u)" -eq 0 ] || sudo -n true 2>/dev/null; }; then
  log "missing: ${MISSING[*]}; trying scripts/install-deps.sh (apt-get; fails without network)"
  limit "$(cap 240)" ./scripts/install-deps.sh >"$OUTDIR/install-deps.log" 2>&1 ||
    log "scripts/install-deps.sh failed (see $OUTDIR/install-deps.log)"
  check_prereqs
fi
if [ "${#MISSING[@]}" -gt 0 ]; then
  say "weft GPU check: MISSING PREREQUISITES (nothing was built)"
  for m in "${MISSING[@]}"; do say "  missing: $m"; done
  say "result: MISSING (exit 2)"
  for m in "${MISSING[@]}"; do log "missing: $m"; done
  exit 2
fi

if [ -n "$BUNDLE" ]; then
  # shellcheck source=tests/gpu/bundle.sh
  . "$ROOT/tests/gpu/bundle.sh"
  make_bundle
  exit $?
fi

if [ "$FAKE" = 1 ]; then
  MODE="fake driver"
else
  MODE="real driver"
  case "${WEFT_CUDA_DRIVER:-}" in
  "" | libcuda.so.1) ;;
  *fake_cuda*) log "warning: WEFT_CUDA_DRIVER=$WEFT_CUDA_DRIVER looks like the fake driver; use --fake for that" ;;
  *) log "note: using WEFT_CUDA_DRIVER=$WEFT_CUDA_DRIVER as the driver" ;;
  esac
fi

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -n) $(uname -srm), $JOBS cpus"
  if git -C "$ROOT" rev-parse HEAD >/dev/null 2>&1; then
    echo "commit: $(git -C "$ROOT" rev-parse HEAD)$(git -C "$ROOT" diff --quiet HEAD -- 2>/dev/null || echo ' (working tree modified)')"
  else
    echo "commit: unknown (not a git checkout)"
  fi
  echo "cmake: $(cmake --version | head -1)"
  echo "generator: $GEN"
  echo "compiler: $("${CC:-gcc}" --version | head -1)"
  echo "criterion: $(pkg-config --modversion criterion), ck: $(pkg-config --modversion ck), jemalloc: $([ "$JEMALLOC" = ON ] && pkg-config --modversion jemalloc || echo 'not found (built with WEFT_WITH_JEMALLOC=OFF)')"
  echo "cuda headers: $CUDA_INC ($(sed -n 's/^#define CUDA_VERSION \([0-9]*\).*/CUDA_VERSION \1/p' "$CUDA_INC/cuda.h"))"
  echo "mode: $MODE"
} >"$OUTDIR/env.txt"

# ---- nvidia-smi ---------------------------------------------------------------------------

GPU_NAME=""
if command -v nvidia-smi >/dev/null 2>&1; then
  {
    echo "\$ nvidia-smi -L"
    limit 30 nvidia-smi -L 2>&1
    echo
    echo "\$ nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv"
    limit 30 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1
  } >"$OUTDIR/nvidia-smi.txt"
  GPU_NAME=$(sed -n 's/^GPU 0: \(.*\) (UUID.*/\1/p' "$OUTDIR/nvidia-smi.txt" | head -1)
else
  echo "nvidia-smi not found" >"$OUTDIR/nvidia-smi.txt"
fi

# ---- configure and build ------------------------------------------------------------------

FAIL=()
log "configuring $BUILD (Release, $GEN, CUDA headers in $CUDA_INC)"
T0=$(date +%s)
limit "$(cap 120)" cmake -S "$ROOT" -B "$BUILD" -G "$GEN" -DCMAKE_BUILD_TYPE=Release \
  -DWEFT_WITH_CUDA=ON -DCUDA_DRIVER_INCLUDE_DIR="$CUDA_INC" -DWEFT_WITH_JEMALLOC="$JEMALLOC" \
  -DWEFT_BUILD_TESTS=ON -DWEFT_BUILD_BENCH=ON -DWEFT_BUILD_EXAMPLES=OFF \
  >"$OUTDIR/configure.log" 2>&1
RC=$?
if [ "$RC" -eq 0 ]; then
  log "building (-j$JOBS)"
  limit "$(cap 420)" cmake --build "$BUILD" -j "$JOBS" >"$OUTDIR/build.log" 2>&1
  RC=$?
fi
BUILD_S=$(($(date +%s) - T0))
if [ "$RC" -ne 0 ]; then
  say "weft GPU check ($MODE): BUILD FAILED (status $RC after ${BUILD_S}s; see configure.log and build.log)"
  tail -n 30 "$OUTDIR/build.log" 2>/dev/null | tee -a "$SUMMARY" >/dev/null
  say "result: FAIL (exit 1)"
  exit 1
fi

if [ "$FAKE" = 1 ]; then
  DRIVER=$BUILD/tests/fake_cuda/libcuda.so.1
  if [ ! -f "$DRIVER" ]; then
    say "weft GPU check (fake driver): the build made no $DRIVER"
    say "result: FAIL (exit 1)"
    exit 1
  fi
else
  DRIVER=${WEFT_CUDA_DRIVER:-libcuda.so.1}
  if [ "$DRIVER" = libcuda.so.1 ] && command -v ldconfig >/dev/null 2>&1 &&
    ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
    log "warning: ldconfig knows no libcuda.so.1: the suites and benchmarks will skip (no NVIDIA driver?)"
  fi
fi
export WEFT_CUDA_DRIVER=$DRIVER

# ---- the CUDA suites ----------------------------------------------------------------------
# CTest's list (ctest -R 'cuda_') gives each suite's command, directory and
# environment; each is run here with that environment except WEFT_CUDA_DRIVER,
# which is forced to $DRIVER: tests/CMakeLists.txt pins it to the fake for
# some suites (an ENVIRONMENT property wins over the caller's variable, so a
# plain ctest run would test the fake even on a GPU machine).

TLOG=$OUTDIR/tests.log
: >"$TLOG"
(cd "$BUILD" && ctest -N -V -R 'cuda_') >"$OUTDIR/ctest-list.txt" 2>&1
SUITES=0 SUITES_PASS=0 SUITES_FAIL=0 T_PASS=0 T_SKIP=0 T_FAIL=0
SUITE_LINES=()

run_suite() { # run_suite NAME DIR CMD ENV...
  local name=$1 dir=$2 cmd=$3
  shift 3
  local envs=() e
  for e in "$@"; do
    case "$e" in WEFT_CUDA_DRIVER=*) ;; *) envs+=("$e") ;; esac
  done
  local t0 rc out
  out=$(mktemp)
  t0=$(date +%s)
  {
    echo "==== $name"
    echo "command: $cmd"
    echo "directory: $dir"
    echo "environment: ${envs[*]} WEFT_CUDA_DRIVER=$DRIVER CRITERION_VERBOSITY_LEVEL=1"
  } >>"$TLOG"
  local to=()
  [ "$HAVE_TIMEOUT" = 1 ] && to=(timeout --kill-after=10 "$(cap 240)")
  (
    cd "$dir" || exit 127
    eval "set -- $cmd"
    exec env "${envs[@]}" WEFT_CUDA_DRIVER="$DRIVER" CRITERION_VERBOSITY_LEVEL=1 "${to[@]}" "$@"
  ) >"$out" 2>&1
  rc=$?
  local secs=$(($(date +%s) - t0))
  cat "$out" >>"$TLOG"
  local p s f
  p=$(grep -c '^\[PASS\]' "$out")
  s=$(grep -c '^\[SKIP\]' "$out")
  f=$(grep -c '^\[FAIL\]' "$out")
  rm -f "$out"
  echo "==== $name: exit status $rc after ${secs}s ($p passed, $s skipped, $f failed)" >>"$TLOG"
  echo >>"$TLOG"
  SUITES=$((SUITES + 1))
  T_PASS=$((T_PASS + p))
  T_SKIP=$((T_SKIP + s))
  T_FAIL=$((T_FAIL + f))
  local verdict=PASS
  if [ "$rc" -ne 0 ]; then
    verdict="FAIL (exit $rc$([ "$rc" -eq 124 ] && echo ', timed out'))"
    SUITES_FAIL=$((SUITES_FAIL + 1))
    FAIL+=("suite $name")
  else
    SUITES_PASS=$((SUITES_PASS + 1))
  fi
  SUITE_LINES+=("$(printf '  %-28s %-24s %4d passed %4d skipped %4d failed  %4ds' "$name" "$verdict" "$p" "$s" "$f" "$secs")")
}

log "running the CUDA suites against $DRIVER"
T0=$(date +%s)
num="" cmd="" dir="" envs=()
while IFS= read -r line; do
  if [[ $line =~ ^([0-9]+):\ Test\ command:\ (.*)$ ]]; then
    num=${BASH_REMATCH[1]} cmd=${BASH_REMATCH[2]} dir="" envs=()
  elif [[ $line =~ ^([0-9]+):\ Working\ Directory:\ (.*)$ ]]; then
    dir=${BASH_REMATCH[2]}
  elif [[ $line =~ ^([0-9]+):\ \ ([A-Za-z_][A-Za-z0-9_]*=.*)$ ]]; then
    envs+=("${BASH_REMATCH[2]}")
  elif [[ $line =~ ^\ *Test\ +#([0-9]+):\ (.+)$ ]] && [ "${BASH_REMATCH[1]}" = "$num" ]; then
    run_suite "${BASH_REMATCH[2]}" "${dir:-$BUILD}" "$cmd" "${envs[@]}"
    num=""
  fi
done <"$OUTDIR/ctest-list.txt"
TESTS_S=$(($(date +%s) - T0))
if [ "$SUITES" -eq 0 ]; then
  FAIL+=("no suite matched ctest -R 'cuda_' (see ctest-list.txt)")
fi

# ---- the benchmarks -----------------------------------------------------------------------

log "running weft-bench --filter cuda_ --reps 5"
T0=$(date +%s)
BENCH=$BUILD/bench/weft-bench
limit "$(cap 240)" "$BENCH" --filter cuda_ --reps 5 --json "$OUTDIR/bench.json" \
  >"$OUTDIR/bench.txt" 2>"$OUTDIR/bench.stderr"
BRC=$?
BENCH_S=$(($(date +%s) - T0))
BENCH_SKIP=$(sed -n 's/^cuda: SKIPPED[^:]*: //p' "$OUTDIR/bench.txt" | head -1)
if [ "$BRC" -ne 0 ]; then FAIL+=("weft-bench exited $BRC$([ "$BRC" -eq 124 ] && echo ' (timed out)')"); fi
DEV_BENCH=$(sed -n 's/^cuda: driver .*, device 0: //p' "$OUTDIR/bench.txt" | head -1)
[ "$DEV_BENCH" = unknown ] && DEV_BENCH=""
DRV_VER=$(sed -n 's/^cuda: driver .* (version \([0-9.]*\)), device 0: .*/\1/p' "$OUTDIR/bench.txt" | head -1)

# median and ratio of one benchmark row ("" when absent)
row() { awk -v n="$1" '$1 == n { print $4 " " $8 }' "$OUTDIR/bench.txt" | head -1; }
ratio_line() { # ratio_line WHAT BENCH BASELINE
  local r b
  r=$(row "$2")
  b=$(row "$3")
  printf '  %-44s %s  (%s %s ns, %s %s ns)\n' "$1" "${r#* }" "$2" "${r%% *}" "$3" "${b%% *}"
}

# ---- summary ------------------------------------------------------------------------------

STATUS=0
VERDICT="PASS"
if [ "${#FAIL[@]}" -gt 0 ]; then
  STATUS=1
  VERDICT="FAIL: $(
    IFS=';'
    echo "${FAIL[*]}"
  )"
elif [ -n "$BENCH_SKIP" ] || [ "$T_PASS" -eq 0 ]; then
  STATUS=3
  VERDICT="INCOMPLETE: nothing failed, but the CUDA path was not exercised ($([ -n "$BENCH_SKIP" ] && echo 'the benchmarks skipped' || echo 'every suite test skipped'))"
fi

{
  echo "weft GPU check, $MODE: $DRIVER"
  sed 's/^/  /' "$OUTDIR/env.txt"
  if [ -n "$GPU_NAME" ]; then
    echo "device: $GPU_NAME (nvidia-smi -L)"
  else
    echo "device: ${DEV_BENCH:-unknown}$([ -n "$DEV_BENCH" ] && echo ' (weft-bench, through the driver)')"
  fi
  echo "driver version (cuDriverGetVersion): ${DRV_VER:-unknown}"
  echo
  echo "build: ok in ${BUILD_S}s ($BUILD, Release)"
  echo "suites (ctest -R 'cuda_', run with WEFT_CUDA_DRIVER=$DRIVER) in ${TESTS_S}s: $SUITES_PASS of $SUITES passed, $SUITES_FAIL failed"
  echo "  test cases: $T_PASS passed, $T_SKIP skipped, $T_FAIL failed"
  for l in "${SUITE_LINES[@]}"; do echo "$l"; done
  echo
  if [ "$BRC" -ne 0 ]; then
    echo "benchmarks: FAILED (weft-bench exited $BRC after ${BENCH_S}s); bench.stderr ends with:"
    tail -n 15 "$OUTDIR/bench.stderr" | sed 's/^/  /'
  elif [ -n "$BENCH_SKIP" ]; then
    echo "benchmarks: SKIPPED after ${BENCH_S}s: $BENCH_SKIP"
  else
    echo "benchmarks (weft-bench --filter cuda_ --reps 5) in ${BENCH_S}s; key ratios (median / baseline median, same run; < 1: weft is faster):"
    ratio_line "launch, submit to completion" cuda_launch_noop cuda_raw_launch_noop
    ratio_line "cross-stream fan, per launch" cuda_cross_stream_fan cuda_raw_cross_stream_fan
    ratio_line "replay vs eager launches, per node" cuda_replay_chain cuda_eager_chain
    echo
    echo "  the cuda_* rows of the table (ns per operation):"
    awk '/^benchmark / { on = 1 } on && /^$/ { exit } on && !/^---/' "$OUTDIR/bench.txt" |
      sed 's/^/  /'
    echo
    sed -n '/^cuda: device statistics/,$p' "$OUTDIR/bench.txt" | sed 's/^/  /'
  fi
  echo
  echo "total: $(elapsed)s"
  echo "result: $VERDICT (exit $STATUS)"
  echo "files: $(cd "$OUTDIR" && ls | tr '\n' ' ')"
} >"$SUMMARY"
cat "$SUMMARY"
exit "$STATUS"
