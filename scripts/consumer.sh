#!/usr/bin/env bash
# The installed package, as a new user meets it: builds weft (the libraries
# only), installs it to a fresh temporary prefix, moves that prefix elsewhere
# (weft.pc and weftConfig.cmake must not depend on where it was configured or
# installed), then builds and runs tests/consumer out of tree five ways:
#   find_package(weft) + weft::weft (shared) and weft::weft_static;
#   cc $(pkg-config --cflags --libs weft) (shared);
#   cc with pkg-config --static, libweft.a chosen explicitly (static);
#   add_subdirectory(<this checkout>) + weft::weft and weft::weft_static.
# It also checks that pkg-config's cflags carry nothing but the include path
# and that the static binaries do not need libweft.so. With DLPack it builds a
# consumer of weft/dlpack.h through pkg-config and find_package(weft COMPONENTS
# dlpack); a second build without DLPack must install no weft/dlpack.h, keep
# the consumers working and refuse that component. Last, it embeds the
# source tree with add_subdirectory (weft not the top-level project) where
# pkg-config cannot find Criterion: that build must configure without looking
# for it, put no -Werror on weft's own files, and run both consumers.
#
#   scripts/consumer.sh   (WEFT_CONSUMER_BUILD_DIR: the build folder, default build-consumer)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
./scripts/install-deps.sh
BUILD=${WEFT_CONSUMER_BUILD_DIR:-build-consumer}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/weft-consumer.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
CONFIGURED="$WORK/configured-prefix-never-used"
CC=${CC:-cc}

step() { echo "== consumer: $* =="; }
die() { echo "consumer.sh: $*" >&2; exit 1; }

step "build weft (libraries only) in $BUILD"
cmake -S . -B "$BUILD" -G Ninja -DWEFT_BUILD_TESTS=OFF -DWEFT_BUILD_BENCH=OFF \
  -DWEFT_BUILD_EXAMPLES=OFF -DWEFT_SANITIZE= -DCMAKE_INSTALL_PREFIX="$CONFIGURED" >/dev/null
cmake --build "$BUILD" --target weft weft_static

step "install to a fresh prefix, then move it"
cmake --install "$BUILD" --prefix "$WORK/installed" >/dev/null
mv "$WORK/installed" "$WORK/moved"
PREFIX="$WORK/moved"
if grep -rIl -e "$CONFIGURED" -e "$WORK/installed" "$PREFIX"; then
  die "the files above name the configure-time or install-time prefix"
fi
[ -f "$PREFIX/share/doc/weft/LICENSE" ] || die "LICENSE is not installed"
PC=$(find "$PREFIX" -name weft.pc -path '*/pkgconfig/*')
[ -n "$PC" ] || die "weft.pc is not installed"
PKG_CONFIG_PATH=$(dirname "$PC")
export PKG_CONFIG_PATH

step "pkg-config"
pkg-config --validate weft || die "pkg-config --validate weft failed"
for mode in "" "--static"; do
  # shellcheck disable=SC2086
  cflags=$(pkg-config --cflags $mode weft)
  echo "pkg-config --cflags $mode weft: $cflags"
  for f in $cflags; do
    case "$f" in
    -I*) [ -f "${f#-I}/weft/weft.h" ] || die "$f has no weft/weft.h" ;;
    *) die "pkg-config --cflags $mode weft leaks '$f'" ;;
    esac
  done
done
echo "pkg-config --libs --static weft: $(pkg-config --libs --static weft)"
LIBDIR=$(pkg-config --variable=libdir weft)
if [ ! -f "$LIBDIR/libweft.a" ] || [ ! -e "$LIBDIR/libweft.so" ]; then
  die "libdir $LIBDIR lacks libweft.a or libweft.so"
fi

needs_weft_so() { readelf -d "$1" | grep -q 'NEEDED.*libweft\.so'; }
# Runs one consumer; a failure is reported and the others still run.
FAILED=()
run() {
  local rc=0
  "$1" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "consumer.sh: $(basename "$1") FAILED (exit status $rc)" >&2
    FAILED+=("$(basename "$1")")
  fi
}

step "find_package(weft): weft::weft and weft::weft_static"
cmake -S "$ROOT/tests/consumer" -B "$WORK/cmake-build" -G Ninja -DCMAKE_PREFIX_PATH="$PREFIX" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$WORK/cmake-build"
needs_weft_so "$WORK/cmake-build/consumer_shared" || die "consumer_shared does not need libweft.so"
! needs_weft_so "$WORK/cmake-build/consumer_static" || die "consumer_static needs libweft.so"
run "$WORK/cmake-build/consumer_shared"
run "$WORK/cmake-build/consumer_static"

