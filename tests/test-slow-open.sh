#!/usr/bin/env bash
# Slow opens and probe clients never cost read-ahead for good (issue 23,
# rows 1 and 2), against nbdkit's delay filter under ra-cache:
#
# 1. a backend whose every open takes 3.5 s (an ssh or VDDK login over a
#    WAN; longer than the 3 s after which an open used to count as
#    waiting in a server's backlog): the background connection opened
#    while the first client streams is kept, and three later clients get
#    read-ahead through it;
# 2. a backend whose opens take 600 ms, and probe clients (nbdinfo
#    --size, qemu-img info) that leave before the background open is
#    answered: the next streaming client gets read-ahead.
#
# In both the pool's limit stays at its one connection and nothing counts
# as a sign of a connection limit (backend_connections_late).

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"
requires nbdinfo qemu-img

# stream NAME MIB: one client reads MIB MiB from the start of server
# NAME in 256 KiB reads, checking the pattern plugin's data (each 8-byte
# word holds its own offset).
cat > "$tmpdir/stream.py" <<'EOF'
import os, struct
h = nbd.NBD ()
h.connect_uri (os.environ["URI"])
bs = 256 * 1024
for off in range (0, int (os.environ["MIB"]) << 20, bs):
    b = h.pread (bs, off)
    assert struct.unpack_from (">Q", b, 8) == (off + 8,), "wrong data at %d" % off
h.shutdown ()
EOF
stream ()
{
  run_py "$tmpdir/stream.py" URI="$(uri "$1")" MIB="$2" ||
    fail "$1: a streaming client failed"
}

# ---- 1. every open takes 3.5 s ---------------------------------------
start_server slow -v --filter="$FILTER" --filter=delay pattern 1G \
  delay-open=3500ms ra-cache-stats="$tmpdir/slow.json" \
  ra-cache-stats-socket="$tmpdir/slow-stats.sock"
stream slow 32
read -r a0 < <(live_stat slow async_pages)
for i in 1 2 3; do
  stream slow 32
done
read -r a1 conns limit late < <(live_stat slow async_pages \
  backend_connections backend_connection_limit backend_connections_late)
info "slow opens: async pages $a0 for the first client, $((a1 - a0)) for" \
     "the next three; connections $conns, limit $limit, late $late"
[ "$conns" = 1 ] || fail "slow opens: $conns background connections, not 1"
[ "$limit" = 1 ] || fail "slow opens: the limit fell to $limit"
[ "$late" = 0 ] || fail "slow opens: a slow open counted as a connection limit"
(( a1 - a0 > 4096 )) ||
  fail "slow opens: the later clients got no read-ahead ($((a1 - a0)) async pages)"
stop_server slow || fail "slow opens: the front did not stop cleanly"

# ---- 2. probe clients before the first stream --------------------------
start_server probe -v --filter="$FILTER" --filter=delay pattern 1G \
  delay-open=600ms ra-cache-stats="$tmpdir/probe.json" \
  ra-cache-stats-socket="$tmpdir/probe-stats.sock"
size=$(timeout "$CLIENT_TIMEOUT" nbdinfo --size "$(uri probe)") ||
  fail "probe: nbdinfo failed"
[ "$size" = $((1 << 30)) ] || fail "probe: nbdinfo says $size bytes"
timeout "$CLIENT_TIMEOUT" qemu-img info "$(uri probe)" > /dev/null ||
  fail "probe: qemu-img info failed"
# The background open under way when the probes left is answered 600 ms
# after it began: give it that, as a user's next command would.
sleep 1
stream probe 32
read -r apages conns limit late < <(live_stat probe async_pages \
  backend_connections backend_connection_limit backend_connections_late)
info "probes: then a stream of 32 MiB: async pages $apages, connections" \
     "$conns, limit $limit, late $late"
[ "$limit" = 1 ] || fail "probes: the limit fell to $limit"
[ "$late" = 0 ] || fail "probes: a probe's leaving counted as a connection limit"
(( apages > 4096 )) || fail "probes: the stream got no read-ahead ($apages async pages)"
stop_server probe || fail "probes: the front did not stop cleanly"
info "ok"
