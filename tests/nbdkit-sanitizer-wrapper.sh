#!/bin/sh
# ra-cache tests in a sanitizer build (configure --enable-sanitizers=LIST):
# the tests start nbdkit through this wrapper (make check installs it as
# tests/sanitizer-bin/nbdkit, sets NBDKIT to it and puts its directory
# first on PATH).  nbdkit itself is not instrumented, so an instrumented
# filter only loads into it with the sanitizer runtime preloaded.
#
# From AM_TESTS_ENVIRONMENT:
#   RA_CACHE_REAL_NBDKIT         the nbdkit configure found
#   RA_CACHE_SANITIZER_PRELOAD   libasan.so / libtsan.so (may be empty:
#                                UBSan alone needs no preload) and
#                                tests/.libs/libsanitizer-preload.so
#   RA_CACHE_SANITIZER_LOGDIR    where ASan and TSan reports go, one file
#                                per process (nbdkit.PID), so that even a
#                                test that does not look at nbdkit's exit
#                                status cannot lose one: run.sh check fails
#                                on any.  (UBSan in an ASan build writes to
#                                nbdkit's stderr whatever log_path says; it
#                                still stops nbdkit with exit status 1.)
#
# Options (ASAN_OPTIONS etc. already set in the environment come after
# these, so they win):
#   detect_leaks=0   nbdkit and its plugins leave memory behind at exit,
#                    in modules already unloaded, which LeakSanitizer
#                    cannot tell from the filter's: leaks are checked in
#                    the unit tests (LeakSanitizer, valgrind) instead
#   halt_on_error=1  the first report stops nbdkit (exit status 1 for
#                    ASan and UBSan, 66 for TSan), which fails the test
#
# libsanitizer-preload.so restores LD_PRELOAD for nbdkit's children
# (--run commands, sh plugin scripts): only nbdkit runs with the runtime.

: "${RA_CACHE_REAL_NBDKIT:=/usr/bin/nbdkit}"
logdir=${RA_CACHE_SANITIZER_LOGDIR:-/tmp}
mkdir -p "$logdir" || exit 1
log=$logdir/nbdkit

ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:log_path=$log:${ASAN_OPTIONS:-}"
UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$log:${UBSAN_OPTIONS:-}"
TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:log_path=$log:${TSAN_OPTIONS:-}"
export ASAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS

if [ -n "${RA_CACHE_SANITIZER_PRELOAD:-}" ]; then
  RA_CACHE_SAVED_LD_PRELOAD=${LD_PRELOAD:-}
  export RA_CACHE_SAVED_LD_PRELOAD
  LD_PRELOAD="$RA_CACHE_SANITIZER_PRELOAD${LD_PRELOAD:+ $LD_PRELOAD}"
  export LD_PRELOAD
fi
exec "$RA_CACHE_REAL_NBDKIT" "$@"
