#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz preset, clang) and runs each one found in build/fuzz/fuzz for
# SECONDS_PER_TARGET seconds (default 20) on a temporary copy of its seed corpus fuzz/corpus/NAME/
# (with fuzz/NAME.dict when present). Prints execs and the result per target; exits 1 on any finding.
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET]   (env: EMBER_FUZZ_ARGS adds libFuzzer flags)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
secs="${1:-20}"
case "$secs" in ''|*[!0-9]*) echo "fuzz.sh: SECONDS_PER_TARGET: expected a positive integer, found '$secs'" >&2; exit 2;; esac

cmake --preset fuzz --no-warn-unused-cli >/dev/null  # CMAKE_C_COMPILER is set for C-using targets
nice -n 15 cmake --build --preset fuzz -j 2

work="$(mktemp -d "${TMPDIR:-/tmp}/ember-fuzz.XXXXXX")"
trap 'rm -rf "$work"' EXIT
shopt -s nullglob
targets=(build/fuzz/fuzz/fuzz_*)
[ ${#targets[@]} -gt 0 ] || { echo "fuzz.sh: no fuzz targets in build/fuzz/fuzz" >&2; exit 1; }

failed=0
printf '%-20s %8s %12s %9s  %s\n' target seconds execs exec/s result
for bin in "${targets[@]}"; do
  [ -x "$bin" ] && [ -f "$bin" ] || continue
  name="$(basename "$bin")"
  short="${name#fuzz_}"
  corpus="$work/$short"
  mkdir -p "$corpus" "$work/artifacts-$short"
  if [ -d "fuzz/corpus/$short" ]; then cp -R "fuzz/corpus/$short/." "$corpus/"; fi
  dict=()
  [ -f "fuzz/$short.dict" ] && dict=(-dict="fuzz/$short.dict")
  log="$work/$short.log"
  rc=0
  # shellcheck disable=SC2086
  nice -n 15 "$bin" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts-$short/" "${dict[@]}" ${EMBER_FUZZ_ARGS:-} "$corpus" \
    >"$log" 2>&1 || rc=$?
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)"
  if [ "$rc" -eq 0 ]; then
    result=ok
  else
    result="FAILED (exit $rc)"
    failed=1
  fi
  printf '%-20s %8s %12s %9s  %s\n' "$name" "$secs" "${execs:-?}" "${rate:-?}" "$result"
  if [ "$rc" -ne 0 ]; then
    grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$log" | head -20 >&2 || true
    mkdir -p build/fuzz/findings
    cp "$work/artifacts-$short/"* build/fuzz/findings/ 2>/dev/null || true
    echo "fuzz.sh: $name: reproducer(s) kept in build/fuzz/findings/; run: $bin FILE" >&2
  fi
done
exit "$failed"
