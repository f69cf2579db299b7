#!/usr/bin/env bash
# bench/adaptive.sh: ra-cache's two readahead modes side by side, the
# kernel's heuristics with a fixed ra-max (swept) and ra-mode=adaptive
# with its defaults, over backends of different latency and bandwidth.
#
#   BUILD=build bench/adaptive.sh [--markdown]
#
# It prints figures, never verdicts: nothing here asserts on timing.
#
# Cells (rows): a backend
#   nbdkit [--filter=rate] --filter=delay memory BACKEND_SIZE delay-read=Nms
#          [rate=R burstiness=RATE_BURSTINESS]
# for every N in CELLS and R in RATES ("unlimited": no rate filter), started
# once per cell; for every run a fresh front (a cold cache)
#   nbdkit --filter=FILTER nbd socket=BACKEND [ra-mode=...] [ra-max=...]
#          ra-cache-stats=FILE
# and one sequential reader for SECS seconds:
#   ra-bench -p seq -s 64K -d 1 -t SECS
# Columns: MB/s with ra-mode=kernel and each ra-max of RA_MAX_SWEEP, the
# best of them, ra-mode=adaptive (no ra-max: its defaults), and the ratios
# adaptive / best and adaptive / kernel 128K.  A second table gives the
# front's async_skipped (async parts dropped for congestion) and
# ahead_wasted_pages (read ahead, evicted unused) of the same runs.
# Every other filter parameter keeps its default.
#
# Extra rows, on the EXTRA_DELAY ms cell without a rate limit, kernel
# mode with the default ra-max (8M) against adaptive:
#   random      ra-bench -p random -s 4K -d 1: MB/s and the amplification
#               backend_bytes / client_bytes (ra-cache's own counters)
#   interleaved ra-bench -p interleaved --streams 64 -c 8 -s 64K -d 1 with
#               ra-cache-size=32M: MB/s, waste = ahead_wasted_pages /
#               async_pages, and ahead_used_pages
#
# Environment (defaults in brackets):
#   BUILD [TOP/build]      build tree: FILTER and RA_BENCH default into it
#   FILTER [BUILD/plugins/ra-cache/.libs/nbdkit-ra-cache-filter.so]
#   RA_BENCH [BUILD/ra-bench]
#   CELLS ["1 5 20"]       backend read delays, whole milliseconds ("" for
#                          the extra rows only)
#   RATES ["unlimited 1G"] backend bandwidth: unlimited, or a rate= of
#                          nbdkit-rate-filter(1) in bits per second (1G is
#                          2^30 bit/s, 134 MB/s), global to all connections
#   RATE_BURSTINESS [0.1]  the rate filter's burstiness= (seconds at the
#                          rate that a full bucket lets through at once; its
#                          bucket starts full, so the default 2 s would let
#                          the first 256 MiB of a 1G run through unlimited)
#   SECS [4]               seconds per run (ra-bench -t)
#   RA_MAX_SWEEP ["128K 256K 512K 1M 2M 4M 8M 16M"]   kernel-mode ra-max
#   ADAPTIVE [1]           0: kernel mode only, without passing ra-mode=
#                          (for a filter that has no ra-mode parameter)
#   EXTRAS ["random interleaved"]   extra rows to run ("" for none)
#   EXTRA_DELAY [1]        the cell (ms, no rate limit) of the extra rows
#   REPEAT [1]             runs per configuration; the median by MB/s is
#                          shown, with that run's counters
#   BACKEND_SIZE [16G]     export size (sparse: costs no memory; big enough
#                          that a run at 1 GB/s does not wrap around)
#   MARKDOWN [0]           1 (or --markdown): Markdown tables on stdout
#   RESULTS []             also write every run's raw figures to this TSV
#   PYTHON [/usr/bin/python3]
#   BENCH_KEEP_TMP         set to keep the temporary directory (logs, stats)
#
# Progress goes to stderr, the tables to stdout.  With the defaults: 6
# cells x 9 configurations + 4 extra runs = 58 runs of about SECS + 0.5 s,
# about 4.5 minutes on 2 cores (ADAPTIVE=0: 50 runs, 3.6 minutes).  Exit
# status: 0, or 1 if any run failed (its server log is shown on stderr and
# its cell reads FAIL).

