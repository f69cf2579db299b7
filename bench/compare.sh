#!/usr/bin/env bash
# bench/compare.sh: ra-cache side by side with no filter and with nbdkit's
# own readahead+cache filters, over a backend RDELAY (1 ms) away.
#
#   bench/compare.sh          # after ./run.sh demo or ./run.sh check built build/
#
# For every cell (configuration x workload) it starts two fresh nbdkit
# servers on Unix sockets in a private temporary directory:
#
#   backend:  nbdkit --filter=stats --filter=delay pattern 4G rdelay=RDELAY
#   front:    nbdkit [FILTERS] nbd socket=backend.sock
#
# runs one client against the front, stops both, and reports MB/s (10^6
# bytes/s, as the client saw it) and the backend amplification: bytes the
# backend served (counted by nbdkit-stats-filter, outermost on the
# backend, so it sees exactly what the front asked for) / bytes the client
# read.  A second table gives what the front server cost: the front
# nbdkit runs under bench/rusage, which reports its own rusage when it
# exits: CPU seconds (to the millisecond) (user + system, all threads, the whole
# life of the server), minor page faults, and CPU seconds per GiB the
# client read.  Configurations (columns):
#
#   ceiling          rdelay=0, front without a filter: the no-latency ceiling
#   plain            rdelay=RDELAY, front without a filter
#   readahead+cache  front with --filter=readahead --filter=cache
#                    (the order nbdkit-readahead-filter(1) recommends)
#   ra-cache         front with --filter=FILTER (ra-cache, default settings
#                    plus RA_CACHE_ARGS); "n/a" if FILTER is not built
#   ra-cache-wait    (only if named in CONFIGS) ra-cache with
#                    ra-congestion=wait
#   ra-cache-base    (only if named in CONFIGS) --filter=FILTER_BASE with
#                    RA_CACHE_ARGS: another build (e.g. main's), to
#                    measure a change before and after in one run
#   single-hop       (only if named in CONFIGS) the client reads the backend
#                    directly with rdelay=0: the physical limit for a cache
#                    that serves hits locally
#
# Workloads (rows): qemu-img bench sequential reads of 4 KiB, 64 KiB and
# 1 MiB at depth 1 and of 64 KiB at depth 8 (COUNT_* requests each); short
# jobs: qemu-img bench sequential 64 KiB at depth 8 and 1 MiB at depth 1
# over 256 MiB, and 64 KiB at depth 1 over 128 MiB (SHORT_*); fio
# (ioengine=nbd) random 4 KiB reads at depth 1 for DURATION seconds; and
# fio sequential 64 KiB reads; and ra-bench (RA_BENCH) for DURATION
# seconds: 4 sequential streams of 16 KiB reads interleaved round-robin on
# one connection, 4 sequential streams on 4 connections, strided (read
# 64 KiB, skip 64 KiB) and backward sequential 64 KiB reads.  Then the ratios of the ra-cache column to the others (of
# MB/s).
#
# Environment (defaults in brackets):
#   RDELAY [1ms]          backend read delay (not for "ceiling", which is 0)
#   BACKEND [pattern 4G]  backend plugin and arguments (word-split), e.g.
#                         "sparse-random 4G"
#   FILTER [build/plugins/ra-cache/.libs/nbdkit-ra-cache-filter.so]
#   FILTER_BASE []        the filter of ra-cache-base
#   RA_CACHE_ARGS []      extra ra-cache parameters, e.g. "ra-max=8M"
#   CONFIGS ["ceiling plain readahead+cache ra-cache"]   columns to run,
#                         in this order; may add single-hop
#   WORKLOADS ["seq4k seq64k seq1m seq64k-d8 short64k-d8 short1m short64k
#              fioseq64k rand4k interleave16k multiconn64k strided64k
#              backward64k"]
#   RA_BENCH [build/ra-bench]
#   COUNT_4K [6000] COUNT_64K [4000] COUNT_1M [3000] COUNT_64K_D8 [6000]
#                         qemu-img bench requests per cell (capped to the
#                         export size)
#   SHORT_64K_D8 [256M] SHORT_1M [256M] SHORT_64K [128M]
#                         bytes read by the short-job rows
#   DURATION [5]          seconds per fio, interleave and ra-bench cell
#   REPEAT [3]            runs per cell; the table shows the median run
#                         (by MB/s) with its amplification
#   RESULTS [none]        also write the raw figures to this TSV file
#   CLIENT_TIMEOUT [300]  seconds before a client counts as hung
#   PYTHON [/usr/bin/python3]  a python3 with the nbd module (python3-libnbd)
#   BENCH_KEEP_TMP        set to keep the temporary directory (logs, stats)
#
# With the defaults the whole run takes about 8 minutes on 2 cores
# (REPEAT=1: 3 minutes).
# Exit status: 0, or 1 if any cell failed (its server log is shown).

