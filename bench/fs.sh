#!/usr/bin/env bash
# bench/fs.sh: a file system read through the kernel over nbdfuse and a
# loop device (and over nbd-client where /dev/nbd0 exists), on several
# layouts and trees, with ra-cache side by side with no filter, nbdkit's
# readahead+cache and the no-delay ceiling.
#
#   bench/fs.sh               # after ./run.sh demo or ./run.sh check built build/
#   LAYOUTS=ext4-mkfs TREES=sources bench/fs.sh   # the one image of before
#
# The images, made once each and kept in IMAGE_DIR (later runs reuse
# them), one per layout and tree:
#
# Trees (TREES):
#   sources    a copy of SOURCES (files on this machine: /usr/share/man,
#              the python3 library and /usr/share/doc by default: here
#              233 MiB in 29,000 files): a few big files among many small
#   many       a generated tree of many small files in many directories:
#              50 x 40 directories of 12 files each, 512 bytes to 12 KiB
#              (24,000 files, about 150 MiB; the same every time)
# Layouts (LAYOUTS), how the file system was filled:
#   ext4-mkfs  mkfs.ext4 -d TREE: files laid out one after the other in
#              directory order
#   ext4-cp    mkfs.ext4, then cp -a of TREE into it mounted through the
#              kernel (ext4's allocator spreads directories over the
#              block groups, as a file system filled the usual way)
#   xfs-cp     mkfs.xfs, then cp -a through the kernel (allocation groups)
#
# For every run (one image, one workload, one configuration), fresh
# servers on Unix sockets in a private temporary directory:
#
#   backend:  nbdkit -r --filter=stats --filter=delay file IMAGE rdelay=RDELAY
#   front:    nbdkit [FILTERS] nbd socket=backend.sock
#
# then the front is attached read-only and mounted read-only:
#
#   nbdfuse: nbdfuse -r MNT --unix front.sock; losetup -r -f MNT/nbd;
#            mount -o ro,noload LOOP FS   (XFS: -o ro,norecovery)
#   nbd:     nbd-client -unix front.sock /dev/nbd0 -readonly;
#            mount -o ro,noload /dev/nbd0 FS    (only where /dev/nbd0 exists)
#
# the page cache is dropped (sync; echo 3 > /proc/sys/vm/drop_caches)
# and the workload timed (wall clock):
#
#   tar     cd FS && tar cf - . | wc -c
#   small   cd FS && find SMALL_DIR -type f -size -SMALL_MAX -print0 |
#             xargs -0 cat | wc -c       (many small files, in the
#             order the directories list them: near each other on disk,
#             not in sequence; SMALL_DIR is the first of SOURCES in the
#             sources tree, the whole tree in many)
#   rand    fio --rw=randread --bs=4k --direct=1 --iodepth=1 over the
#             attached device, RAND_BYTES in all (the same sequence every
#             run: randrepeat): a random reader, whose amplification
#             (backend bytes / client bytes) should stay near 1
#             (not in the default WORKLOADS)
#
# Configurations (rows):
#
#   plain            rdelay=RDELAY, front without a filter
#   readahead+cache  front with --filter=readahead --filter=cache
#   ra-cache         front with --filter=FILTER, defaults (plus RA_CACHE_ARGS)
#   ra-cache-base    (only if named in CONFIGS) the same with FILTER_BASE,
#                    another build of the filter (main's, say), to compare
#                    a change with it in one run
#   ra-cache-learn   (only if named in CONFIGS) ra-cache recording into a
#                    fresh ra-cache-learn file of this image and workload:
#                    a first run with learning
#   ra-cache-replay  (only if named in CONFIGS, after ra-cache-learn) ra-cache
#                    with the file that run wrote: the second run, replayed
#                    (windows column: R=used/replayed pages)
#   ceiling          rdelay=0, front without a filter: the no-latency limit
#
# Figures, of the median run by seconds: seconds, speed-up against plain
# (plain seconds / seconds), the share of the ceiling (ceiling seconds /
# seconds), MiB the backend served (its stats filter),
# and for ra-cache its own stats (ra-cache-stats): windows per branch
# (A..G, and N for branch N, near) and amplification (backend bytes /
# client bytes).
#
# Environment (defaults in brackets):
#   RDELAY [1ms]          backend read delay (not for "ceiling", which is 0)
#   FILTER [build/plugins/ra-cache/.libs/nbdkit-ra-cache-filter.so]
#   RA_CACHE_ARGS []      extra ra-cache parameters (both ra-cache rows)
#   FILTER_BASE []        the filter of the ra-cache-base row
#   CONFIGS ["plain readahead+cache ra-cache ceiling"]
#   WORKLOADS ["tar small"]
#   LAYOUTS ["ext4-mkfs ext4-cp xfs-cp"]   (xfs-cp needs mkfs.xfs: xfsprogs)
#   TREES ["sources many"]
#   ATTACH ["nbdfuse nbd"] how to attach (nbd is skipped without /dev/nbd0)
#   REPEAT [1]            runs per cell, alternating between configurations
#   SOURCES ["/usr/share/man /usr/lib/python3* /usr/share/doc"]  what the image holds
#   SMALL_DIR [sources: the first of SOURCES, as it lies in the image;
#             many: the whole tree]
#   SMALL_MAX [16k]       largest file the small workload reads
#   RAND_BYTES [16777216] bytes the rand workload reads (4K reads)
#   IMAGE_DIR [${XDG_CACHE_HOME:-~/.cache}/ra-cache-bench]
#   TRACE [none]          record the ra-cache front's requests with
#                         nbdkit's log filter into
#                         TRACE.LAYOUT.TREE.WORKLOAD.log
#                         (for ra-trace: src/ra-trace.pod)
#   RESULTS [none]        also write every run's raw figures as TSV
#   CLIENT_TIMEOUT [300]  seconds before a workload counts as hung
#   BENCH_KEEP_TMP        set to keep the temporary directory (logs, stats)
#
# Needs root (losetup, mount, drop_caches), /dev/fuse and nbdfuse.
# About 8 minutes with the defaults on 2 cores (48 runs, nbdfuse only;
# making the six images once: about 3 more minutes).
# Exit status: 0, 77 if it cannot run here (says why), 1 if a run failed.

