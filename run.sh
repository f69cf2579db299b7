#!/usr/bin/env bash
# run.sh: set up, build, demonstrate and test ra-cache on Debian 12.
#
#   ./run.sh demo [PLUGIN [PLUGIN-ARGS...]]
#       qemu-img bench sequential reads through a front nbdkit without and
#       with ra-cache, side by side.  Without PLUGIN the backend is a demo
#       "remote" server (nbdkit --filter=delay pattern 1G rdelay=1ms) that
#       the front reads with the nbd plugin; with PLUGIN the front serves
#       that plugin directly (e.g. ./run.sh demo curl url=https://...).
#   ./run.sh check
#       make check (the whole test suite), then make distcheck, then
#       make check again in build-asan/, a tree configured with
#       --enable-sanitizers=address,undefined (nbdkit gets the ASan
#       runtime preloaded: tests/nbdkit-sanitizer-wrapper.sh), then the
#       tests where threads meet (CONCURRENCY_TESTS in Makefile.am) in
#       build-tsan/, configured with --enable-sanitizers=thread; any
#       sanitizer report fails the run.
#
# Both first do every set-up step that is still needed: install the
# missing Debian packages (as root; otherwise they name what to install),
# autoreconf -fi when configure is missing or older than configure.ac or
# Makefile.am, configure into build/ (VPATH) and make -j$(nproc).
#
# Environment: RDELAY (demo backend delay, default 1ms), DEMO_SIZE (demo
# backend size, default 1G), CONFIGURE_FLAGS (extra ../configure flags),
# JOBS (parallel make jobs, default nproc), BENCH_KEEP_TMP=1 (keep the
# demo's servers' logs), CHECK_SANITIZERS (the -fsanitize list of the
# second check tree, default address,undefined; "no" leaves it out),
# CHECK_TSAN (yes: the ThreadSanitizer tree, the default; no: not).

set -euo pipefail

srcdir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
builddir=$srcdir/build
filter=$builddir/plugins/ra-cache/.libs/nbdkit-ra-cache-filter.so
: "${JOBS:=$(nproc 2>/dev/null || echo 2)}"
: "${CONFIGURE_FLAGS:=}"
: "${CHECK_SANITIZERS:=address,undefined}"
: "${CHECK_TSAN:=yes}"

# The Debian 12 packages everything here needs: building (toolchain,
# nbdkit, libnbd, libev, libconfig, Check, pod2man), the test suite
# (nbdsh and its python3 binding, qemu-img, nbdfuse, nbd-client,
# valgrind, nbd-server and lighttpd as real backends, prometheus for
# scraping ra-cache-stats-listen and its promtool) and the
# benchmarks (fio; nbd-server and lighttpd for bench/servers.sh;
# xfsprogs for bench/fs.sh's XFS layout).
packages=(nbdkit nbdkit-plugin-dev libnbd-dev libnbd-bin python3-libnbd
          libev-dev libconfig-dev check qemu-utils fio nbd-client
          autoconf automake libtool pkg-config make gcc perl valgrind
          nbd-server lighttpd xfsprogs prometheus)

say ()
{
  echo "run.sh: $*"
}

die ()
{
  echo "run.sh: $*" >&2
  exit 1
}

usage ()
{
  sed -n '2,/^$/s/^# \{0,1\}//p' "$0"
}

# ---- set-up ------------------------------------------------------------------

install_packages ()
{
  local p missing=()
  command -v dpkg-query >/dev/null 2>&1 ||
    die "dpkg-query not found: this script sets up Debian 12; elsewhere install the equivalents of: ${packages[*]}"
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q ' installed$' ||
      missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    die "missing Debian packages: ${missing[*]}
  install them as root:  apt-get update && apt-get install -y ${missing[*]}
  or run this script as root."
  fi
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update </dev/null
  apt-get install -y "${missing[@]}" </dev/null
}

generate_build_system ()
{
  if [ ! -x "$srcdir/configure" ] ||
     [ "$srcdir/configure" -ot "$srcdir/configure.ac" ] ||
     [ "$srcdir/configure" -ot "$srcdir/Makefile.am" ]; then
    say "autoreconf -fi"
    (cd "$srcdir" && autoreconf -fi)
    # Makefile.am alone may leave configure's contents, and so its time,
    # unchanged: mark it as generated now so the test above settles.
    touch "$srcdir/configure"
  fi
}

