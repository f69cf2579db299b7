#!/usr/bin/env bash
# The kernel's NBD client over ra-cache: nbd-client attaches /dev/nbd0 to
# the filter, then mkfs.ext4, mount, write, unmount, detach, attach a
# fresh ra-cache over the same backend and verify every checksum.
# Needs the nbd kernel module: elsewhere it skips and says why.
set -euo pipefail
export PATH=/usr/sbin:/sbin:/usr/bin:/bin:$PATH

skip () { echo "SKIP: $*"; exit 77; }

[ "$(id -u)" -eq 0 ] || skip "needs root (nbd-client and mount)"
command -v nbd-client >/dev/null || skip "nbd-client not installed (apt-get install nbd-client)"
[ -b /dev/nbd0 ] || modprobe nbd 2>/dev/null || true
[ -b /dev/nbd0 ] || skip "no /dev/nbd0: the nbd kernel module is not available on this machine"
nbd-client -c /dev/nbd0 >/dev/null 2>&1 && skip "/dev/nbd0 is already in use"

filter=${top_builddir:-.}/plugins/ra-cache/.libs/nbdkit-ra-cache-filter.so
[ -f "$filter" ] || { echo "FAIL: $filter not built"; exit 1; }

d=$(mktemp -d /tmp/ra-nbd-client.XXXXXX)
attached=
cleanup () {
  set +e
  mountpoint -q "$d/fs" && umount "$d/fs"
  [ -n "$attached" ] && nbd-client -d /dev/nbd0 >/dev/null
  for p in "$d"/*.pid; do [ -f "$p" ] && kill "$(cat "$p")" 2>/dev/null; done
  sleep 0.3
  rm -rf "$d"
}
trap cleanup EXIT INT TERM

wait_for () {
  for _ in $(seq 100); do test "$@" && return 0; sleep 0.1; done
  echo "FAIL: timed out waiting for: test $*"; exit 1
}

mkdir "$d/fs"
"${NBDKIT:-nbdkit}" -U "$d/back.sock" -P "$d/back.pid" --filter=delay memory 256M rdelay=1ms
wait_for -S "$d/back.sock"

attach () {
  rm -f "$d/front.sock"
  "${NBDKIT:-nbdkit}" -U "$d/front.sock" -P "$d/front.pid" --filter="$filter" \
         nbd socket="$d/back.sock"
  wait_for -S "$d/front.sock"
  nbd-client -unix "$d/front.sock" /dev/nbd0 -b 4096 >/dev/null
  attached=1
}

detach () {
  umount "$d/fs"
  nbd-client -d /dev/nbd0 >/dev/null; attached=
  kill "$(cat "$d/front.pid")"; sleep 0.5; rm -f "$d/front.pid"
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
echo "PASS"
