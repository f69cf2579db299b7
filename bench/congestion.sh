#!/usr/bin/env bash
# bench/congestion.sh: does speculation crowd out waiting clients?
#
# A congested backend (nbdkit -t BACKEND_THREADS, rdelay=RDELAY) serves a
# sequential reader (ra-bench seq, 64 KiB, depth 1) and a random reader
# (ra-bench random, 4 KiB, depth RANDOM_DEPTH) at the same time, for
# DURATION seconds, through each front configuration:
#   plain            no filter
#   ra-off           ra-cache ra-max=0 (cache, no readahead)
#   ra-skip          ra-cache defaults (ra-congestion=skip)
#   ra-wait          ra-cache ra-congestion=wait
#   readahead+cache  nbdkit's own filters
# and prints the random reader's p50/p99 latency, the sequential reader's
# throughput, and the ra-cache counters of skipped and delayed async parts,
# side by side, with the ratios the congestion issue asks about.
#
# Usage: bench/congestion.sh        (env: RDELAY, BACKEND_THREADS,
#        DURATION, RANDOM_DEPTH, BUILD, RA_CACHE_ARGS)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
: "${BUILD:=$here/../build}"
: "${RDELAY:=3ms}"
: "${BACKEND_THREADS:=2}"
: "${DURATION:=8}"
: "${RANDOM_DEPTH:=4}"
: "${RA_CACHE_ARGS:=}"
filter=$BUILD/plugins/ra-cache/.libs/nbdkit-ra-cache-filter.so
bench=$BUILD/ra-bench
[ -f "$filter" ] || bench_die "build the filter first ($filter)"
[ -x "$bench" ] || bench_die "build ra-bench first ($bench)"
export PATH=$BENCH_PATH

bench_init
trap bench_cleanup EXIT

configs=(plain ra-off ra-skip ra-wait readahead+cache)
declare -A front=(
  [plain]=""
  [ra-off]="--filter=$filter"
  [ra-skip]="--filter=$filter"
  [ra-wait]="--filter=$filter"
  [readahead+cache]="--filter=readahead --filter=cache"
)
declare -A params=(
  [plain]=""
  [ra-off]="ra-max=0"
  [ra-skip]=""
  [ra-wait]="ra-congestion=wait"
  [readahead+cache]=""
)

py=/usr/bin/python3
field () { $py -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }

printf '%-16s %10s %10s %12s %9s %9s %9s\n' config "rand p50" "rand p99" "seq MB/s" skipped delayed promoted
declare -A p99 seq
for cfg in "${configs[@]}"; do
  bench_start back -t "$BACKEND_THREADS" --filter=delay pattern 8G rdelay="$RDELAY" ||
    bench_die "backend failed"
  stats=
  # shellcheck disable=SC2086
  if [[ $cfg == ra-* ]]; then
    stats=$bench_tmpdir/ra.json
    bench_start front ${front[$cfg]} nbd socket="$(bench_sock back)" \
      ${params[$cfg]} $RA_CACHE_ARGS ra-cache-stats="$stats" || bench_die "front failed"
  else
    bench_start front ${front[$cfg]} nbd socket="$(bench_sock back)" ||
      bench_die "front failed"
  fi
  uri=$(bench_uri front)
  "$bench" --json -u "$uri" -p seq -s 64K -d 1 -t "$DURATION" > "$bench_tmpdir/seq.json" &
  spid=$!
  "$bench" --json -u "$uri" -p random -s 4K -d "$RANDOM_DEPTH" -t "$DURATION" \
    --seed 7 > "$bench_tmpdir/rand.json" &
  rpid=$!
  wait "$spid" || bench_die "$cfg: sequential reader failed"
  wait "$rpid" || bench_die "$cfg: random reader failed"
  bench_stop front
  bench_stop back
  p50=$(field "$bench_tmpdir/rand.json" 'd["latency_ms"]["p50"]')
  p99[$cfg]=$(field "$bench_tmpdir/rand.json" 'd["latency_ms"]["p99"]')
  seq[$cfg]=$(field "$bench_tmpdir/seq.json" 'd["mb_per_s"]')
  sk=- dl=- pr=-
  if [ -n "$stats" ]; then
    sk=$(field "$stats" 'd["async_skipped"]')
    dl=$(field "$stats" 'd["async_delayed"]')
    pr=$(field "$stats" 'd["async_promoted"]')
    left=$(field "$stats" 'd["cache_pages_inflight"]')
    [ "$left" = 0 ] || echo "warning: $cfg left $left pages in flight at exit" >&2
  fi
  printf '%-16s %10.2f %10.2f %12.1f %9s %9s %9s\n' "$cfg" "$p50" "${p99[$cfg]}" "${seq[$cfg]}" "$sk" "$dl" "$pr"
done
echo
for cfg in ra-skip ra-wait; do
  $py -c "import sys; a,b,c,d=map(float,sys.argv[2:6]); print('%s: random p99 %.2fx of ra-off; sequential %.2fx of plain' % (sys.argv[1], a/b, c/d))" \
    "$cfg" "${p99[$cfg]}" "${p99[ra-off]}" "${seq[$cfg]}" "${seq[plain]}"
done
echo "(backend: nbdkit -t $BACKEND_THREADS --filter=delay pattern 8G rdelay=$RDELAY;" \
     "readers: ra-bench seq 64K d1 and random 4K d$RANDOM_DEPTH for ${DURATION}s at once)"
