#!/usr/bin/env bash
# The GPU check's bundle runner: copied to DIR/run.sh by `tests/gpu/run.sh --bundle DIR`.
# It runs the CUDA suites, the CUDA stress program, the CUDA example and weft-bench's
# cuda benchmarks from the bundle folder alone, on a machine that has the NVIDIA driver
# and a glibc but no build tree, package registry, Criterion or ck (the bundle carries
# those in lib/). See tests/gpu/README.md.
#
#   run.sh [--fake DRIVER] [OUTDIR]
#
#   --fake DRIVER  load DRIVER (the bundle's fake/libcuda.so.1) instead of the machine's
#                  libcuda.so.1: the bundle's self-test on a machine without a GPU
#   OUTDIR         also copy summary.txt and the logs there (default: $OUT when it is set)
#
# Writes logs/*.log and summary.txt in the bundle folder. Exit status: 0 every test and
# the benchmarks passed; 1 one failed or timed out; 2 the bundle cannot run here (bad
# arguments, a library that does not resolve); 3 nothing failed but the CUDA path was
# not exercised (no driver or no device: every suite test and the benchmarks skipped).
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
START_NS=$(date +%s%N)
BUDGET_S=${WEFT_GPU_BUDGET_S:-420} # the whole run, under 8 minutes even when every step times out

usage() { sed -n '8,18p' "$0" | sed 's/^# \{0,1\}//'; }

FAKE=""
OUTDIR=${OUT:-}
OUTDIR_SET=0
while [ $# -gt 0 ]; do
  case "$1" in
  --fake)
    if [ $# -lt 2 ] || [ -z "$2" ]; then
      echo "run.sh: --fake needs the driver's path (e.g. $HERE/fake/libcuda.so.1)" >&2
      exit 2
    fi
    FAKE=$2
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
    if [ "$OUTDIR_SET" = 1 ]; then
      echo "run.sh: more than one OUTDIR ('$OUTDIR', '$1')" >&2
      exit 2
    fi
    OUTDIR=$1
    OUTDIR_SET=1
    ;;
  esac
  shift
done

LOGS=$HERE/logs
SUMMARY=$HERE/summary.txt
if ! rm -rf "$LOGS" || ! mkdir -p "$LOGS" || ! : >"$SUMMARY"; then
  echo "run.sh: cannot write $LOGS and $SUMMARY (is the bundle folder read-only? copy it first)" >&2
  exit 2
fi
if [ -n "$OUTDIR" ] && ! mkdir -p "$OUTDIR"; then
  echo "run.sh: cannot create OUTDIR $OUTDIR" >&2
  exit 2
fi
[ -n "$OUTDIR" ] && OUTDIR=$(cd "$OUTDIR" && pwd)
cd "$LOGS" || exit 2 # the programs' working directory: nothing they write lands elsewhere
chmod +x "$HERE"/bin/* 2>/dev/null # in case a copy dropped the modes

log() { echo "run.sh: $*" >&2; }
elapsed() { echo $((($(date +%s%N) - START_NS) / 1000000000)); }
# The seconds a step may take: its own cap, but never past the overall budget.
cap() {
  local left=$((BUDGET_S - $(elapsed)))
  [ "$left" -lt 5 ] && left=5
  if [ "$1" -lt "$left" ]; then echo "$1"; else echo "$left"; fi
}

# limited SECONDS LOG cmd...: runs cmd with stdout and stderr in LOG, killed after
# SECONDS; status 124 when it was. coreutils' timeout kills the whole process group
# (Criterion's workers too); without it, a watcher kills the program itself.
HAVE_TIMEOUT=0
t=$(command -v timeout 2>/dev/null) && [ -x "$t" ] && HAVE_TIMEOUT=1
limited() {
  local s=$1 out=$2
  shift 2
  if [ "$HAVE_TIMEOUT" = 1 ]; then
    timeout --kill-after=10 "$s" "$@" >"$out" 2>&1
    return
  fi
  "$@" >"$out" 2>&1 &
  local pid=$! flag=$LOGS/.timed-out.$$
  rm -f "$flag"
  (
    sleep "$s"
    kill -0 "$pid" 2>/dev/null || exit 0
    : >"$flag"
    kill -TERM "$pid" 2>/dev/null
    sleep 10
    kill -KILL "$pid" 2>/dev/null
  ) &
  local watcher=$! rc
  wait "$pid"
  rc=$?
  kill "$watcher" 2>/dev/null
  wait "$watcher" 2>/dev/null
  if [ -f "$flag" ]; then
    rm -f "$flag"
    return 124
  fi
  return "$rc"
}

# ---- the machine and the driver -----------------------------------------------------------

GLIBC=$(getconf GNU_LIBC_VERSION 2>/dev/null | sed 's/^glibc //')
[ -n "$GLIBC" ] || GLIBC=$(ldd --version 2>/dev/null | sed -n '1s/.* \([0-9][0-9.]*\)$/\1/p')
NEED=$(sed -n 's/^glibc needed: \([0-9.]*\).*/\1/p' "$HERE/MANIFEST" 2>/dev/null)
NEED_CXX=$(sed -n 's/^glibc needed by lib\/cxx: \([0-9.]*\).*/\1/p' "$HERE/MANIFEST" 2>/dev/null)
GPU_NAME=""
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -n) $(uname -srm), $(nproc 2>/dev/null || echo '?') cpus, glibc ${GLIBC:-unknown}"
  echo "bundle: $HERE"
  sed 's/^/  /' "$HERE/MANIFEST" 2>/dev/null || echo "  (no MANIFEST: not a bundle made by tests/gpu/run.sh --bundle?)"
  echo "LD_LIBRARY_PATH on entry: ${LD_LIBRARY_PATH:-(unset)}"
  echo
  if command -v nvidia-smi >/dev/null 2>&1; then
    echo "\$ nvidia-smi -L"
    limited 30 "$LOGS/.smi" nvidia-smi -L
    cat "$LOGS/.smi"
    GPU_NAME=$(sed -n 's/^GPU 0: \(.*\) (UUID.*/\1/p' "$LOGS/.smi" | head -1)
    echo "\$ nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv"
    limited 30 "$LOGS/.smi" nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap \
      --format=csv
    cat "$LOGS/.smi"
    rm -f "$LOGS/.smi"
  else
    echo "nvidia-smi: not found"
  fi
} >"$LOGS/system.log" 2>&1

