#!/usr/bin/env bash
# bench/convert.sh: qemu-img convert of a qcow2 image through the front,
# ra-cache side by side with no filter and nbdkit's readahead+cache.
#
#   bench/convert.sh          # after ./run.sh demo or ./run.sh check built build/
#
# The image: qcow2, IMAGE_SIZE (512M) virtual, its first eighth data and
# the rest 1 MiB-aligned runs of data (1-8 MiB) and holes (1-6 MiB), about
# 310 MiB of pseudo-random data in all (fixed seed); made once with
# qemu-img convert from a sparse raw file and kept in IMAGE_DIR, so that
# later runs reuse it.  For every run, two fresh nbdkit servers on Unix
# sockets in a private temporary directory:
#
#   backend:  nbdkit -r --filter=stats --filter=delay file IMAGE rdelay=RDELAY
#   front:    nbdkit [FILTERS] nbd socket=backend.sock      (under bench/rusage)
#
# and the client, timed by this script (wall clock, the whole command):
#
#   qemu-img convert -f qcow2 -O raw nbd+unix:///?socket=front.sock OUT
#
# with OUT in OUT_DIR (a directory made in /dev/shm, tmpfs), deleted after
# every run.  qemu-img reads the qcow2 metadata, then only the allocated
# clusters, 8 requests in flight (its default -m 8).  Configurations
# (rows):
#
#   plain            rdelay=RDELAY, front without a filter
#   readahead+cache  front with --filter=readahead --filter=cache
#   ra-cache         front with --filter=FILTER, defaults (plus RA_CACHE_ARGS)
#   ra-cache-ra0     the same with ra-max=0: the cache without readahead
#   ra-cache-base    (only if named in CONFIGS) --filter=FILTER_BASE,
#                    defaults (plus RA_CACHE_ARGS): another build, e.g.
#                    main's, to measure a change before and after in one
#                    run, cells alternated
#   ceiling          rdelay=0, front without a filter: the no-latency limit
#
# Figures, of the median run by seconds: seconds; speed-up against plain
# (plain seconds / seconds: above 1 is faster); the front nbdkit's own CPU
# seconds (user + system) and minor page faults (bench/rusage: the rusage of
# the whole life of the server); MiB the backend served (its stats
# filter; the front is stopped first, so background reads count).
#
# Environment (defaults in brackets):
#   RDELAY [1ms]          backend read delay (not for "ceiling", which is 0)
#   FILTER [build/plugins/ra-cache/.libs/nbdkit-ra-cache-filter.so]
#   FILTER_BASE []        the filter of ra-cache-base
#   RA_CACHE_ARGS []      extra ra-cache parameters (both ra-cache rows)
#   CONFIGS ["plain readahead+cache ra-cache ra-cache-ra0 ceiling"]
#   REPEAT [3]            runs per configuration, alternating between them
#   IMAGE_SIZE [512M]     virtual size of the image (its data scales with it)
#   IMAGE_DIR [${XDG_CACHE_HOME:-~/.cache}/ra-cache-bench]
#                         where the image is made once and then reused
#   OUT_DIR [/dev/shm]    where the output directory is made (tmpfs!)
#   VERIFY [1]            1: qemu-img compare the output with the image
#                         in the first run of every configuration
#   RESULTS [none]        also write every run's raw figures as TSV
#   CLIENT_TIMEOUT [300]  seconds before the client counts as hung
#   PYTHON [/usr/bin/python3]
#   BENCH_KEEP_TMP        set to keep the temporary directory (logs, stats)
#
# About 2 minutes with the defaults on 2 cores (15 runs).
# Exit status: 0, or 1 if any run failed (its server log is shown).

set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(dirname "$here")
# shellcheck source=bench/lib.sh
. "$here/lib.sh"

: "${RDELAY:=1ms}"
: "${FILTER:=$top/build/plugins/ra-cache/.libs/nbdkit-ra-cache-filter.so}"
: "${FILTER_BASE:=}"
: "${RA_CACHE_ARGS:=}"
: "${CONFIGS:=plain readahead+cache ra-cache ra-cache-ra0 ceiling}"
: "${REPEAT:=3}"
: "${IMAGE_SIZE:=512M}"
: "${IMAGE_DIR:=${XDG_CACHE_HOME:-$HOME/.cache}/ra-cache-bench}"
: "${OUT_DIR:=/dev/shm}"
: "${VERIFY:=1}"
: "${RESULTS:=}"
: "${PYTHON:=/usr/bin/python3}"

bench_args "$@"

