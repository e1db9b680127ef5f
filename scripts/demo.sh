#!/usr/bin/env bash
# The main job: install what is missing, build, run the demo on the host
# backend (a multi-stream workload, an injected failure reported with its root
# cause and chain), then the benchmark summary.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
BUILD=${WEFT_BUILD_DIR:-build-release}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_BUILD_TESTS=OFF >/dev/null
cmake --build "$BUILD" --target weft-demo weft-bench
echo
"./$BUILD/examples/weft-demo"
echo
echo "== benchmark summary (weft-bench ${WEFT_BENCH_ARGS:---quick}) =="
# shellcheck disable=SC2086
"./$BUILD/bench/weft-bench" ${WEFT_BENCH_ARGS:---quick}