# The driver: --fake's path, else libcuda.so.1 as dlopen finds it (the caller's
# LD_LIBRARY_PATH, then ldconfig's cache), else the first libcuda.so.1 in the places
# NVIDIA's container runtime and distributions put it (never the toolkit's stub).
if [ -n "$FAKE" ]; then
  case "$FAKE" in /*) ;; *) FAKE=$(cd "$(dirname "$FAKE")" 2>/dev/null && pwd)/$(basename "$FAKE") ;; esac
  if [ ! -f "$FAKE" ]; then
    echo "run.sh: --fake $FAKE: no such file" >&2
    exit 2
  fi
  MODE="fake driver"
  DRIVER=$FAKE
  DRIVER_NOTE=""
else
  MODE="real driver"
  DRIVER=libcuda.so.1
  DRIVER_NOTE="not found: no libcuda.so.1 in LD_LIBRARY_PATH, ldconfig or the usual places"
  IFS=: read -r -a dirs <<<"${LD_LIBRARY_PATH:-}"
  for d in "${dirs[@]}"; do
    if [ -n "$d" ] && [ -e "$d/libcuda.so.1" ]; then
      DRIVER_NOTE="$d/libcuda.so.1 (LD_LIBRARY_PATH)"
      break
    fi
  done
  if [[ $DRIVER_NOTE == not* ]]; then
    p=$( (ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null) | awk '$1 == "libcuda.so.1" && $0 ~ /x86-64|x86_64/ { print $NF; exit }')
    if [ -n "$p" ]; then
      DRIVER_NOTE="$p (ldconfig)"
    else
      for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64 \
        /lib64 /usr/lib/wsl/lib /usr/local/cuda/compat; do
        if [ -e "$d/libcuda.so.1" ]; then
          DRIVER=$d/libcuda.so.1
          DRIVER_NOTE="found in $d (neither LD_LIBRARY_PATH nor ldconfig names it)"
          break
        fi
      done
    fi
  fi
fi
export WEFT_CUDA_DRIVER=$DRIVER
echo "driver: $MODE, WEFT_CUDA_DRIVER=$DRIVER${DRIVER_NOTE:+; $DRIVER_NOTE}" >>"$LOGS/system.log"

# ---- the libraries ------------------------------------------------------------------------
# lib/ holds every library the programs need that is not glibc's own (the set below,
# which tests/gpu/run.sh --bundle leaves out too), lib/cxx/ libstdc++ and libgcc_s.
# Those two are tried from the bundle first; when they cannot load here (they can need
# a newer glibc than lib/ does) the machine's own are used, and the summary says so.

SYSTEM_LIBS='^(linux-vdso|linux-gate|ld-linux[^ ]*|libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libanl|libBrokenLocale|libthread_db|libc_malloc_debug|libnss_[a-z0-9_]+)\.so'
PROGRAMS=("$HERE"/bin/*)
[ -n "$FAKE" ] && PROGRAMS+=("$FAKE")
LIBS_OK=0
LIBS_NOTE=""
OUTSIDE=()
# ldd_with DIRS: ldd of every program with LD_LIBRARY_PATH=DIRS plus the caller's;
# status 0 when every library resolves.
ldd_with() {
  local p
  : >"$LOGS/.ldd"
  for p in "${PROGRAMS[@]}"; do
    echo "== $p" >>"$LOGS/.ldd"
    LD_LIBRARY_PATH="$1${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$p" >>"$LOGS/.ldd" 2>&1
  done
  ! grep -q 'not found\|not a dynamic executable\|error while loading' "$LOGS/.ldd"
}
{
  echo "glibc here: ${GLIBC:-unknown}; the bundle's lib/ needs ${NEED:-?}, lib/cxx/ ${NEED_CXX:-?}"
  if ! command -v ldd >/dev/null 2>&1; then
    LIBS_OK=1
    LIB_PATH=$HERE/lib:$HERE/lib/cxx
    LIBS_NOTE="not checked (no ldd here); lib/ and lib/cxx/ from the bundle"
    echo "ldd: not found, libraries not checked"
  elif ldd_with "$HERE/lib:$HERE/lib/cxx"; then
    LIBS_OK=1
    LIB_PATH=$HERE/lib:$HERE/lib/cxx
    LIBS_NOTE="every one resolves (lib/ and lib/cxx/ first)"
    echo "with LD_LIBRARY_PATH=$LIB_PATH: every library resolves"
  else
    echo "with LD_LIBRARY_PATH=$HERE/lib:$HERE/lib/cxx some library does not resolve:"
    grep -B1 'not found\|not a dynamic\|error while' "$LOGS/.ldd"
    if ldd_with "$HERE/lib"; then
      LIBS_OK=1
      LIB_PATH=$HERE/lib
      LIBS_NOTE="lib/ from the bundle, libstdc++/libgcc_s the machine's (the bundle's need glibc ${NEED_CXX:-?}, this one has ${GLIBC:-?})"
      echo "with LD_LIBRARY_PATH=$LIB_PATH (the machine's libstdc++/libgcc_s): every library resolves"
    else
      echo "with LD_LIBRARY_PATH=$HERE/lib (the machine's libstdc++/libgcc_s) neither:"
      grep -B1 'not found\|not a dynamic\|error while' "$LOGS/.ldd"
      LIB_PATH=$HERE/lib:$HERE/lib/cxx
    fi
  fi
  [ -f "$LOGS/.ldd" ] && cat "$LOGS/.ldd"
} >"$LOGS/libraries.log" 2>&1
if [ -f "$LOGS/.ldd" ]; then
  # Every library that resolved outside the bundle and is not glibc's (the machine's
  # libstdc++ in the fallback above; under --fake, any is a failure: the self-test
  # proves the bundle needs nothing else).
  while IFS= read -r l; do OUTSIDE+=("$l"); done < <(
    awk '$2 == "=>" && $3 ~ /^\// { print $1 " => " $3 }' "$LOGS/.ldd" | sort -u |
      while read -r name _ path; do
        case "$path" in "$HERE"/lib/*) continue ;; esac
        [[ $name =~ $SYSTEM_LIBS ]] && continue
        echo "$name => $path"
      done
  )
  rm -f "$LOGS/.ldd"
fi
if [ "${#OUTSIDE[@]}" -gt 0 ]; then
  LIBS_NOTE="$LIBS_NOTE; ${#OUTSIDE[@]} resolved outside the bundle and glibc (below)"
fi
# Only the programs get the bundle's libraries: the tools this script runs keep the
# machine's (a bundled libpcre2 or libz never meets the machine's grep or sed).
RUN_LD=$LIB_PATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [ "$LIBS_OK" = 0 ]; then
  {
    echo "weft GPU check (bundle), $MODE: the bundle's programs cannot load their libraries here"
    echo "  glibc here ${GLIBC:-unknown}, the bundle needs ${NEED:-?}; see logs/libraries.log:"
    grep -B1 'not found\|not a dynamic\|error while' "$LOGS/libraries.log" | awk '!seen[$0]++' |
      sed 's/^/  /' | head -20
    echo "result: CANNOT RUN (exit 2)"
  } | tee "$SUMMARY"
  [ -n "$OUTDIR" ] && cp "$SUMMARY" "$LOGS/system.log" "$LOGS/libraries.log" "$OUTDIR/"
  exit 2
fi

# ---- the tests ----------------------------------------------------------------------------

CPUS=$(nproc 2>/dev/null || echo 2)
JOBS=${WEFT_GPU_JOBS:-$((CPUS / 4))} # one CUDA context per Criterion worker
[ "$JOBS" -lt 1 ] && JOBS=1
[ "$JOBS" -gt 4 ] && JOBS=4
FAIL=()
LINES=()
T_PASS=0 T_SKIP=0 T_FAIL=0

# run_test NAME SECONDS KIND PROGRAM [ARGS...]: KIND criterion (counts its cases),
# plain (exit status 0) or a string the output must hold besides exit status 0.
run_test() {
  local name=$1 secs=$2 kind=$3
  shift 3
  local out=$LOGS/$name.log lim t0 rc ms
  lim=$(cap "$secs")
  t0=$(date +%s%N)
  if [ "$kind" = criterion ]; then
    limited "$lim" "$out.run" env LD_LIBRARY_PATH="$RUN_LD" CRITERION_VERBOSITY_LEVEL=1 \
      "$HERE/$1" "${@:2}" --jobs "$JOBS" --color=never
  else
    limited "$lim" "$out.run" env LD_LIBRARY_PATH="$RUN_LD" "$HERE/$1" "${@:2}"
  fi
  rc=$?
  ms=$((($(date +%s%N) - t0) / 1000000))
  {
    echo "==== $name: $* (WEFT_CUDA_DRIVER=$WEFT_CUDA_DRIVER, LD_LIBRARY_PATH=$RUN_LD, timeout ${lim}s)"
    cat "$out.run"
    echo "==== $name: exit status $rc after $((ms / 1000)).$(printf %03d $((ms % 1000)))s"
  } >"$out"
  rm -f "$out.run"
  local verdict=PASS detail=""
  if [ "$rc" -eq 124 ]; then
    verdict=TIMEOUT
    detail="killed after ${lim}s"
  elif [ "$rc" -ne 0 ]; then
    verdict=FAIL
    detail="exit $rc"
  elif [ "$kind" != criterion ] && [ "$kind" != plain ] && ! grep -qF -- "$kind" "$out"; then
    verdict=FAIL
    detail="exit 0 but the output lacks \"$kind\""
  fi
  if [ "$kind" = criterion ]; then
    local p s f
    p=$(grep -c '^\[PASS\]' "$out")
    s=$(grep -c '^\[SKIP\]' "$out")
    f=$(grep -c '^\[FAIL\]' "$out")
    T_PASS=$((T_PASS + p))
    T_SKIP=$((T_SKIP + s))
    T_FAIL=$((T_FAIL + f))
    detail="$p passed, $s skipped, $f failed${detail:+; $detail}"
  fi
  if [ "$kind" != criterion ] && [ "$name" != bench ] && [ -z "$detail" ]; then
    detail=$(sed '$d' "$out" | tail -n 1 | grep -v '^====' | cut -c1-110) # its last line
  fi
  [ "$verdict" = PASS ] || FAIL+=("$name $verdict")
  LINES+=("$(printf '  %-8s %-22s %7.1fs  %s' "$verdict" "$name" "$(echo "$ms" | awk '{ print $1 / 1000 }')" "$detail")")
}

log "$MODE: WEFT_CUDA_DRIVER=$WEFT_CUDA_DRIVER; libraries: $LIBS_NOTE"
# Timeouts: 45 + 120 + 45 + 30 + 120 = 360 s at most (and $BUDGET_S in all); under the
# fake on a loaded 2-core VM the five take about 15 s.
run_test cuda_backend_units 45 criterion bin/test_cuda_backend_units
run_test cuda_device 120 criterion bin/test_cuda_device
run_test stress_cuda_device 45 plain bin/stress_cuda_device
run_test example_cuda_axpy 30 "the unrelated buffer z reads back fine: 7.0 everywhere" bin/weft-cuda_axpy
run_test bench 120 plain bin/weft-bench --filter cuda --reps 3 --json "$LOGS/bench.json"

# What answered: weft-bench names the driver and the device it opened.
BENCH_LOG=$LOGS/bench.log
DEVICE=$(sed -n 's/^cuda: driver .*, device 0: //p' "$BENCH_LOG" | head -1)
DRV_VER=$(sed -n 's/^cuda: driver .* (version \([0-9.]*\)), device 0: .*/\1/p' "$BENCH_LOG" | head -1)
[ "$DEVICE" = unknown ] && DEVICE="" # printed when no device opened
BENCH_SKIP=$(sed -n 's/^cuda: SKIPPED[^:]*: //p' "$BENCH_LOG" | head -1)
if [ -n "$FAKE" ]; then
  [ -n "$DEVICE" ] && [[ $DEVICE != *Fake* ]] && FAIL+=("--fake, but the device is '$DEVICE'")
  [ "${#OUTSIDE[@]}" -gt 0 ] && FAIL+=("libraries outside the bundle: ${OUTSIDE[*]}")