set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(dirname "$here")
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
export PATH=$PATH:/usr/sbin:/sbin

: "${RDELAY:=1ms}"
: "${FILTER:=$top/build/plugins/ra-cache/.libs/nbdkit-ra-cache-filter.so}"
: "${RA_CACHE_ARGS:=}"
: "${FILTER_BASE:=}"
: "${CONFIGS:=plain readahead+cache ra-cache ceiling}"
: "${WORKLOADS:=tar small}"
: "${LAYOUTS:=ext4-mkfs ext4-cp xfs-cp}"
: "${TREES:=sources many}"
: "${ATTACH:=nbdfuse nbd}"
: "${REPEAT:=1}"
: "${SOURCES:=$(echo /usr/share/man /usr/lib/python3.[0-9]* /usr/share/doc)}"
: "${SMALL_MAX:=16k}"
: "${RAND_BYTES:=16777216}"
: "${IMAGE_DIR:=${XDG_CACHE_HOME:-$HOME/.cache}/ra-cache-bench}"
: "${TRACE:=}"
: "${RESULTS:=}"
: "${PYTHON:=/usr/bin/python3}"

bench_args "$@"

skip () { echo "fs.sh: SKIP: $*" >&2; exit 77; }
[[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || bench_die "REPEAT must be a positive integer"
read -r -a ra_cache_args <<<"$RA_CACHE_ARGS"
[ "$(id -u)" -eq 0 ] || skip "needs root (losetup, mount, drop_caches)"
for c in "$NBDKIT" nbdfuse losetup mount umount mkfs.ext4 tar cp timeout awk "$PYTHON"; do
  command -v "$c" >/dev/null 2>&1 || skip "$c is not installed"
done
for l in $LAYOUTS; do
  case "$l" in
    ext4-mkfs|ext4-cp) ;;
    xfs-cp) command -v mkfs.xfs >/dev/null 2>&1 ||
              bench_die "LAYOUTS names xfs-cp but mkfs.xfs is not installed (apt-get install xfsprogs)" ;;
    *) bench_die "unknown layout $l (ext4-mkfs, ext4-cp or xfs-cp)" ;;
  esac
