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
  # The torch client (tests/python): say plainly whether it ran.
  torch_python=$(sed -n 's/^WEFT_TORCH_PYTHON_FOUND:INTERNAL=//p' CMakeCache.txt)
  if [ -n "$SAN" ]; then
    echo "test.sh: SKIPPED the torch client tests (python_torch_interop, examples_torch_interop):" \
      "a -fsanitize=$SAN libweft.so cannot be loaded into python"
  elif [ -z "$torch_python" ]; then
    echo "test.sh: SKIPPED the torch client tests (python_torch_interop, examples_torch_interop):" \
      "torch is not installed (apt-get install python3-torch, then run this again)"
  else
    echo "test.sh: ran the torch client tests with $torch_python" \
      "(torch $("$torch_python" -c 'import torch; print(torch.__version__)' 2>/dev/null))"
  fi
fi
