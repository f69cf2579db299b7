#!/usr/bin/env bash
# bench/matrix.sh: the copy tools users run, at the distances they run
# them, in one table: ra-cache beside no filter, KubeVirt CDI's stack
# (--filter=readahead --filter=retry), readahead+cache and the ceiling.
#
#   bench/matrix.sh            # after ./run.sh demo or ./run.sh check built build/
#   QUICK=1 bench/matrix.sh    # a 3-minute subset
#
# Rows: TOOL x DISTANCE.  Tools (TOOLS):
#   convert-raw    qemu-img convert -n -f raw -O raw of the raw image, over
#                  a tmpfs file of the image's size made once (see client)
#   convert-qcow2  qemu-img convert -n -f qcow2 -O raw (over the same kept
#                  file) of a qcow2 image whose
#                  clusters lie out of guest order (written in shuffled
#                  1 MiB pieces, as an image written over time), 5/8 data
#   nbdcopy        nbdcopy URI null: with its defaults (up to 4 connections)
#   bench64k       qemu-img bench -s 64K -d 1, sequential, the first
#                  sixteenth of the image
#   bench1m        qemu-img bench -s 1M -d 1, sequential
#   bench256k4     qemu-img bench -s 256K -d 4, sequential, the first
#                  quarter of the image: a client of a few reads in
#                  flight, less than a link's BDP (not in the defaults:
#                  bench/RESULTS.md, "Covered clients", "A probe
#                  of the BDP" and "Covered but calm")
#   bench1m2       qemu-img bench -s 1M -d 2, sequential: a client two
#                  reads deep, covered at once (2 MiB in flight) but
#                  short of a link's BDP, which only the calm let-go
#                  serves (not in the defaults: bench/RESULTS.md, "A
#                  let-go client stays let go")
#   fio4           fio (nbd engine), 4 jobs each reading its own quarter
#                  of the first quarter of the image sequentially in
#                  128 KiB reads, depth 1
# Distances (DISTANCES), NAME:DELAY:RATE:SIZE (RATE "-" for none; SIZE
# the image's, and so the bytes each tool reads):
#   1ms:1ms:-:1G  10ms:10ms:-:256M  20ms-1G:20ms:1G:128M  50ms-100M:50ms:100M:16M
# Columns (CONFIGS): plain (no filter), readahead (CDI: --filter=readahead
# --filter=retry), readahead+cache (--filter=readahead --filter=cache),
# ra-cache (defaults, plus RA_CACHE_ARGS), ra-cache-base (FILTER_BASE, if
# named), ceiling (no filter, no delay; the same rate limit).
#
# Every cell on fresh servers, both on Unix sockets:
#   backend: nbdkit -r [--filter=rate rate=RATE burstiness=0.1]
#            --filter=delay file IMAGE rdelay=DELAY
#   front:   nbdkit [FILTERS] nbd socket=backend.sock   (under bench/rusage)
# Each cell is the median of REPEAT runs (configurations alternated
# within each repetition, in an order shuffled in each, run_order); a
# run's figures: the client's seconds (the whole command), the front's
# CPU seconds (user + system), its minor page faults and its peak
# resident set (a fresh server's first touch of
# memory is dear here: bench/RESULTS.md, "CPU to the millisecond").  The
# table gives, per row, each column's seconds, then ra-cache against the
# better of plain and readahead (above 1: faster), ra-cache's share of
# the ceiling (ceiling s / ra-cache s), and the front's CPU per byte,
# minor faults and peak RSS against plain's (each figure the median of
# its own runs: a run's CPU varies apart from its seconds).
#
# Environment (defaults in brackets):
#   QUICK               1: TOOLS="convert-qcow2 nbdcopy bench1m",
#                       DISTANCES="1ms:1ms:-:512M 20ms-1G:20ms:1G:96M",
#                       REPEAT=1
#   TOOLS, DISTANCES, CONFIGS ["plain readahead readahead+cache ra-cache ceiling"]
#   REPEAT [3]
#   FILTER [build/plugins/ra-cache/.libs/nbdkit-ra-cache-filter.so]
#   FILTER_BASE []      the filter of ra-cache-base
#   RA_CACHE_ARGS []    extra ra-cache parameters (both ra-cache columns)
#   RA_CACHE_BASE_ARGS  if set, ra-cache-base's instead of RA_CACHE_ARGS
#                       (FILTER_BASE may then be FILTER: one build, two
#                       settings)
#   IMAGE_DIR [${XDG_CACHE_HOME:-~/.cache}/ra-cache-bench]   images, made once
#   OUT_DIR [/dev/shm]  where qemu-img convert writes (tmpfs; the target,
#                       made once per size, is kept for all runs)
#   RESULTS []          also write every run as TSV
#   CLIENT_TIMEOUT [300]
#
# About 18 minutes with the defaults on 2 cores.  Exit status 0, or 1 if
# a run failed (its front server's log is shown).