done
for t in $TREES; do
  case "$t" in sources|many) ;; *) bench_die "unknown tree $t (sources or many)" ;; esac
done
[ -c /dev/fuse ] || skip "no /dev/fuse"
[ -w /proc/sys/vm/drop_caches ] || skip "cannot drop the page cache here"
for f in stats delay readahead cache log; do
  "$NBDKIT" --filter="$f" null --dump-plugin >/dev/null 2>&1 ||
    bench_die "nbdkit cannot load its $f filter"
done
have_filter=yes
[ -f "$FILTER" ] || { have_filter=no; echo "fs.sh: $FILTER is not built: the ra-cache rows will say n/a" >&2; }
for c in $CONFIGS; do
  case "$c" in plain|readahead+cache|ra-cache|ra-cache-learn|ceiling) ;;
    ra-cache-replay) [[ " $CONFIGS " = *" ra-cache-learn "*"ra-cache-replay "* ]] ||
      bench_die "ra-cache-replay needs ra-cache-learn before it in CONFIGS" ;;
    ra-cache-base) [ -f "$FILTER_BASE" ] || bench_die "ra-cache-base needs FILTER_BASE (a built filter)" ;;
    *) bench_die "unknown configuration $c" ;;
  esac
done
for w in $WORKLOADS; do
  case "$w" in
    tar|small) ;;
    rand) command -v fio >/dev/null 2>&1 ||
            bench_die "WORKLOADS names rand but fio is not installed (apt-get install fio)" ;;
    *) bench_die "unknown workload $w (tar, small or rand)" ;;
  esac
done
attaches=
for a in $ATTACH; do
  case "$a" in
    nbdfuse) attaches+=" nbdfuse" ;;
    nbd)
      if [ ! -b /dev/nbd0 ]; then
        echo "fs.sh: no /dev/nbd0 (modprobe nbd): the nbd-client rows are skipped" >&2
      elif ! command -v nbd-client >/dev/null 2>&1; then
        echo "fs.sh: nbd-client is not installed: the nbd-client rows are skipped" >&2
      elif nbd-client -c /dev/nbd0 >/dev/null 2>&1; then
        echo "fs.sh: /dev/nbd0 is in use: the nbd-client rows are skipped" >&2
      else
        attaches+=" nbd"
      fi ;;
    *) bench_die "unknown ATTACH $a" ;;
  esac
done
[ -n "$attaches" ] || skip "no way to attach the export here"

# State for cleanup: everything attached, innermost last; and while an
# image is filled through the kernel, its loop device and mount point.
mnt= fsdir= loop= fuse_pid= nbddev= fill_loop= fill_dir= attached_dev=
detach ()
{
  set +e
  [ -n "$fill_dir" ] && mountpoint -q "$fill_dir" && umount "$fill_dir"
  [ -n "$fill_loop" ] && losetup -d "$fill_loop"
  fill_loop=
  [ -n "$fsdir" ] && mountpoint -q "$fsdir" && umount "$fsdir"
  [ -n "$loop" ] && losetup -d "$loop"
  loop=
  [ -n "$nbddev" ] && nbd-client -d "$nbddev" >/dev/null 2>&1
  nbddev=
  # The loop device lets go of MNT/nbd a moment after losetup -d: until
  # then MNT is busy.
  if [ -n "$mnt" ]; then
    for _ in $(seq 50); do
      mountpoint -q "$mnt" || break
      umount "$mnt" 2>/dev/null && break
      sleep 0.1
    done
  fi
  if [ -n "$fuse_pid" ]; then
    kill "$fuse_pid" 2>/dev/null
    wait "$fuse_pid" 2>/dev/null
    fuse_pid=
  fi
  set -e
  return 0
}
cleanup ()
{
  detach
  bench_cleanup
  return 0
}
bench_traps cleanup
mnt=$bench_tmpdir/mnt fsdir=$bench_tmpdir/fs
mkdir "$mnt" "$fsdir"