set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(dirname "$here")
# shellcheck source=bench/lib.sh
. "$here/lib.sh"

: "${RDELAY:=1ms}"
: "${BACKEND:=pattern 4G}"
: "${FILTER:=$top/build/plugins/ra-cache/.libs/nbdkit-ra-cache-filter.so}"
: "${FILTER_BASE:=}"
: "${RA_CACHE_ARGS:=}"
: "${CONFIGS:=ceiling plain readahead+cache ra-cache}"
: "${WORKLOADS:=seq4k seq64k seq1m seq64k-d8 short64k-d8 short1m short64k fioseq64k rand4k interleave16k multiconn64k strided64k backward64k}"
: "${COUNT_4K:=6000}"
: "${COUNT_64K:=4000}"
: "${COUNT_1M:=3000}"
: "${COUNT_64K_D8:=6000}"
: "${SHORT_64K_D8:=256M}"
: "${SHORT_1M:=256M}"
: "${SHORT_64K:=128M}"
: "${DURATION:=5}"
: "${REPEAT:=3}"
: "${RESULTS:=}"
: "${PYTHON:=/usr/bin/python3}"
: "${RA_BENCH:=$top/build/ra-bench}"

bench_args "$@"

[[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || bench_die "REPEAT must be a positive integer"
read -r -a backend_args <<<"$BACKEND"
read -r -a ra_cache_args <<<"$RA_CACHE_ARGS"

# ---- preflight -----------------------------------------------------------
for c in "$NBDKIT" qemu-img fio nbdinfo timeout awk; do
  command -v "$c" >/dev/null 2>&1 || bench_die "$c is not installed (./run.sh demo installs everything)"
done
bench_check_rusage
fio --enghelp=nbd >/dev/null 2>&1 ||
  bench_die "this fio has no nbd engine (ioengine=nbd)"
[ -x "$RA_BENCH" ] || bench_die "$RA_BENCH is not built (make in build/)"
for f in stats delay readahead cache; do
  "$NBDKIT" --filter="$f" null --dump-plugin >/dev/null 2>&1 ||
    bench_die "nbdkit cannot load its $f filter"
done

have_filter=yes
if [ ! -f "$FILTER" ]; then
  have_filter=no
  echo "compare.sh: $FILTER is not built: the ra-cache column will say n/a" >&2
fi

bench_traps

# The export size caps the qemu-img bench counts.
bench_start back "${backend_args[@]}" || exit 1
export_size=$(bench_export_size "$(bench_uri back)") ||
  bench_die "cannot read the size of the backend: ${BACKEND}"
bench_stop_all

# ---- workloads -------------------------------------------------------------
declare -A wl_label=(
  [seq4k]="sequential 4 KiB reads, depth 1"
  [seq64k]="sequential 64 KiB reads, depth 1"
  [seq1m]="sequential 1 MiB reads, depth 1"
  [seq64k-d8]="sequential 64 KiB reads, depth 8"
  [short64k-d8]="short job: seq. 64 KiB, depth 8, $SHORT_64K_D8"
  [short1m]="short job: seq. 1 MiB, depth 1, $SHORT_1M"
  [short64k]="short job: seq. 64 KiB, depth 1, $SHORT_64K"
  [rand4k]="random 4 KiB reads (fio), depth 1"
  [interleave16k]="4 streams interleaved, 16 KiB"
  [fioseq64k]="sequential 64 KiB reads (fio), depth 1"
  [multiconn64k]="4 streams on 4 connections, 64 KiB"
  [strided64k]="strided 64 KiB (read 1, skip 1)"
  [backward64k]="backward sequential 64 KiB"
)
for w in $WORKLOADS; do
  [ -n "${wl_label[$w]+x}" ] || bench_die "unknown workload $w (known: ${!wl_label[*]})"
done
declare -A short_bytes=()
short_bytes[short64k-d8]=$(bench_size_bytes "$SHORT_64K_D8") || bench_die "bad SHORT_64K_D8"
short_bytes[short1m]=$(bench_size_bytes "$SHORT_1M") || bench_die "bad SHORT_1M"
short_bytes[short64k]=$(bench_size_bytes "$SHORT_64K") || bench_die "bad SHORT_64K"
for c in $CONFIGS; do
  case "$c" in
    ceiling|plain|readahead+cache|ra-cache|ra-cache-wait|single-hop) ;;
    ra-cache-base) [ -f "$FILTER_BASE" ] ||
      bench_die "ra-cache-base needs FILTER_BASE (a built filter .so)" ;;
    *) bench_die "unknown configuration $c" ;;
  esac