set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(dirname "$here")
# shellcheck source=bench/lib.sh
. "$here/lib.sh"

bench_args "$@"

if [ "${QUICK:-}" = 1 ]; then
  : "${TOOLS:=convert-qcow2 nbdcopy bench1m}"
  : "${DISTANCES:=1ms:1ms:-:512M 20ms-1G:20ms:1G:96M}"
  : "${REPEAT:=1}"
fi
: "${TOOLS:=convert-raw convert-qcow2 nbdcopy bench64k bench1m fio4}"
: "${DISTANCES:=1ms:1ms:-:1G 10ms:10ms:-:256M 20ms-1G:20ms:1G:128M 50ms-100M:50ms:100M:16M}"
: "${CONFIGS:=plain readahead readahead+cache ra-cache ceiling}"
: "${REPEAT:=3}"
: "${FILTER:=$top/build/plugins/ra-cache/.libs/nbdkit-ra-cache-filter.so}"
: "${FILTER_BASE:=}"
: "${RA_CACHE_ARGS:=}"
: "${IMAGE_DIR:=${XDG_CACHE_HOME:-$HOME/.cache}/ra-cache-bench}"
: "${OUT_DIR:=/dev/shm}"
: "${RESULTS:=}"
: "${PYTHON:=/usr/bin/python3}"

[[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || bench_die "REPEAT must be a positive integer"
read -r -a ra_cache_args <<<"$RA_CACHE_ARGS"
if [ -n "${RA_CACHE_BASE_ARGS+set}" ]; then
  read -r -a ra_cache_base_args <<<"$RA_CACHE_BASE_ARGS"
fi
for c in "$NBDKIT" qemu-img qemu-io nbdcopy fio timeout awk "$PYTHON"; do
  command -v "$c" >/dev/null 2>&1 || bench_die "$c is not installed (./run.sh demo installs everything)"
done
bench_check_rusage
fio --enghelp=nbd >/dev/null 2>&1 || bench_die "this fio has no nbd engine (ioengine=nbd)"
for f in delay rate readahead retry cache; do
  "$NBDKIT" --filter="$f" null --dump-plugin >/dev/null 2>&1 ||
    bench_die "nbdkit cannot load its $f filter"
done
[ -f "$FILTER" ] || bench_die "$FILTER is not built (./run.sh demo builds it)"
for c in $CONFIGS; do
  case "$c" in
    plain|readahead|readahead+cache|ra-cache|ceiling) ;;
    ra-cache-base) [ -f "$FILTER_BASE" ] ||
      bench_die "ra-cache-base needs FILTER_BASE (a built filter .so)" ;;
    *) bench_die "unknown configuration $c" ;;
  esac
done
for t in $TOOLS; do
  case "$t" in
    convert-raw|convert-qcow2|nbdcopy|bench64k|bench1m|bench1m2|bench256k4|fio4) ;;
    *) bench_die "unknown tool $t" ;;
  esac
done

bench_traps
bench_outdir "$OUT_DIR" matrix
outdir=$bench_outdir
mkdir -p "$IMAGE_DIR"

