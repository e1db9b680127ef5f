#!/usr/bin/env bash
# Installs what is missing, builds everything and runs the whole test suite.
# WEFT_SANITIZE=address,undefined (or thread) selects a sanitizer build.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
SAN=${WEFT_SANITIZE:-}
BUILD=${WEFT_BUILD_DIR:-build${SAN:+-${SAN//,/-}}}
CC_ARG=()
if [ "$SAN" = "thread" ]; then CC_ARG=(-DCMAKE_C_COMPILER=clang); fi
cmake -S . -B "$BUILD" -G Ninja -DWEFT_BUILD_TESTS=ON -DWEFT_SANITIZE="$SAN" "${CC_ARG[@]}" >/dev/null
cmake --build "$BUILD"
cd "$BUILD"
if [ "$SAN" = "thread" ]; then
  # Criterion cannot run under TSan: only the plain-main stress programs,
  # under both scheduler modes.
  ctest --output-on-failure -j2 -R '^stress_'
  WEFT_SCHEDULER=combining ctest --output-on-failure -j2 -R '^stress_stress_(submit|replay|close)'
else
  ctest --output-on-failure -j2
  # The device suites and stress programs again with the combining scheduler.
  WEFT_SCHEDULER=combining ctest --output-on-failure -j2 -R '^(device_|stress_stress_(submit|replay|close)|examples_)'
fi
