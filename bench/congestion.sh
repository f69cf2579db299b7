#!/usr/bin/env bash
# bench/congestion.sh: does speculation crowd out waiting clients?
#
# For every backend (rows) and front configuration (columns), two fresh
# servers, and two readers at the same time for DURATION seconds:
#   sequential  ra-bench seq, 64 KiB, depth 1 (a bulk copy); with
#               NEIGHBOUR=nbdcopy, nbdcopy with its defaults copying the
#               export to null: (a copy tool: several connections, many
#               reads in flight), NBDCOPY_CHUNK bytes at a time through
#               an nbdkit --filter=offset of its own on the front, one
#               range after another until DURATION has passed (the
#               last one runs to its end); its MB/s from the backend's
#               stats filter
#   random      ra-bench random, 4 KiB, depth RANDOM_DEPTH (a VM's I/O)
# The table gives the random reader's p50/p99 latency (ms) and the
# sequential reader's MB/s, then for each ra-cache column the random p99
# against ra-off and the sequential MB/s against plain: the congestion
# issue's goal is p99 within 1.25x of ra-off, and sequential at least 3x
# plain where the backend has the capacity.
#
# Backends (rows, BACKENDS): tN = nbdkit -t N --filter=delay pattern 8G
# rdelay=RDELAY (N threads per connection; the front opens several
# connections, and all servers share this machine's CPUs); rate =
# the same with -t 16 behind --filter=rate rate=RATE (a bandwidth limit
# shared by all connections).
#
# Fronts (columns, CONFIGS):
#   plain      no filter
#   spread     no filter, the sequential reader's 64 KiB reads spread
#              over SPREAD connections at depth 2 (16: 32 reads in
#              flight), so that it moves about what ra-cache's reader
#              moves with no cache at all: the random p99 next to it is
#              what that throughput alone costs on this machine (CPU,
#              sockets), whoever reads ahead
#   ra-off     ra-cache ra-max=0 (cache, no readahead)
#   fixed      ra-cache ra-mode=kernel: the fixed congestion threshold
#              (ra-congestion-threshold, 9), as before the estimator
#   learned    ra-cache defaults (adaptive: the congestion estimate)
#   small-io   the same with ra-io-max=SMALL_IO (256K): smaller reads and
#              windows all the time (the defaults' yield to the random
#              reader then divides them by 4 again: 64K reads, 512K
#              windows; measured before the yield existed in bench/RESULTS.md)
#   base       (only with FILTER_BASE) another build's filter, defaults:
#              e.g. main's, to compare before and after in one run
# plus RA_CACHE_ARGS for every ra-cache column.  Cells run row by row,
# REPEAT times, the columns of a row alternated in every repetition,
# fresh servers for each; a cell shows the median of its runs (of each
# figure apart).  ra-cache columns also show the async parts skipped,
# async reads held back (delayed by the threshold + held by the
# estimate) and the estimate at the end (backend_slots, queueing delay
# in us), of the last run.
#
# Usage: bench/congestion.sh   (env: BACKENDS ["t1 t2 t4 t16 rate"],
#        CONFIGS ["plain ra-off fixed learned"], RDELAY [3ms], RATE [400M],
#        DURATION [6], REPEAT [3], RANDOM_DEPTH [1], SPREAD [16],
#        NEIGHBOUR [seq; or nbdcopy], NBDCOPY_CHUNK [268435456],
#        SMALL_IO [256K], BUILD [build],
#        FILTER_BASE, RA_CACHE_ARGS, RESULTS [a TSV file of every run])
# About DURATION + 3 s per run: 7 minutes with the defaults.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
: "${BUILD:=$here/../build}"
: "${RDELAY:=3ms}"
: "${RATE:=400M}"
: "${BACKENDS:=t1 t2 t4 t16 rate}"
: "${CONFIGS:=plain ra-off fixed learned}"
: "${DURATION:=6}"
: "${REPEAT:=3}"
: "${RANDOM_DEPTH:=1}"
: "${NEIGHBOUR:=seq}"
: "${NBDCOPY_CHUNK:=268435456}"
: "${SPREAD:=16}"
: "${SMALL_IO:=256K}"
: "${RA_CACHE_ARGS:=}"
: "${FILTER_BASE:=}"
: "${RESULTS:=}"
filter=$BUILD/plugins/ra-cache/.libs/nbdkit-ra-cache-filter.so
bench=$BUILD/ra-bench
[ -f "$filter" ] || bench_die "build the filter first ($filter)"
[ -x "$bench" ] || bench_die "build ra-bench first ($bench)"
export PATH=$BENCH_PATH

