#!/usr/bin/env bash
# The whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer (gcc, the `asan`
# preset, leaks checked): configure, build, ctest. CI runs it after the release suite and the
# fuzzers (docs/fuzzing.md); about 20 min of building and 5 of testing on 2 cores. The mpirun
# tests (Mpi.*) run in the release suite only: Open MPI's own allocations, kept until exit, would
# be reported as leaks by every rank; the block and reducer logic they drive is also tested in
# one process (test_data_parallel, in both suites).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset asan >/dev/null
cmake --build --preset asan
ctest --preset asan