set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(dirname "$here")
# shellcheck source=bench/lib.sh
. "$here/lib.sh"

: "${BUILD:=$top/build}"
: "${FILTER:=$BUILD/plugins/ra-cache/.libs/nbdkit-ra-cache-filter.so}"
: "${RA_BENCH:=$BUILD/ra-bench}"
: "${CELLS=1 5 20}"
: "${RATES:=unlimited 1G}"
: "${RATE_BURSTINESS:=0.1}"
: "${SECS:=4}"
: "${RA_MAX_SWEEP:=128K 256K 512K 1M 2M 4M 8M 16M}"
: "${ADAPTIVE:=1}"
: "${EXTRAS=random interleaved}"
: "${EXTRA_DELAY:=1}"
: "${REPEAT:=1}"
: "${BACKEND_SIZE:=16G}"
: "${MARKDOWN:=0}"
: "${RESULTS:=}"
: "${PYTHON:=/usr/bin/python3}"

for arg in "$@"; do
  case "$arg" in
    -h|--help) sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    --markdown) MARKDOWN=1 ;;
    *) bench_die "unknown argument $arg (settings are environment variables: $0 --help)" ;;
  esac
done

# ---- settings --------------------------------------------------------------
read -r -a cells <<<"$CELLS"
read -r -a rates <<<"$RATES"
read -r -a sweep <<<"$RA_MAX_SWEEP"
read -r -a extras <<<"$EXTRAS"
[ "${#cells[@]}" -gt 0 ] || [ "${#extras[@]}" -gt 0 ] || bench_die "CELLS and EXTRAS are both empty"
[ "${#cells[@]}" -eq 0 ] || [ "${#rates[@]}" -gt 0 ] || bench_die "RATES is empty"
for n in "${cells[@]}" "$EXTRA_DELAY"; do
  [[ "$n" =~ ^[0-9]+$ ]] || bench_die "delays (CELLS, EXTRA_DELAY) are whole milliseconds: '$n'"
done
for r in "${rates[@]}"; do
  [ "$r" = unlimited ] || [[ "$r" =~ ^[0-9]+[kKMGT]?$ ]] ||
    bench_die "RATES: '$r' is neither unlimited nor a rate (e.g. 1G, 500M)"
done
for m in "${sweep[@]}"; do
  [[ "$m" =~ ^[0-9]+[KMG]$ ]] || bench_die "RA_MAX_SWEEP: '$m' is not a size like 128K or 4M"
done
for e in "${extras[@]}"; do
  case "$e" in random|interleaved) ;; *) bench_die "EXTRAS: unknown row '$e' (random, interleaved)" ;; esac
done
[[ "$SECS" =~ ^[0-9]+(\.[0-9]+)?$ ]] || bench_die "SECS must be a number of seconds"
[[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || bench_die "REPEAT must be a positive integer"
[[ "$RATE_BURSTINESS" =~ ^[0-9]+(\.[0-9]+)?$ ]] || bench_die "RATE_BURSTINESS must be a number of seconds"
case "$ADAPTIVE" in 0|1) ;; *) bench_die "ADAPTIVE must be 0 or 1" ;; esac
case "$MARKDOWN" in 0|1) ;; *) bench_die "MARKDOWN must be 0 or 1" ;; esac

# ---- preflight ---------------------------------------------------------------
export PATH=$BENCH_PATH
for c in "$NBDKIT" timeout awk "$PYTHON"; do
  command -v "$c" >/dev/null 2>&1 || bench_die "$c is not installed (./run.sh demo installs everything)"
done
[ -f "$FILTER" ] || bench_die "the filter is not built: $FILTER (set BUILD or FILTER)"
[ -x "$RA_BENCH" ] || bench_die "ra-bench is not built: $RA_BENCH (set BUILD or RA_BENCH)"
for f in delay rate; do
  "$NBDKIT" --filter="$f" null --dump-plugin >/dev/null 2>&1 ||
    bench_die "nbdkit cannot load its $f filter"