bench_traps

declare -A front=(
  [plain]=""
  [spread]=""
  [ra-off]="--filter=$filter"
  [fixed]="--filter=$filter"
  [learned]="--filter=$filter"
  [small-io]="--filter=$filter"
  [base]="--filter=$FILTER_BASE"
)
declare -A params=(
  [plain]=""
  [spread]=""
  [ra-off]="ra-max=0"
  [fixed]="ra-mode=kernel"
  [learned]=""
  [small-io]="ra-io-max=$SMALL_IO"
  [base]=""
)
for cfg in $CONFIGS; do
  [ -n "${front[$cfg]+x}" ] || bench_die "unknown configuration $cfg"
  [ "$cfg" != base ] || [ -f "$FILTER_BASE" ] ||
    bench_die "base needs FILTER_BASE (a built nbdkit-ra-cache-filter.so)"
done

py=/usr/bin/python3
field () { $py -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
# copies SOCKET: NEIGHBOUR=nbdcopy's copier (see its use below).
copies ()
{
  local sock=$1 off=0 end
  end=$(awk -v t="$EPOCHREALTIME" -v d="$DURATION" 'BEGIN { printf "%.3f", t + d }')
  while awk -v t="$EPOCHREALTIME" -v e="$end" 'BEGIN { exit !(t < e) }'; do
    timeout $((DURATION + 60)) nbdcopy -- \
      [ "$NBDKIT" -r --filter=offset nbd socket="$sock" offset="$off" range="$NBDCOPY_CHUNK" ] \
      null: > "$bench_tmpdir/nbdcopy.log" 2>&1 || { cat "$bench_tmpdir/nbdcopy.log" >&2; return 1; }
    off=$((off + NBDCOPY_CHUNK))
  done
}
[ -z "$RESULTS" ] ||
  printf 'backend\tconfig\trun\trand_p50_ms\trand_p99_ms\tseq_mb_s\tskipped\theld\tslots\tqdelay_us\n' > "$RESULTS"
median () { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

printf '%-7s %-8s %9s %9s %9s %8s %8s %6s %8s\n' backend config "rand p50" "rand p99" "seq MB/s" skipped held slots "qdel us"
declare -A p99 seq p50s p99s seqs extra
for be in $BACKENDS; do
  case "$be" in
    t[0-9]*) bargs=(-t "${be#t}" --filter=stats --filter=delay pattern 8G rdelay="$RDELAY") ;;
    rate) bargs=(-t 16 --filter=stats --filter=rate --filter=delay pattern 8G rdelay="$RDELAY" rate="$RATE") ;;
    *) bench_die "unknown backend $be" ;;
  esac
  bargs+=(statsfile="$bench_tmpdir/back.stats" statsappend=false)
  for ((rep = 1; rep <= REPEAT; rep++)); do
  for cfg in $CONFIGS; do
    bench_start back "${bargs[@]}" || bench_die "backend failed"
    stats=
    # shellcheck disable=SC2086
    seqargs=(-d 1)
    [ "$cfg" != spread ] || seqargs=(-c "$SPREAD" -d 2)
    if [ -n "${front[$cfg]}" ]; then
      stats=$bench_tmpdir/ra.json
      rm -f "$stats"
      bench_start front ${front[$cfg]} nbd socket="$(bench_sock back)" \
        ${params[$cfg]} $RA_CACHE_ARGS ra-cache-stats="$stats" || bench_die "front failed"
    else
      bench_start front nbd socket="$(bench_sock back)" || bench_die "front failed"
    fi
    uri=$(bench_uri front)
    t0=$EPOCHREALTIME
    if [ "$NEIGHBOUR" = nbdcopy ]; then
      # Copies of NBDCOPY_CHUNK one after another, each of the next
      # range (data not read yet), until DURATION has passed: each copy
      # ends on its own.  Killing nbdcopy instead, with its many reads in
      # flight, trips nbdkit 1.32.5's assertion "raw_send_socket: sock >=
      # 0" in the front (a reply sent after another thread closed the
      # socket), whatever the front's filters.
      copies "$(bench_sock front)" &
    else
      timeout $((DURATION + 60)) "$bench" --json -u "$uri" -p seq -s 64K "${seqargs[@]}" -t "$DURATION" \
        > "$bench_tmpdir/seq.json" &
    fi
    spid=$!
    timeout $((DURATION + 60)) "$bench" --json -u "$uri" -p random -s 4K -d "$RANDOM_DEPTH" \
      -t "$DURATION" --seed 7 > "$bench_tmpdir/rand.json" &
    rpid=$!
    wait "$rpid" || bench_die "$be $cfg: random reader failed"
    wait "$spid" || bench_die "$be $cfg: the $NEIGHBOUR neighbour failed"
    secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')
    bench_stop front
    bench_stop back
    p50=$(field "$bench_tmpdir/rand.json" 'd["latency_ms"]["p50"]')
    r99=$(field "$bench_tmpdir/rand.json" 'd["latency_ms"]["p99"]')
    if [ "$NEIGHBOUR" = nbdcopy ]; then
      # Everything the backend read, the random reader's 4K reads too
      # (a few MB), over the run (until the last copy ended).
      rseq=$(awk -v b="$(bench_stats_read_bytes "$bench_tmpdir/back.stats")" \
               -v s="$secs" 'BEGIN { printf "%.1f\n", b / s / 1e6 }')
    else
      rseq=$(field "$bench_tmpdir/seq.json" 'd["mb_per_s"]')
    fi
    p50s[$be.$cfg]+=" $p50"; p99s[$be.$cfg]+=" $r99"; seqs[$be.$cfg]+=" $rseq"
    sk=- held=- slots=- qd=-
    if [ -n "$stats" ]; then
      sk=$(field "$stats" 'd["async_skipped"]')
      held=$(field "$stats" 'd["async_delayed"] + d.get("async_held", 0)')
      slots=$(field "$stats" 'd.get("backend_slots", "-")')
      qd=$(field "$stats" '"%.0f" % d["backend_queue_delay_us"] if "backend_queue_delay_us" in d else "-"')
      left=$(field "$stats" 'd["cache_pages_inflight"]')
      [ "$left" = 0 ] || echo "warning: $be $cfg left $left pages in flight at exit" >&2
    fi
    extra[$be.$cfg]="$sk $held $slots $qd"
    [ -z "$RESULTS" ] ||
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$be" "$cfg" "$rep" "$p50" "$r99" \
        "$rseq" "$sk" "$held" "$slots" "$qd" >> "$RESULTS"
  done
  done
  for cfg in $CONFIGS; do
    p99[$be.$cfg]=$(median <<<"${p99s[$be.$cfg]}")
    seq[$be.$cfg]=$(median <<<"${seqs[$be.$cfg]}")
    read -r sk held slots qd <<<"${extra[$be.$cfg]}"
    printf '%-7s %-8s %9.2f %9.2f %9.1f %8s %8s %6s %8s\n' "$be" "$cfg" \
      "$(median <<<"${p50s[$be.$cfg]}")" "${p99[$be.$cfg]}" "${seq[$be.$cfg]}" \
      "$sk" "$held" "$slots" "$qd"
  done
done
echo
for be in $BACKENDS; do
  for cfg in $CONFIGS; do
    case "$cfg" in plain|ra-off) continue ;; esac
    # spread has no front of ours: its line is the machine's own cost.
    [ -n "${p99[$be.ra-off]:-}" ] && [ -n "${seq[$be.plain]:-}" ] || continue
    $py -c "import sys; a,b,c,d=map(float,sys.argv[3:7]); print('%-7s %-8s random p99 %.2fx of ra-off; sequential %.2fx of plain' % (sys.argv[1], sys.argv[2], a/b, c/d))" \
      "$be" "$cfg" "${p99[$be.$cfg]}" "${p99[$be.ra-off]}" "${seq[$be.$cfg]}" "${seq[$be.plain]}"
  done
done
echo "(backends: nbdkit -t N --filter=delay pattern 8G rdelay=$RDELAY; rate: -t 16" \
     "--filter=rate rate=$RATE; readers: $([ "$NEIGHBOUR" = nbdcopy ] &&
       echo "nbdcopy (seq MB/s: all the backend read)" ||
       echo "ra-bench seq 64K d1") and random 4K" \
     "d$RANDOM_DEPTH for ${DURATION}s at once; median of $REPEAT runs)"
