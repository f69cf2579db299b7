#!/usr/bin/env bash
# bench/servers.sh: ra-cache in front of real servers that are not nbdkit:
# nbd-server with a named export, and an HTTP server read with
# nbdkit-curl-plugin.
#
#   bench/servers.sh          # after ./run.sh demo or ./run.sh check built build/
#
# The disk: DISK_SIZE (256M) of pseudo-random data, made once in IMAGE_DIR.
# For every run, fresh servers in a private temporary directory:
#
#   nbd-server row:  nbd-server -C CONF (export [EXPORT] = the disk,
#                    read-only, on a Unix socket; no default export)
#                    front: nbdkit [FILTERS] --filter=delay nbd socket=S
#                           export=EXPORT rdelay=NBD_RDELAY
#   curl row:        lighttpd -D -f CONF (document root with the disk as
#                    disk.img, on 127.0.0.1, a free port)
#                    front: nbdkit [FILTERS] --filter=delay curl
#                           url=http://127.0.0.1:PORT/disk.img rdelay=CURL_RDELAY
#
# nbd-server and lighttpd have no delay of their own: the delay filter
# sits in the front, under the filters compared, so that their reads
# (background ones included) wait as they would for a distant server.
# The front runs under bench/rusage for its own rusage.  Configurations
# (columns):
#
#   plain            no filter (only the delay)
#   readahead+cache  --filter=readahead --filter=cache
#   ra-cache         --filter=FILTER, defaults (plus RA_CACHE_ARGS)
#   ra-cache-base    (only if named in CONFIGS) --filter=FILTER_BASE,
#                    defaults (plus RA_CACHE_ARGS): another build, e.g.
#                    main's, to measure a change before and after in one run
#   ceiling          (only if named in CONFIGS) no filter, no delay
#
# The client: qemu-img bench sequential 64 KiB reads at depth 1 from offset
# 0, COUNT (2048: 128 MiB) requests.  Cells, of the median run by MB/s:
# MB/s (10^6 bytes/s as qemu-img saw it), and in a second table CPU s per
# GiB read (the front nbdkit's CPU s, user + system; its minor faults).
#
# Environment (defaults in brackets):
#   NBD_RDELAY [1ms]      delay of the nbd-server row
#   CURL_RDELAY [2ms]     delay of the curl row
#   EXPORT [bench]        the nbd-server export name
#   ROWS ["nbd-server curl"]
#   CONFIGS ["plain readahead+cache ra-cache"]   may add ra-cache-base, ceiling
#   FILTER [build/plugins/ra-cache/.libs/nbdkit-ra-cache-filter.so]
#   FILTER_BASE []        the filter of ra-cache-base
#   RA_CACHE_ARGS []      extra ra-cache parameters
#   COUNT [2048]          qemu-img bench requests (capped to DISK_SIZE)
#   DISK_SIZE [256M]      the disk
#   IMAGE_DIR [${XDG_CACHE_HOME:-~/.cache}/ra-cache-bench]
#   REPEAT [3]            runs per cell, alternating between the columns
#   RESULTS [none]        also write every run's raw figures as TSV
#   CLIENT_TIMEOUT [300]  seconds before the client counts as hung
#   BENCH_KEEP_TMP        set to keep the temporary directory (logs, configs)
#
# About 1 minute with the defaults on 2 cores (18 runs).
# Exit status: 0, or 1 if any run failed (its server log is shown).

set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(dirname "$here")
# shellcheck source=bench/lib.sh
. "$here/lib.sh"

: "${NBD_RDELAY:=1ms}"
: "${CURL_RDELAY:=2ms}"
: "${EXPORT:=bench}"
: "${ROWS:=nbd-server curl}"
: "${CONFIGS:=plain readahead+cache ra-cache}"
: "${FILTER:=$top/build/plugins/ra-cache/.libs/nbdkit-ra-cache-filter.so}"
: "${FILTER_BASE:=}"
: "${RA_CACHE_ARGS:=}"
: "${COUNT:=2048}"
: "${DISK_SIZE:=256M}"
: "${IMAGE_DIR:=${XDG_CACHE_HOME:-$HOME/.cache}/ra-cache-bench}"
: "${REPEAT:=3}"
: "${RESULTS:=}"

bench_args "$@"

