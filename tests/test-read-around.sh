#!/usr/bin/env bash
# Read around the cache: a client whose own reads keep the backend busy
# (qemu-img convert: 8 reads of 2 MiB in flight) gets no read-ahead
# (async_covered), and its requests, when none of their pages is cached,
# are read straight into its buffer without making pages
# (read_around_pages).  The data must be right; data read a second time
# must be kept, as after drop-behind, so that a third pass hits the
# cache.
test_needs="nbdkit filter"
. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

requires qemu-img md5sum

size=$((48 * 1024 * 1024))
random_file "$tmpdir/disk.img" "$size"
want=$(md5sum < "$tmpdir/disk.img")

start_server back -r --filter=delay file "$tmpdir/disk.img" rdelay=1ms

convert ()  # convert PASS: copy the export, check it
{
  rm -f "$tmpdir/copy.img"
  timeout "$CLIENT_TIMEOUT" qemu-img convert -f raw -O raw -m 8 \
    "$(uri front)" "$tmpdir/copy.img" ||
    fail "pass $1: qemu-img convert through ra-cache failed"
  [ "$(md5sum < "$tmpdir/copy.img")" = "$want" ] || fail "pass $1: wrong data"
}

# Pass 1 on a fresh front.  A convert that the read-ahead kept ahead of
# from its first read to its last (it missed no page but the first: it
# never waited, so it never kept reads in flight and was not covered)
# is a client slower than the backend, served as it should be, but not
# the case under test: seen once in a make check beside other tests.
# So is one covered for only part of its job, with less than a quarter
# of it read around (a make check, 2026-12-06: 5 windows covered, 1,024
# pages read around, 1,027 missed; alone the same build read 9,216-11,264
# around in 4 runs of 4).  Such a pass is run again on a fresh front, at
# most three times.
for try in 1 2 3; do
  start_front front back ra-cache-stats-socket="$tmpdir/front-stats.sock"
  convert 1
  read -r around1 covered1 pages1 misses1 <<<"$(live_stat front \
    read_around_pages async_covered cache_pages page_misses)"
  info "pass 1 (try $try): read_around_pages=$around1" \
       "async_covered=$covered1 cache_pages=$pages1 page_misses=$misses1"
  (( ((covered1 == 0 && misses1 <= 1) || around1 < size / 4096 / 4) &&
     try < 3 )) || break
  info "pass 1: convert was not covered for most of its job; again"
  stop_server front || fail "the front did not stop cleanly"
done
(( covered1 > 0 )) || fail "pass 1: convert's reads were never covered"
# Most of it, but not always half: on a loaded machine convert is now
# and then not covered for part of its job (most likely let go by the
# covered-but-calm rule, after 8 calm base latencies: 8 ms here).  Pass 1
# read 8,704-11,264 of these 12,288 pages around in 23 of 24 runs beside
# a CPU hog and 3,584 in one (with 3ff50b0, before 5514025; after it,
# once 3,584 in a make check).
(( around1 >= size / 4096 / 4 )) ||
  fail "pass 1: less than a quarter of the export read around ($around1 pages)"
(( misses1 >= around1 )) || fail "pass 1: read-around pages not counted as misses"
(( pages1 * 4 < size / 4096 )) ||
  fail "pass 1: data read once was kept ($pages1 pages cached)"

convert 2
read -r around2 pages2 <<<"$(live_stat front read_around_pages cache_pages)"
info "pass 2: read_around_pages=$around2 cache_pages=$pages2"
(( pages2 >= size / 4096 / 2 )) ||
  fail "pass 2: data read again was not kept ($pages2 pages cached)"

read -r hits2 bbytes2 <<<"$(live_stat front page_hits backend_bytes)"
convert 3
read -r hits3 bbytes3 <<<"$(live_stat front page_hits backend_bytes)"
info "pass 3: page_hits +$((hits3 - hits2)) backend_bytes +$((bbytes3 - bbytes2))"
(( hits3 - hits2 >= size / 4096 / 2 )) || fail "pass 3: the kept data did not hit"
(( bbytes3 - bbytes2 < size / 2 )) || fail "pass 3: the backend read it all again"
stop_server front || fail "the front did not stop cleanly"
info PASS