configure_build ()
{
  [ -f "$srcdir/config.status" ] &&
    die "$srcdir is configured in the source tree: run 'make distclean' there first (run.sh builds in build/)"
  mkdir -p "$builddir"
  if [ ! -f "$builddir/Makefile" ] || [ ! -f "$builddir/config.status" ] ||
     [ "$builddir/config.status" -ot "$srcdir/configure" ]; then
    say "configuring in build/"
    # shellcheck disable=SC2086 # CONFIGURE_FLAGS is a list of words
    (cd "$builddir" && ../configure $CONFIGURE_FLAGS)
  fi
}

build ()
{
  say "make -j$JOBS"
  make -C "$builddir" -j"$JOBS" ||
    die "the build failed (see above)"
}

setup ()
{
  install_packages
  generate_build_system
  configure_build
  build
}

# ---- check -------------------------------------------------------------------

# Print the test-suite.log of every test run under DIR that did not pass.
show_failures ()
{
  local log
  while IFS= read -r log; do
    if grep -Eq '^# (FAIL|XPASS|ERROR): *[1-9]' "$log"; then
      echo "======== $log ========"
      cat "$log"
    fi
  done < <(find "$1" -name test-suite.log 2>/dev/null)
}

do_check ()
{
  setup
  say "make check"
  if ! make -C "$builddir" -j"$JOBS" check; then
    show_failures "$builddir"
    die "make check failed"
  fi
  say "make distcheck"
  if ! make -C "$builddir" -j"$JOBS" distcheck; then
    show_failures "$builddir"
    die "make distcheck failed"
  fi
  if [ "$CHECK_SANITIZERS" != no ]; then
    sanitizer_check "$srcdir/build-asan" "$CHECK_SANITIZERS" TESTS
  else
    say "CHECK_SANITIZERS=no: no address sanitizer tree"
  fi
  if [ "$CHECK_TSAN" != no ]; then
    sanitizer_check "$srcdir/build-tsan" thread CONCURRENCY_TESTS
  else
    say "CHECK_TSAN=no: no ThreadSanitizer tree"
  fi
  say "make check and make distcheck passed, and the sanitizer trees"
}

# sanitizer_check DIR LIST VAR: make check in DIR, a tree configured
# with --enable-sanitizers=LIST, of the tests Makefile.am's variable VAR
# names: the unit tests are instrumented programs (LeakSanitizer on in
# an ASan tree); the integration tests load the instrumented filter into
# nbdkit through the wrapper, which writes every report to
# DIR/tests/sanitizer-logs/.
sanitizer_check ()
{
  local dir=$1 list=$2 var=$3 tests
  mkdir -p "$dir"
  if [ ! -f "$dir/Makefile" ] || [ ! -f "$dir/config.status" ] ||
     [ "$dir/config.status" -ot "$srcdir/configure" ] ||
     ! grep -q -- "--enable-sanitizers=$list" "$dir/config.status"; then
    say "configuring in ${dir#"$srcdir"/}/ with --enable-sanitizers=$list"
    # shellcheck disable=SC2086 # CONFIGURE_FLAGS is a list of words
    (cd "$dir" && ../configure --enable-sanitizers="$list" $CONFIGURE_FLAGS)
  fi
  say "make -j$JOBS in ${dir#"$srcdir"/}/"
  make -C "$dir" -j"$JOBS" || die "the $list sanitizer build failed (see above)"
  tests=$(make -s -C "$dir" --no-print-directory \
            --eval="run-sh-print-tests: ; @echo \$($var)" run-sh-print-tests |
            tail -n 1)
  rm -rf "$dir/tests/sanitizer-logs"
  say "make check in ${dir#"$srcdir"/}/ (-fsanitize=$list): $var"
  if ! make -C "$dir" -j"$JOBS" check TESTS="$tests"; then
    show_failures "$dir"
    show_sanitizer_reports "$dir" || true
    die "make check with -fsanitize=$list failed"
  fi
  # A report from a server whose exit status no test looked at.
  if show_sanitizer_reports "$dir"; then
    die "make check with -fsanitize=$list passed, but a sanitizer reported errors (above)"
  fi
}