done
"$NBDKIT" memory --dump-plugin >/dev/null 2>&1 || bench_die "nbdkit has no memory plugin"
if [ "$ADAPTIVE" = 1 ]; then
  # nbdkit --run checks the parameters and exits at once.
  for m in kernel adaptive; do
    if ! out=$("$NBDKIT" -U - --filter="$FILTER" null 1M ra-mode="$m" --run true 2>&1); then
      while IFS= read -r l; do echo "    $l"; done <<<"$out" >&2
      bench_die "$FILTER does not take ra-mode=$m: run with ADAPTIVE=0 for kernel mode only"
    fi
  done
fi

bench_traps
# shellcheck disable=SC2154 # bench_tmpdir is set by bench_init
tmp=$bench_tmpdir

# Configurations of the sequential sweep: k:RA_MAX (kernel) and adaptive.
seq_cfgs=()
for m in "${sweep[@]}"; do seq_cfgs+=("k:$m"); done
[ "$ADAPTIVE" = 1 ] && seq_cfgs+=(adaptive)
extra_cfgs=(kernel)
[ "$ADAPTIVE" = 1 ] && extra_cfgs+=(adaptive)

# ra_params CONFIG: the front's ra-cache parameters for a configuration.
ra_params ()
{
  case "$1" in
    k:*)      [ "$ADAPTIVE" = 1 ] && echo ra-mode=kernel; echo "ra-max=${1#k:}" ;;
    kernel)   [ "$ADAPTIVE" = 1 ] && echo ra-mode=kernel; true ;;
    adaptive) echo ra-mode=adaptive ;;
  esac
}

cfg_label ()
{
  case "$1" in
    k:*) echo "kernel ra-max=${1#k:}" ;;
    *)   echo "$1" ;;
  esac
}

rate_label ()
{
  if [ "$1" = unlimited ]; then echo unlimited; else echo "rate=$1"; fi
}

# ---- one run -------------------------------------------------------------------
# runs[KEY]: one line per successful run:
#   MB/s client_bytes backend_bytes async_pages ahead_used ahead_wasted async_skipped
declare -A runs=() failed_key=()
failed=0
nruns=0
irun=0
t_all=$SECONDS

# backend_start DELAY RATE: the backend server of a cell.
backend_start ()
{
  local delay=$1 rate=$2
  local -a args=()
  [ "$rate" != unlimited ] && args+=(--filter=rate)
  args+=(--filter=delay memory "$BACKEND_SIZE" delay-read="${delay}ms")
  [ "$rate" != unlimited ] && args+=(rate="$rate" burstiness="$RATE_BURSTINESS")
  bench_start back "${args[@]}"
}

