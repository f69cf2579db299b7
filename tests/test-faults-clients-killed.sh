#!/usr/bin/env bash
# ra-cache under injected faults (helpers and the health checks that end
# every case: tests/faults.sh).
#
# Clients that vanish with reads in flight: over a 20 ms backend,
# ra-bench (seq at depth 16, random, interleaved streams, 4
# connections) and an nbdsh client with 48 aio reads outstanding are
# killed with SIGKILL while the stats show backend reads in flight and
# prefetch active, several times in a row; then a new client reads the
# whole export through ra-cache and gets exactly the source.

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"
. "$top_srcdir/tests/faults.sh"

size=$((32 * 1024 * 1024))
random_file "$tmpdir/data" "$size"

# ---- clients killed with reads in flight --------------------------------
# nbdkit 1.32.4 and 1.32.5 (and 1.33 before 1.33.10) abort when a client
# hangs up with several replies pending on one connection: one of its
# worker threads fails to send (EPIPE) and closes the socket, another
# then reaches "raw_send_socket: Assertion `sock >= 0' failed" (fixed
# upstream by "server: Don't assert on send if client hangs up early",
# nbdkit commit 9d82aa4f).  The front without ra-cache does the same.  On
# those versions the front serves each connection with one thread
# (--threads=1): connections still run in parallel, and so do the
# filter's background reads.
threads=()
v=$("$NBDKIT" --version | awk '{ print $2; exit }')
if printf '1.32.4\n%s\n' "$v" | sort -C -V &&
   printf '%s\n1.33.10\n' "$v" | sort -C -V && [ "$v" != 1.33.10 ]; then
  threads=(--threads=1)
  info "b: nbdkit $v aborts when a client hangs up with replies pending" \
       "(fixed in 1.33.10): the front runs with --threads=1"
fi
start_server backb --filter=delay file "$tmpdir/data" rdelay=20ms
start_server frontb "${threads[@]}" -v --filter="$FILTER" \
  nbd socket="$(sock backb)" ra-cache-stats-socket="$tmpdir/frontb-stats.sock" \
  ra-max=4M ra-io-max=256K ra-cache-size=8M

cat > "$tmpdir/aio.py" <<'EOF'
import os, random
h = nbd.NBD ()
h.connect_uri (os.environ["URI"])
size = h.get_size ()
r = random.Random (int (os.environ["SEED"]))
off = r.randrange (0, size // 2) & ~4095
n = 0
# 48 reads of 256 KiB always outstanding, never waited for: sequential
# runs (readahead) and now and then a random one.
while True:
    while h.aio_in_flight () < 48:
        if n % 3 == 2:
            o = r.randrange (0, size - 262144)
        else:
            o, off = off, (off + 262144) % (size - 262144)
        h.aio_pread (nbd.Buffer (262144), o, completion=lambda *a: 1)
        n += 1
    h.poll (-1)
EOF

clients=(
  "$BENCH -u $(uri frontb) -p seq -s 64K -d 16 -t 20"
  "$BENCH -u $(uri frontb) -p random -s 16K -d 16 -t 20 --seed $seed"
  "$BENCH -u $(uri frontb) -p interleaved --streams 8 -s 32K -d 8 -t 20"
  "$BENCH -u $(uri frontb) -p multiconn -c 4 -s 64K -d 4 -t 20"
  aio
  "$BENCH -u $(uri frontb) -p seq -s 4K -d 16 --offset $((size / 3)) -t 20"
  aio
)
kills=0
for spec in "${clients[@]}"; do
  if [ "$spec" = aio ]; then
    run_py "$tmpdir/aio.py" URI="$(uri frontb)" SEED="$((seed + kills))" \
      >/dev/null 2>&1 &
  else
    # shellcheck disable=SC2086
    timeout "$T" $spec >/dev/null 2>&1 &
  fi
  pid=$!
  client_pids+=("$pid")
  # Kill it while backend reads are in flight, after a random delay.
  sleep "0.$((RANDOM % 6 + 2))"
  for ((i = 0; i < 100; i++)); do
    inflight=$(live_stat frontb inflight_now)
    [ "$inflight" -gt 0 ] && break
    sleep 0.05
  done
  [ "$inflight" -gt 0 ] ||
    fail "b: no backend read in flight under the client: $spec"
  # SIGKILL the client and its wrappers (the client first): its socket
  # closes with replies outstanding.
  kill_tree "$pid"
  wait "$pid" 2>/dev/null || true
  kills=$((kills + 1))
  what=${spec#*-p }
  info "b: killed a client (${what%% -t*}) with $inflight backend reads in flight"
done
async_pages=$(live_stat frontb async_pages)
[ "$async_pages" -gt 0 ] || fail "b: no prefetch happened: the case proved nothing"
# A new client gets exactly the source.
timeout "$T" nbdcopy "$(uri frontb)" "$tmpdir/copy-b" ||
  fail "b: nbdcopy through ra-cache failed after the kills"
cmp "$tmpdir/data" "$tmpdir/copy-b" ||
  fail "b: the export read through ra-cache after the kills is wrong"
rm -f "$tmpdir/copy-b"
healthy frontb "$tmpdir/data"
stop_clean frontb
stop_server backb
info "b: $kills clients killed mid-read ($async_pages pages prefetched); a new client read all $size bytes right; nothing left in flight"
