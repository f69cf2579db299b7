#!/usr/bin/env bash
# ra-cache: writes, trims and zeroes from one connection are seen by the
# others, whatever the cache held or was reading ahead at the time.
#
# Backend: the memory plugin behind a 2 ms read delay (so prefetch reads
# are still in flight when the writes arrive); a ra-cache front reads it
# through the nbd plugin.  The test keeps a model of the export.
#
# 1. Connection A reads a region (caching it and reading ahead of it),
#    sometimes asks for it with NBD_CMD_CACHE first; connection B
#    writes, trims or zeroes part of it (unaligned, sometimes spilling
#    over its ends, sometimes into the part read ahead); A reads the
#    region again: it must see exactly the model.
# 2. While A streams sequentially through the export (so its windows are
#    read ahead), B, in another thread, keeps writing, trimming and
#    zeroing just ahead of A, into pages that are cached or in flight.
#    Every read of A must equal the model.  The two threads only
#    coordinate so that B never touches the bytes A is reading at that
#    moment, which keeps the model exact.
# Finally the whole export read through the front, and read from the
# backend directly, must both equal the model.

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

# The cache holds a quarter of the export, so the streams of part 2 read
# the backend (and ahead) all the way.
start_server back --filter=delay memory 32M rdelay=2ms
start_front front back ra-cache-size=8M ra-max=2M

cat > "$tmpdir/writes.py" <<'EOF'
import os, random, threading, time
rng = random.Random (int (os.environ["SEED"]))
KiB, MiB = 1024, 1024 * 1024

def connect (uri):
    h = nbd.NBD ()
    h.connect_uri (uri)
    return h

A = connect (os.environ["URI"])
B = connect (os.environ["URI"])
size = A.get_size ()
assert B.can_trim () and B.can_zero () and A.can_cache ()
model = bytearray (size)

def verify (h, off, count, what):
    buf = h.pread (count, off)
    exp = bytes (model[off:off + count])
    if buf != exp:
        bad = next (i for i in range (count) if buf[i] != exp[i])
        raise AssertionError ("%s: read of %d at %d: byte %d differs "
                              "(got %d, model %d)" %
                              (what, count, off, off + bad, buf[off + bad - off],
                               exp[bad]))

def do_op (h, op, off, count, r):
    if op == "write":
        data = r.randbytes (count)
        h.pwrite (data, off)
        return data
    if op == "trim":
        h.trim (count, off)
    else:
        h.zero (count, off)
    return bytes (count)        # the memory plugin reads both back as zeroes

# Fill the export through the front.
for off in range (0, size, MiB):
    data = rng.randbytes (MiB)
    B.pwrite (data, off)
    model[off:off + MiB] = data

# ---- 1. read, modify from B, read again ----------------------------------
ops = ["write", "trim", "zero"]
for n in range (90):
    count = rng.randrange (1, 256 * KiB)
    off = rng.randrange (0, size - count)
    if n % 5 == 0:
        A.cache (count, off)                 # NBD_CMD_CACHE: prefetch it
    else:
        verify (A, off, count, "first read")
    # B's change: inside the region, over one of its ends, or just past
    # it (in the part A's window read ahead).
    where = n % 3
    wcount = rng.randrange (1, 64 * KiB)
    if where == 0:
        woff = off + rng.randrange (0, count)
    elif where == 1:
        woff = max (0, off - wcount // 2)
    else:
        woff = off + count + rng.randrange (0, 64 * KiB)
    woff = min (woff, size - 1)
    wcount = min (wcount, size - woff)
    op = ops[n % 3]
    model[woff:woff + wcount] = do_op (B, op, woff, wcount, rng)
    verify (A, off, count, "read after %s of %d at %d" % (op, wcount, woff))
    # And the region B changed, plus 128K after it, from A.
    vcount = min (wcount + 128 * KiB, size - woff)
    verify (A, woff, vcount, "B's region after %s" % op)

# ---- 2. B changes pages just ahead of a sequential reader A --------------
lock = threading.Condition ()
pos_a = 0                       # A reads at or after this offset
pending = []                    # ranges B is changing now
done = False
b_ops = 0
errors = []

def overlaps (off, count):
    return any (o < off + count and off < o + c for o, c in pending)

def writer (seed):
    global b_ops
    r = random.Random (seed)
    h = connect (os.environ["URI"])
    try:
        while True:
            count = r.choice ([1, 100, 4096, 4097, r.randrange (1, 64 * KiB)])
            with lock:
                if done:
                    break
                # Ahead of A's current read (64K) and within its
                # readahead windows (ra-max 2M): cached or in flight.
                off = pos_a + 64 * KiB + r.randrange (0, 2 * MiB)
                if off + count > size:
                    off = r.randrange (0, size - count)
                    if off < pos_a + 64 * KiB:
                        continue        # only A's future: keep the model exact
                pending.append ((off, count))
            op = r.choice (ops)
            data = do_op (h, op, off, count, r)
            with lock:
                model[off:off + count] = data
                pending.remove ((off, count))
                b_ops += 1
                lock.notify_all ()
            time.sleep (0.0005)
    except Exception as e:
        errors.append (e)
        with lock:
            lock.notify_all ()
    finally:
        h.shutdown ()

def stream (h, what):
    global pos_a
    step = 64 * KiB - 1            # not page aligned
    off = n = 0
    while off < size:
        count = min (step, size - off)
        with lock:
            pos_a = off
            # Every 8 reads, let the writer change something ahead first
            # (while there is room ahead for it), so that it certainly
            # runs during the stream however the threads are scheduled.
            n += 1
            if n % 8 == 0 and off < size - 4 * MiB:
                target = b_ops + 1
                while b_ops < target and not errors:
                    lock.wait ()
            while overlaps (off, count) and not errors:
                lock.wait ()
            exp = bytes (model[off:off + count])
        buf = h.pread (count, off)
        if buf != exp:
            bad = next (i for i in range (count) if buf[i] != exp[i])
            raise AssertionError ("%s: read of %d at %d: byte %d differs" %
                                  (what, count, off, off + bad))
        off += count

for n, what in enumerate (["stream 1", "stream 2"]):
    done = False
    t = threading.Thread (target = writer, args = (rng.random (),))
    t.start ()
    try:
        stream (connect (os.environ["URI"]) if n else A, what)
    finally:
        with lock:
            done = True
        t.join ()
    if errors:
        raise errors[0]
print ("writer changed the export %d times during the streams" % b_ops)
assert b_ops >= 100, b_ops

# ---- the whole export, through the front and from the backend ------------
for off in range (0, size, MiB):
    verify (A, off, MiB, "final read through ra-cache")
D = connect (os.environ["BACK"])
for off in range (0, size, MiB):
    verify (D, off, MiB, "final read from the backend")
EOF
seed=${RA_CACHE_TEST_SEED:-$RANDOM}
info "seed $seed"
run_py "$tmpdir/writes.py" URI="$(uri front)" BACK="$(uri back)" SEED="$seed"
stop_server front
[ "$(ra_stat front invalidated_pages)" -gt 0 ] ||
  fail "no cached page was invalidated: the test did not exercise it"
[ "$(ra_stat front async_pages)" -gt 0 ] ||
  fail "nothing was read ahead: the test did not exercise prefetch"
info "counters: $(ra_stat front client_reads page_hits async_pages invalidated_pages) (client_reads page_hits async_pages invalidated_pages)"