# ---- the images (made once each) ---------------------------------------------------
# A tree's staging copy: the sources tree's name holds a hash of SOURCES
# (other sources, other images); the many tree is the same everywhere.
key=$(printf '%s\n' $SOURCES | cksum | cut -d' ' -f1)
tree_name () { [ "$1" = many ] && echo many-v1 || echo "src$key"; }
stage=
stage_tree () # stage_tree TREE: a new staging directory ($stage) holding it
{
  local t=$1
  stage=$(mktemp -d "$IMAGE_DIR/stage.XXXXXX")
  if [ "$t" = sources ]; then
    # shellcheck disable=SC2086 # a list of directories
    tar cf - --ignore-failed-read $SOURCES 2>/dev/null | tar xf - -C "$stage" ||
      return 1
  else
    # 50 x 40 directories of 12 files, 512 bytes to 12 KiB, from a fixed
    # seed: the same tree on every machine.
    "$PYTHON" - "$stage/many" <<'PYEOF' || return 1
import os, random, sys
top = sys.argv[1]
r = random.Random(25)
for i in range(50):
    for j in range(40):
        d = os.path.join(top, "d%02d" % i, "e%02d" % j)
        os.makedirs(d)
        for k in range(12):
            with open(os.path.join(d, "f%02d" % k), "wb") as f:
                f.write(r.randbytes(r.randint(512, 12288)))
PYEOF
  fi
}
make_image () # make_image LAYOUT TREE IMAGE
{
  local layout=$1 t=$2 image=$3 kib fs=${1%%-*}
  echo "fs.sh: making $image ($t tree, $layout; once)" >&2
  stage_tree "$t" || { rm -rf "$stage"; bench_die "cannot make the $t tree"; }
  kib=$(du -sk "$stage" | cut -f1)
  kib=$((kib * 13 / 10 + 65536))
  # mkfs.xfs wants 300 MiB at least; ext4-cp the same size as xfs-cp.
  [ "$layout" = ext4-mkfs ] || [ "$kib" -ge 409600 ] || kib=409600
  rm -f "$image.tmp$$"
  if [ "$layout" = ext4-mkfs ]; then
    mkfs.ext4 -q -F -L rafsbench -d "$stage" "$image.tmp$$" "${kib}k" >&2 ||
      { rm -rf "$stage" "$image.tmp$$"; bench_die "mkfs.ext4 -d failed"; }
  else
    truncate -s "${kib}k" "$image.tmp$$"
    if [ "$fs" = ext4 ]; then
      mkfs.ext4 -q -F -L rafsbench "$image.tmp$$" >&2
    else
      mkfs.xfs -q -f -L rafsbench "$image.tmp$$" >&2
    fi || { rm -rf "$stage" "$image.tmp$$"; bench_die "mkfs.$fs failed"; }
    fill_dir=$bench_tmpdir/fill
    mkdir -p "$fill_dir"
    if ! fill_loop=$(losetup -f --show "$image.tmp$$") ||
       ! mount -t "$fs" "$fill_loop" "$fill_dir" ||
       ! cp -a "$stage/." "$fill_dir/" ||
       ! umount "$fill_dir"; then
      detach; rm -rf "$stage" "$image.tmp$$"
      bench_die "filling $image through the kernel failed"
    fi
    losetup -d "$fill_loop"
    fill_loop=
  fi
  rm -rf "$stage"
  mv "$image.tmp$$" "$image"
}
declare -A image_of=() small_dir_of=()
for layout in $LAYOUTS; do
  for t in $TREES; do
    img=$IMAGE_DIR/fs-$(tree_name "$t")-$layout.img
    if [ ! -f "$img" ]; then
      mkdir -p "$IMAGE_DIR"
      make_image "$layout" "$t" "$img"
    fi
    image_of[$layout/$t]=$img
    if [ "$t" = many ]; then
      small_dir_of[$t]=${SMALL_DIR:-many}
    else
      small_dir_of[$t]=${SMALL_DIR:-$(set -- $SOURCES; echo "${1#/}")}
    fi
  done
