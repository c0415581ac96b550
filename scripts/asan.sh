#!/usr/bin/env bash
# The whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer (gcc, the `asan`
# preset, leaks checked): configure, build, ctest. CI runs it after the release suite and the
# fuzzers (docs/fuzzing.md); about 20 min of building and 5 of testing on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset asan >/dev/null
cmake --build --preset asan
ctest --preset asan
