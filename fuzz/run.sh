#!/usr/bin/env bash
# fuzz/run.sh: build ra-cache's libFuzzer targets with clang and run them.
#
#   fuzz/run.sh [-t SECONDS] [-j JOBS] [--smoke] [--build-only] [TARGET...]
#
# Targets (default: all):
#   config   src/config.c: rc_config_load_file on the input as a libconfig
#            file, rc_config_set on it as KEY=VALUE, rc_parse_size
#   trace    src/trace.c: the trace parser (plain OFFSET LENGTH [STREAM]
#            lines and nbdkit log filter lines), and the replay of small
#            accepted traces through the simulation (src/trace-sim.c)
#
# Each target runs for SECONDS (default 60, or $FUZZ_SECONDS) starting
# from its seed corpus fuzz/corpus/TARGET/ (read only: new inputs go to
# BUILDDIR/corpus/TARGET/, which later runs reuse).  -j JOBS runs that
# many fuzzing processes per target (libFuzzer -fork).  --smoke runs
# each target once over its seed corpus only (a second or two; what
# make check does where clang is available).  A crash, leak, sanitizer
# report or timeout stops the run with exit status 1 and leaves the
# input in BUILDDIR/artifacts/ (reproduce: BUILDDIR/fuzz-TARGET FILE).
#
# Needs clang with libFuzzer: on Debian 12, apt-get install clang
# libclang-rt-14-dev (and libconfig-dev).  Environment: CC (default
# clang), FUZZ_BUILDDIR (default build-fuzz/ in the source tree),
# FUZZ_CFLAGS (extra flags).  Exit status 77: clang cannot build
# libFuzzer targets here.

set -euo pipefail

srcdir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
: "${CC:=clang}"
: "${FUZZ_BUILDDIR:=$srcdir/build-fuzz}"
: "${FUZZ_SECONDS:=60}"
: "${FUZZ_CFLAGS:=}"
all_targets=(config trace)
seconds=$FUZZ_SECONDS
jobs=1
smoke=no
build_only=no
targets=()

say () { echo "fuzz/run.sh: $*"; }
die () { echo "fuzz/run.sh: $*" >&2; exit 1; }

usage () { sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; }

while [ $# -gt 0 ]; do
  case $1 in
    -t) [ $# -ge 2 ] || die "-t needs a number of seconds"; seconds=$2; shift 2 ;;
    -t*) seconds=${1#-t}; shift ;;
    -j) [ $# -ge 2 ] || die "-j needs a number"; jobs=$2; shift 2 ;;
    -j*) jobs=${1#-j}; shift ;;
    --smoke) smoke=yes; shift ;;
    --build-only) build_only=yes; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) usage >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  case " ${all_targets[*]} " in
    *" $t "*) ;;
    *) die "unknown target '$t' (targets: ${all_targets[*]})" ;;
  esac