# Print the sanitizer reports under DIR/tests/sanitizer-logs; true if
# there were any (files with only warnings do not count).
show_sanitizer_reports ()
{
  local f found=1
  for f in "$1"/tests/sanitizer-logs/*; do
    [ -f "$f" ] || continue
    if grep -Eq 'ERROR: [A-Za-z]*Sanitizer|runtime error:|WARNING: ThreadSanitizer' "$f"; then
      echo "======== $f ========"
      cat "$f"
      found=0
    fi
  done
  return $found
}

# ---- demo --------------------------------------------------------------------

# The rows of the demo: "LABEL BLOCK COUNT DEPTH" ("_" in LABEL is a space).
demo_rows=(
  "sequential_4_KiB_reads,_depth_1    4096 2000 1"
  "sequential_64_KiB_reads,_depth_1   65536 1500 1"
  "sequential_1_MiB_reads,_depth_1    1048576 1000 1"
  "sequential_64_KiB_reads,_depth_8   65536 3000 8"
)

# start_cell WITH-FILTER(yes|no): fresh servers for one measurement.
start_cell ()
{
  bench_stop_all
  local -a f=()
  [ "$1" = yes ] && f=(--filter="$filter")
  if [ ${#backend[@]} -eq 0 ]; then
    bench_start back --filter=delay pattern "$DEMO_SIZE" rdelay="$RDELAY" ||
      exit 1
    bench_start_timed front "${f[@]}" nbd socket="$(bench_sock back)" || exit 1
  else
    bench_start_timed front "${f[@]}" "${backend[@]}" || exit 1
  fi
}

do_demo ()
{
  backend=("$@")
  setup
  if [ ! -f "$filter" ]; then
    die "the ra-cache filter was not built: $filter does not exist
  (the build ran without errors but produced no filter: is it in Makefile.am?)"
  fi
  # shellcheck source=bench/lib.sh
  . "$srcdir/bench/lib.sh"
  : "${RDELAY:=1ms}"
  : "${DEMO_SIZE:=1G}"
  bench_traps

  local size row label bs count depth s0 s1 mb0 mb1 bytes cpu0 cpu1 flt0 flt1
  if [ ${#backend[@]} -eq 0 ]; then
    say "backend: nbdkit --filter=delay pattern $DEMO_SIZE rdelay=$RDELAY (a slow \"remote\" server)"
    say "front:   nbdkit nbd socket=BACKEND [--filter=ra-cache]"
  else
    say "front:   nbdkit [--filter=ra-cache] ${backend[*]}"
  fi
  start_cell no
  size=$(bench_export_size "$(bench_uri front)") ||
    die "cannot read the export size through the front server"
  bench_stop_all

  echo
  printf '%-34s %10s %10s %7s  %-17s %-17s %9s %9s\n' "qemu-img bench, fresh servers" \
    "no filter" "ra-cache" "ratio" "no filter" "ra-cache" "no filter" "ra-cache"
  printf '%-34s %10s %10s %7s  %-17s %-17s %9s %9s\n' "" "MB/s" "MB/s" "" \
    "CPU s (s/GiB)" "CPU s (s/GiB)" "min. flt" "min. flt"
  for row in "${demo_rows[@]}"; do
    read -r label bs count depth <<<"$row"
    label=${label//_/ }
    (( count * bs > size )) && count=$(( size / bs ))
    if (( count < 1 )); then
      printf '%-34s %14s\n' "$label" "(export too small)"
      continue
    fi
    bytes=$(( count * bs ))
    start_cell no
    bench_client "$bench_tmpdir/s0" \
      bench_qemu_img "$(bench_uri front)" "$bs" "$count" "$depth" ||
      die "qemu-img bench failed without the filter"
    bench_stop_all
    read -r cpu0 flt0 _ _ < <(bench_rusage front)
    start_cell yes
    bench_client "$bench_tmpdir/s1" \
      bench_qemu_img "$(bench_uri front)" "$bs" "$count" "$depth" || {
        echo "---- ra-cache front server log ----" >&2
        tail -n 30 "$bench_tmpdir/front.log" >&2
        die "qemu-img bench failed with ra-cache"
      }
    bench_stop_all
    read -r cpu1 flt1 _ _ < <(bench_rusage front)
    s0=$(cat "$bench_tmpdir/s0")
    s1=$(cat "$bench_tmpdir/s1")
    mb0=$(bench_mbps "$bytes" "$s0")
    mb1=$(bench_mbps "$bytes" "$s1")
    printf '%-34s %10s %10s %6sx  %-17s %-17s %9s %9s\n' "$label" "$mb0" "$mb1" \
      "$(bench_ratio "$s0" "$s1" 1)" \
      "$cpu0 ($(bench_per_gib "$cpu0" "$bytes"))" \
      "$cpu1 ($(bench_per_gib "$cpu1" "$bytes"))" "$flt0" "$flt1"
  done
  echo
  say "MB/s = 10^6 bytes/s as qemu-img saw it; ratio = ra-cache / no filter."
  say "CPU s, min. flt: the front nbdkit's own user+system CPU seconds and minor page"
  say "faults over its whole life (bench/rusage); s/GiB: CPU s per GiB read."
  say "bench/compare.sh compares more workloads and nbdkit's readahead+cache filters."
}

# ---- main --------------------------------------------------------------------

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  demo)  do_demo "$@" ;;
  check) [ $# -eq 0 ] || die "check takes no arguments"; do_check ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac
