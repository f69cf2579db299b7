#!/usr/bin/env bash
# bench/passes.sh: one copy run several times through the same front
# server, as a long-lived server serves import after import of the same
# image: each pass's seconds, the front's CPU over that pass and its
# resident set after it, ra-cache beside no filter.  (matrix.sh and
# compare.sh start fresh servers for every run: they never see what a
# cache that has served a job before does to the next one.)
#
#   bench/passes.sh                       # nbdcopy of 1 GiB at 1 ms, 3 passes
#   TOOL=convert SIZE=512M bench/passes.sh
#
# Every configuration and repetition on fresh servers, then PASSES runs
# of the tool one after the other through them (Unix sockets):
#   backend: nbdkit -r [--filter=rate rate=RATE burstiness=0.1]
#            --filter=delay file IMAGE rdelay=DELAY
#   front:   nbdkit [FILTER] nbd socket=backend.sock
# The front's CPU over a pass is the difference of its utime + stime
# (/proc/PID/stat, every thread) before and after it; its RSS is VmRSS
# after it.  The table: per configuration and pass, the medians over
# REPEAT of seconds, CPU seconds and RSS in MiB, and per pass ra-cache's
# speed against no filter's (plain s / ra-cache s: above 1, faster).
#
# Environment (defaults in brackets):
#   TOOL [nbdcopy]      nbdcopy: nbdcopy URI null: (its defaults);
#                       convert: qemu-img convert -n -f raw -O raw into a
#                       tmpfs file of the image's size, made once and kept
#   SIZE [1G]           the image: IMAGE_DIR/passes-SIZE.raw, random
#                       data, made once
#   DELAY [1ms], RATE [-: none]
#   PASSES [3], REPEAT [3]
#   CONFIGS ["plain ra-cache"] (and ra-cache-base, with FILTER_BASE)
#   FILTER [build/plugins/ra-cache/.libs/nbdkit-ra-cache-filter.so]
#   FILTER_BASE []      the filter of ra-cache-base
#   RA_CACHE_ARGS []    extra ra-cache parameters (both ra-cache columns)
#   IMAGE_DIR [${XDG_CACHE_HOME:-~/.cache}/ra-cache-bench]
#   OUT_DIR [/dev/shm]  where convert writes
#   CLIENT_TIMEOUT [300]
#
# About 1 minute with the defaults on 2 cores.  Exit status 0, or 1 if a
# run failed.

set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(dirname "$here")
# shellcheck source=bench/lib.sh
. "$here/lib.sh"

bench_args "$@"

: "${TOOL:=nbdcopy}"
: "${SIZE:=1G}"
: "${DELAY:=1ms}"
: "${RATE:=-}"
: "${PASSES:=3}"
: "${REPEAT:=3}"
: "${CONFIGS:=plain ra-cache}"
: "${FILTER:=$top/build/plugins/ra-cache/.libs/nbdkit-ra-cache-filter.so}"
: "${FILTER_BASE:=}"
: "${RA_CACHE_ARGS:=}"
: "${IMAGE_DIR:=${XDG_CACHE_HOME:-$HOME/.cache}/ra-cache-bench}"
: "${OUT_DIR:=/dev/shm}"

[[ "$PASSES" =~ ^[1-9][0-9]*$ ]] || bench_die "PASSES must be a positive integer"
[[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || bench_die "REPEAT must be a positive integer"
case "$TOOL" in
  nbdcopy|convert) ;;
  *) bench_die "TOOL must be nbdcopy or convert, not $TOOL" ;;
esac
read -r -a ra_cache_args <<<"$RA_CACHE_ARGS"
for c in "$NBDKIT" qemu-img nbdcopy timeout awk; do
  command -v "$c" >/dev/null 2>&1 || bench_die "$c is not installed (./run.sh demo installs everything)"
done
[ -f "$FILTER" ] || bench_die "$FILTER is not built (./run.sh demo builds it)"
for c in $CONFIGS; do
  case "$c" in
    plain|ra-cache) ;;
    ra-cache-base) [ -f "$FILTER_BASE" ] ||
      bench_die "ra-cache-base needs FILTER_BASE, a built filter" ;;
    *) bench_die "unknown configuration $c (plain, ra-cache, ra-cache-base)" ;;
  esac
