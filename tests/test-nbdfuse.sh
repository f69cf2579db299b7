#!/usr/bin/env bash
# A real kernel block device over ra-cache: nbdfuse exposes the export as
# a file, losetup makes it a block device; mkfs.ext4, mount, write files,
# unmount, stop the server, serve the same backend through a fresh
# ra-cache, mount again and verify every checksum.  Mounts, loop devices
# and processes are cleaned up on every exit path.
test_needs="nbdkit filter"
. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"
export PATH=/usr/sbin:/sbin:$PATH

[ "$(id -u)" -eq 0 ] || skip "needs root (losetup and mount)"
[ -c /dev/fuse ] || skip "no /dev/fuse: FUSE is not available here"
requires nbdfuse losetup mkfs.ext4 mountpoint

d=$tmpdir
loop=
fuse_pid=
# Before the servers stop: unmount, detach the loop device, end nbdfuse.
undo_mounts ()
{
  mountpoint -q "$d/fs" && umount "$d/fs"
  [ -n "$loop" ] && losetup -d "$loop"
  mountpoint -q "$d/mnt" && umount "$d/mnt"
  [ -n "$fuse_pid" ] && kill "$fuse_pid" 2>/dev/null && wait "$fuse_pid" 2>/dev/null
  return 0
}
at_cleanup undo_mounts

mkdir "$d/mnt" "$d/fs"
# The "remote" backend: it outlives the ra-cache front servers.
start_server back --filter=delay memory 256M rdelay=1ms

attach () {
  start_front front back ra-cache-size=32M
  nbdfuse "$d/mnt" --unix "$(sock front)" &
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
  stop_server front || fail "the front did not stop cleanly"
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
info "checksums verified through a fresh ra-cache: $(wc -l < "$d/sums") files"
detach
info PASS