done

# qemu_seq URI BLOCK COUNT DEPTH: "BYTES SECONDS".
qemu_seq ()
{
  local uri=$1 bs=$2 count=$3 depth=$4 secs
  if (( count * bs > export_size )); then
    count=$(( export_size / bs ))
  fi
  (( count > 0 )) || { echo "export too small for $bs-byte reads" >&2; return 1; }
  secs=$(bench_qemu_img "$uri" "$bs" "$count" "$depth") || return 1
  echo "$(( count * bs )) $secs"
}

# fio_rand URI: "BYTES SECONDS" of DURATION seconds of random 4 KiB reads.
fio_rand ()
{
  # shellcheck disable=SC2154 # bench_tmpdir is set by bench_init
  local uri=$1 out=$bench_tmpdir/fio.json
  rm -f "$out"
  timeout "$CLIENT_TIMEOUT" fio --name=rand4k --ioengine=nbd --uri="$uri" \
    --rw=randread --bs=4k --iodepth=1 --size="$export_size" \
    --time_based --runtime="$DURATION" \
    --output-format=json --output="$out" >"$bench_tmpdir/fio.out" 2>&1 ||
    { cat "$bench_tmpdir/fio.out" >&2; return 1; }
  "$PYTHON" -c '
import json, sys
j = json.load(open(sys.argv[1]))
r = j["jobs"][0]["read"]
if j["jobs"][0]["error"]:
    sys.exit("fio job error %d" % j["jobs"][0]["error"])
print(r["io_bytes"], r["runtime"] / 1000.0)' "$out"
}


# fio_seq URI: "BYTES SECONDS" of DURATION seconds of sequential 64 KiB
# reads.
fio_seq ()
{
  local uri=$1 out=$bench_tmpdir/fio.json
  timeout "$CLIENT_TIMEOUT" fio --name=seq64k --ioengine=nbd --uri="$uri" \
    --rw=read --bs=64k --iodepth=1 --time_based --runtime="$DURATION" \
    --output-format=json --output="$out" >"$bench_tmpdir/fio.out" 2>&1 ||
    { cat "$bench_tmpdir/fio.out" >&2; return 1; }
  "$PYTHON" -c '
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
if j["error"]:
    sys.exit("fio job error %d" % j["error"])
print(j["read"]["io_bytes"], j["read"]["runtime"] / 1000.0)' "$out"
}

# ra_bench URI ARGS...: "BYTES SECONDS" of a DURATION seconds ra-bench run.
ra_bench ()
{
  local uri=$1; shift
  [ -x "$RA_BENCH" ] || { echo "ra-bench not built: $RA_BENCH" >&2; return 1; }
  timeout "$CLIENT_TIMEOUT" "$RA_BENCH" --json -u "$uri" -t "$DURATION" "$@" \
    > "$bench_tmpdir/rb.json" || return 1
  "$PYTHON" -c '
import json, sys
j = json.load(open(sys.argv[1]))
print(j["bytes"], j["elapsed_s"])' "$bench_tmpdir/rb.json"
}

