#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz preset, clang) and runs each one found in build/fuzz/fuzz for
# SECONDS_PER_TARGET seconds (default 20) on a temporary copy of its seed corpus fuzz/corpus/NAME/
# (with fuzz/NAME.dict when present). Prints execs and the result per target; exits 1 on any finding.
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET]   (env: EMBER_FUZZ_ARGS adds libFuzzer flags,
#        EMBER_FUZZ_JOBS=N runs N targets at once)
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

jobs="${EMBER_FUZZ_JOBS:-1}"
case "$jobs" in ''|*[!0-9]*|0) echo "fuzz.sh: EMBER_FUZZ_JOBS: expected a positive integer, found '$jobs'" >&2; exit 2;; esac

# One target: its result line in $work/NAME.result, its exit code in $work/NAME.rc.
run_target() {
  local bin="$1" name short corpus log rc=0 execs rate result
  name="$(basename "$bin")"
  short="${name#fuzz_}"
  corpus="$work/$short"
  mkdir -p "$corpus" "$work/artifacts-$short"
  if [ -d "fuzz/corpus/$short" ]; then cp -R "fuzz/corpus/$short/." "$corpus/"; fi
  local dict=()
  [ -f "fuzz/$short.dict" ] && dict=(-dict="fuzz/$short.dict")
  log="$work/$short.log"
  # shellcheck disable=SC2086
  nice -n 15 "$bin" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts-$short/" "${dict[@]}" ${EMBER_FUZZ_ARGS:-} "$corpus" \
    >"$log" 2>&1 || rc=$?
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)"
  if [ "$rc" -eq 0 ]; then result=ok; else result="FAILED (exit $rc)"; fi
  printf '%-20s %8s %12s %9s  %s\n' "$name" "$secs" "${execs:-?}" "${rate:-?}" "$result" >"$work/$name.result"
  echo "$rc" >"$work/$name.rc"
}

# EMBER_FUZZ_JOBS=N runs N targets at a time (each libFuzzer process is one thread); the results
# are printed in target order either way.
names=()
for bin in "${targets[@]}"; do
  [ -x "$bin" ] && [ -f "$bin" ] || continue
  names+=("$(basename "$bin")")
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  run_target "$bin" &
done
wait

failed=0
printf '%-20s %8s %12s %9s  %s\n' target seconds execs exec/s result
for name in "${names[@]}"; do
  cat "$work/$name.result"
  rc="$(cat "$work/$name.rc")"
  if [ "$rc" -ne 0 ]; then
    failed=1
    short="${name#fuzz_}"
    grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$work/$short.log" | head -20 >&2 || true
    mkdir -p build/fuzz/findings
    cp "$work/artifacts-$short/"* build/fuzz/findings/ 2>/dev/null || true
    echo "fuzz.sh: $name: reproducer(s) kept in build/fuzz/findings/; run: build/fuzz/fuzz/$name FILE" >&2
  fi
done
exit "$failed"
