# shellcheck shell=bash
# The GPU check's bundle: `tests/gpu/run.sh --bundle DIR` fills DIR with what a machine
# that has the NVIDIA driver and a glibc needs to run the CUDA checks (tests/gpu/README.md).
# Sourced by run.sh: it uses run.sh's variables (ROOT, BUILD, FROM, BUNDLE, SELF_TEST,
# OUTDIR, JOBS, GEN, CUDA_INC, JEMALLOC) and helpers (limit, cap, log).

# 60 MiB: the device tool carries at most 64 MiB, the work tree (about 3 MiB) included.
BUNDLE_MAX_BYTES=${WEFT_GPU_BUNDLE_MAX_BYTES:-62914560}
# What goes to DIR/bin: its name there, its path in the build tree. Every program that
# drives the CUDA backend on a real driver: the backend's units, the device suite, the
# stress program, the example and weft-bench. test_cuda_fake_driver and
# stress_fake_cuda test the fake itself, at its path in the build tree: not bundled.
BUNDLE_PROGRAMS=(
  "test_cuda_backend_units tests/test_cuda_backend_units"
  "test_cuda_device tests/test_cuda_device"
  "stress_cuda_device tests/stress_stress_cuda_device"
  "weft-cuda_axpy examples/weft-cuda_axpy"
  "weft-bench bench/weft-bench"
)
BUNDLE_TARGETS=(test_cuda_backend_units test_cuda_device stress_stress_cuda_device weft-cuda_axpy
  weft-bench fake_cuda)
# Never copied: glibc's own libraries (every machine has them; bundle_run.sh's
# SYSTEM_LIBS is the same set) and the driver.
BUNDLE_SKIP='^(linux-vdso|linux-gate|ld-linux[^ ]*|libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libanl|libBrokenLocale|libthread_db|libc_malloc_debug|libnss_[a-z0-9_]+|libcuda|libnvidia-[a-z0-9_-]+)\.so'

