#!/usr/bin/env bash
# The C++ package end to end: installs BUILD_DIR into a fresh prefix, builds examples/consumer
# against it with find_package (shared and static targets) and with pkg-config, and runs each
# build (it trains a few steps and saves weights); first checks that the prefix's headers are the
# public API alone. Usage: consumer.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src="$1" build="$2"
work="$(mktemp -d "${TMPDIR:-/tmp}/ember-package.XXXXXX")"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix with space"
cmake --install "$build" --prefix "$prefix" > "$work/install.log"
# The consumer is built with the build's own compiler and flags (a sanitizer build's library needs
# its runtime in the program too).
cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
cxx="$(cache CMAKE_CXX_COMPILER)" cxxflags="$(cache CMAKE_CXX_FLAGS)" ldflags="$(cache CMAKE_EXE_LINKER_FLAGS)"
same=(-DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_CXX_FLAGS="$cxxflags" -DCMAKE_EXE_LINKER_FLAGS="$ldflags" -DCMAKE_BUILD_TYPE=Release)
# The installed headers are the public API alone: none of ember_support's (the CLI's files, json,
# bench and report helpers), none naming nlohmann, and each compiles on its own against the prefix.
inc="$prefix/include"
for h in ember_support ember/files.h ember/json.h ember/bench.h ember/report.h; do
  if [ -e "$inc/$h" ]; then echo "consumer.sh: the prefix ships $h (a CLI helper, not the library's API)" >&2; exit 1; fi
done
if grep -l nlohmann "$inc"/ember/*.h; then echo "consumer.sh: an installed header (above) names nlohmann" >&2; exit 1; fi
for h in "$inc"/ember/*.h; do
  echo "#include \"ember/${h##*/}\"" | "$cxx" -std=c++20 -fsyntax-only -I"$inc" -x c++ - ||
    { echo "consumer.sh: the installed ember/${h##*/} does not compile on its own" >&2; exit 1; }
done
cmake -S "$src/examples/consumer" -B "$work/b" -DCMAKE_PREFIX_PATH="$prefix" "${same[@]}" > "$work/configure.log"
cmake --build "$work/b" -j 2 > "$work/build.log"
"$work/b/consumer" "$work/shared.safetensors"
"$work/b/consumer_static" "$work/static.safetensors"
cmp "$work/shared.safetensors" "$work/static.safetensors"
# pkg-config: the shared library, found through the installed ember.pc (rpath for the run).
libdir="$(dirname "$(find "$prefix" -name ember.pc)")/.."
flags="$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs ember)"
eval "\"$cxx\" -std=c++20 -O1 $cxxflags \"$src/examples/consumer/main.cpp\" -o \"$work/pc\" $flags $ldflags -Wl,-rpath,\"$libdir\""
"$work/pc" "$work/pc.safetensors"
cmp "$work/shared.safetensors" "$work/pc.safetensors"
# Nothing from the source or build tree is needed: the prefix moved elsewhere still works.
mv "$prefix" "$work/moved"
rm -rf "$work/b2"
cmake -S "$src/examples/consumer" -B "$work/b2" -DCMAKE_PREFIX_PATH="$work/moved" "${same[@]}" > /dev/null
cmake --build "$work/b2" -j 2 --target consumer_static > /dev/null
"$work/b2/consumer_static" "$work/moved.safetensors"
echo "consumer.sh: find_package (shared, static), pkg-config and a moved prefix all built and trained"