done

# ---- attach and run ------------------------------------------------------------
wait_for () # wait_for SECONDS TEST-ARGS...
{
  local n=$(( $1 * 10 )); shift
  while (( n-- > 0 )); do test "$@" && return 0; sleep 0.1; done
  return 1
}

attach () # attach HOW SOCKET LAYOUT: the export mounted read-only on $fsdir
{
  local how=$1 sock=$2 fs=${3%%-*} dev
  if [ "$how" = nbdfuse ]; then
    nbdfuse -r "$mnt" --unix "$sock" &
    fuse_pid=$!
    wait_for 10 -f "$mnt/nbd" || { echo "nbdfuse did not start" >&2; return 1; }
    loop=$(losetup -r -f --show "$mnt/nbd") || { loop=; return 1; }
    dev=$loop
  else
    nbddev=/dev/nbd0
    nbd-client -unix "$sock" "$nbddev" -b 4096 -readonly >/dev/null || { nbddev=; return 1; }
    dev=$nbddev
  fi
  attached_dev=$dev
  if [ "$fs" = xfs ]; then
    mount -t xfs -o ro,norecovery "$dev" "$fsdir" || return 1
  else
    mount -t ext4 -o ro,noload "$dev" "$fsdir" || return 1
  fi
  blockdev --getra "$dev" > "$bench_tmpdir/readahead-sectors" 2>/dev/null || true
}

workload () # workload NAME: bytes read; the page cache is dropped first
{
  sync
  echo 3 > /proc/sys/vm/drop_caches
  cd "$fsdir"
  case "$1" in
    tar) tar cf - . | wc -c ;;
    small) find "$SMALL_DIR" -type f -size "-$SMALL_MAX" -print0 | xargs -0 cat | wc -c ;;
    rand) fio --name=rand --filename="$DEV" --readonly --rw=randread --bs=4k \
              --direct=1 --ioengine=psync --iodepth=1 --io_size="$RAND_BYTES" \
              --randrepeat=1 --output=/dev/null && echo "$RAND_BYTES" ;;
  esac
}

timed_workload () # timed_workload NAME SMALL_DIR: "SECONDS BYTES"
{
  local t0 t1 bytes
  t0=$EPOCHREALTIME
  bytes=$(timeout "$CLIENT_TIMEOUT" bash -c "$(declare -f workload); fsdir=$fsdir DEV=$attached_dev RAND_BYTES=$RAND_BYTES SMALL_DIR=$2 SMALL_MAX=$SMALL_MAX workload $1") ||
    return 1
  t1=$EPOCHREALTIME
  awk -v a="$t0" -v b="$t1" -v n="$bytes" 'BEGIN { printf "%.3f %d\n", b - a, n }'
}

# ra-cache's stats file: "windows-per-branch amplification".
ra_stats ()
{
  "$PYTHON" - "$1" <<'EOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception:
    print("n/a n/a"); sys.exit(0)
w = d.get("windows", {})
parts = ["%s=%d" % (k, v) for k, v in sorted(w.items()) if v]
cb = d.get("client_bytes", 0)
if d.get("replay_pages", 0):
    parts.append("R=%d/%d" % (d.get("replay_used_pages", 0), d["replay_pages"]))
print("%s %s" % (",".join(parts) or "-",
                 "%.2f" % (d.get("backend_bytes", 0) / cb) if cb else "n/a"))
EOF
}

declare -A runs=() cell=()
failed=0