# The newest GLIBC_x.y symbol version the files need (undefined symbols only).
glibc_needed() {
  command -v objdump >/dev/null 2>&1 || {
    echo unknown
    return
  }
  local v
  v=$(for f in "$@"; do objdump -T "$f" 2>/dev/null; done | awk '/\*UND\*/' |
    grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
  echo "${v:-none}"
}

bundle_fail() {
  echo "run.sh --bundle: $*" >&2
  return 1
}

# bundle_self_test DIR: runs a copy of DIR against its fake driver (see run.sh's usage).
bundle_self_test() {
  local dir=$1 tmp rc t0 sealed="" how
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-gpu-bundle.XXXXXX") || return 1
  cp -r "$dir" "$tmp/bundle" || return 1
  # Hidden in the sealed run: the source and build trees, and the system's copies of
  # the bundled libraries and of ck, except those the runner's own tools load.
  local hide=() tools=() keep p
  for p in "$ROOT" "$BUILD"; do
    case "$tmp/" in "$p"/*) continue ;; esac # never an ancestor of the copy
    hide+=("$p")
  done
  for p in bash sh env grep sed awk cat cp rm mkdir date sort nproc getconf uname timeout ldd \
    basename dirname sleep head tee; do
    p=$(command -v "$p" 2>/dev/null) && tools+=("$p")
  done
  keep=$(ldd "${tools[@]}" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' |
    xargs -r readlink -f | sort -u)
  while IFS= read -r p; do
    [ -n "$p" ] && ! grep -qxF "$p" <<<"$keep" && hide+=("$p")
  done < <({
    cat "$OUTDIR/bundled-from.txt"
    local d
    d=$(pkg-config --variable=libdir ck 2>/dev/null) && ls "$d"/libck.so* 2>/dev/null
  } | xargs -r readlink -f | sort -u)
  # shellcheck disable=SC2016 # expanded by the inner bash, from its arguments
  local inner='cd / || exit 2
r=$1 f=$2 o=$3
shift 3
for p in "$@"; do
  [ -e "$p" ] || continue # under a folder hidden already
  if [ -d "$p" ]; then mount -t tmpfs weft-hidden "$p"; else mount --bind /dev/null "$p"; fi || exit 2
done
exec env -i PATH=/usr/bin:/bin "$r" --fake "$f" "$o"'
  local runner=$tmp/bundle/run.sh fake=$tmp/bundle/fake/libcuda.so.1 res=$tmp/results
  for how in "unshare -m" "unshare -rm"; do
    if $how true 2>/dev/null; then
      sealed=$how
      break
    fi
  done
  t0=$(date +%s)
  if [ -n "$sealed" ]; then
    log "self-test: $runner --fake $fake in an empty environment, under '$sealed' with ${#hide[@]} paths hidden"
    printf '  %s\n' "${hide[@]}" >"$OUTDIR/self-test-hidden.txt"
    $sealed bash -c "$inner" bash "$runner" "$fake" "$res" "${hide[@]}" >"$OUTDIR/self-test.log" 2>&1
    rc=$?
  else
    log "self-test: $runner --fake $fake in an empty environment (no mount namespace here: the build tree and the system libraries stay visible; the runner's ldd check still fails on any library outside the bundle)"
    (cd / && env -i PATH=/usr/bin:/bin "$runner" --fake "$fake" "$res") >"$OUTDIR/self-test.log" 2>&1
    rc=$?
  fi
  rm -rf "$OUTDIR/self-test"
  mkdir -p "$OUTDIR/self-test"
  cp "$res"/* "$OUTDIR/self-test/" 2>/dev/null
  echo "self-test: $tmp/bundle, $([ -n "$sealed" ] && echo "sealed ($sealed, ${#hide[@]} paths hidden: $OUTDIR/self-test-hidden.txt)" || echo "not sealed"), $(($(date +%s) - t0))s, exit $rc; results in $OUTDIR/self-test/"
  sed 's/^/  /' "$res/summary.txt" 2>/dev/null || tail -n 20 "$OUTDIR/self-test.log"
  rm -rf "$tmp"
  [ "$rc" -eq 0 ]
}

make_bundle() {
  local t0 rc dir
  t0=$(date +%s)
  if [ -z "$FROM" ]; then
    log "configuring $BUILD (Release, $GEN, CUDA headers in $CUDA_INC)"
    limit "$(cap 120)" cmake -S "$ROOT" -B "$BUILD" -G "$GEN" -DCMAKE_BUILD_TYPE=Release \
      -DWEFT_WITH_CUDA=ON -DCUDA_DRIVER_INCLUDE_DIR="$CUDA_INC" -DWEFT_WITH_JEMALLOC="$JEMALLOC" \
      -DWEFT_BUILD_TESTS=ON -DWEFT_BUILD_BENCH=ON -DWEFT_BUILD_EXAMPLES=ON -DWEFT_SANITIZE= \
      -DCMAKE_SKIP_BUILD_RPATH=ON >"$OUTDIR/configure.log" 2>&1
    rc=$?
    if [ "$rc" -eq 0 ]; then
      log "building ${BUNDLE_TARGETS[*]} (-j$JOBS)"
      limit "$(cap 420)" cmake --build "$BUILD" -j "$JOBS" --target "${BUNDLE_TARGETS[@]}" \
        >"$OUTDIR/build.log" 2>&1
      rc=$?
    fi
    if [ "$rc" -ne 0 ]; then
      tail -n 30 "$OUTDIR/build.log" "$OUTDIR/configure.log" 2>/dev/null >&2
      bundle_fail "the build failed (status $rc; $OUTDIR/configure.log, build.log)"
      return
    fi
  fi
  local build_s=$(($(date +%s) - t0)) entry name path
  for entry in "${BUNDLE_PROGRAMS[@]}" "fake tests/fake_cuda/libcuda.so.1"; do
    path=${entry#* }
    [ -f "$BUILD/$path" ] || {
      bundle_fail "$BUILD/$path is missing (a build with the tests, the bench, the examples and the CUDA backend: -DWEFT_WITH_CUDA=ON)"
      return
    }
  done
  if grep -q 'built without cuda.h' "$BUILD/tests/stress_stress_cuda_device"; then
    bundle_fail "$BUILD was built without the CUDA backend (no cuda.h): nothing to run on a GPU"
    return
  fi

  # DIR: made, or emptied when it holds an earlier bundle; anything else is refused.
  mkdir -p "$BUNDLE" || {
    bundle_fail "cannot create $BUNDLE"
    return
  }
  dir=$(cd "$BUNDLE" && pwd)
  if [ -n "$(ls -A "$dir")" ] && [ ! -f "$dir/MANIFEST" ]; then
    bundle_fail "$dir is not empty and holds no bundle (no MANIFEST): refusing to empty it"
    return
  fi
  find "$dir" -mindepth 1 -delete || return 1
  mkdir -p "$dir/bin" "$dir/lib/cxx" "$dir/fake" || return 1

  local strip=0
  command -v strip >/dev/null 2>&1 && strip=1
  for entry in "${BUNDLE_PROGRAMS[@]}"; do
    name=${entry%% *}
    cp "$BUILD/${entry#* }" "$dir/bin/$name" || return 1
    [ "$strip" = 1 ] && strip --strip-debug "$dir/bin/$name" # symbols stay, for backtraces
  done
  cp "$BUILD/tests/fake_cuda/libcuda.so.1" "$dir/fake/" || return 1

  # The libraries: every one ldd resolves for a program (or the fake) that is not
  # glibc's or the driver; libstdc++ and libgcc_s to lib/cxx (the runner falls back
  # to the machine's when these need a newer glibc than it has).
  : >"$OUTDIR/bundled-from.txt"
  local lines
  lines=$(for f in "$dir"/bin/* "$dir/fake/libcuda.so.1"; do ldd "$f"; done 2>&1)
  if grep -q 'not found' <<<"$lines"; then
    grep 'not found' <<<"$lines" | sort -u >&2
    bundle_fail "a library does not resolve on this machine either"
    return
  fi
  while read -r name path; do
    [[ $name =~ $BUNDLE_SKIP ]] && continue
    case "$name" in
    libstdc++.so.* | libgcc_s.so.*) cp -L "$path" "$dir/lib/cxx/$name" ;;
    *) cp -L "$path" "$dir/lib/$name" ;;
    esac || return 1
    echo "$path" >>"$OUTDIR/bundled-from.txt"
  done < <(awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' <<<"$lines" | sort -u)

  cp "$ROOT/tests/gpu/bundle_run.sh" "$dir/run.sh" && chmod +x "$dir/run.sh" || return 1
  local commit need need_cxx
  commit=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
  git -C "$ROOT" diff --quiet HEAD -- 2>/dev/null || commit="$commit (working tree modified)"
  need=$(glibc_needed "$dir"/bin/* "$dir"/lib/*.so*)
  need_cxx=$(glibc_needed "$dir"/lib/cxx/*)
  {
    echo "weft GPU check bundle: run ./run.sh (tests/gpu/README.md in weft's sources)"
    echo "commit: $commit"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n), $("${CC:-gcc}" --version 2>/dev/null | head -1), from $BUILD$([ -n "$FROM" ] && echo ' (--from)')"
    echo "glibc needed: $need (bin/ and lib/)"
    echo "glibc needed by lib/cxx: $need_cxx (libstdc++, libgcc_s)"
    echo "files:"
    (cd "$dir" && find bin lib fake run.sh -type f -printf '%s %p\n' | sort -k2 | awk '{ printf "  %9d  %s\n", $1, $2 }')
  } >"$dir/MANIFEST"

  local bytes
  bytes=$(du -sb "$dir" | cut -f1)
  echo "bundle: $dir, $bytes bytes ($(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }') MiB of at most $((BUNDLE_MAX_BYTES / 1048576)) MiB), $(find "$dir/bin" -type f | wc -l) programs, $(find "$dir/lib" -type f | wc -l) libraries, glibc >= $need; build ${build_s}s"
  if [ "$bytes" -gt "$BUNDLE_MAX_BYTES" ]; then
    bundle_fail "the bundle is over $BUNDLE_MAX_BYTES bytes"
    return
  fi
  [ "$SELF_TEST" = 1 ] || return 0
  bundle_self_test "$dir"
}