# run_one KEY LABEL CONFIG EXTRA-PARAMS -- RA-BENCH-ARGS...: a fresh front
# with the configuration's parameters (and EXTRA-PARAMS, one word), one
# ra-bench run of SECS seconds, the front stopped for its stats.
run_one ()
{
  local key=$1 label=$2 cfg=$3 extra=$4 t0=$SECONDS line
  shift 5
  local stats=$tmp/front.stats.json
  local -a params
  mapfile -t params < <(ra_params "$cfg")
  [ -n "$extra" ] && params+=("$extra")

  irun=$((irun + 1))
  printf '[%3d/%d] %-34s %-26s ' "$irun" "$nruns" "$label" "$(cfg_label "$cfg")" >&2
  if [ -n "${failed_key[$key]:-}" ]; then
    echo "skipped (failed before)" >&2
    return 0
  fi
  rm -f "$stats" "$tmp/rb.json"
  if ! bench_start front --filter="$FILTER" nbd socket="$(bench_sock back)" \
         "${params[@]}" ra-cache-stats="$stats"; then
    failed_key[$key]=1; failed=1
    echo "FAILED (front did not start)" >&2
    return 0
  fi
  if ! bench_client "$tmp/rb.json" timeout "$CLIENT_TIMEOUT" "$RA_BENCH" --json \
         -u "$(bench_uri front)" -t "$SECS" "$@" 2>"$tmp/rb.err"; then
    bench_stop front
    failed_key[$key]=1; failed=1
    echo "FAILED" >&2
    sed 's/^/    ra-bench: /' "$tmp/rb.err" >&2
    tail -n 20 "$tmp/front.log" | sed 's/^/    front: /' >&2
    return 0
  fi
  bench_stop front
  if ! line=$("$PYTHON" - "$tmp/rb.json" "$stats" <<'PY'
import json, sys
rb = json.load(open(sys.argv[1]))
st = json.load(open(sys.argv[2]))
print("%.6f %d %d %d %d %d %d %d %d" % (
    rb["bytes"] / rb["elapsed_s"] / 1e6, st["client_bytes"],
    st["backend_bytes"], st["async_pages"], st["ahead_used_pages"],
    st["ahead_wasted_pages"], st["async_skipped"],
    st.get("adapt_late", 0), st.get("adapt_last_cap_bytes", 0)))
PY
  ); then
    failed_key[$key]=1; failed=1
    echo "FAILED (no results: ra-bench output or stats file unreadable)" >&2
    tail -n 20 "$tmp/front.log" | sed 's/^/    front: /' >&2
    return 0
  fi
  runs[$key]+="$line"$'\n'
  [ -n "$RESULTS" ] &&
    printf '%s\t%s\t%s\n' "$key" "$(cfg_label "$cfg")${extra:+ $extra}" \
      "${line// /$'\t'}" >> "$RESULTS"
  read -r mb cb bb ap au aw sk late cap <<<"$line"
  printf '%7s MB/s  amp %s  skipped %s  async %s used %s wasted %s  late %s cap %s  %3ds\n' \
    "$(bench_mbps "$mb" 1e-6)" "$(bench_ratio "$bb" "$cb" 2)" "$sk" "$ap" "$au" \
    "$aw" "$late" "$((cap >> 10))K" $((SECONDS - t0)) >&2
  return 0
}

# median KEY: the median run of KEY by MB/s (the lower middle one for an
# even REPEAT), or nothing.
median ()
{
  [ -n "${runs[$1]:-}" ] || return 0
  printf '%s' "${runs[$1]}" | sort -g -k1,1 |
    awk '{ l[NR] = $0 } END { if (NR) print l[int((NR + 1) / 2)] }'
}