[[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || bench_die "REPEAT must be a positive integer"
read -r -a ra_cache_args <<<"$RA_CACHE_ARGS"
image_bytes=$(bench_size_bytes "$IMAGE_SIZE") || bench_die "bad IMAGE_SIZE"
(( image_bytes >= 16 * 1048576 && image_bytes % 1048576 == 0 )) ||
  bench_die "IMAGE_SIZE must be a whole number of MiB, 16M at least"

for c in "$NBDKIT" qemu-img timeout awk "$PYTHON"; do
  command -v "$c" >/dev/null 2>&1 || bench_die "$c is not installed (./run.sh demo installs everything)"
done
bench_check_rusage
for f in stats delay readahead cache; do
  "$NBDKIT" --filter="$f" null --dump-plugin >/dev/null 2>&1 ||
    bench_die "nbdkit cannot load its $f filter"
done
"$NBDKIT" file --dump-plugin >/dev/null 2>&1 || bench_die "nbdkit has no file plugin"
have_filter=yes
if [ ! -f "$FILTER" ]; then
  have_filter=no
  echo "convert.sh: $FILTER is not built: the ra-cache rows will say n/a" >&2
fi
for c in $CONFIGS; do
  case "$c" in
    plain|readahead+cache|ra-cache|ra-cache-ra0|ceiling) ;;
    ra-cache-base) [ -f "$FILTER_BASE" ] ||
      bench_die "ra-cache-base needs FILTER_BASE (a built filter .so)" ;;
    *) bench_die "unknown configuration $c" ;;
  esac
done

bench_traps
bench_outdir "$OUT_DIR" convert
outdir=$bench_outdir

# ---- the image (made once) ---------------------------------------------------
# The layout and the data are a function of IMAGE_SIZE alone (fixed seed):
# a change here must change the name ("v1").
image=$IMAGE_DIR/convert-$IMAGE_SIZE-v1.qcow2
if [ ! -f "$image" ]; then
  mkdir -p "$IMAGE_DIR"
  echo "convert.sh: making $image (once)" >&2
  raw=$outdir/image.raw
  "$PYTHON" - "$raw" "$image_bytes" <<'EOF'