done
bytes=$(bench_size_bytes "$SIZE") || bench_die "bad SIZE $SIZE"
ticks=$(getconf CLK_TCK)

bench_traps
mkdir -p "$IMAGE_DIR"
image=$IMAGE_DIR/passes-$SIZE.raw
if [ ! -f "$image" ]; then
  echo "passes.sh: making $image (once)" >&2
  head -c "$bytes" /dev/urandom > "$image.tmp$$"
  mv "$image.tmp$$" "$image"
fi
cat "$image" > /dev/null        # in the host's page cache before the first run
target=
if [ "$TOOL" = convert ]; then
  bench_outdir "$OUT_DIR" passes
  target=$bench_outdir/target.raw
  qemu-img create -q -f raw "$target" "$bytes"
fi

# cpu_ticks PID: utime + stime of every thread of PID, in clock ticks.
cpu_ticks ()
{
  awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"
}

declare -A runs=()
failed=0
t_all=$SECONDS
for ((rep = 1; rep <= REPEAT; rep++)); do
  for c in $CONFIGS; do
    bench_stack_args "$c" "$image" "$DELAY" "$RATE"
    if ! bench_start back "${bench_back[@]}" ||
       ! bench_start front "${bench_front[@]}"; then
      bench_stop_all
      failed=1
      continue
    fi
    pid=$(cat "$bench_tmpdir/front.pid")
    for ((pass = 1; pass <= PASSES; pass++)); do
      t0=$(cpu_ticks "$pid")
      s0=$EPOCHREALTIME
      case "$TOOL" in
        nbdcopy) cmd=(nbdcopy "$(bench_uri front)" null:) ;;
        convert) cmd=(qemu-img convert -n -f raw -O raw "$(bench_uri front)" "$target") ;;
      esac
      if ! timeout "$CLIENT_TIMEOUT" "${cmd[@]}"; then
        echo "passes.sh: $c pass $pass FAILED; front server log:" >&2
        tail -n 20 "$bench_tmpdir/front.log" | sed 's/^/    /' >&2
        failed=1
        break
      fi
      s1=$EPOCHREALTIME
      t1=$(cpu_ticks "$pid")
      rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status")
      line=$(awk -v a="$s0" -v b="$s1" -v c="$((t1 - t0))" -v hz="$ticks" -v r="$rss" \
        'BEGIN { printf "%.3f %.2f %.1f", b - a, c / hz, r / 1024 }')
      runs["$c $pass"]+="$line"$'\n'
      read -r secs cpu mib <<<"$line"
      printf '%-14s pass %d: %s s, %s CPU s, %s MiB\n' "$c" "$pass" \
        "$secs" "$cpu" "$mib" >&2
    done
    bench_stop front
    bench_stop back
  done
done

echo
echo "Passes through one front: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $("$NBDKIT" --version)"
rate_note=
[ "$RATE" != - ] && rate_note=" rate=$RATE"
echo "$TOOL of $SIZE, backend rdelay=$DELAY$rate_note, $PASSES passes per server; each cell the run of median seconds of $REPEAT"
echo "ra-cache: $FILTER${RA_CACHE_ARGS:+ $RA_CACHE_ARGS}${FILTER_BASE:+; ra-cache-base: $FILTER_BASE}"
echo
hdr="| pass |"
sep="|---:|"
for c in $CONFIGS; do hdr+=" $c s | CPU s | RSS MiB |"; sep+="---:|---:|---:|"; done
echo "$hdr plain / ra-cache |"
echo "$sep---:|"
for ((pass = 1; pass <= PASSES; pass++)); do
  row="| $pass |"
  declare -A s=()
  for c in $CONFIGS; do
    m=$(printf '%s' "${runs[$c $pass]:-}" | bench_median_line 1)
    if [ -n "$m" ]; then
      read -r s[$c] cpu rss <<<"$m"
      row+=" ${s[$c]} | $cpu | $rss |"
    else row+=" FAIL | | |"; fi
  done
  row+=" $(bench_ratio "${s[plain]:-}" "${s[ra-cache]:-}" 2) |"
  echo "$row"
  unset s
done
echo
echo "passes.sh: $((SECONDS - t_all)) s"
exit "$failed"