run_once () # run_once ATTACH LAYOUT TREE WORKLOAD CONFIG REP
{
  local how=$1 layout=$2 t=$3 wl=$4 c=$5 rep=$6 delay=$RDELAY key=$1/$2/$3/$4/$5
  local image=${image_of[$2/$3]} trace_log=$TRACE.$2.$3.$4.log
  local learn=$bench_tmpdir/$1.$2.$3.$4.learn
  local stats=$bench_tmpdir/back.stats rstats=$bench_tmpdir/ra.stats
  local res secs bytes back_bytes wins amp
  local -a front=() learn_arg=()
  [ "$c" = ceiling ] && delay=0
  if [ -n "$TRACE" ] && [ "$c" = ra-cache ]; then
    rm -f "$trace_log"
    front+=(--filter=log)
  fi
  case "$c" in
    readahead+cache) front+=(--filter=readahead --filter=cache) ;;
    ra-cache) front+=(--filter="$FILTER") ;;
    ra-cache-learn)
      rm -f "$learn"
      front+=(--filter="$FILTER"); learn_arg=(ra-cache-learn="$learn") ;;
    ra-cache-replay)
      [ -s "$learn" ] || { echo "fs.sh: $key: the learn run wrote no $learn" >&2; cell[$key]=FAIL; failed=1; return 0; }
      front+=(--filter="$FILTER"); learn_arg=(ra-cache-learn="$learn") ;;
    ra-cache-base) front+=(--filter="$FILTER_BASE") ;;
  esac
  front+=(nbd socket="$(bench_sock back)")
  [[ "$c" = ra-cache* ]] && front+=("${ra_cache_args[@]}" "${learn_arg[@]}" ra-cache-stats="$rstats")
  [ -n "$TRACE" ] && [ "$c" = ra-cache ] && front+=(logfile="$trace_log")

  rm -f "$stats" "$rstats" "$bench_tmpdir"/*.log
  if ! bench_start back -r --filter=stats --filter=delay file "$image" \
         rdelay="$delay" statsfile="$stats" statsappend=false ||
     ! bench_start front "${front[@]}" ||
     ! attach "$how" "$(bench_sock front)" "$layout"; then
    detach; bench_stop_all
    cell[$key]=FAIL; failed=1
    return 0
  fi
  if ! res=$(timed_workload "$wl" "${small_dir_of[$t]}"); then
    detach; bench_stop_all
    echo "fs.sh: $key FAILED; front server log:" >&2
    tail -n 30 "$bench_tmpdir/front.log" | sed 's/^/    /' >&2
    cell[$key]=FAIL; failed=1
    return 0
  fi
  detach
  bench_stop front
  bench_stop back
  read -r secs bytes <<<"$res"
  back_bytes=$(bench_stats_read_bytes "$stats")
  wins=- amp=-
  [[ "$c" = ra-cache* ]] && read -r wins amp < <(ra_stats "$rstats")
  runs[$key]+="$secs $back_bytes $bytes $wins $amp"$'\n'
  printf '%-7s %-9s %-7s %-5s %-16s %8s s  %5d MiB read, backend %5d MiB  %s %s' \
    "$how" "$layout" "$t" "$wl" "$c" \
    "$secs" $((bytes / 1048576)) $((back_bytes / 1048576)) "$wins" "$amp" >&2
  [ -n "$RESULTS" ] &&
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$how" "$layout" "$t" "$wl" "$c" "$rep" "$secs" \
      "$bytes" "$back_bytes" "$wins" "$amp" >> "$RESULTS"
  return 0
}

[ -n "$RESULTS" ] &&
  printf 'attach\tlayout\ttree\tworkload\tconfig\trun\tseconds\tclient_bytes\tbackend_bytes\tra_windows\tra_amplification\n' > "$RESULTS"
ncells=$(( $(wc -w <<<"$attaches") * $(wc -w <<<"$LAYOUTS") * $(wc -w <<<"$TREES") *
           $(wc -w <<<"$WORKLOADS") * $(wc -w <<<"$CONFIGS") * REPEAT ))
i=0
t_all=$SECONDS
for how in $attaches; do
  for layout in $LAYOUTS; do
    for t in $TREES; do
      for wl in $WORKLOADS; do
        for ((rep = 1; rep <= REPEAT; rep++)); do
          for c in $CONFIGS; do
            i=$((i + 1))
            key=$how/$layout/$t/$wl/$c
            if [ "$c" = ra-cache ] && [ "$have_filter" = no ]; then cell[$key]=n/a; continue; fi
            [ "${cell[$key]:-}" = FAIL ] && continue
            t0=$SECONDS
            printf '[%3d/%d] ' "$i" "$ncells" >&2
            run_once "$how" "$layout" "$t" "$wl" "$c" "$rep"
            [ "${cell[$key]:-}" = FAIL ] && echo "$key: FAILED" >&2 || printf ' %3ds\n' $((SECONDS - t0)) >&2
          done
        done
      done
    done
  done
done

echo
echo "file system benchmark: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $("$NBDKIT" --version), $(uname -r)"
for layout in $LAYOUTS; do
  for t in $TREES; do
    echo "image $layout/$t: ${image_of[$layout/$t]} ($(( $(stat -c %s "${image_of[$layout/$t]}") / 1048576 )) MiB)"
  done
done
echo "backend: nbdkit -r --filter=stats --filter=delay file IMAGE rdelay=$RDELAY (ceiling: rdelay=0); front: nbdkit [filters] nbd, Unix sockets"
echo "attached: nbdfuse + losetup -r (readahead $(cat "$bench_tmpdir/readahead-sectors" 2>/dev/null || echo '?') sectors), mount -o ro,noload (XFS: ro,norecovery); page cache dropped before each run"
echo "workloads: tar = tar cf - . | wc -c; small = find SMALL_DIR -type f -size -$SMALL_MAX | xargs cat (sources: ${small_dir_of[sources]:-$(set -- $SOURCES; echo "${1#/}")}; many: ${small_dir_of[many]:-many}); rand = fio randread 4K direct, depth 1, $RAND_BYTES bytes over the device"
echo "ra-cache: $FILTER${RA_CACHE_ARGS:+ $RA_CACHE_ARGS}$([ "$have_filter" = no ] && echo ' (NOT BUILT)')"
[[ " $CONFIGS " = *" ra-cache-base "* ]] && echo "ra-cache-base: $FILTER_BASE"
echo "median of $REPEAT run(s) by seconds, fresh servers each"
echo
echo "| attach | layout | tree | workload | configuration | seconds | plain s / s | of ceiling | readahead+cache s / s | backend MiB | ra-cache windows | amplification |"
echo "|---|---|---|---|---|---:|---:|---:|---:|---:|---|---:|"
median_secs () # median_secs KEY: the median run's seconds, or nothing
{
  [ -n "${runs[$1]:-}" ] && printf '%s' "${runs[$1]}" | bench_median_line 1 | cut -d' ' -f1
  return 0
}
for how in $attaches; do
  for layout in $LAYOUTS; do
    for t in $TREES; do
      for wl in $WORKLOADS; do
        k=$how/$layout/$t/$wl
        plain_s=$(median_secs "$k/plain")
        rc_s=$(median_secs "$k/readahead+cache")
        ceil_s=$(median_secs "$k/ceiling")
        for c in $CONFIGS; do
          key=$k/$c
          if [ -n "${runs[$key]:-}" ]; then
            read -r secs back_bytes bytes wins amp < <(printf '%s' "${runs[$key]}" | bench_median_line 1)
            r1=$(bench_ratio "$plain_s" "$secs" 2); [ "$r1" = n/a ] || r1="${r1}x"
            r3=$(bench_ratio "$ceil_s" "$secs" 2)
            r2=$(bench_ratio "$rc_s" "$secs" 2); [ "$r2" = n/a ] || r2="${r2}x"
            echo "| $how | $layout | $t | $wl | $c | $secs | $r1 | $r3 | $r2 | $((back_bytes / 1048576)) | $wins | $amp |"
          else
            echo "| $how | $layout | $t | $wl | $c | ${cell[$key]:-n/a} | | | | | | |"
          fi
        done
      done
    done
  done
done
echo
echo "total time: $((SECONDS - t_all)) s"
exit "$failed"