import random, sys
path, size = sys.argv[1], int(sys.argv[2])
mib = 1 << 20
rng = random.Random(13)
with open(path, "wb") as f:
    f.truncate(size)
    # The first eighth data (a boot area, tables), then runs of data and
    # holes.
    extents = [(0, size // 8 // mib)]
    pos = size // 8 // mib
    data = False
    while pos < size // mib:
        n = rng.randint(1, 8 if data else 6)
        n = min(n, size // mib - pos)
        if data:
            extents.append((pos, n))
        pos += n
        data = not data
    for start, n in extents:
        f.seek(start * mib)
        f.write(rng.randbytes(n * mib))
EOF
  timeout "$CLIENT_TIMEOUT" qemu-img convert -f raw -O qcow2 "$raw" "$image.tmp$$" ||
    { rm -f "$image.tmp$$"; bench_die "cannot make $image"; }
  rm -f "$raw"
  mv "$image.tmp$$" "$image"
fi
# The allocated data, from qemu-img map (and a check that it is there).
data_bytes=$(qemu-img map -f qcow2 --output=json "$image" | "$PYTHON" -c '
import json, sys
print(sum(e["length"] for e in json.load(sys.stdin) if e["data"]))') ||
  bench_die "cannot read the map of $image"
(( data_bytes > 0 )) || bench_die "$image holds no data: delete it to make it again"
image_file_bytes=$(stat -c %s "$image")

# ---- one run -------------------------------------------------------------------
declare -A runs=() cell=()
failed=0

# convert_once URI OUT: the seconds qemu-img convert took.
convert_once ()
{
  local uri=$1 out=$2 t0 t1
  t0=$EPOCHREALTIME
  timeout "$CLIENT_TIMEOUT" qemu-img convert -f qcow2 -O raw "$uri" "$out" >&2 ||
    { echo "qemu-img convert failed on $uri" >&2; return 1; }
  t1=$EPOCHREALTIME
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", b - a }'
}

# run_once CONFIG REP
run_once ()
{
  local c=$1 rep=$2 delay=$RDELAY stats=$bench_tmpdir/back.stats
  local out=$outdir/out.raw secs back_bytes cpu minflt majflt maxrss
  local -a front=()
  [ "$c" = ceiling ] && delay=0
  case "$c" in
    readahead+cache) front=(--filter=readahead --filter=cache) ;;
    ra-cache|ra-cache-ra0) front=(--filter="$FILTER") ;;
    ra-cache-base) front=(--filter="$FILTER_BASE") ;;
  esac
  front+=(nbd socket="$(bench_sock back)")
  [ "$c" = ra-cache-ra0 ] && front+=(ra-max=0)
  [[ "$c" = ra-cache* ]] && front+=("${ra_cache_args[@]}")

  rm -f "$stats" "$out" "$bench_tmpdir"/*.log "$bench_tmpdir/front.rusage"
  if ! bench_start back -r --filter=stats --filter=delay file "$image" \
         rdelay="$delay" statsfile="$stats" statsappend=false ||
     ! bench_start_timed front "${front[@]}"; then
    bench_stop_all
    cell[$c]=FAIL; failed=1
    return 0
  fi
  if ! bench_client "$bench_tmpdir/result" convert_once "$(bench_uri front)" "$out"; then
    bench_stop_all
    echo "convert.sh: $c FAILED; front server log:" >&2
    tail -n 30 "$bench_tmpdir/front.log" | sed 's/^/    /' >&2
    rm -f "$out"
    cell[$c]=FAIL; failed=1
    return 0
  fi
  if [ "$VERIFY" = 1 ] && [ "$rep" = 1 ] &&
     ! timeout "$CLIENT_TIMEOUT" qemu-img compare -q -f qcow2 -F raw "$image" "$out"; then
    bench_stop_all
    echo "convert.sh: $c: the output DIFFERS from the image" >&2
    rm -f "$out"
    cell[$c]=FAIL; failed=1
    return 0
  fi
  rm -f "$out"
  bench_stop front
  bench_stop back
  read -r cpu minflt majflt maxrss < <(bench_rusage front)
  secs=$(cat "$bench_tmpdir/result")
  back_bytes=$(bench_stats_read_bytes "$stats")
  runs[$c]+="$secs $cpu $minflt $back_bytes"$'\n'
  printf '%-16s %8s s %6s CPU s %8s flt  backend %s MiB' "$c" "$secs" "$cpu" \
    "$minflt" "$(awk -v b="$back_bytes" 'BEGIN { printf "%.0f", b / 1048576 }')" >&2
  [ -n "$RESULTS" ] &&
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$c" "$rep" "$secs" "$back_bytes" \
      "$cpu" "$minflt" "$majflt" "$maxrss" >> "$RESULTS"
  return 0
}

# ---- run -----------------------------------------------------------------------
[ -n "$RESULTS" ] &&
  printf 'config\trun\tseconds\tbackend_bytes\tfront_cpu_s\tfront_minflt\tfront_majflt\tfront_maxrss_kib\n' > "$RESULTS"
nconf=$(wc -w <<<"$CONFIGS")
i=0
t_all=$SECONDS
for ((rep = 1; rep <= REPEAT; rep++)); do
  for c in $CONFIGS; do
    i=$((i + 1))
    if [[ "$c" = ra-cache* ]] && [ "$have_filter" = no ]; then
      cell[$c]=n/a; continue
    fi
    [ "${cell[$c]:-}" = FAIL ] && continue
    t0=$SECONDS
    printf '[%3d/%d] run %d: ' "$i" $((nconf * REPEAT)) "$rep" >&2
    run_once "$c" "$rep"
    if [ "${cell[$c]:-}" = FAIL ]; then
      echo "$c: FAILED" >&2
    else
      printf ' %3ds\n' $((SECONDS - t0)) >&2
    fi
  done
done

declare -A med=()
for c in $CONFIGS; do
  [ -n "${cell[$c]:-}" ] && continue
  [ -n "${runs[$c]:-}" ] || { cell[$c]=n/a; continue; }
  med[$c]=$(printf '%s' "${runs[$c]}" | bench_median_line 1)
done

mib ()
{
  awk -v b="$1" 'BEGIN { printf "%.0f\n", b / 1048576 }'
}

echo
echo "qemu-img convert benchmark: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $("$NBDKIT" --version), $(qemu-img --version | head -n 1)"
echo "image: $image: qcow2, $IMAGE_SIZE virtual, $(mib "$data_bytes") MiB of data, file $(mib "$image_file_bytes") MiB"
echo "backend: nbdkit -r --filter=stats --filter=delay file IMAGE rdelay=$RDELAY (ceiling: rdelay=0); front: nbdkit [filters] nbd, Unix sockets"
echo "client: qemu-img convert -f qcow2 -O raw nbd+unix:///?socket=FRONT $OUT_DIR/.../out.raw"
echo "ra-cache: $FILTER${RA_CACHE_ARGS:+ $RA_CACHE_ARGS}$([ "$have_filter" = no ] && echo ' (NOT BUILT)')"
[ -n "$FILTER_BASE" ] && echo "ra-cache-base: $FILTER_BASE"
echo "median of $REPEAT run(s) by seconds, fresh servers each; front CPU s (user + system) and minor faults from the front nbdkit's own rusage"
echo
echo "| configuration | front filters | seconds | plain s / s | front CPU s | front minor faults | backend MiB read |"
echo "|---|---|---:|---:|---:|---:|---:|"
declare -A fdesc=(
  [plain]="none" [readahead+cache]="readahead, cache" [ra-cache]="ra-cache"
  [ra-cache-ra0]="ra-cache ra-max=0" [ceiling]="none (rdelay=0)"
  [ra-cache-base]="ra-cache (FILTER_BASE)"
)
plain_s=
[ -n "${med[plain]:-}" ] && read -r plain_s _ <<<"${med[plain]}"
for c in $CONFIGS; do
  if [ -n "${med[$c]:-}" ]; then
    read -r secs cpu minflt back_bytes <<<"${med[$c]}"
    r=$(bench_ratio "$plain_s" "$secs" 2)
    [ "$r" = n/a ] || r="${r}x"
    echo "| $c | ${fdesc[$c]}${RA_CACHE_ARGS:+$([[ "$c" = ra-cache* ]] && echo " $RA_CACHE_ARGS")} | $secs | $r | $cpu | $minflt | $(mib "$back_bytes") |"
  else
    echo "| $c | ${fdesc[$c]} | ${cell[$c]} | | | | |"
  fi
done
echo
echo "total time: $((SECONDS - t_all)) s"
exit "$failed"
