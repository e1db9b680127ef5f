#!/usr/bin/env bash
# Installs what weft needs to build, test and benchmark on a fresh Debian 12 machine.
# Idempotent: does nothing when every package is already present.
set -euo pipefail
# g++ and libtbb-dev: weft-bench's oneTBB peers (bench/peers/, weft-bench --peers);
# without them bench/ still builds, and --peers says so.
pkgs=(libck-dev libjemalloc-dev libcriterion-dev pkg-config ninja-build cmake gcc clang
      libclang-rt-14-dev g++ libtbb-dev)
pkgs+=(libxml2-utils) # xmllint: the well-formedness test of weft-bench --report's HTML and SVG
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "weft: installing ${missing[*]}" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
