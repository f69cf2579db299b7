#!/usr/bin/env bash
# ra-cache under injected faults (helpers and the health checks that end
# every case: tests/faults.sh).
#
# A backend that stalls for seconds: the backend server has nbdkit's
# pause filter; while three clients (two sequential readers, one
# random reader) read through ra-cache, the test pauses the backend
# for STALL seconds and resumes it.  During the stall the front's
# stats show reads in flight and its stats socket still answers; after
# it every read completes with the right data, and some client saw a
# read last about as long as the stall (so the stall really hit).

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"
. "$top_srcdir/tests/faults.sh"

size=$((32 * 1024 * 1024))
random_file "$tmpdir/data" "$size"

# ---- a backend that stalls ----------------------------------------------
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