# ---- images (made once per size; fixed seeds: a change here changes "v1") --
# raw_image SIZE: a raw image of random data.
raw_image ()
{
  local f=$IMAGE_DIR/matrix-$1-v1.raw bytes
  if [ ! -f "$f" ]; then
    bytes=$(bench_size_bytes "$1")
    echo "matrix.sh: making $f (once)" >&2
    "$PYTHON" - "$f.tmp$$" "$bytes" <<'EOF'
import random, sys
path, size = sys.argv[1], int(sys.argv[2])
rng = random.Random(7)
with open(path, "wb") as f:
    for _ in range(size >> 20):
        f.write(rng.randbytes(1 << 20))
EOF
    mv "$f.tmp$$" "$f"
  fi
  echo "$f"
}

# qcow2_image SIZE: a qcow2 image of SIZE virtual, 5/8 of it data written
# in shuffled 1 MiB pieces (so its clusters lie out of guest order).
qcow2_image ()
{
  local f=$IMAGE_DIR/matrix-$1-v1.qcow2 bytes
  if [ ! -f "$f" ]; then
    bytes=$(bench_size_bytes "$1")
    echo "matrix.sh: making $f (once)" >&2
    qemu-img create -q -f qcow2 "$f.tmp$$" "$bytes"
    "$PYTHON" - "$bytes" > "$outdir/qemu-io.cmds" <<'EOF'
import random, sys
mib = 1 << 20
n = int(sys.argv[1]) // mib
rng = random.Random(11)
pieces = [i for i in range(n) if rng.random() < 0.625]
rng.shuffle(pieces)
for i in pieces:
    print("write -q -P %d %d %d" % (1 + i % 250, i * mib, mib))
EOF
    timeout "$CLIENT_TIMEOUT" qemu-io -f qcow2 "$f.tmp$$" < "$outdir/qemu-io.cmds" \
      > /dev/null || bench_die "cannot make $f"
    mv "$f.tmp$$" "$f"
  fi
  echo "$f"
}

# ---- the clients: each prints its seconds --------------------------------------
elapsed ()
{
  local t0=$EPOCHREALTIME
  "$@" >&2 || return 1
  awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f\n", b - a }'
}

# tool_bytes TOOL BYTES: what TOOL reads of an image of BYTES: the copy
# tools all of it, the small-read clients a part (qemu-img bench 64K a
# sixteenth, 256K at depth 4 and fio a quarter), so that the slow
# columns stay short.
tool_bytes ()
{
  case "$1" in
    bench64k) echo $(($2 / 16)) ;;
    bench256k4|fio4) echo $(($2 / 4)) ;;
    *) echo "$2" ;;
  esac
}

# convert_target BYTES: the file qemu-img convert -n writes over, made
# (allocated) once per size and kept: a new tmpfs file in every run
# charged the client with the first touch of its memory (about 2.6 ms per
# MiB here), and a run of convert-raw at 1 ms spread from 0.85 to 2.2 s
# in every configuration; over a kept file, 0.65-0.76 s.
convert_target ()
{
  local out=$outdir/out-$1.raw
  if [ ! -f "$out" ]; then
    rm -f "$outdir"/out-*.raw
    fallocate -l "$1" "$out" || bench_die "cannot allocate $1 bytes in $outdir"
  fi
  echo "$out"
}

