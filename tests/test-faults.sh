#!/usr/bin/env bash
# ra-cache under injected faults.  Every client runs under `timeout`;
# after each case the front must still be healthy: it answers a read
# with the right data, and once the load has stopped its live stats
# (ra-cache-stats-socket) settle to inflight_now == 0 (no backend read
# running or queued) and cache_pages_inflight == 0 (no placeholder page
# left that nothing will ever complete).  Where a case ends the front, it
# must exit within a bound of SIGTERM with status 0 or 143 and with no
# "Assertion" or "Segmentation" in its log.
#
# a. A backend that stalls for seconds: the backend server has nbdkit's
#    pause filter; while three clients (two sequential readers, one
#    random reader) read through ra-cache, the test pauses the backend
#    for STALL seconds and resumes it.  During the stall the front's
#    stats show reads in flight and its stats socket still answers; after
#    it every read completes with the right data, and some client saw a
#    read last about as long as the stall (so the stall really hit).
# b. Clients that vanish with reads in flight: over a 20 ms backend,
#    ra-bench (seq at depth 16, random, interleaved streams, 4
#    connections) and an nbdsh client with 48 aio reads outstanding are
#    killed with SIGKILL while the stats show backend reads in flight and
#    prefetch active, several times in a row; then a new client reads the
#    whole export through ra-cache and gets exactly the source.
# c. Shutdown with prefetches in flight: a sequential reader over a 50 ms
#    backend with ra-mode=kernel (adaptive mode would keep a window below
#    the congestion threshold), ra-max=64M, ra-io-max=256K and
#    ra-congestion=wait (so async reads queue up rather than being
#    skipped); when many reads are
#    queued and running the front gets SIGTERM.  It must exit within 10 s,
#    status 0 or 143, no crash; ra-cache-stats=FILE must be written, be
#    valid JSON and show nothing in flight; the reader must end (with an
#    error: its server went away) rather than hang; the stats socket is
#    removed.
# d. Failing writes: the backend has the error filter failing pwrite,
#    zero and trim (100%, switched on by a file).  A region is read (and
#    cached, checked by page_hits), then a write, a zero and a trim into
#    it fail with EIO; reading it through ra-cache afterwards returns
#    exactly what the backend holds (read directly), which is still the
#    original data: nothing of the failed write was cached.  With errors
#    off, the same operations succeed and are visible through ra-cache.
#
# RA_CACHE_TEST_SEED picks the random choices (printed on each run).

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

requires cmp pgrep python3 nbdcopy
BENCH=$top_builddir/ra-bench
[ -x "$BENCH" ] || fail "ra-bench is not built: $BENCH"

seed=${RA_CACHE_TEST_SEED:-$RANDOM}
info "seed $seed"
RANDOM=$seed

# Clients still running when the test ends (it failed) are killed first:
# nbdkit does not exit on SIGTERM while an idle client stays connected.
client_pids=()
kill_tree ()
{
  local c
  for c in $(pgrep -P "$1" || true); do
    kill_tree "$c"
  done
  kill -KILL "$1" 2>/dev/null || true
}
trap 'st=$?; for p in "${client_pids[@]}"; do kill_tree "$p"; done
      (exit $st); cleanup' EXIT

# Every client command gets this long before it counts as a hang.
T=60
CLIENT_TIMEOUT=$T                       # run_py's
STALL=${STALL:-3}

# ---- helpers ---------------------------------------------------------------
# live_stat (tests/functions.sh) reads a running front's stats socket.

# settled NAME: wait (up to 15 s) until nothing is in flight in the
# front: no backend read running or queued, no page in flight.
settled ()
{
  local name=$1 i inflight pages
  for ((i = 0; i < 150; i++)); do
    v=$(live_stat "$name" inflight_now cache_pages_inflight)
    read -r inflight pages <<<"$v"
    [ "$inflight" = 0 ] && [ "$pages" = 0 ] && return 0
    sleep 0.1
  done
  fail "$name: still in flight 15 s after the load stopped:" \
       "inflight_now=$inflight cache_pages_inflight=$pages"
}