step "pkg-config, shared: cc \$(pkg-config --cflags --libs weft)"
# shellcheck disable=SC2046
"$CC" -std=c11 -Wall -Wextra -Werror -o "$WORK/pc_shared" "$ROOT/tests/consumer/consumer.c" \
  $(pkg-config --cflags --libs weft) -Wl,-rpath,"$LIBDIR"
needs_weft_so "$WORK/pc_shared" || die "pc_shared does not need libweft.so"
run "$WORK/pc_shared"

step "pkg-config, static: -l:libweft.a with pkg-config --static --libs"
# With both libraries in libdir, -lweft picks libweft.so: name the archive.
STATIC_LIBS=$(pkg-config --libs --static weft)
STATIC_LIBS=${STATIC_LIBS/-lweft /-l:libweft.a }
echo "cc ... $(pkg-config --cflags weft) $STATIC_LIBS"
# shellcheck disable=SC2046,SC2086
"$CC" -std=c11 -Wall -Wextra -Werror -o "$WORK/pc_static" "$ROOT/tests/consumer/consumer.c" \
  $(pkg-config --cflags weft) $STATIC_LIBS
! needs_weft_so "$WORK/pc_static" || die "pc_static needs libweft.so"
run "$WORK/pc_static"

step "add_subdirectory(weft), without Criterion"
# A pkg-config search path holding only what the libraries need (ck, and
# jemalloc where it is used): Criterion is not there to be found.
PCDIR="$WORK/pkgconfig-without-criterion"
mkdir -p "$PCDIR"
for m in ck jemalloc; do
  if pc=$(pkg-config --variable=pcfiledir "$m" 2>/dev/null); then ln -s "$pc/$m.pc" "$PCDIR/$m.pc"; fi
done
if PKG_CONFIG_LIBDIR="$PCDIR" PKG_CONFIG_PATH='' pkg-config --exists criterion; then
  die "criterion is still visible to pkg-config in $PCDIR"
fi
EMBED="$WORK/embed-build"
PKG_CONFIG_LIBDIR="$PCDIR" PKG_CONFIG_PATH='' cmake -S "$ROOT/tests/consumer" -B "$EMBED" -G Ninja \
  -DWEFT_SOURCE_DIR="$ROOT" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  >"$WORK/embed-configure.log" || { cat "$WORK/embed-configure.log"; die "the embedded configure failed"; }
grep 'weft 0.1' "$WORK/embed-configure.log" || true
if grep -E '^[A-Za-z_]*CRITERION' "$EMBED/CMakeCache.txt"; then
  die "the embedded build looked for Criterion (the cache entries above)"
fi
grep -q 'tests=OFF bench=OFF examples=OFF werror=OFF' "$WORK/embed-configure.log" ||
  die "an embedded weft must default its tests, bench, examples and -Werror off"
cmake --build "$EMBED" --target consumer_shared consumer_static
# weft's own files get its warnings but never -Werror; the consumer's keep theirs.
bad=0
while IFS= read -r cmd; do
  case "$cmd" in
  *" -c $ROOT/tests/consumer/"*)
    [[ "$cmd" == *-Werror* ]] || { echo "consumer compile without -Werror: $cmd"; bad=1; } ;;
  *" -c $ROOT/"*)
    [[ "$cmd" == *-Wall* && "$cmd" != *-Werror* ]] || { echo "weft compile with wrong flags: $cmd"; bad=1; } ;;
  esac
done < <(ninja -C "$EMBED" -t commands consumer_shared consumer_static)
[ "$bad" -eq 0 ] || die "the embedded build's flags are wrong (above)"
needs_weft_so "$EMBED/consumer_shared" || die "the embedded consumer_shared does not need libweft.so"
! needs_weft_so "$EMBED/consumer_static" || die "the embedded consumer_static needs libweft.so"
run "$EMBED/consumer_shared"
run "$EMBED/consumer_static"

