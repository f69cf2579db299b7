#!/usr/bin/env bash
# bench/learn.sh: learn and replay (ra-cache-learn=FILE) on block-level
# workloads, side by side with no filter, ra-cache without learning and
# the no-delay ceiling, on fresh servers.
#
#   bench/learn.sh            # after ./run.sh demo or ./run.sh check built build/
#
# Backend: nbdkit -r --filter=delay pattern 4G rdelay=RDELAY (ceiling:
# rdelay=0); front: nbdkit [--filter=FILTER] nbd socket=backend.sock,
# under bench/rusage (its CPU seconds and minor faults), Unix sockets.
#
# Workloads (rows), each one fio process (ioengine nbd), fixed seeds:
#   boot   randread 4K, depth 1, every 4K block of BOOT_SPAN at 1G once,
#          in a random order fixed by its seed: a boot's scattered reads
#   rand   randread 4K, depth 1, RAND_BYTES over the whole 4G, another
#          seed: a random reader
#   seq    read 64K, depth 1, SEQ_BYTES from 2G on: a sequential stream
# Configurations (columns):
#   plain      front without a filter
#   ra-cache   the filter, defaults, no learning
#   learn      the filter recording into a fresh ra-cache-learn file: the
#              first run with learning
#   replay     the filter with the file the learn run of the same row
#              wrote: the second run
#   boot-file  (rand and seq, when WORKLOADS has boot first) the filter
#              with a copy of the boot row's learned file: a learned file
#              of another workload
#   ceiling    rdelay=0, no filter: the no-latency limit
# Figures: seconds (fio's wall clock, connection included), of the
# median run; ratios: learn / ra-cache and boot-file / ra-cache (speed,
# >1 is faster), replay's share of the ceiling (ceiling s / replay s);
# the front's CPU seconds and minor faults; for replay, pages replayed,
# used and evicted unused.
#
# Environment (defaults in brackets): RDELAY [1ms], FILTER [build's],
# BOOT_SPAN [200M], RAND_BYTES [16M], SEQ_BYTES [256M], REPEAT [1] (runs
# per cell, alternating), WORKLOADS ["boot rand seq"], RA_CACHE_ARGS [].
# About 4 minutes with the defaults (the boot without replay is 51,200
# reads of 1 ms).

set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(dirname "$here")
# shellcheck source=bench/lib.sh
. "$here/lib.sh"

: "${RDELAY:=1ms}"
: "${FILTER:=$top/build/plugins/ra-cache/.libs/nbdkit-ra-cache-filter.so}"
: "${BOOT_SPAN:=200M}"
: "${RAND_BYTES:=16M}"
: "${SEQ_BYTES:=256M}"
: "${REPEAT:=1}"
: "${WORKLOADS:=boot rand seq}"
: "${RA_CACHE_ARGS:=}"
read -r -a ra_cache_args <<< "$RA_CACHE_ARGS"

bench_args "$@"
[ -f "$FILTER" ] || bench_die "$FILTER is not built (./run.sh check, or make in build/)"
command -v fio >/dev/null || bench_die "fio is not installed"
fio --enghelp 2>/dev/null | grep -qw nbd || bench_die "this fio has no nbd ioengine"
bench_traps

configs_of ()
{
  if [ "$1" = boot ] || [[ " $WORKLOADS " != *" boot "* ]]; then
    echo "plain ra-cache learn replay ceiling"
  else
    echo "plain ra-cache learn replay boot-file ceiling"
  fi
}

fio_args ()
{
  case $1 in
    boot) echo "--rw=randread --bs=4k --offset=1G --size=$BOOT_SPAN --randseed=1234" ;;
    rand) echo "--rw=randread --bs=4k --size=4G --io_size=$RAND_BYTES --randseed=99" ;;
    seq) echo "--rw=read --bs=64k --offset=2G --size=$SEQ_BYTES" ;;
  esac
}

declare -A runs=()
failed=0