else
  [[ $DEVICE == *Fake* ]] && FAIL+=("the real-driver run opened the fake driver's device")
fi

STATUS=0
VERDICT=PASS
if [ -z "$FAKE" ] && [[ $DRIVER_NOTE == not* ]] && [ -z "$DEVICE" ]; then
  # No driver on this machine: what failed failed for want of one.
  STATUS=3
  VERDICT="INCOMPLETE: no CUDA driver here, the CUDA path was not exercised (${BENCH_SKIP:-weft-bench opened no device})"
elif [ "${#FAIL[@]}" -gt 0 ]; then
  STATUS=1
  VERDICT="FAIL: $(
    IFS=';'
    echo "${FAIL[*]}"
  )"
elif [ -n "$BENCH_SKIP" ] || [ -z "$DEVICE" ] || [ "$T_PASS" -eq 0 ]; then
  STATUS=3
  VERDICT="INCOMPLETE: nothing failed, but the CUDA path was not exercised (${BENCH_SKIP:-weft-bench opened no CUDA device})"
fi

{
  echo "weft GPU check (bundle), $MODE: WEFT_CUDA_DRIVER=$WEFT_CUDA_DRIVER${DRIVER_NOTE:+ ($DRIVER_NOTE)}"
  echo "gpu: ${GPU_NAME:-none named by nvidia-smi}; device opened by weft-bench: ${DEVICE:-none}${DRV_VER:+ (driver API $DRV_VER)}"
  sed -n '1,2p' "$LOGS/system.log" | sed 's/^/  /'
  sed -n 's/^commit: /  bundle commit: /p; s/^built: /  bundle built: /p' "$HERE/MANIFEST" 2>/dev/null
  echo "libraries: $LIBS_NOTE"
  for l in "${OUTSIDE[@]}"; do echo "  outside the bundle: $l"; done
  echo
  echo "tests (Criterion with --jobs $JOBS; each under its own timeout; logs/NAME.log):"
  for l in "${LINES[@]}"; do echo "$l"; done
  echo "  test cases: $T_PASS passed, $T_SKIP skipped, $T_FAIL failed (on a real driver the fake-only ones skip)"
  echo
  echo "benchmarks (weft-bench --filter cuda --reps 3; ns per operation; ratio < 1: weft is faster):"
  if [ -n "$BENCH_SKIP" ]; then
    echo "  SKIPPED: $BENCH_SKIP"
  else
    grep -v '^weft-bench: ' "$BENCH_LOG" | sed '1d;$d' | sed 's/^/  /'
  fi
  echo
  echo "total: $(elapsed)s"
  echo "result: $VERDICT (exit $STATUS)"
} >"$SUMMARY"

if [ -n "$OUTDIR" ]; then
  # Five files (the device tool returns at most eight, two folders down).
  cp "$SUMMARY" "$OUTDIR/summary.txt"
  cat "$LOGS/system.log" "$LOGS/libraries.log" >"$OUTDIR/system.txt"
  for t in cuda_backend_units cuda_device stress_cuda_device example_cuda_axpy; do
    cat "$LOGS/$t.log"
    echo
  done >"$OUTDIR/tests.log"
  cp "$BENCH_LOG" "$OUTDIR/bench.txt"
  [ -f "$LOGS/bench.json" ] && cp "$LOGS/bench.json" "$OUTDIR/bench.json"
fi
cat "$SUMMARY"
exit "$STATUS"
