#!/usr/bin/env bash
# ra-cache under injected faults (helpers and the health checks that end
# every case: tests/faults.sh).
#
# Shutdown with prefetches in flight: a sequential reader over a 50 ms
# backend with ra-mode=kernel (adaptive mode would keep a window below
# the congestion threshold), ra-max=64M, ra-io-max=256K and
# ra-congestion=wait (so async reads queue up rather than being
# skipped); when many reads are
# queued and running the front gets SIGTERM.  It must exit within 10 s,
# status 0 or 143, no crash; ra-cache-stats=FILE must be written, be
# valid JSON and show nothing in flight; the reader must end (with an
# error: its server went away) rather than hang; the stats socket is
# removed.

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"
. "$top_srcdir/tests/faults.sh"

# ---- SIGTERM with prefetches queued and running --------------------------
start_server backc --filter=delay pattern 4G rdelay=50ms
front frontc backc ra-mode=kernel ra-max=64M ra-io-max=256K ra-cache-size=256M \
  ra-max-background=4 ra-congestion=wait \
  ra-cache-stats="$tmpdir/exit-stats.json"
timeout "$T" "$BENCH" -u "$(uri frontc)" -p seq -s 64K -d 2 -t 40 \
  > "$tmpdir/c-bench.out" 2>&1 &
bench_pid=$!
client_pids+=("$bench_pid")
for ((i = 0; i < 200; i++)); do
  v=$(live_stat frontc inflight_now cache_pages_inflight)
  read -r inflight pages <<<"$v"
  [ "$inflight" -ge 12 ] && break
  sleep 0.05
done
[ "$inflight" -ge 12 ] ||
  fail "c: only $inflight backend reads in flight: prefetch did not queue up"
# Still serving under that load (the pattern plugin: each 8-byte word
# holds its own offset).
timeout "$T" nbdsh -u "$(uri frontc)" -c '
off = 3 << 30
assert h.pread (8, off) == off.to_bytes (8, "big")
' || fail "c: the front does not answer a read under load"
pid=$(server_pid frontc)
rm -f "$tmpdir/frontc.bgpid"       # this case stops it itself
t0=$(date +%s.%N)
kill -TERM "$pid"
for ((i = 0; i < 100; i++)); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$pid" 2>/dev/null; then
  kill -KILL "$pid"
  wait "$pid" || true
  fail "c: the front did not exit within 10 s of SIGTERM" \
       "with $inflight reads in flight"
fi
status=0
wait "$pid" || status=$?
secs=$(python3 -c "print ('%.2f' % ($(date +%s.%N) - $t0))")
case $status in
  0|143) ;;
  *) fail "c: the front exited with status $status (crash?)" ;;
esac
no_crash frontc
[ ! -e "$tmpdir/frontc-stats.sock" ] || fail "c: stats socket left behind"
[ -s "$tmpdir/exit-stats.json" ] || fail "c: ra-cache-stats file not written"
python3 - "$tmpdir/exit-stats.json" <<'EOF' || fail "c: bad ra-cache-stats file"
import json, sys
d = json.load (open (sys.argv[1]))
for k in ("client_reads", "async_pages", "backend_reads", "inflight_now",
          "cache_pages_inflight", "cache_pages", "cache_capacity_pages"):
    assert isinstance (d[k], int), k
assert d["client_reads"] > 0 and d["async_pages"] > 0, d
assert d["inflight_now"] == 0, "in flight at exit: %d" % d["inflight_now"]
assert d["cache_pages_inflight"] == 0, \
    "pages in flight at exit: %d" % d["cache_pages_inflight"]
EOF
status=0
wait "$bench_pid" || status=$?
[ "$status" -ne 124 ] || fail "c: the reader hung after its server exited"
[ -f "$tmpdir/backc.bgpid" ] && kill -0 "$(server_pid backc)" ||
  fail "c: the backend died"
stop_server backc
info "c: SIGTERM with $inflight backend reads in flight ($pages pages in flight): exited in $secs s; stats file valid; the reader ended (status $status)"
