#!/usr/bin/env bash
# A real kernel block device over ra-cache: nbdfuse exposes the export as
# a file, losetup makes it a block device; mkfs.ext4, mount, write files,
# unmount, stop the server, serve the same backend through a fresh
# ra-cache, mount again and verify every checksum.  Mounts, loop devices
# and processes are cleaned up on every exit path.
set -euo pipefail
export PATH=/usr/sbin:/sbin:/usr/bin:/bin:$PATH

skip () { echo "SKIP: $*"; exit 77; }

[ "$(id -u)" -eq 0 ] || skip "needs root (losetup and mount)"
[ -c /dev/fuse ] || skip "no /dev/fuse: FUSE is not available here"
command -v nbdfuse >/dev/null || skip "nbdfuse not installed (apt-get install libnbd-bin)"
command -v losetup >/dev/null || skip "losetup not installed (apt-get install mount)"
command -v mkfs.ext4 >/dev/null || skip "mkfs.ext4 not installed (apt-get install e2fsprogs)"

filter=${top_builddir:-.}/plugins/ra-cache/.libs/nbdkit-ra-cache-filter.so
[ -f "$filter" ] || { echo "FAIL: $filter not built"; exit 1; }

d=$(mktemp -d /tmp/ra-nbdfuse.XXXXXX)
loop=
fuse_pid=
cleanup () {
  set +e
  mountpoint -q "$d/fs" && umount "$d/fs"
  [ -n "$loop" ] && losetup -d "$loop"
  mountpoint -q "$d/mnt" && umount "$d/mnt"
  [ -n "$fuse_pid" ] && kill "$fuse_pid" 2>/dev/null && wait "$fuse_pid" 2>/dev/null
  for p in "$d"/*.pid; do [ -f "$p" ] && kill "$(cat "$p")" 2>/dev/null; done
  sleep 0.3
  rm -rf "$d"
}
trap cleanup EXIT INT TERM

wait_for () {  # wait_for TEST-ARGS...
  for _ in $(seq 100); do test "$@" && return 0; sleep 0.1; done
  echo "FAIL: timed out waiting for: test $*"; exit 1
}

mkdir "$d/mnt" "$d/fs"
# The "remote" backend: it outlives the ra-cache front servers.
"${NBDKIT:-nbdkit}" -U "$d/back.sock" -P "$d/back.pid" --filter=delay memory 256M rdelay=1ms
wait_for -S "$d/back.sock"

attach () {
  rm -f "$d/front.sock"
  "${NBDKIT:-nbdkit}" -U "$d/front.sock" -P "$d/front.pid" --filter="$filter" \
         nbd socket="$d/back.sock" ra-cache-size=32M
  wait_for -S "$d/front.sock"
  nbdfuse "$d/mnt" --unix "$d/front.sock" &
  fuse_pid=$!
  wait_for -f "$d/mnt/nbd"
  if ! loop=$(losetup -f --show "$d/mnt/nbd" 2>"$d/losetup.err"); then
    loop=
    skip "losetup cannot attach a loop device here: $(cat "$d/losetup.err")"
  fi
}

detach () {
  umount "$d/fs"
  losetup -d "$loop"; loop=
  umount "$d/mnt"
  wait "$fuse_pid" || true; fuse_pid=
  kill "$(cat "$d/front.pid")"
  for _ in $(seq 50); do kill -0 "$(cat "$d/front.pid")" 2>/dev/null || break; sleep 0.1; done
  rm -f "$d/front.pid"
}

attach
mkfs.ext4 -q "$loop"
mount "$loop" "$d/fs"
mkdir "$d/fs/dir"
for i in 1 2 3 4 5; do
  head -c $((i * 1500000 + 12345)) /dev/urandom > "$d/fs/dir/file$i"
done
(cd "$d/fs" && sha256sum dir/*) > "$d/sums"
detach

# A fresh ra-cache over the same backend: nothing cached, all read back.
attach
mount "$loop" "$d/fs"
(cd "$d/fs" && sha256sum -c --quiet "$d/sums")
echo "checksums verified through a fresh ra-cache: $(wc -l < "$d/sums") files"
detach
echo "PASS"