[[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || bench_die "REPEAT must be a positive integer"
[[ "$COUNT" =~ ^[1-9][0-9]*$ ]] || bench_die "COUNT must be a positive integer"
read -r -a ra_cache_args <<<"$RA_CACHE_ARGS"
disk_bytes=$(bench_size_bytes "$DISK_SIZE") || bench_die "bad DISK_SIZE"
(( disk_bytes >= 1048576 && disk_bytes % 1048576 == 0 )) ||
  bench_die "DISK_SIZE must be a whole number of MiB"
(( COUNT * 65536 > disk_bytes )) && COUNT=$(( disk_bytes / 65536 ))
bytes=$(( COUNT * 65536 ))

for c in "$NBDKIT" qemu-img timeout awk; do
  command -v "$c" >/dev/null 2>&1 || bench_die "$c is not installed (./run.sh demo installs everything)"
done
bench_check_rusage
declare -A row_label=(
  [nbd-server]="nbd-server, export \"$EXPORT\", +$NBD_RDELAY"
  [curl]="curl, lighttpd 127.0.0.1, +$CURL_RDELAY"
)
for r in $ROWS; do
  case "$r" in
    nbd-server) command -v nbd-server >/dev/null 2>&1 ||
                  bench_die "nbd-server is not installed: apt-get install nbd-server"
                "$NBDKIT" nbd --dump-plugin >/dev/null 2>&1 ||
                  bench_die "nbdkit has no nbd plugin" ;;
    curl)       command -v lighttpd >/dev/null 2>&1 ||
                  bench_die "lighttpd is not installed: apt-get install lighttpd"
                "$NBDKIT" curl --dump-plugin >/dev/null 2>&1 ||
                  bench_die "nbdkit has no curl plugin" ;;
    *) bench_die "unknown row $r (known: nbd-server curl)" ;;
  esac
done
for c in $CONFIGS; do
  case "$c" in
    plain|readahead+cache|ra-cache|ceiling) ;;
    ra-cache-base) [ -f "$FILTER_BASE" ] ||
      bench_die "ra-cache-base needs FILTER_BASE (a built filter .so)" ;;
    *) bench_die "unknown configuration $c" ;;
  esac
done
have_filter=yes
if [ ! -f "$FILTER" ]; then
  have_filter=no
  echo "servers.sh: $FILTER is not built: the ra-cache column will say n/a" >&2
fi

bench_traps

# ---- the disk (made once) ------------------------------------------------------
disk=$IMAGE_DIR/disk-$DISK_SIZE-v1.img
if [ ! -f "$disk" ]; then
  mkdir -p "$IMAGE_DIR"
  echo "servers.sh: making $disk (once)" >&2
  if ! head -c "$disk_bytes" /dev/urandom > "$disk.tmp$$" ||
     [ "$(stat -c %s "$disk.tmp$$")" -ne "$disk_bytes" ]; then
    rm -f "$disk.tmp$$"
    bench_die "cannot make $disk"
  fi
  mv "$disk.tmp$$" "$disk"
fi
# lighttpd's document root: the disk as disk.img (lighttpd follows symlinks).
mkdir "$bench_tmpdir/www"
ln -s "$disk" "$bench_tmpdir/www/disk.img"

# ---- one run -------------------------------------------------------------------
declare -A runs=() cell=() cost=() mbps_raw=() perg_raw=()
failed=0

