#!/usr/bin/env bash
# A backend killed (SIGKILL) and restarted under a connected client
# (issue 12, item 6): the front survives, the background connections are
# reopened (backend_reconnects), and a new client gets correct,
# prefetched data.
. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"
requires nbdcopy sha256sum
CLIENT_TIMEOUT=60

# ---- a backend killed and restarted under a connected client --------
start_server back pattern 64M
start_front f4 back ra-cache-stats-socket="$tmpdir/f4-stats.sock"
cat > "$tmpdir/restart.py" <<'PY'
import os, time
import nbd
h = nbd.NBD ()
h.connect_uri (os.environ["URI"])
off = 0
for i in range (64):          # 8M sequentially: prefetch running
    h.pread (128 * 1024, off); off += 128 * 1024
open (os.environ["READY"], "w").close ()
while not os.path.exists (os.environ["GO"]):
    time.sleep (0.05)
errors = 0
off = 32 << 20                # not read ahead before the kill
for i in range (64):          # the backend restarted: this context is dead
    try:
        h.pread (128 * 1024, off)
    except nbd.Error:
        errors += 1
    off += 128 * 1024
print ("reads failed after the restart:", errors)
while not os.path.exists (os.environ["DONE"]):
    time.sleep (0.05)
PY
run_py "$tmpdir/restart.py" URI="$(uri f4)" READY="$tmpdir/ready" \
  GO="$tmpdir/go" DONE="$tmpdir/done" &
client=$!
for ((i = 0; i < 300; i++)); do [ -e "$tmpdir/ready" ] && break; sleep 0.1; done
[ -e "$tmpdir/ready" ] || fail "the client did not start reading"
kill -KILL "$(server_pid back)"
wait "$(server_pid back)" 2>/dev/null || true
rm -f "$tmpdir/back.bgpid"
start_server back pattern 64M
touch "$tmpdir/go"
# A new client while the first one stays connected: the background
# connections still point at the old server; its reads find them dead,
# and they are reopened.
apages=$(live_stat f4 async_pages)
want=$(timeout "$CLIENT_TIMEOUT" nbdcopy "$(uri back)" - | sha256sum)
got=$(timeout "$CLIENT_TIMEOUT" nbdcopy "$(uri f4)" - | sha256sum)
[ "$got" = "$want" ] || fail "after the restart: wrong data"
read -r rec conns apages2 < <(live_stat f4 backend_reconnects \
                               backend_connections async_pages)
touch "$tmpdir/done"
wait "$client" || fail "the client across the restart failed or hung"
info "restart: reconnects $rec connections $conns;" \
     "async pages $apages before the new client, $apages2 after"
[ "$rec" -gt 0 ] || fail "the background connections were not reopened"
[ "$apages2" -gt $((apages + 1024)) ] ||
  fail "after the restart: no prefetch for a new client"
term_within f4 5