client ()
{
  local tool=$1 uri=$2 bytes=$3
  case "$tool" in
    convert-raw)
      elapsed timeout "$CLIENT_TIMEOUT" qemu-img convert -n -f raw -O raw \
        "$uri" "$(convert_target "$bytes")" ;;
    convert-qcow2)
      elapsed timeout "$CLIENT_TIMEOUT" qemu-img convert -n -f qcow2 -O raw \
        "$uri" "$(convert_target "$bytes")" ;;
    nbdcopy)
      elapsed timeout "$CLIENT_TIMEOUT" nbdcopy "$uri" null: ;;
    bench64k)
      bench_qemu_img "$uri" 65536 $((bytes / 65536)) 1 ;;
    bench1m)
      bench_qemu_img "$uri" 1048576 $((bytes / 1048576)) 1 ;;
    bench1m2)
      bench_qemu_img "$uri" 1048576 $((bytes / 1048576)) 2 ;;
    bench256k4)
      bench_qemu_img "$uri" 262144 $((bytes / 262144)) 4 ;;
    fio4)
      elapsed timeout "$CLIENT_TIMEOUT" fio --name=matrix --ioengine=nbd \
        --uri="$uri" --rw=read --bs=128k --iodepth=1 --numjobs=4 \
        --size=$((bytes / 4)) --offset_increment=$((bytes / 4)) \
        --group_reporting --output=/dev/null ;;
  esac
}

