#!/usr/bin/env bash
# The kernel's NBD client over ra-cache: nbd-client attaches /dev/nbd0 to
# the filter, then mkfs.ext4, mount, write, unmount, detach, attach a
# fresh ra-cache over the same backend and verify every checksum.
# Needs the nbd kernel module: elsewhere it skips and says why.
test_needs="nbdkit filter"
. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"
export PATH=/usr/sbin:/sbin:$PATH

[ "$(id -u)" -eq 0 ] || skip "needs root (nbd-client and mount)"
command -v nbd-client >/dev/null || skip "nbd-client not installed (apt-get install nbd-client)"
[ -b /dev/nbd0 ] || modprobe nbd 2>/dev/null || true
[ -b /dev/nbd0 ] || skip "no /dev/nbd0: the nbd kernel module is not available on this machine"
nbd-client -c /dev/nbd0 >/dev/null 2>&1 && skip "/dev/nbd0 is already in use"
requires mkfs.ext4 mountpoint

d=$tmpdir
attached=
# Before the servers stop: unmount and detach /dev/nbd0.
undo_mounts ()
{
  mountpoint -q "$d/fs" && umount "$d/fs"
  [ -n "$attached" ] && nbd-client -d /dev/nbd0 >/dev/null
  return 0
}
at_cleanup undo_mounts

mkdir "$d/fs"
start_server back --filter=delay memory 256M rdelay=1ms

attach () {
  start_front front back
  nbd-client -unix "$(sock front)" /dev/nbd0 -b 4096 >/dev/null
  attached=1
}

detach () {
  umount "$d/fs"
  nbd-client -d /dev/nbd0 >/dev/null; attached=
  stop_server front || fail "the front did not stop cleanly"
}

attach
mkfs.ext4 -q /dev/nbd0
mount /dev/nbd0 "$d/fs"
for i in 1 2 3; do head -c $((i * 2000000)) /dev/urandom > "$d/fs/file$i"; done
(cd "$d/fs" && sha256sum file*) > "$d/sums"
detach
attach
mount /dev/nbd0 "$d/fs"
(cd "$d/fs" && sha256sum -c --quiet "$d/sums")
detach
info PASS
