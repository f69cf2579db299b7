#!/usr/bin/env bash
# Learn and replay through the kernel: an ext4 image (made with
# mkfs.ext4 -d from a generated tree of many small files) served 1 ms
# away, read with tar through ra-cache, nbdfuse and a loop device,
# recording into ra-cache-learn=FILE; then a fresh front with the file
# reads it again: the same files (sha256sum against the tree), and
# the replay read what the kernel then read (replay_used_pages).  Mounts,
# loop devices and processes are cleaned up on every exit path.
test_needs="nbdkit filter"
. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"
kernel_dev_init "losetup, mount, drop_caches"
d=$tmpdir

# The tree: 40 directories of 25 files of 1 to 9 KiB.
mkdir -p "$d/tree"
for i in $(seq 40); do
  mkdir "$d/tree/dir$i"
  for j in $(seq 25); do
    head -c $(( (i * 25 + j) % 9 * 1024 + 1024 )) /dev/urandom > "$d/tree/dir$i/f$j"
  done
done
truncate -s 64M "$d/disk.img"
mkfs.ext4 -q -d "$d/tree" "$d/disk.img"
(cd "$d/tree" && find . -type f | sort | xargs sha256sum) > "$d/sums"
start_server back -r --filter=delay file "$d/disk.img" rdelay=1ms

# read NAME: attach front NAME (ra-cache with the learned file), drop
# the page cache, read every file through the kernel, check them, detach.
read_tree ()
{
  start_front "$1" back ra-cache-learn="$d/fs.learn"
  kernel_attach "$1" -r
  mount -o ro,noload "$loop" "$d/fs"
  sync; echo 3 > /proc/sys/vm/drop_caches
  timeout "$CLIENT_TIMEOUT" tar -C "$d/fs" -cf - . > /dev/null ||
    fail "tar through $1 failed"
  (cd "$d/fs" && sha256sum -c --quiet "$d/sums") ||
    fail "the files read through $1 are not the tree's"
  kernel_detach "$1"
}

read_tree first
read -r recorded <<< "$(ra_stat first learn_recorded_pages)"
[ "$recorded" -gt 0 ] || fail "nothing recorded"
read_tree second
read -r seq used wasted misses1 misses2 <<< \
  "$(ra_stat second learn_sequence_pages replay_used_pages replay_wasted_pages) \
   $(ra_stat first page_misses) $(ra_stat second page_misses)"
info "recorded $recorded pages; replay: sequence $seq, used $used," \
  "wasted $wasted; misses $misses1 -> $misses2"
[ "$seq" -eq "$recorded" ] || fail "sequence $seq pages, recorded $recorded"
[ "$used" -ge $((seq * 9 / 10)) ] ||
  fail "the kernel read only $used of $seq pages through the replay"
[ "$misses2" -lt "$misses1" ] || fail "the replay did not save misses"