# healthy NAME SOURCE: the front answers reads with the right data
# (64 KiB at a few places, compared with SOURCE) and settles.
healthy ()
{
  local name=$1 src=$2
  timeout "$T" nbdsh -u "$(uri "$name")" -c "
with open ('$src', 'rb') as f:
    src = f.read ()
size = h.get_size ()
for off in (0, 4096 * 77 + 5, size // 2, size - 65536):
    assert h.pread (65536, off) == src[off:off + 65536], \
        'wrong data at %d' % off
" || fail "$name does not answer reads correctly any more"
  settled "$name"
}

# no_crash NAME: nothing in the server's log says it crashed.
no_crash ()
{
  if grep -E 'Assertion|Segmentation|double free|corrupted' \
       "$tmpdir/$1.log" >&2; then
    fail "$1: its log reports a crash"
  fi
}

# stop_clean NAME: SIGTERM, exit within 30 s, status 0 or 143 (from
# stop_server), nothing in the log.
stop_clean ()
{
  stop_server "$1" || fail "$1 did not stop cleanly"
  no_crash "$1"
}

# front NAME BACKEND [PARAMS...]: a ra-cache front with a stats socket.
front ()
{
  local name=$1 back=$2; shift 2
  start_front "$name" "$back" ra-cache-stats-socket="$tmpdir/$name-stats.sock" "$@"
}

size=$((32 * 1024 * 1024))
random_file "$tmpdir/data" "$size"

# ---- a. a backend that stalls ----------------------------------------------
start_server backa --filter=pause --filter=delay file "$tmpdir/data" \
  rdelay=2ms pause-control="$tmpdir/pause.ctl"
front fronta backa ra-max=1M ra-cache-size=4M

cat > "$tmpdir/pause.py" <<'EOF'
import socket, sys
s = socket.socket (socket.AF_UNIX)
s.settimeout (20)
s.connect (sys.argv[1])
s.sendall (sys.argv[2].encode ())
reply = s.recv (1).decode ()
assert reply == sys.argv[2].upper (), "pause filter replied %r" % reply
EOF

cat > "$tmpdir/reader.py" <<'EOF'
import os, random, time
with open (os.environ["SOURCE"], "rb") as f:
    src = f.read ()
h = nbd.NBD ()
h.connect_uri (os.environ["URI"])
size = h.get_size ()
mode, stop = os.environ["MODE"], os.environ["STOP"]
r = random.Random (int (os.environ["SEED"]))
off = int (os.environ.get ("START", "0"))
n = 0
worst = 0.0
while not os.path.exists (stop):
    if mode == "seq":
        count = 65536
        if off + count > size:
            off = 0
    else:
        count = r.choice ([4096, 512, 65536, r.randrange (1, 200000)])
        off = r.randrange (0, size - count)
    t0 = time.monotonic ()
    buf = h.pread (count, off)
    worst = max (worst, time.monotonic () - t0)
    assert buf == src[off:off + count], \
        "%s reader: wrong data in %d bytes at %d" % (mode, count, off)
    n += 1
    if mode == "seq":
        off += count
    time.sleep (0.002)
h.shutdown ()
with open (os.environ["OUT"], "w") as f:
    f.write ("%d %.3f\n" % (n, worst))
EOF

rm -f "$tmpdir/stop-a"
pids=()
for spec in seq:0 seq:$((size / 2)) random:0; do
  run_py "$tmpdir/reader.py" URI="$(uri fronta)" SOURCE="$tmpdir/data" \
    MODE="${spec%%:*}" START="${spec#*:}" STOP="$tmpdir/stop-a" \
    SEED="$((seed + ${#pids[@]}))" OUT="$tmpdir/a-${#pids[@]}.out" &
  pids+=($!)
  client_pids+=("$!")
done
sleep 1
timeout 30 python3 "$tmpdir/pause.py" "$tmpdir/pause.ctl" p ||
  fail "could not pause the backend"
info "a: backend paused for $STALL s"
sleep 1
inflight=$(live_stat fronta inflight_now)
[ "$inflight" -gt 0 ] ||
  fail "a: nothing in flight while the backend is paused: did the stall hit?"
sleep $((STALL - 1))
timeout 30 python3 "$tmpdir/pause.py" "$tmpdir/pause.ctl" r ||
  fail "could not resume the backend"
sleep 1
touch "$tmpdir/stop-a"
for i in "${!pids[@]}"; do
  wait "${pids[i]}" || fail "a: reader $i failed (or hung past $CLIENT_TIMEOUT s)"
done
worst=0 total=0
for i in "${!pids[@]}"; do
  read -r n w < "$tmpdir/a-$i.out"
  total=$((total + n))
  worst=$(python3 -c "print (max ($worst, $w))")
done
python3 -c "import sys; sys.exit (0 if $worst >= $STALL - 1.5 else 1)" ||
  fail "a: the slowest read took $worst s: the ${STALL} s stall did not reach the clients"
healthy fronta "$tmpdir/data"
stop_clean fronta
stop_server backa
info "a: $total reads right across a $STALL s backend stall (slowest $worst s); nothing left in flight"

# ---- b. clients killed with reads in flight --------------------------------
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

# ---- c. SIGTERM with prefetches queued and running --------------------------
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

# ---- d. failing writes -----------------------------------------------------
cp "$tmpdir/data" "$tmpdir/disk"
start_server backd --filter=error file "$tmpdir/disk" \
  error-pwrite-rate=100% error-pwrite-file="$tmpdir/werr" \
  error-zero-rate=100% error-zero-file="$tmpdir/werr" \
  error-trim-rate=100% error-trim-file="$tmpdir/werr"
front frontd backd ra-max=256K

cat > "$tmpdir/writes.py" <<'EOF'
import errno, os, random
SOURCE, ERR, STATS = os.environ["SOURCE"], os.environ["ERR"], os.environ["STATS"]
with open (SOURCE, "rb") as f:
    src = f.read ()
import json, socket
def stat (key):
    s = socket.socket (socket.AF_UNIX)
    s.settimeout (10)
    s.connect (STATS)
    data = b""
    while True:
        b = s.recv (65536)
        if not b:
            break
        data += b
    return json.loads (data)[key]

h = nbd.NBD ()
h.connect_uri (os.environ["URI"])
back = nbd.NBD ()
back.connect_uri (os.environ["BACK"])
r = random.Random (int (os.environ["SEED"]))
MiB = 1 << 20
lo, n = MiB, 256 * 1024                  # the region
expect = bytearray (src[lo:lo + n])

def region_ok (what):
    a = h.pread (n, lo)
    b = back.pread (n, lo)
    assert b == expect, "%s: the backend holds something unexpected" % what
    assert a == b, "%s: ra-cache returns other data than the backend" % what

# Cache the region and check that it is cached.
region_ok ("first read")
hits = stat ("page_hits")
region_ok ("second read")
assert stat ("page_hits") >= hits + n // 4096, "the region was not cached"

ops = [("pwrite", lambda o, k: h.pwrite (r.randbytes (k), o)),
       ("zero", lambda o, k: h.zero (k, o)),
       ("trim", lambda o, k: h.trim (k, o))]
failed = 0
open (ERR, "w").close ()
for name, op in ops * 3:
    k = r.choice ([1, 511, 4096, 5000, 65536 + 3])
    o = lo + r.randrange (0, n - k)
    try:
        op (o, k)
    except nbd.Error as e:
        assert e.errnum == errno.EIO, "%s: error %s, not EIO" % (name, e)
        failed += 1
    else:
        raise AssertionError ("%s of %d at %d succeeded with errors on" %
                              (name, k, o))
    region_ok ("after a failed %s of %d at %d" % (name, k, o))
os.unlink (ERR)

# With errors off the same operations work and show through ra-cache.
for i in range (6):
    k = r.choice ([1, 511, 4096, 5000, 65536 + 3])
    o = lo + r.randrange (0, n - k)
    if i % 3 == 0:
        data = r.randbytes (k)
        h.pwrite (data, o)
    elif i % 3 == 1:
        data = bytes (k)
        h.zero (k, o)
    else:
        h.trim (k, o)
        # Trimmed bytes are what the backend says they are.
        data = back.pread (k, o)
    expect[o - lo:o - lo + k] = data
    region_ok ("after a %s of %d at %d" % (("pwrite", "zero", "trim")[i % 3],
                                           k, o))
print ("failed writes: %d" % failed)
h.shutdown ()
back.shutdown ()
EOF
run_py "$tmpdir/writes.py" URI="$(uri frontd)" BACK="$(uri backd)" \
  SOURCE="$tmpdir/data" ERR="$tmpdir/werr" SEED="$seed" \
  STATS="$tmpdir/frontd-stats.sock" > "$tmpdir/d.out" ||
  fail "d: failing writes broke the cache"
invalidated=$(live_stat frontd invalidated_pages)
[ "$invalidated" -gt 0 ] || fail "d: no page was invalidated"
cp "$tmpdir/disk" "$tmpdir/disk-now"
healthy frontd "$tmpdir/disk-now"
stop_clean frontd
stop_server backd
info "d: $(cat "$tmpdir/d.out"); the cache always returned the backend's data"
