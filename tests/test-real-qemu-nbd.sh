#!/usr/bin/env bash
# qemu-nbd behind the filter (issue 12, items 2 and 5), with its defaults
# (one connection at a time), with -t (clients one after the other) and
# with -e 4: no client hangs, data matches, reads are cached (and with
# -e 4 prefetched), the next client is served, SIGTERM ends nbdkit in 5 s.
. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"
requires qemu-nbd qemu-img nbdcopy sha256sum
CLIENT_TIMEOUT=60

qemu_pids=()
kill_qemu ()
{
  local p
  for p in "${qemu_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  return 0
}
at_cleanup kill_qemu

disk=$tmpdir/disk.img
random_file "$disk" $((32 << 20))
want=$(sha256sum < "$disk" | cut -d' ' -f1)

# start_qemu NAME ARGS...: qemu-nbd on $tmpdir/NAME.sock, read-only raw.
start_qemu ()
{
  local name=$1 i; shift
  qemu-nbd -k "$tmpdir/$name.sock" -r -f raw "$@" "$disk" \
    >"$tmpdir/$name.log" 2>&1 &
  qemu_pids+=($!)
  for ((i = 0; i < 100; i++)); do
    [ -S "$tmpdir/$name.sock" ] && return 0
    sleep 0.1
  done
  fail "qemu-nbd $* did not start"
}

# copy_sum NAME: the checksum of the whole export of server NAME.
copy_sum ()
{
  timeout "$CLIENT_TIMEOUT" nbdcopy "$(uri "$1")" - | sha256sum | cut -d' ' -f1
}

# ---- qemu-nbd with its defaults: one client, then it exits ----------
start_qemu q1
start_front f1 q1 ra-cache-stats="$tmpdir/f1.json"
got=$(copy_sum f1)
[ "$got" = "$want" ] || fail "qemu-nbd defaults: wrong data"
term_within f1 5
read -r hits misses < <(file_stat "$tmpdir/f1.json" page_hits page_misses)
info "qemu-nbd defaults: hits $hits misses $misses"
[ "$hits" -gt "$misses" ] || fail "qemu-nbd defaults: reads were not cached"

# ---- qemu-nbd -e 1 -t: clients one after the other -------------------
# The first client's pages read once are given back behind it
# (drop-behind); the second reads the data again, which the cache then
# keeps; the third is served from the cache.
start_qemu q2 -t
start_front f2 q2 ra-cache-stats="$tmpdir/f2.json" \
  ra-cache-stats-socket="$tmpdir/f2-stats.sock"
got=$(copy_sum f2)
[ "$got" = "$want" ] || fail "qemu-nbd -t: wrong data (first client)"
timeout "$CLIENT_TIMEOUT" qemu-img bench -f raw -c 512 -s 64K -S 64K \
  "$(uri f2)" >/dev/null || fail "qemu-nbd -t: qemu-img bench failed or hung"
read -r misses0 < <(live_stat f2 page_misses)
got=$(copy_sum f2)
[ "$got" = "$want" ] || fail "qemu-nbd -t: wrong data (third client)"
read -r misses1 < <(live_stat f2 page_misses)
term_within f2 5
read -r hits misses < <(file_stat "$tmpdir/f2.json" page_hits page_misses)
info "qemu-nbd -t: hits $hits misses $misses, third client $((misses1 - misses0)) misses"
[ $((misses1 - misses0)) -lt 100 ] && [ "$hits" -gt 8000 ] ||
  fail "qemu-nbd -t: the third client was not served from the cache"

# ---- qemu-nbd -e 4 -t: prefetch through the background connections --
start_qemu q3 -e 4 -t
start_front f3 q3 ra-cache-stats="$tmpdir/f3.json"
got=$(copy_sum f3)
[ "$got" = "$want" ] || fail "qemu-nbd -e 4: wrong data"
got=$(copy_sum f3)
[ "$got" = "$want" ] || fail "qemu-nbd -e 4: wrong data (second client)"
term_within f3 5
read -r hits misses apages opens < <(file_stat "$tmpdir/f3.json" \
  page_hits page_misses async_pages backend_connection_opens)
info "qemu-nbd -e 4: hits $hits misses $misses async pages $apages" \
     "connection opens $opens"
[ "$hits" -gt "$misses" ] || fail "qemu-nbd -e 4: reads were not cached"
[ "$apages" -gt 4096 ] || fail "qemu-nbd -e 4: no prefetch"
