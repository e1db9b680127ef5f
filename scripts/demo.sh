#!/usr/bin/env bash
# The main job: install what is missing, build, run the demos on the host
# backend, then the benchmark summary:
#  - weft-mlp_train: a small MLP trained with SGD as a task graph captured once
#    and replayed per step (loss falling, per-step time eager vs graph vs
#    replay), then one step with an injected failure: its root and chain;
#  - weft-demo: a four-stream pipeline and an injected NaN, the same way;
#  - weft-cuda_axpy: the CUDA backend, when a driver is present (it says why
#    not otherwise; WEFT_CUDA_DRIVER can point at tests/fake_cuda's library).
# It writes the trace of the MLP's injected-failure step (a Chrome trace-event
# timeline) and, when weft-bench has --report, the benchmark report, under
# WEFT_DEMO_OUT (default: $BUILD/demo), and says at the end what to open.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
BUILD=${WEFT_BUILD_DIR:-build-release}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_BUILD_TESTS=OFF >/dev/null
cmake --build "$BUILD" --target weft-mlp_train weft-demo weft-cuda_axpy weft-bench
OUT=${WEFT_DEMO_OUT:-$BUILD/demo}
mkdir -p "$OUT"
TRACE="$OUT/mlp-failure-step.trace.json"
echo
"./$BUILD/examples/weft-mlp_train" --trace "$TRACE"
# The same timeline drawn offline (no network, no JavaScript).
command -v python3 >/dev/null && python3 scripts/trace_svg.py "$TRACE" "$OUT/mlp-failure-step.html" \
  --title "weft-mlp_train: the injected-failure step"
echo
"./$BUILD/examples/weft-demo"
echo
"./$BUILD/examples/weft-cuda_axpy"
echo
echo "== benchmark summary (weft-bench ${WEFT_BENCH_ARGS:---quick}) =="
REPORT=""
if "./$BUILD/bench/weft-bench" --help 2>&1 | grep -q -- --report; then
  REPORT="$OUT/bench-report"
  # shellcheck disable=SC2086
  "./$BUILD/bench/weft-bench" ${WEFT_BENCH_ARGS:---quick} --report "$REPORT"
else
  # shellcheck disable=SC2086
  "./$BUILD/bench/weft-bench" ${WEFT_BENCH_ARGS:---quick}
fi
echo
echo "== what to open =="
echo "  the failure step's timeline: $TRACE"
echo "    drag it into https://ui.perfetto.dev (or chrome://tracing): one track per stream,"
echo "    the failed launch and the launches it skipped joined by arrows, the scheduler's track;"
echo "    docs/observability.md says how to read it; drawn offline: $OUT/mlp-failure-step.html"
if [ -n "$REPORT" ]; then
  echo "  the benchmark report: $REPORT/index.html (self-contained: open it in any browser)"
fi