run_workload ()
{
  local w=$1 uri=$2
  case "$w" in
    seq4k)         qemu_seq "$uri" 4096 "$COUNT_4K" 1 ;;
    seq64k)        qemu_seq "$uri" 65536 "$COUNT_64K" 1 ;;
    seq1m)         qemu_seq "$uri" 1048576 "$COUNT_1M" 1 ;;
    seq64k-d8)     qemu_seq "$uri" 65536 "$COUNT_64K_D8" 8 ;;
    short64k-d8)   qemu_seq "$uri" 65536 $((short_bytes[short64k-d8] / 65536)) 8 ;;
    short1m)       qemu_seq "$uri" 1048576 $((short_bytes[short1m] / 1048576)) 1 ;;
    short64k)      qemu_seq "$uri" 65536 $((short_bytes[short64k] / 65536)) 1 ;;
    rand4k)        fio_rand "$uri" ;;
    interleave16k) ra_bench "$uri" -p interleaved --streams 4 -s 16K ;;
    fioseq64k)     fio_seq "$uri" ;;
    multiconn64k)  ra_bench "$uri" -p multiconn --streams 4 -s 64K ;;
    strided64k)    ra_bench "$uri" -p strided --stride-read 1 --stride-skip 1 -s 64K ;;
    backward64k)   ra_bench "$uri" -p backward -s 64K ;;
  esac
}

# ---- one cell --------------------------------------------------------------
# runs[CONFIG,WORKLOAD]: one line "MB/s amplification CPU-s minor-faults
# client-bytes" per successful run (CPU-s, faults: the front's; n/a for
# single-hop).
declare -A runs=() cell=() mbps_raw=() cost=() perg_raw=()
failed=0