# run_once ROW CONFIG REP
run_once ()
{
  local r=$1 c=$2 rep=$3 delay secs mb cpu minflt majflt maxrss
  local -a front=() plugin=()
  case "$c" in
    readahead+cache) front=(--filter=readahead --filter=cache) ;;
    ra-cache) front=(--filter="$FILTER") ;;
    ra-cache-base) front=(--filter="$FILTER_BASE") ;;
  esac
  rm -f "$bench_tmpdir"/*.log "$bench_tmpdir/front.rusage"
  case "$r" in
    nbd-server)
      delay=$NBD_RDELAY
      bench_start_nbd_server back "$disk" "$EXPORT" || { cell[$r,$c]=FAIL; failed=1; return 0; }
      plugin=(nbd socket="$(bench_sock back)" export="$EXPORT") ;;
    curl)
      delay=$CURL_RDELAY
      bench_start_lighttpd back "$bench_tmpdir/www" || { cell[$r,$c]=FAIL; failed=1; return 0; }
      plugin=(curl url="http://127.0.0.1:$(bench_port back)/disk.img") ;;
  esac
  [ "$c" = ceiling ] && delay=0
  front+=(--filter=delay "${plugin[@]}" rdelay="$delay")
  [[ $c == ra-cache* ]] && front+=("${ra_cache_args[@]}")
  if ! bench_start_timed front "${front[@]}"; then
    bench_stop_all
    cell[$r,$c]=FAIL; failed=1
    return 0
  fi
  if ! bench_client "$bench_tmpdir/result" \
         bench_qemu_img "$(bench_uri front)" 65536 "$COUNT" 1; then
    bench_stop_all
    echo "servers.sh: $r / $c FAILED; front server log:" >&2
    tail -n 30 "$bench_tmpdir/front.log" | sed 's/^/    /' >&2
    cell[$r,$c]=FAIL; failed=1
    return 0
  fi
  bench_stop front
  bench_stop back
  read -r cpu minflt majflt maxrss < <(bench_rusage front)
  secs=$(cat "$bench_tmpdir/result")
  mb=$(awk -v b="$bytes" -v s="$secs" 'BEGIN { printf "%.6f\n", b / s / 1e6 }')
  runs[$r,$c]+="$mb $cpu $minflt"$'\n'
  printf '%-11s %-16s %8s MB/s %6s CPU s %8s flt' "$r" "$c" \
    "$(bench_mbps "$bytes" "$secs")" "$cpu" "$minflt" >&2
  [ -n "$RESULTS" ] &&
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$c" "$rep" "$bytes" \
      "$secs" "$cpu" "$minflt" "$majflt" "$maxrss" >> "$RESULTS"
  return 0
}

# ---- run -----------------------------------------------------------------------
[ -n "$RESULTS" ] &&
  printf 'row\tconfig\trun\tclient_bytes\tseconds\tfront_cpu_s\tfront_minflt\tfront_majflt\tfront_maxrss_kib\n' > "$RESULTS"
ncells=$(( $(wc -w <<<"$ROWS") * $(wc -w <<<"$CONFIGS") * REPEAT ))
i=0
t_all=$SECONDS
for r in $ROWS; do
  for ((rep = 1; rep <= REPEAT; rep++)); do
    for c in $CONFIGS; do
      i=$((i + 1))
      if [ "$c" = ra-cache ] && [ "$have_filter" = no ]; then
        cell[$r,$c]=n/a; continue
      fi
      [ "${cell[$r,$c]:-}" = FAIL ] && continue
      t0=$SECONDS
      printf '[%3d/%d] run %d: ' "$i" "$ncells" "$rep" >&2
      run_once "$r" "$c" "$rep"
      if [ "${cell[$r,$c]:-}" = FAIL ]; then
        echo "$r $c: FAILED" >&2
      else
        printf ' %3ds\n' $((SECONDS - t0)) >&2
      fi
    done
  done
  for c in $CONFIGS; do
    [ -n "${cell[$r,$c]:-}" ] && continue
    [ -n "${runs[$r,$c]:-}" ] || { cell[$r,$c]=n/a; continue; }
    read -r mb cpu minflt < <(printf '%s' "${runs[$r,$c]}" | bench_median_line 1)
    # shellcheck disable=SC2034 # read by table (a nameref)
    mbps_raw[$r,$c]=$mb
    cell[$r,$c]=$(bench_mbps "$mb" 1e-6)
    perg_raw[$r,$c]=$(bench_per_gib "$cpu" "$bytes")
    # shellcheck disable=SC2034
    cost[$r,$c]="${perg_raw[$r,$c]} ($cpu s, $minflt)"
  done
done

# ---- the tables ----------------------------------------------------------------
ratio_cols=()
if [[ " $CONFIGS " == *" ra-cache "* ]]; then
  for c in ceiling readahead+cache plain ra-cache-base; do
    [[ " $CONFIGS " == *" $c "* ]] && ratio_cols+=("$c")
  done
fi

# table VALUES RAW: one Markdown table of cells VALUES[ROW,CONFIG] with the
# ra-cache ratios of RAW[ROW,CONFIG].
table ()
{
  local -n vals=$1 raw=$2
  local hdr="| server, front delay |" sep="|---|" row r c x
  for c in $CONFIGS; do hdr+=" $c |"; sep+="---:|"; done
  for c in "${ratio_cols[@]}"; do hdr+=" ra-cache / $c |"; sep+="---:|"; done
  echo "$hdr"; echo "$sep"
  for r in $ROWS; do
    row="| ${row_label[$r]} |"
    for c in $CONFIGS; do
      x=${vals[$r,$c]:-}
      [ -n "$x" ] || x=${cell[$r,$c]:-n/a}
      row+=" $x |"
    done
    for c in "${ratio_cols[@]}"; do
      x=$(bench_ratio "${raw[$r,ra-cache]:-}" "${raw[$r,$c]:-}" 2)
      [ "$x" = n/a ] || x="${x}x"
      row+=" $x |"
    done
    echo "$row"
  done
}

echo
echo "real-server benchmark: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $("$NBDKIT" --version), $(nbd-server -V 2>&1 | sed -n 's/.*version //p' | head -n 1 | sed 's/^/nbd-server /'), $(lighttpd -v 2>&1 | head -n 1 | cut -d' ' -f1)"
echo "disk: $disk ($DISK_SIZE); front: nbdkit [filters] --filter=delay {nbd|curl} ... rdelay=D (ceiling: rdelay=0), Unix socket"
echo "ra-cache: $FILTER${RA_CACHE_ARGS:+ $RA_CACHE_ARGS}$([ "$have_filter" = no ] && echo ' (NOT BUILT)')"
[[ " $CONFIGS " == *" ra-cache-base "* ]] && echo "ra-cache-base: $FILTER_BASE"
echo "client: qemu-img bench -f raw -t none -c $COUNT -d 1 -s 65536 (sequential 64 KiB, depth 1, $(( bytes / 1048576 )) MiB); median of $REPEAT run(s) by MB/s, fresh servers each"
echo
echo "MB/s (10^6 bytes/s)"
echo
table cell mbps_raw
echo
echo "front server cost: CPU s per GiB read (the front nbdkit's CPU s, user + system; its minor page faults), same runs"
echo
table cost perg_raw
echo
echo "total time: $((SECONDS - t_all)) s"
exit "$failed"
