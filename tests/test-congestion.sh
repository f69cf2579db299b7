#!/usr/bin/env bash
# Congestion: a backend with few threads and a few ms of delay, a
# sequential reader and a random reader at once.  With ra-congestion=skip
# the stats show skipped async parts; with wait, delayed ones (both in
# kernel mode, the fixed threshold); in adaptive mode (the defaults) the
# measured estimate: a base latency of at least the backend's 3 ms, and
# backend slots from 1 to the threshold.  Once the load ends no empty
# placeholder page (in flight, never to be read) stays in the cache.
# Data read is checked against the pattern plugin.
. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"
bench=$top_builddir/ra-bench
[ -x "$bench" ] || fail "ra-bench is not built: $bench"

start_server back -t 2 --filter=delay pattern 2G rdelay=3ms

for policy in skip wait adaptive; do
  # 256K backend reads: a 4M window is 16 of them, over the threshold of 9
  # (kernel mode: adaptive mode keeps a window below the threshold).
  if [ $policy = adaptive ]; then
    args=()
  else
    args=(ra-mode=kernel ra-max=4M ra-io-max=256K ra-congestion=$policy)
  fi
  front=front_$policy
  start_server "$front" --filter="$FILTER" \
    nbd socket="$(sock back)" ${args[@]+"${args[@]}"} \
    ra-cache-stats-socket="$tmpdir/$front-stats.sock"
  uri=$(uri "$front")
  timeout "$CLIENT_TIMEOUT" "$bench" -u "$uri" -p seq -s 64K -d 1 -t 3 \
    > "$tmpdir/seq.txt" &
  s=$!
  timeout "$CLIENT_TIMEOUT" "$bench" -u "$uri" -p random -s 4K -d 4 -t 3 \
    --seed 3 > "$tmpdir/rand.txt" &
  r=$!
  wait $s || fail "$policy: sequential reader failed"
  wait $r || fail "$policy: random reader failed"
  # Drain: background reads finish within a few backend round trips.
  for _ in $(seq 50); do
    [ "$(live_stat "$front" inflight_now)" = 0 ] && break; sleep 0.1
  done
  read -r skipped delayed inflight_pages <<<"$(live_stat "$front" \
    async_skipped async_delayed cache_pages_inflight)"
  info "$policy: async parts skipped $skipped, delayed $delayed, pages in flight after the load $inflight_pages"
  [ "$inflight_pages" = 0 ] || fail "$policy: $inflight_pages placeholder pages left in flight"
  if [ $policy = adaptive ]; then
    read -r slots base held <<<"$(live_stat "$front" \
      backend_slots backend_base_latency_us async_held)"
    info "adaptive: backend slots $slots, base latency $base us, async reads held $held"
    [ "$slots" -ge 1 ] && [ "$slots" -le 9 ] || fail "adaptive: backend_slots $slots"
    /usr/bin/python3 -c "import sys; sys.exit(not 3000 <= float(sys.argv[1]) < 1e6)" "$base" ||
      fail "adaptive: base latency $base us, the backend delays 3 ms"
    [ "$delayed" = 0 ] || fail "adaptive: the fixed threshold delayed reads with skip"
  elif [ $policy = skip ]; then
    [ "$skipped" -gt 0 ] || fail "skip: no async part was skipped under congestion"
    [ "$delayed" = 0 ] || fail "skip: async reads were delayed"
  else
    [ "$delayed" -gt 0 ] || fail "wait: no async read was held back"
    [ "$skipped" = 0 ] || fail "wait: async parts were skipped"
  fi
  # What the cache holds after all this is still right.
  nbdsh_t -u "$uri" -c '
import random
random.seed(5)
for i in range(200):
    off = random.randrange(0, (2 << 30) - 65536) & ~7
    buf = h.pread(65536, off)
    for j in range(0, 65536, 4096):
        want = (off + j).to_bytes(8, "big")
        assert buf[j:j+8] == want, "bad data at %d" % (off + j)
' || fail "$policy: data read after congestion is wrong"
  stop_server "$front" || fail "$policy: the front did not stop cleanly"
  [ ! -e "$tmpdir/$front-stats.sock" ] || fail "stats socket not removed at exit"
done
info PASS