# run_cell CONFIG WORKLOAD REP: fresh backend and front, one client run;
# prints the run's progress line on stderr.
run_cell ()
{
  local c=$1 w=$2 rep=$3 delay=$RDELAY stats=$bench_tmpdir/back.stats
  local client=front bytes secs back_bytes mb amp cpu minflt majflt maxrss
  local -a front

  [ "$c" = ceiling ] && delay=0
  [ "$c" = single-hop ] && { delay=0; client=back; }
  case "$c" in
    ceiling|plain|single-hop) front=() ;;
    readahead+cache) front=(--filter=readahead --filter=cache) ;;
    ra-cache|ra-cache-wait) front=(--filter="$FILTER") ;;
    ra-cache-base) front=(--filter="$FILTER_BASE") ;;
  esac
  front+=(nbd socket="$(bench_sock back)")
  [ "$c" = ra-cache ] || [ "$c" = ra-cache-base ] && front+=("${ra_cache_args[@]}")
  [ "$c" = ra-cache-wait ] && front+=(ra-congestion=wait "${ra_cache_args[@]}")

  rm -f "$stats" "$bench_tmpdir"/*.log "$bench_tmpdir/front.rusage"
  if ! bench_start back --filter=stats --filter=delay "${backend_args[@]}" \
         rdelay="$delay" statsfile="$stats" statsappend=false ||
     { [ "$client" = front ] && ! bench_start_timed front "${front[@]}"; }; then
    bench_stop_all
    cell[$c,$w]=FAIL
    failed=1
    return 0
  fi
  if ! bench_client "$bench_tmpdir/result" run_workload "$w" "$(bench_uri "$client")"; then
    bench_stop_all
    echo "compare.sh: $c / $w FAILED; $client server log:" >&2
    tail -n 30 "$bench_tmpdir/$client.log" | sed 's/^/    /' >&2
    cell[$c,$w]=FAIL
    failed=1
    return 0
  fi
  # The front first, so that the backend counts every read the front made
  # (background reads included) before it writes its stats at exit.
  bench_stop front
  bench_stop back
  read -r cpu minflt majflt maxrss < <(bench_rusage front)
  read -r bytes secs < "$bench_tmpdir/result"
  back_bytes=$(bench_stats_read_bytes "$stats")
  mb=$(awk -v b="$bytes" -v s="$secs" 'BEGIN { printf "%.6f\n", b / s / 1e6 }')
  amp=$(bench_ratio "$back_bytes" "$bytes" 2)
  runs[$c,$w]+="$mb $amp $cpu $minflt $bytes"$'\n'
  printf '%-16s %-38s %-16s %6s CPU s %8s flt' "$c" "${wl_label[$w]}" \
    "$(bench_mbps "$bytes" "$secs") ($amp)" "$cpu" "$minflt" >&2
  [ -n "$RESULTS" ] &&
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$c" "$w" "$rep" \
      "$bytes" "$secs" "$back_bytes" "$mb" "$amp" "$cpu" "$minflt" "$majflt" \
      "$maxrss" >> "$RESULTS"
  return 0
}

# ---- run ---------------------------------------------------------------------
[ -n "$RESULTS" ] &&
  printf 'config\tworkload\trun\tclient_bytes\tseconds\tbackend_bytes\tMB/s\tamplification\tfront_cpu_s\tfront_minflt\tfront_majflt\tfront_maxrss_kib\n' > "$RESULTS"

ncells=0
for w in $WORKLOADS; do for c in $CONFIGS; do ncells=$((ncells + REPEAT)); done; done
i=0
t_all=$SECONDS
# The repetitions of one workload alternate between the configurations, so
# that a change in the machine's load spreads over all columns alike.
for w in $WORKLOADS; do
  for ((rep = 1; rep <= REPEAT; rep++)); do
    for c in $CONFIGS; do
      i=$((i + 1))
      if [ "$c" = ra-cache ] && [ "$have_filter" = no ]; then
        cell[$c,$w]=n/a
        continue
      fi
      [ "${cell[$c,$w]:-}" = FAIL ] && continue
      t0=$SECONDS
      printf '[%3d/%d] run %d: ' "$i" "$ncells" "$rep" >&2
      run_cell "$c" "$w" "$rep"
      if [ "${cell[$c,$w]:-}" = FAIL ]; then
        echo "$c ${wl_label[$w]}: FAILED" >&2
      else
        printf ' %3ds\n' $((SECONDS - t0)) >&2
      fi
    done
  done
  # The median run by MB/s (the lower middle one for an even REPEAT).
  for c in $CONFIGS; do
    [ -n "${cell[$c,$w]:-}" ] && continue
    [ -n "${runs[$c,$w]:-}" ] || { cell[$c,$w]=n/a; continue; }
    read -r mb amp cpu minflt bytes < <(printf '%s' "${runs[$c,$w]}" | bench_median_line 1)
    mbps_raw[$c,$w]=$mb
    cell[$c,$w]="$(bench_mbps "$mb" 1e-6) ($amp)"
    perg_raw[$c,$w]=$(bench_per_gib "$cpu" "$bytes")
    if [ "$cpu" = n/a ]; then
      cost[$c,$w]=n/a
    else
      cost[$c,$w]="${perg_raw[$c,$w]} ($cpu s, $minflt)"
    fi
  done
done

# ---- the table -----------------------------------------------------------------
ratio_cols=()
if [[ " $CONFIGS " == *" ra-cache "* ]]; then
  for c in ceiling readahead+cache plain ra-cache-base; do
    [[ " $CONFIGS " == *" $c "* ]] && ratio_cols+=("$c")
  done
fi

echo
echo "ra-cache benchmark: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $("$NBDKIT" --version), $(qemu-img --version | head -n 1)"
echo "backend: nbdkit --filter=stats --filter=delay $BACKEND rdelay=$RDELAY (ceiling and single-hop: rdelay=0); front: nbdkit [filters] nbd, Unix sockets"
echo "ra-cache: $FILTER${RA_CACHE_ARGS:+ $RA_CACHE_ARGS}$([ "$have_filter" = no ] && echo ' (NOT BUILT)')"
echo "cells: MB/s (backend bytes / client bytes), the median of $REPEAT run(s) on fresh servers each"
echo
# print_table CELLS RAW: one table, a row per workload and a column per
# configuration from the associative array named CELLS, then the ratios
# of ra-cache to each of ratio_cols from the raw figures in RAW.
print_table ()
{
  local -n cells_=$1 raw_=$2
  local hdr="| workload |" sep="|---|" row w c r
  for c in $CONFIGS; do hdr+=" $c |"; sep+="---:|"; done
  for c in "${ratio_cols[@]}"; do hdr+=" ra-cache / $c |"; sep+="---:|"; done
  echo "$hdr"; echo "$sep"
  for w in $WORKLOADS; do
    row="| ${wl_label[$w]} |"
    for c in $CONFIGS; do row+=" ${cells_[$c,$w]:-n/a} |"; done
    for c in "${ratio_cols[@]}"; do
      r=$(bench_ratio "${raw_[ra-cache,$w]:-}" "${raw_[$c,$w]:-}" 2)
      [ "$r" = n/a ] || r="${r}x"
      row+=" $r |"
    done
    echo "$row"
  done
}

print_table cell mbps_raw
echo
echo "front server cost: CPU s per GiB read by the client (the front nbdkit's CPU s, user + system; its minor page faults), from the front's own rusage (bench/rusage), in the same median runs"
echo
print_table cost perg_raw
echo
echo "total time: $((SECONDS - t_all)) s"
exit "$failed"