# run_order REP ROW: CONFIGS in the order of repetition REP of ROW,
# shuffled (the seed is the repetition and the row, so a run can be
# repeated).  A run can leave the machine slower or faster for the next
# (the memory it freed, the host's page cache), and where a run sits
# moved nbdcopy at 1 ms by 5% or more, more than the filter did
# (bench/RESULTS.md, "nbdcopy at 1 ms, the order of runs, and the fixed
# cost at 50 ms"), so no column always follows the same one, the first
# repetition included (in CONFIGS' order, ra-cache always ran after
# readahead+cache there).
run_order ()
{
  local -a order
  local i j t
  read -r -a order <<<"$CONFIGS"
  RANDOM=$(( $1 * 7919 + $(printf '%s' "$2" | cksum | cut -d' ' -f1) % 7919 ))
  for ((i = ${#order[@]} - 1; i > 0; i--)); do
    j=$((RANDOM % (i + 1)))
    t=${order[i]}; order[i]=${order[j]}; order[j]=$t
  done
  echo "${order[*]}"
}

# ---- one run -----------------------------------------------------------------
declare -A runs=()
failed=0

# run_once TOOL DIST CONFIG IMAGE BYTES DELAY RATE REP
run_once ()
{
  local tool=$1 dist=$2 c=$3 image=$4 bytes=$5 delay=$6 rate=$7 rep=$8
  local secs cpu minflt maxrss
  [ "$c" = ceiling ] && delay=0
  bench_stack_args "$c" "$image" "$delay" "$rate"
  if ! bench_start back "${bench_back[@]}" ||
     ! bench_start_timed front "${bench_front[@]}"; then
    bench_stop_all
    failed=1
    return 1
  fi
  if ! bench_client "$bench_tmpdir/result" client "$tool" "$(bench_uri front)" "$bytes"; then
    bench_stop_all
    echo "matrix.sh: $tool $dist $c FAILED; front server log:" >&2
    tail -n 20 "$bench_tmpdir/front.log" | sed 's/^/    /' >&2
    failed=1
    return 1
  fi
  bench_stop front
  bench_stop back
  read -r cpu minflt _ maxrss < <(bench_rusage front)
  secs=$(cat "$bench_tmpdir/result")
  runs["$tool $dist $c"]+="$secs $cpu $minflt $maxrss"$'\n'
  printf '%-14s %-10s %-16s %8s s %6s CPU s %7s faults %7s KiB\n' \
    "$tool" "$dist" "$c" "$secs" "$cpu" "$minflt" "$maxrss" >&2
  [ -n "$RESULTS" ] &&
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$tool" "$dist" "$c" "$rep" \
      "$secs" "$cpu" "$minflt" "$maxrss" >> "$RESULTS"
  return 0
}

[ -n "$RESULTS" ] &&
  printf 'tool\tdistance\tconfig\trun\tseconds\tfront_cpu_s\tfront_minor_faults\tfront_max_rss_kib\n' > "$RESULTS"
t_all=$SECONDS
for d in $DISTANCES; do
  IFS=: read -r dname delay rate size <<<"$d"
  bytes=$(bench_size_bytes "$size")
  for tool in $TOOLS; do
    if [ "$tool" = convert-qcow2 ]; then image=$(qcow2_image "$size")
    else image=$(raw_image "$size"); fi
    # In the host's page cache before the first run, as for the others.
    cat "$image" > /dev/null
    for ((rep = 1; rep <= REPEAT; rep++)); do
      for c in $(run_order "$rep" "$tool $dname"); do
        run_once "$tool" "$dname" "$c" "$image" "$(tool_bytes "$tool" "$bytes")" \
          "$delay" "$rate" "$rep" || true
      done
    done
  done
done

# ---- the table ---------------------------------------------------------------
# median KEY: the median of each figure of KEY's runs (seconds, CPU s,
# faults, RSS), each over its own runs.
median ()
{
  local f out=
  [ -n "${runs[$1]:-}" ] || return 0
  for f in 1 2 3 4; do
    out+=" $(printf '%s' "${runs[$1]}" | bench_median_line "$f" | awk -v f="$f" '{ print $f }')"
  done
  echo "${out# }"
}

echo
echo "Copy tools x distances: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $("$NBDKIT" --version), $(qemu-img --version | head -n 1), nbdcopy $(nbdcopy --version | head -n 1 | awk '{print $2}')"
echo "backend: nbdkit -r [--filter=rate rate=RATE burstiness=0.1] --filter=delay file IMAGE rdelay=DELAY; front: nbdkit [FILTERS] nbd; Unix sockets, fresh servers per run"
echo "ra-cache: $FILTER${RA_CACHE_ARGS:+ $RA_CACHE_ARGS}${FILTER_BASE:+; ra-cache-base: $FILTER_BASE}${RA_CACHE_BASE_ARGS+ ($RA_CACHE_BASE_ARGS)}"
echo "seconds: median of $REPEAT; vs best: the better of plain and readahead / ra-cache (above 1: faster); of ceiling: ceiling s / ra-cache s; CPU, faults, RSS: the front's CPU s, minor faults and peak RSS, ra-cache / plain; every figure the median of its own runs"
echo
hdr="| tool | distance |"
sep="|---|---|"
for c in $CONFIGS; do hdr+=" $c s |"; sep+="---:|"; done
echo "$hdr ra-cache vs best | ra-cache of ceiling | CPU ra-cache / plain | faults ra-cache / plain | RSS ra-cache / plain |"
echo "$sep---:|---:|---:|---:|---:|"
for d in $DISTANCES; do
  IFS=: read -r dname _ _ _ <<<"$d"
  for tool in $TOOLS; do
    row="| $tool | $dname |"
    declare -A s=() cpu=() flt=() rss=()
    for c in $CONFIGS; do
      m=$(median "$tool $dname $c")
      if [ -n "$m" ]; then
        read -r s[$c] cpu[$c] flt[$c] rss[$c] <<<"$m"
        row+=" ${s[$c]} |"
      else row+=" FAIL |"; fi
    done
    best=
    for c in plain readahead; do
      [ -n "${s[$c]:-}" ] || continue
      if [ -z "$best" ] || awk -v a="${s[$c]}" -v b="$best" 'BEGIN { exit !(a < b) }'; then
        best=${s[$c]}
      fi
    done
    row+=" $(bench_ratio "${best:-}" "${s[ra-cache]:-}" 2) |"
    row+=" $(bench_ratio "${s[ceiling]:-}" "${s[ra-cache]:-}" 2) |"
    row+=" $(bench_ratio "${cpu[ra-cache]:-}" "${cpu[plain]:-}" 2) |"
    row+=" $(bench_ratio "${flt[ra-cache]:-}" "${flt[plain]:-}" 2) |"
    row+=" $(bench_ratio "${rss[ra-cache]:-}" "${rss[plain]:-}" 2) |"
    echo "$row"
    unset s cpu flt rss
  done
done
echo
echo "matrix.sh: $((SECONDS - t_all)) s"
exit "$failed"