run_once () # run_once WORKLOAD CONFIG
{
  local wl=$1 c=$2 delay=$RDELAY key=$1/$2 rstats=$bench_tmpdir/ra.json
  local learn=$bench_tmpdir/$1.learn t0 t1 secs cpu minflt rest extra=-
  local -a front=(nbd socket="$(bench_sock back)")
  [ "$c" = ceiling ] && delay=0
  case $c in
    ra-cache) front=(--filter="$FILTER" "${front[@]}" "${ra_cache_args[@]}") ;;
    learn|replay|boot-file)
      [ "$c" = learn ] && rm -f "$learn"
      if [ "$c" = boot-file ]; then
        [ -s "$bench_tmpdir/boot.learn" ] || bench_die "boot-file needs the boot row first"
        cp "$bench_tmpdir/boot.learn" "$bench_tmpdir/other.learn"
        learn=$bench_tmpdir/other.learn
      fi
      front=(--filter="$FILTER" "${front[@]}" "${ra_cache_args[@]}"
             ra-cache-learn="$learn") ;;
  esac
  [ "$c" = plain ] || [ "$c" = ceiling ] || front+=(ra-cache-stats="$rstats")
  rm -f "$rstats"
  bench_start back -r --filter=delay pattern 4G rdelay="$delay" ||
    bench_die "the backend did not start"
  bench_start_timed front "${front[@]}" || bench_die "the front did not start"
  # shellcheck disable=SC2046 # fio_args is a list of options
  t0=$EPOCHREALTIME
  if ! timeout "$CLIENT_TIMEOUT" fio --name="$wl" --ioengine=nbd \
         --uri="$(bench_uri front)" --iodepth=1 $(fio_args "$wl") \
         --output="$bench_tmpdir/fio.out" >/dev/null 2>&1; then
    echo "learn.sh: $key: fio failed: $(tail -n 5 "$bench_tmpdir/fio.out")" >&2
    failed=1
  fi
  t1=$EPOCHREALTIME
  bench_stop front
  bench_stop back
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
  read -r cpu minflt rest <<< "$(bench_rusage front)"
  if [ -s "$rstats" ]; then
    extra=$(file_stat "$rstats" replay_pages replay_used_pages replay_wasted_pages |
              awk '$1 > 0 { printf "%d/%d/%d", $1, $2, $3 } $1 == 0 { printf "-" }')
  fi
  runs[$key]+="$secs $cpu $minflt $extra"$'\n'
  printf '%-5s %-9s %8s s  front CPU %s s, %s minor faults  replayed/used/wasted %s\n' \
    "$wl" "$c" "$secs" "$cpu" "$minflt" "$extra" >&2
}

t_all=$SECONDS
for wl in $WORKLOADS; do
  for ((rep = 1; rep <= REPEAT; rep++)); do
    for c in $(configs_of "$wl"); do
      run_once "$wl" "$c"
    done
  done
done

med () # med KEY FIELD: field FIELD of the median run (by seconds)
{
  [ -n "${runs[$1]:-}" ] || { echo n/a; return 0; }
  printf '%s' "${runs[$1]}" | bench_median_line 1 | awk -v f="$2" '{ print $f }'
}

echo
echo "learn and replay: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $("$NBDKIT" --version)"
echo "backend: nbdkit -r --filter=delay pattern 4G rdelay=$RDELAY (ceiling: 0); front: nbdkit [--filter=ra-cache] nbd; fio --ioengine=nbd --iodepth=1"
echo "boot: randread 4K over $BOOT_SPAN at 1G, each block once; rand: randread 4K, $RAND_BYTES over 4G; seq: read 64K, $SEQ_BYTES from 2G"
echo "ra-cache: $FILTER${RA_CACHE_ARGS:+ $RA_CACHE_ARGS}; median of $REPEAT run(s), fresh servers each"
echo
echo "| workload | configuration | seconds | vs ra-cache | of ceiling | front CPU s | minor faults | replayed/used/wasted pages |"
echo "|---|---|---:|---:|---:|---:|---:|---|"
for wl in $WORKLOADS; do
  base=$(med "$wl/ra-cache" 1) ceil=$(med "$wl/ceiling" 1)
  for c in $(configs_of "$wl"); do
    s=$(med "$wl/$c" 1)
    r=$(bench_ratio "$base" "$s" 2); [ "$r" = n/a ] || r="${r}x"
    echo "| $wl | $c | $s | $r | $(bench_ratio "$ceil" "$s" 2) | $(med "$wl/$c" 2) | $(med "$wl/$c" 3) | $(med "$wl/$c" 4) |"
  done
done
echo
echo "total time: $((SECONDS - t_all)) s"
exit "$failed"
