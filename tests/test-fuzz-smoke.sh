#!/usr/bin/env bash
# The libFuzzer targets (fuzz/run.sh: the configuration parser and
# ra-trace's trace parser), built with clang and run once over their seed
# corpora (fuzz/corpus/), no fuzzing: a seed that crashes, leaks or trips
# a sanitizer fails.  Real fuzzing runs only on request: fuzz/run.sh.
#
# Skips where clang cannot build libFuzzer targets (apt-get install clang
# libclang-rt-14-dev), and in a sanitizer build (the plain build runs it).
test_needs=""
. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

if [ -n "${RA_CACHE_SANITIZERS:-}" ]; then
  skip "a sanitizer build; the plain build runs the fuzz smoke test"
fi
command -v "${CC_FUZZ:-clang}" >/dev/null 2>&1 ||
  skip "clang is not installed (apt-get install clang libclang-rt-14-dev)"

status=0
CC=${CC_FUZZ:-clang} FUZZ_BUILDDIR=$top_builddir/fuzz-smoke \
  "$top_srcdir/fuzz/run.sh" --smoke || status=$?
case $status in
  0) info PASS ;;
  77) skip "clang cannot build libFuzzer targets here (see above)" ;;
  *) fail "fuzz/run.sh --smoke exited with status $status" ;;
esac
