#!/usr/bin/env bash
# Congestion: a backend with few threads and a few ms of delay, a
# sequential reader and a random reader at once.  With ra-congestion=skip
# the stats show skipped async parts; with wait, delayed ones (both in
# kernel mode, the fixed threshold); in adaptive mode (the defaults) the
# measured estimate: a base latency of at least the backend's 3 ms, and
# backend slots from 1 to the threshold.  Once the load ends no empty
# placeholder page (in flight, never to be read) stays in the cache.
# Data read is checked against the pattern plugin.
set -euo pipefail
export PATH=/usr/bin:/bin:$PATH
filter=${top_builddir:-.}/plugins/ra-cache/.libs/nbdkit-ra-cache-filter.so
bench=${top_builddir:-.}/ra-bench
[ -f "$filter" ] && [ -x "$bench" ] || { echo "FAIL: build first"; exit 1; }
d=$(mktemp -d /tmp/ra-congestion.XXXXXX)
cleanup () {
  for p in "$d"/*.pid; do [ -f "$p" ] && kill "$(cat "$p")" 2>/dev/null; done
  sleep 0.3; rm -rf "$d"
}
trap cleanup EXIT INT TERM
fail () { echo "FAIL: $*"; exit 1; }
wait_sock () { for _ in $(seq 100); do [ -S "$1" ] && return 0; sleep 0.1; done; fail "no socket $1"; }
stat_of () {  # stat_of SOCKET KEY
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
data = b""
while True:
    b = s.recv(65536)
    if not b: break
    data += b
print(json.loads(data)[sys.argv[2]])
PY
}

"${NBDKIT:-nbdkit}" -t 2 -U "$d/back.sock" -P "$d/back.pid" --filter=delay pattern 2G rdelay=3ms
wait_sock "$d/back.sock"

for policy in skip wait adaptive; do
  rm -f "$d/front.sock"
  # 256K backend reads: a 4M window is 16 of them, over the threshold of 9
  # (kernel mode: adaptive mode keeps a window below the threshold).
  if [ $policy = adaptive ]; then
    args=()
  else
    args=(ra-mode=kernel ra-max=4M ra-io-max=256K ra-congestion=$policy)
  fi
  "${NBDKIT:-nbdkit}" -U "$d/front.sock" -P "$d/front.pid" --filter="$filter" \
    nbd socket="$d/back.sock" "${args[@]}" \
    ra-cache-stats-socket="$d/stats.sock"
  wait_sock "$d/front.sock"
  uri="nbd+unix:///?socket=$d/front.sock"
  "$bench" -u "$uri" -p seq -s 64K -d 1 -t 3 > "$d/seq.txt" &
  s=$!
  "$bench" -u "$uri" -p random -s 4K -d 4 -t 3 --seed 3 > "$d/rand.txt" &
  r=$!
  wait $s || fail "$policy: sequential reader failed"
  wait $r || fail "$policy: random reader failed"
  # Drain: background reads finish within a few backend round trips.
  for _ in $(seq 50); do
    [ "$(stat_of "$d/stats.sock" inflight_now)" = 0 ] && break; sleep 0.1
  done
  skipped=$(stat_of "$d/stats.sock" async_skipped)
  delayed=$(stat_of "$d/stats.sock" async_delayed)
  inflight_pages=$(stat_of "$d/stats.sock" cache_pages_inflight)
  echo "$policy: async parts skipped $skipped, delayed $delayed, pages in flight after the load $inflight_pages"
  [ "$inflight_pages" = 0 ] || fail "$policy: $inflight_pages placeholder pages left in flight"
  if [ $policy = adaptive ]; then
    slots=$(stat_of "$d/stats.sock" backend_slots)
    base=$(stat_of "$d/stats.sock" backend_base_latency_us)
    held=$(stat_of "$d/stats.sock" async_held)
    echo "adaptive: backend slots $slots, base latency $base us, async reads held $held"
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
  nbdsh -u "$uri" -c '
import random
random.seed(5)
for i in range(200):
    off = random.randrange(0, (2 << 30) - 65536) & ~7
    buf = h.pread(65536, off)
    for j in range(0, 65536, 4096):
        want = (off + j).to_bytes(8, "big")
        assert buf[j:j+8] == want, "bad data at %d" % (off + j)
' || fail "$policy: data read after congestion is wrong"
  kill "$(cat "$d/front.pid")"
  for _ in $(seq 50); do kill -0 "$(cat "$d/front.pid")" 2>/dev/null || break; sleep 0.1; done
  rm -f "$d/front.pid"
  [ ! -e "$d/stats.sock" ] || fail "stats socket not removed at exit"
done
echo PASS
