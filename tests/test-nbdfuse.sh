#!/usr/bin/env bash
# A real kernel block device over ra-cache: nbdfuse exposes the export as
# a file, losetup makes it a block device; mkfs.ext4, mount, write files,
# unmount, stop the server, serve the same backend through a fresh
# ra-cache, mount again and verify every checksum.  Mounts, loop devices
# and processes are cleaned up on every exit path.
test_needs="nbdkit filter"
. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"
kernel_dev_init "losetup and mount"
d=$tmpdir

# The "remote" backend: it outlives the ra-cache front servers.
start_server back --filter=delay memory 256M rdelay=1ms

attach () {
  start_front front back ra-cache-size=32M
  kernel_attach front
}

detach () {
  kernel_detach front
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