done
[[ $seconds =~ ^[1-9][0-9]*$ ]] || die "-t: '$seconds' is not a number of seconds"
[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "-j: '$jobs' is not a number"

# ---- build ---------------------------------------------------------------

if ! command -v "$CC" >/dev/null 2>&1; then
  echo "fuzz/run.sh: $CC not found (apt-get install clang libclang-rt-14-dev)" >&2
  exit 77
fi
mkdir -p "$FUZZ_BUILDDIR"
# Where clang has no libFuzzer runtime (libclang-rt-*-dev) it says so here.
echo 'int LLVMFuzzerTestOneInput (const char *d, unsigned long n) { return 0; }' \
  > "$FUZZ_BUILDDIR/probe.c"
if ! "$CC" -fsanitize=fuzzer,address,undefined "$FUZZ_BUILDDIR/probe.c" \
       -o "$FUZZ_BUILDDIR/probe" >"$FUZZ_BUILDDIR/probe.log" 2>&1; then
  echo "fuzz/run.sh: $CC cannot build libFuzzer targets (apt-get install libclang-rt-14-dev):" >&2
  cat "$FUZZ_BUILDDIR/probe.log" >&2
  exit 77
fi
libconfig_cflags=$(pkg-config --cflags libconfig 2>/dev/null) ||
  die "libconfig not found (apt-get install libconfig-dev pkg-config)"
libconfig_libs=$(pkg-config --libs libconfig)

# The sources include <config.h>; outside the autotools build this one
# is enough.
cat > "$FUZZ_BUILDDIR/config.h" <<'EOF'
/* config.h for the fuzz targets (fuzz/run.sh). */
#ifndef _GNU_SOURCE
# define _GNU_SOURCE 1
#endif
#define PACKAGE_NAME "ra-cache"
#define PACKAGE_VERSION "fuzz"
EOF

# shellcheck disable=SC2054 # the commas are -fsanitize's
cflags=(-g -O1 -fno-omit-frame-pointer
        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
        -Wall -Wextra -Wno-unused-parameter -Wno-unused-function
        -I"$FUZZ_BUILDDIR" -I"$srcdir/include")
# shellcheck disable=SC2206 # lists of words
cflags+=($libconfig_cflags $FUZZ_CFLAGS)

build ()
{
  local name=$1; shift
  say "building fuzz-$name"
  # shellcheck disable=SC2086 # libconfig_libs is a list of words
  "$CC" "${cflags[@]}" "$@" -o "$FUZZ_BUILDDIR/fuzz-$name" $libconfig_libs ||
    die "building fuzz-$name failed"
}

for t in "${targets[@]}"; do
  case $t in
    config) build config "$srcdir/fuzz/fuzz-config.c" "$srcdir/src/config.c" ;;
    trace) build trace "$srcdir/fuzz/fuzz-trace.c" "$srcdir/src/trace.c" \
             "$srcdir/src/trace-sim.c" "$srcdir/src/readahead.c" \
             "$srcdir/src/near.c" "$srcdir/src/readpath.c" \
             "$srcdir/src/trigger.c" \
             "$srcdir/src/congestion.c" "$srcdir/src/pagecache.c" \
             "$srcdir/src/pagecache-giveback.c" "$srcdir/src/hugemem.c" \
             "$srcdir/src/config.c" ;;
  esac
done
[ "$build_only" = yes ] && exit 0

# ---- run -----------------------------------------------------------------

export ASAN_OPTIONS="detect_leaks=1:${ASAN_OPTIONS:-}"
export LSAN_OPTIONS="suppressions=$srcdir/fuzz/lsan.supp:print_suppressions=0:${LSAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-}"
status=0
for t in "${targets[@]}"; do
  seeds=$srcdir/fuzz/corpus/$t
  bin=$FUZZ_BUILDDIR/fuzz-$t
  art=$FUZZ_BUILDDIR/artifacts/$t
  mkdir -p "$art"
  if [ "$smoke" = yes ]; then
    say "fuzz-$t over its $(find "$seeds" -type f | wc -l) seed inputs"
    # Every seed once, no mutation.
    if ! "$bin" -artifact_prefix="$art/" -timeout=10 \
         "$seeds"/* >"$FUZZ_BUILDDIR/smoke-$t.log" 2>&1; then
      cat "$FUZZ_BUILDDIR/smoke-$t.log" >&2
      say "FAIL: fuzz-$t failed on a seed input"
      status=1
    fi
    continue
  fi
  work=$FUZZ_BUILDDIR/corpus/$t
  mkdir -p "$work"
  say "fuzz-$t for ${seconds}s ($jobs job(s)); corpus $work + $seeds"
  args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048
        -max_len=4096 -artifact_prefix="$art/" -print_final_stats=1)
  [ "$jobs" -gt 1 ] && args+=(-fork="$jobs")
  if ! "$bin" "${args[@]}" "$work" "$seeds" 2>"$FUZZ_BUILDDIR/fuzz-$t.log"; then
    tail -n 60 "$FUZZ_BUILDDIR/fuzz-$t.log" >&2
    say "FAIL: fuzz-$t found a problem: see $art/ and $FUZZ_BUILDDIR/fuzz-$t.log"
    status=1
    continue
  fi
  grep -E '^stat::(number_of_executed_units|peak_rss_mb|new_units_added)|^#[0-9]+.*DONE' \
    "$FUZZ_BUILDDIR/fuzz-$t.log" | sed "s/^/fuzz-$t: /" || true
done
exit $status