# ---- run -------------------------------------------------------------------------
nruns=$(( ${#cells[@]} * ${#rates[@]} * ${#seq_cfgs[@]} * REPEAT
          + ${#extras[@]} * ${#extra_cfgs[@]} * REPEAT ))
[ -n "$RESULTS" ] &&
  printf 'key\tconfig\tMB/s\tclient_bytes\tbackend_bytes\tasync_pages\tahead_used_pages\tahead_wasted_pages\tasync_skipped\tadapt_late\tadapt_last_cap_bytes\n' > "$RESULTS"
echo "adaptive.sh: $nruns runs of ${SECS} s, about $(awk -v n="$nruns" -v s="$SECS" \
  'BEGIN { printf "%.0f", n * (s + 0.6) / 60 + 0.5 }') minutes" >&2

for delay in "${cells[@]}"; do
  for rate in "${rates[@]}"; do
    label="seq 64K, ${delay} ms, $(rate_label "$rate")"
    if ! backend_start "$delay" "$rate"; then
      failed=1
      for cfg in "${seq_cfgs[@]}"; do failed_key[seq,$delay,$rate,$cfg]=1; done
      irun=$((irun + ${#seq_cfgs[@]} * REPEAT))
      continue
    fi
    # The repetitions alternate between the configurations, so that a
    # change in the machine's load spreads over all of them alike.
    for ((rep = 1; rep <= REPEAT; rep++)); do
      for cfg in "${seq_cfgs[@]}"; do
        run_one "seq,$delay,$rate,$cfg" "$label" "$cfg" "" -- -p seq -s 64K -d 1
      done
    done
    bench_stop_all
  done
done

if [ "${#extras[@]}" -gt 0 ]; then
  if ! backend_start "$EXTRA_DELAY" unlimited; then
    failed=1
    for e in "${extras[@]}"; do
      for cfg in "${extra_cfgs[@]}"; do failed_key[$e,$cfg]=1; done
    done
  else
    for e in "${extras[@]}"; do
      for ((rep = 1; rep <= REPEAT; rep++)); do
        for cfg in "${extra_cfgs[@]}"; do
          case "$e" in
            random)
              run_one "$e,$cfg" "random 4K, ${EXTRA_DELAY} ms" "$cfg" "" -- \
                -p random -s 4K -d 1 ;;
            interleaved)
              run_one "$e,$cfg" "64 streams/8 conns, ${EXTRA_DELAY} ms" "$cfg" \
                ra-cache-size=32M -- -p interleaved --streams 64 -c 8 -s 64K -d 1 ;;
          esac
        done
      done
    done
    bench_stop_all
  fi
fi

# ---- tables ----------------------------------------------------------------------
# print_table: rows on stdin, fields separated by tabs, the first row the
# header; aligned text (first column left, the others right) or Markdown.
print_table ()
{
  awk -F'\t' -v md="$MARKDOWN" '
    { n = NR; nf[n] = NF; for (i = 1; i <= NF; i++) { c[n, i] = $i; if (length($i) > w[i]) w[i] = length($i); if (NF > maxf) maxf = NF } }
    END {
      for (r = 1; r <= n; r++) {
        line = ""
        for (i = 1; i <= maxf; i++) {
          v = c[r, i]
          if (md) line = line "| " v " "
          else if (i == 1) line = sprintf("%-*s", w[i], v)
          else line = line sprintf("  %*s", w[i], v)
        }
        if (md) line = line "|"
        print line
        if (r == 1) {
          line = ""
          for (i = 1; i <= maxf; i++) {
            if (md) line = line (i == 1 ? "|---" : "|---:")
            else line = line (i == 1 ? "" : "  ") sprintf("%*s", w[i], "") 
          }
          if (md) line = line "|"
          else gsub(/ /, "-", line)
          print line
        }
      }
    }'
}

# title TEXT: a table's title.
title ()
{
  echo
  if [ "$MARKDOWN" = 1 ]; then echo "**$1**"; echo; else echo "$1"; fi
}

xratio ()
{
  local r
  r=$(bench_ratio "$1" "$2" 2)
  [ "$r" = n/a ] || r="${r}x"
  echo "$r"
}

# cellval KEY FIELD: a field of KEY's median run (1 MB/s, 2 client bytes,
# 3 backend bytes, 4 async_pages, 5 ahead_used, 6 ahead_wasted,
# 7 async_skipped), FAIL or n/a.
cellval ()
{
  local m
  if [ -n "${failed_key[$1]:-}" ] && [ -z "${runs[$1]:-}" ]; then echo FAIL; return; fi
  m=$(median "$1")
  [ -n "$m" ] || { echo n/a; return; }
  awk -v f="$2" '{ print $f }' <<<"$m"
}

echo
echo "ra-cache readahead modes: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $("$NBDKIT" --version)"
echo "filter: $FILTER"
echo "backend: nbdkit [--filter=rate] --filter=delay memory $BACKEND_SIZE delay-read=N ms [rate=R burstiness=$RATE_BURSTINESS]; front: nbdkit --filter=ra-cache nbd, fresh for every run; Unix sockets"
echo "each figure: the median of $REPEAT run(s) of ${SECS} s; MB/s = 10^6 bytes/s as ra-bench measured"
[ "$ADAPTIVE" = 1 ] || echo "ADAPTIVE=0: kernel mode only, no ra-mode parameter passed"

if [ "${#cells[@]}" -gt 0 ]; then
  title "Sequential 64 KiB reads, depth 1 (ra-bench -p seq -s 64K -d 1): MB/s"
  {
    hdr="backend"
    for m in "${sweep[@]}"; do hdr+=$'\t'"k $m"; done
    hdr+=$'\t'"best kernel"
    [ "$ADAPTIVE" = 1 ] && hdr+=$'\t'"adaptive"$'\t'"adaptive / best"$'\t'"adaptive / k 128K"
    echo "$hdr"
    for delay in "${cells[@]}"; do
      for rate in "${rates[@]}"; do
        row="${delay} ms, $(rate_label "$rate")"
        best='' bestm=''
        for m in "${sweep[@]}"; do
          v=$(cellval "seq,$delay,$rate,k:$m" 1)
          if [[ "$v" =~ ^[0-9.]+$ ]]; then
            row+=$'\t'"$(bench_mbps "$v" 1e-6)"
            if [ -z "$best" ] || awk -v a="$v" -v b="$best" 'BEGIN { exit !(a > b) }'; then
              best=$v bestm=$m
            fi
          else
            row+=$'\t'"$v"
          fi
        done
        if [ -n "$best" ]; then row+=$'\t'"$(bench_mbps "$best" 1e-6) ($bestm)"; else row+=$'\t'"n/a"; fi
        if [ "$ADAPTIVE" = 1 ]; then
          a=$(cellval "seq,$delay,$rate,adaptive" 1)
          k128=$(cellval "seq,$delay,$rate,k:128K" 1)
          if [[ "$a" =~ ^[0-9.]+$ ]]; then row+=$'\t'"$(bench_mbps "$a" 1e-6)"; else row+=$'\t'"$a"; fi
          row+=$'\t'"$(xratio "$a" "${best:-}")"$'\t'"$(xratio "$a" "$k128")"
        fi
        echo "$row"
      done
    done
  } | print_table

  title "The same runs: async_skipped / ahead_wasted_pages (async parts dropped for congestion / pages read ahead and evicted unused)"
  {
    hdr="backend"
    for m in "${sweep[@]}"; do hdr+=$'\t'"k $m"; done
    [ "$ADAPTIVE" = 1 ] && hdr+=$'\t'"adaptive"
    echo "$hdr"
    for delay in "${cells[@]}"; do
      for rate in "${rates[@]}"; do
        row="${delay} ms, $(rate_label "$rate")"
        for cfg in "${seq_cfgs[@]}"; do
          sk=$(cellval "seq,$delay,$rate,$cfg" 7)
          if [[ "$sk" =~ ^[0-9]+$ ]]; then
            row+=$'\t'"$sk / $(cellval "seq,$delay,$rate,$cfg" 6)"
          else
            row+=$'\t'"$sk"
          fi
        done
        echo "$row"
      done
    done
  } | print_table
fi

if [ "${#extras[@]}" -gt 0 ]; then
  title "Extra rows: ${EXTRA_DELAY} ms backend, no rate limit; kernel = ra-mode=kernel with the default ra-max (8M)"
  {
    hdr="workload"$'\t'"figure"$'\t'"kernel"
    [ "$ADAPTIVE" = 1 ] && hdr+=$'\t'"adaptive"$'\t'"adaptive / kernel"
    echo "$hdr"
    for e in "${extras[@]}"; do
      if [ "$e" = random ]; then
        name="random 4 KiB reads, depth 1"
        figs=("MB/s" "amplification (backend / client bytes)")
      else
        name="64 streams on 8 connections, 64 KiB, ra-cache-size=32M"
        figs=("MB/s" "waste (ahead_wasted / async_pages)" "ahead_used_pages")
      fi
      for fig in "${figs[@]}"; do
        row="$name"$'\t'"$fig"
        name=""
        vals=()
        for cfg in "${extra_cfgs[@]}"; do
          key="$e,$cfg"
          mb=$(cellval "$key" 1)
          if ! [[ "$mb" =~ ^[0-9.]+$ ]]; then vals+=("$mb"); continue; fi
          case "$fig" in
            MB/s) vals+=("$(bench_mbps "$mb" 1e-6)") ;;
            amp*) vals+=("$(bench_ratio "$(cellval "$key" 3)" "$(cellval "$key" 2)" 2)") ;;
            waste*) vals+=("$(bench_ratio "$(cellval "$key" 6)" "$(cellval "$key" 4)" 3)") ;;
            ahead_used*) vals+=("$(cellval "$key" 5)") ;;
          esac
        done
        for v in "${vals[@]}"; do row+=$'\t'"$v"; done
        if [ "$ADAPTIVE" = 1 ]; then
          row+=$'\t'"$(xratio "${vals[1]:-}" "${vals[0]:-}")"
        fi
        echo "$row"
      done
    done
  } | print_table
fi

echo
echo "total time: $((SECONDS - t_all)) s"
exit "$failed"
