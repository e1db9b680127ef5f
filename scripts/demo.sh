#!/usr/bin/env bash
# The main job: install what is missing, build, run the demos on the host
# backend, then the benchmark summary:
#  - weft-mlp_train: a small MLP trained with SGD as a task graph captured once
#    and replayed per step (loss falling, per-step time eager vs graph vs
#    replay), then one step with an injected failure: its root and chain;
#  - weft-demo: a four-stream pipeline and an injected NaN, the same way;
#  - weft-cuda_axpy: the CUDA backend, when a driver is present (it says why
#    not otherwise; WEFT_CUDA_DRIVER can point at tests/fake_cuda's library).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
BUILD=${WEFT_BUILD_DIR:-build-release}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_BUILD_TESTS=OFF >/dev/null
cmake --build "$BUILD" --target weft-mlp_train weft-demo weft-cuda_axpy weft-bench
echo
"./$BUILD/examples/weft-mlp_train"
echo
"./$BUILD/examples/weft-demo"
echo
"./$BUILD/examples/weft-cuda_axpy"
echo
echo "== benchmark summary (weft-bench ${WEFT_BENCH_ARGS:---quick}) =="
# shellcheck disable=SC2086
"./$BUILD/bench/weft-bench" ${WEFT_BENCH_ARGS:---quick}
