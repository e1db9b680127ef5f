#!/usr/bin/env bash
# The public-API suites (tests/device, tests/failures and tests/examples,
# except those that include a private header) linked to libweft.so the way
# a consumer links weft::weft, in both scheduler modes. Separate build dir:
# build-shared/ (WEFT_BUILD_DIR overrides it).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
BUILD=${WEFT_BUILD_DIR:-build-shared}
cmake -S . -B "$BUILD" -G Ninja -DWEFT_BUILD_TESTS=ON -DWEFT_TEST_SHARED=ON \
  -DWEFT_BUILD_BENCH=OFF -DWEFT_BUILD_EXAMPLES=OFF -DWEFT_SANITIZE= >/dev/null
cmake --build "$BUILD"
cd "$BUILD"
# Every suite really runs on the shared library.
for t in tests/test_*; do
  [ -x "$t" ] || continue
  if ! ldd "./$t" | grep 'libweft\.so' >/dev/null; then
    echo "test-shared: $t is not linked to libweft.so" >&2
    exit 1
  fi
done
ctest --output-on-failure -j2
WEFT_SCHEDULER=combining ctest --output-on-failure -j2 -R '^(device_|examples_)'
