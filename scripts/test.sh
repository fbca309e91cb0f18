#!/usr/bin/env bash
# Builds Tally and runs every CTest test: unit, integration (no GPU needed) and the GPU
# suite, which reports "skipped" with its reason on a machine without a GPU.
#
# Usage: scripts/test.sh
#   1. scripts/install-deps.sh (a no-op when everything is installed; TALLY_SKIP_DEPS=1 skips it)
#   2. cmake -S . -B build -G Ninja
#   3. cmake --build build -j<all cores>
#   4. ctest --test-dir build --output-on-failure -j2
# Exit status: ctest's (0 = no test failed), or the failing step's.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD=build
step() { printf '\n==== %s\n' "$*"; }

if [[ -z ${TALLY_SKIP_DEPS:-} ]]; then
  step "dependencies"
  scripts/install-deps.sh
fi

step "configure ($BUILD/)"
generator=()
if [[ -f $BUILD/CMakeCache.txt ]]; then
  existing=$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$BUILD/CMakeCache.txt")
  [[ $existing == Ninja ]] || { echo "error: $BUILD/ was configured with '$existing', not Ninja: remove $BUILD/ and rerun" >&2; exit 1; }
else
  generator=(-G Ninja)
fi
cmake -S . -B "$BUILD" "${generator[@]}"

step "build (-j$(nproc))"
cmake --build "$BUILD" -j "$(nproc)"

step "test"
rc=0
ctest --test-dir "$BUILD" --output-on-failure -j2 || rc=$?
# ctest does not show a skipped test's output: print the reasons the tests gave.
log=$BUILD/Testing/Temporary/LastTest.log
# (Scripts print "SKIP: why"; GoogleTest prints "file:line: Skipped" and then the message.)
if [[ -f $log ]] && grep -qE '^SKIP:|: Skipped$' "$log"; then
  echo "skip reasons:"
  awk '/^[0-9]+\/[0-9]+ Test: / { sub(/^[0-9]+\/[0-9]+ Test: /, ""); name = $0 }
       /^SKIP:/ { print "  " name ": " $0 }
       /: Skipped$/ { if ((getline msg) > 0) print "  " name ": SKIP: " msg }' "$log"
fi
if [[ $rc -eq 0 ]]; then
  echo "test.sh: all tests passed (skipped ones print their reason above)"
else
  echo "test.sh: ctest exited $rc (details above; logs in $BUILD/Testing/Temporary/LastTest.log)"
fi
exit "$rc"
