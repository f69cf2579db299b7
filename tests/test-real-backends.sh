#!/usr/bin/env bash
# Real NBD servers behind the filter (issue 12, items 2, 5 and 6):
#  - qemu-nbd with its defaults (one connection at a time), and -e 4:
#    no client hangs, data matches, reads are cached (and with -e 4
#    prefetched), the next client is served, SIGTERM ends nbdkit in 5 s;
#  - a backend killed (SIGKILL) and restarted under a connected client:
#    the front survives, the background connections are reopened
#    (backend_reconnects), and a new client gets correct, prefetched data.
. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"
requires qemu-nbd qemu-img nbdcopy sha256sum
CLIENT_TIMEOUT=60

qemu_pids=()
trap 'st=$?; for p in "${qemu_pids[@]}"; do kill "$p" 2>/dev/null || true; done
      (exit $st); cleanup' EXIT

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

# term_within NAME SECS: SIGTERM ends server NAME within SECS seconds.
term_within ()
{
  local pid i
  pid=$(server_pid "$1")
  kill -TERM "$pid"
  for ((i = 0; i < $2 * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null && fail "$1 still runs $2 s after SIGTERM"
  wait "$pid" 2>/dev/null || true
  rm -f "$tmpdir/$1.bgpid"
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
