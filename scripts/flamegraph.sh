#!/usr/bin/env bash
# CPU flame graph of one ember run, sampled by perf: `perf record -g` around `ember profile ARGS`,
# then `perf script | ember flamegraph --perf-script -`. Prints the SVG's path.
# Usage: scripts/flamegraph.sh [ember profile args...]   (environment overrides below)
#   EMBER=PATH                 ember binary (default: build/release/ember)
#   EMBER_FLAME_CMD="train ..." ember subcommand and flags to run first (default: profile, or
#                              "train --limit-train 2000 --epochs 1" where this ember has no profile)
#   EMBER_FLAME_OUT=FILE       SVG to write (default: flame.svg)
#   EMBER_PERF_RECORD_ARGS=... perf record flags (default: -g; try "--call-graph dwarf" for deeper
#                              stacks in builds without frame pointers)
#   PERF=PATH                  perf binary (default: perf)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
ember="${EMBER:-$root/build/release/ember}"
out="${EMBER_FLAME_OUT:-flame.svg}"
perf="${PERF:-perf}"
no_perf_hint="without perf, 'ember profile --flame FILE.svg' draws ember's own spans (no sampling needed)"

die() { echo "flamegraph.sh: error: $*" >&2; exit 1; }

[ -x "$ember" ] || die "$ember: not found or not executable (build first: cmake --preset release && cmake --build --preset release)"
command -v "$perf" >/dev/null 2>&1 ||
  die "perf ($perf) is not installed (Debian: apt-get install linux-perf); $no_perf_hint"

if [ -n "${EMBER_FLAME_CMD:-}" ]; then
  read -r -a cmd <<<"$EMBER_FLAME_CMD"
elif "$ember" --help 2>/dev/null | grep -qE '^ +profile( |$)'; then
  cmd=(profile)
else
  cmd=(train --limit-train 2000 --epochs 1)
  echo "flamegraph.sh: this ember has no 'profile' command; sampling 'ember ${cmd[*]}' instead" >&2
fi
read -r -a record_args <<<"${EMBER_PERF_RECORD_ARGS:--g}"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/ember-flame-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

# A tiny probe first, so that "not permitted" gets its own message rather than a failed run.
if ! "$perf" record -q "${record_args[@]}" -o "$tmp/probe.data" -- true >"$tmp/probe.log" 2>&1; then
  reason="$(grep -m1 -iE 'paranoid|permission|not permitted|denied|not supported|error' "$tmp/probe.log" || true)"
  die "perf record is not permitted here (${reason:-see the output of perf record}); as root, or with" \
      "sysctl kernel.perf_event_paranoid=1, it works; $no_perf_hint"
fi

echo "flamegraph.sh: perf record ${record_args[*]} -- $ember ${cmd[*]} $*" >&2
"$perf" record -q "${record_args[@]}" -o "$tmp/perf.data" -- "$ember" "${cmd[@]}" "$@" >&2 ||
  die "the sampled run failed: $ember ${cmd[*]} $*"
"$perf" script -i "$tmp/perf.data" 2>"$tmp/script.log" >"$tmp/perf.txt" ||
  die "perf script failed: $(head -n1 "$tmp/script.log")"
"$ember" flamegraph --perf-script "$tmp/perf.txt" -o "$out" --title "ember ${cmd[*]} $* (perf, CPU samples)" >&2
echo "$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