# DLPack: the installed weft/dlpack.h, reached through pkg-config and through
# find_package(weft COMPONENTS dlpack), when weft was built with it.
cat >"$WORK/dlpack_consumer.c" <<'C'
#include <stdio.h>
#include <weft/dlpack.h>
int main(void) {
  weft_device *dev = NULL;
  weft_buffer b;
  DLManagedTensor *t = NULL;
  const int64_t shape[1] = {4};
  const DLDataType f32 = {kDLFloat, 32, 1};
  const float v[4] = {1, 2, 3, 4};
  weft_status st = weft_device_open(NULL, &dev);
  if (!st) st = weft_buffer_create(dev, 0, sizeof(v), &b);
  if (!st) st = weft_buffer_write(dev, 0, b, 0, v, sizeof(v));
  if (!st) st = weft_buffer_to_dlpack(dev, 0, b, 0, f32, shape, 1, &t);
  int ok = !st && ((const float *)t->dl_tensor.data)[3] == 4.0f;
  if (t) t->deleter(t);
  weft_error_free(st);
  weft_device_close(dev);
  puts(ok ? "dlpack consumer: OK" : "dlpack consumer: FAILED");
  return ok ? 0 : 1;
}
C
cat >"$WORK/dlpack_cmake.txt" <<'CM'
cmake_minimum_required(VERSION 3.25)
project(weft_dlpack_consumer LANGUAGES C)
find_package(weft 0.1 REQUIRED CONFIG COMPONENTS dlpack)
add_executable(dlpack_consumer dlpack_consumer.c)
target_compile_options(dlpack_consumer PRIVATE -Wall -Wextra -Wpedantic -Werror)
target_link_libraries(dlpack_consumer PRIVATE weft::weft)
CM
if [ "$(pkg-config --variable=dlpack weft)" = yes ]; then
  step "DLPack: weft/dlpack.h through pkg-config and find_package(weft COMPONENTS dlpack)"
  [ -f "$PREFIX/include/weft/dlpack.h" ] || die "pkg-config says dlpack=yes but weft/dlpack.h is not installed"
  # shellcheck disable=SC2046
  "$CC" -std=c11 -Wall -Wextra -Werror -o "$WORK/dlpack_pc" "$WORK/dlpack_consumer.c" \
    $(pkg-config --cflags --libs weft) -Wl,-rpath,"$LIBDIR"
  run "$WORK/dlpack_pc"
  mkdir -p "$WORK/dlpack-src"
  cp "$WORK/dlpack_consumer.c" "$WORK/dlpack-src/"
  cp "$WORK/dlpack_cmake.txt" "$WORK/dlpack-src/CMakeLists.txt"
  cmake -S "$WORK/dlpack-src" -B "$WORK/dlpack-build" -G Ninja -DCMAKE_PREFIX_PATH="$PREFIX" >/dev/null
  cmake --build "$WORK/dlpack-build"
  run "$WORK/dlpack-build/dlpack_consumer"
else
  step "DLPack: weft was built without it (no dlpack/dlpack.h): skipped"
fi

step "built without DLPack: no weft/dlpack.h, the other consumers unchanged"
cmake -S . -B "$BUILD-nodlpack" -G Ninja -DWEFT_BUILD_TESTS=OFF -DWEFT_BUILD_BENCH=OFF \
  -DWEFT_BUILD_EXAMPLES=OFF -DWEFT_SANITIZE= -DWEFT_WITH_DLPACK=OFF >/dev/null
cmake --build "$BUILD-nodlpack" --target weft weft_static
cmake --install "$BUILD-nodlpack" --prefix "$WORK/nodlpack" >/dev/null
[ ! -e "$WORK/nodlpack/include/weft/dlpack.h" ] || die "weft/dlpack.h installed by a build without DLPack"
NODL_PC=$(dirname "$(find "$WORK/nodlpack" -name weft.pc -path '*/pkgconfig/*')")
[ "$(PKG_CONFIG_PATH=$NODL_PC pkg-config --variable=dlpack weft)" = no ] ||
  die "weft.pc of a build without DLPack does not say dlpack=no"
cmake -S "$ROOT/tests/consumer" -B "$WORK/nodlpack-build" -G Ninja \
  -DCMAKE_PREFIX_PATH="$WORK/nodlpack" >/dev/null
cmake --build "$WORK/nodlpack-build"
run "$WORK/nodlpack-build/consumer_shared"
mkdir -p "$WORK/dlpack-src-nodl"
cp "$WORK/dlpack_consumer.c" "$WORK/dlpack-src-nodl/"
cp "$WORK/dlpack_cmake.txt" "$WORK/dlpack-src-nodl/CMakeLists.txt"
if cmake -S "$WORK/dlpack-src-nodl" -B "$WORK/nodlpack-dl" -G Ninja \
  -DCMAKE_PREFIX_PATH="$WORK/nodlpack" >"$WORK/nodlpack-dl.log" 2>&1; then
  die "find_package(weft COMPONENTS dlpack) succeeded on a weft built without DLPack"
fi
grep -q "dlpack" "$WORK/nodlpack-dl.log" || { cat "$WORK/nodlpack-dl.log"; die "the refusal does not name dlpack"; }
echo "find_package(weft COMPONENTS dlpack) on a weft without DLPack is refused, naming the component"

[ "${#FAILED[@]}" -eq 0 ] || die "failed: ${FAILED[*]}"
echo "consumer.sh: every consumer built and ran"
