#!/bin/sh
# Renders a tiny weft-bench --report with headless Chromium: the page must
# load and be drawn to a PNG (exit 0, a PNG file of a plausible size).
# Usage: test_report_render.sh WEFT_BENCH WORKDIR. Exit 77 (CTest's skip)
# when /usr/bin/chromium (or $CHROMIUM) is not installed.
set -eu
bench=$1
work=$2
chromium=${CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$chromium" ]; then
  echo "SKIP: $chromium is not installed (Debian: apt-get install chromium)"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work/home"
"$bench" --quick --reps 1 --warmup 0 --scale 0.001 --report "$work/report" \
  >"$work/bench.out" 2>"$work/bench.err" || {
  echo "weft-bench --report failed:"
  cat "$work/bench.err"
  exit 1
}
# Chromium wants a writable profile and home; no sandbox as root in CI.
status=0
HOME="$work/home" timeout 150 "$chromium" --headless --no-sandbox --disable-gpu \
  --user-data-dir="$work/profile" --screenshot="$work/report.png" --window-size=1280,2000 \
  "file://$work/report/index.html" >"$work/chromium.log" 2>&1 || status=$?
if [ "$status" -ne 0 ] || [ ! -s "$work/report.png" ]; then
  echo "chromium exited with $status and no screenshot:"
  cat "$work/chromium.log"
  exit 1
fi
# The PNG signature, and more than a blank page's few kilobytes.
sig=$(od -An -tx1 -N8 "$work/report.png" | tr -d ' \n')
size=$(wc -c <"$work/report.png")
if [ "$sig" != "89504e470d0a1a0a" ] || [ "$size" -lt 20000 ]; then
  echo "not a rendered page: signature $sig, $size bytes"
  exit 1
fi
echo "rendered $work/report/index.html to $work/report.png ($size bytes)"
