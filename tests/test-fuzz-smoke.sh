#!/usr/bin/env bash
# The libFuzzer targets (fuzz/run.sh: the configuration parser and
# ra-trace's trace parser), built with clang and run once over their seed
# corpora (fuzz/corpus/), no fuzzing: a seed that crashes, leaks or trips
# a sanitizer fails.  Real fuzzing runs only on request: fuzz/run.sh.
#
# Skips where clang cannot build libFuzzer targets (apt-get install clang
# libclang-rt-14-dev), and in a sanitizer build (the plain build runs it).
set -euo pipefail

: "${top_builddir:=$PWD}"
: "${top_srcdir:=$(cd "$(dirname "$0")/.." && pwd)}"
name=test-fuzz-smoke

if [ -n "${RA_CACHE_SANITIZERS:-}" ]; then
  echo "$name: SKIP: a sanitizer build; the plain build runs the fuzz smoke test"
  exit 77
fi
if ! command -v "${CC_FUZZ:-clang}" >/dev/null 2>&1; then
  echo "$name: SKIP: clang is not installed (apt-get install clang libclang-rt-14-dev)"
  exit 77
fi

status=0
CC=${CC_FUZZ:-clang} FUZZ_BUILDDIR=$top_builddir/fuzz-smoke \
  "$top_srcdir/fuzz/run.sh" --smoke || status=$?
case $status in
  0) echo "$name: PASS" ;;
  77) echo "$name: SKIP: clang cannot build libFuzzer targets here (see above)" ;;
  *) echo "$name: FAIL" ;;
esac
exit $status
