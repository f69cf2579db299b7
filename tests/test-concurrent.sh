#!/usr/bin/env bash
# ra-cache under many concurrent connections: 12 client connections (one
# nbdsh process, one thread and one libnbd handle per connection) mixing
# reads, writes and zeroes on disjoint and overlapping regions.
#
# Backend: the file plugin on a copy of a random file, behind a 1 ms read
# delay; a ra-cache front (8M cache for a 32M export, so pages are
# evicted and read again) reads it through the nbd plugin.
#
#   [0, 8M) and [24M, 32M)   read-only: two sequential readers compare
#                            every read with the source file exactly;
#   [8M, 24M)                eight 2 MiB regions, one per writer thread.
#
# - Each writer owns its region: it writes random data or zeroes at
#   random unaligned places, and after every change reads around it, and
#   now and then its whole region, through its own connection: the data
#   must equal its model exactly.
# - Two random readers read anywhere (across regions being written).
#   Every change is logged with the time it started and ended, so a
#   reader can compute what each byte must hold: the bytes that no
#   change touched while the read was in progress must equal the source
#   with every change that ended before the read began applied (a stale
#   page left in the cache fails this); bytes changed during the read
#   are not checked.
# - Finally the whole export read through ra-cache, and read from the
#   backend directly, must both equal the model.

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

requires cp

size=$((32 * 1024 * 1024))
random_file "$tmpdir/source" "$size"
cp "$tmpdir/source" "$tmpdir/disk"

start_server back --filter=delay file "$tmpdir/disk" rdelay=1ms
start_front front back ra-cache-size=8M ra-max=1M

cat > "$tmpdir/concurrent.py" <<'EOF'
import os, random, threading, time
KiB, MiB = 1024, 1024 * 1024
URI, BACK = os.environ["URI"], os.environ["BACK"]
seed = int (os.environ["SEED"])
with open (os.environ["SOURCE"], "rb") as f:
    src = f.read ()
size = len (src)
REGION0, REGION, NWRITERS = 8 * MiB, 2 * MiB, 8

lock = threading.Lock ()
model = bytearray (src)
changes = [[] for w in range (NWRITERS)]   # per writer, in order
errors = []
verified = [0, 0]                          # bytes checked, bytes skipped

def connect (uri):
    h = nbd.NBD ()
    h.connect_uri (uri)
    return h

def first_diff (a, b):
    return next (i for i in range (len (a)) if a[i] != b[i])

def writer (w):
    r = random.Random (seed * 100 + w)
    h = connect (URI)
    lo, hi = REGION0 + w * REGION, REGION0 + (w + 1) * REGION
    mine = bytearray (src[lo:hi])      # this writer's model of its region
    for n in range (60):
        count = r.choice ([1, 511, 4096, 4097, r.randrange (1, 64 * KiB)])
        off = r.randrange (lo, hi - count)
        zero = r.random () < 0.3
        data = bytes (count) if zero else r.randbytes (count)
        c = { "off": off, "count": count, "data": data,
              "start": time.monotonic (), "end": None }
        with lock:
            changes[w].append (c)
        if zero:
            h.zero (count, off)
        else:
            h.pwrite (data, off)
        c["end"] = time.monotonic ()
        mine[off - lo:off - lo + count] = data
        with lock:
            model[off:off + count] = data
        # Read it back, with what is around it.
        a, b = max (lo, off - 4 * KiB - 7), min (hi, off + count + 4 * KiB + 3)
        buf = h.pread (b - a, a)
        if buf != mine[a - lo:b - lo]:
            raise AssertionError ("writer %d: after change %d (%d bytes at %d) "
                                  "byte %d is wrong" %
                                  (w, n, count, off,
                                   a + first_diff (buf, mine[a - lo:b - lo])))
        if n % 15 == 14:
            for o in range (lo, hi, 64 * KiB - 1):
                k = min (64 * KiB - 1, hi - o)
                if h.pread (k, o) != mine[o - lo:o - lo + k]:
                    raise AssertionError ("writer %d: region read at %d "
                                          "is wrong" % (w, o))
    h.shutdown ()

def seq_reader (lo, hi):
    h = connect (URI)
    for rnd in range (2):
        for o in range (lo, hi, 32 * KiB + 5):
            k = min (32 * KiB + 5, hi - o)
            if h.pread (k, o) != src[o:o + k]:
                raise AssertionError ("sequential reader: read at %d is "
                                      "wrong" % o)
    h.shutdown ()

def check (buf, off, t0, t1):
    """What buf (read at off between t0 and t1) must hold."""
    count = len (buf)
    expect = bytearray (src[off:off + count])
    unknown = []
    with lock:
        relevant = [list (ch) for ch in changes]
    for chs in relevant:
        for c in chs:
            a, b = max (off, c["off"]), min (off + count, c["off"] + c["count"])
            if a >= b:
                continue
            end = c["end"]
            if end is not None and end < t0:
                expect[a - off:b - off] = c["data"][a - c["off"]:b - c["off"]]
            elif c["start"] > t1:
                continue
            else:
                unknown.append ((a - off, b - off))
    checked = bytearray (buf)
    for a, b in unknown:
        checked[a:b] = expect[a:b]
    skipped = sum (b - a for a, b in unknown)
    if checked != expect:
        i = first_diff (checked, expect)
        raise AssertionError ("random reader: read of %d at %d: byte %d is "
                              "stale or wrong" % (count, off, off + i))
    with lock:
        verified[0] += count - skipped
        verified[1] += skipped

def random_reader (k):
    r = random.Random (seed * 1000 + k)
    h = connect (URI)
    for n in range (150):
        count = r.choice ([1, 4096, 65536, r.randrange (1, 256 * KiB)])
        if n % 2:                          # mostly inside the written part
            off = r.randrange (REGION0 - 64 * KiB,
                               REGION0 + NWRITERS * REGION + 64 * KiB - count)
        else:
            off = r.randrange (0, size - count)
        t0 = time.monotonic ()
        buf = h.pread (count, off)
        t1 = time.monotonic ()
        check (buf, off, t0, t1)
    h.shutdown ()

def run (fn, *args):
    try:
        fn (*args)
    except BaseException as e:
        errors.append (e)

threads = [threading.Thread (target = run, args = (writer, w))
           for w in range (NWRITERS)]
threads += [threading.Thread (target = run, args = (seq_reader, 0, REGION0)),
            threading.Thread (target = run,
                              args = (seq_reader, REGION0 + NWRITERS * REGION,
                                      size))]
threads += [threading.Thread (target = run, args = (random_reader, k))
            for k in range (2)]
assert len (threads) >= 12
for t in threads:
    t.start ()
for t in threads:
    t.join ()
if errors:
    raise errors[0]
print ("%d connections; random readers checked %d bytes, skipped %d "
       "changing under them" % (len (threads), verified[0], verified[1]))
assert verified[0] > 4 * MiB

# The whole export through ra-cache and from the backend directly.
for uri, what in [(URI, "through ra-cache"), (BACK, "from the backend")]:
    h = connect (uri)
    for o in range (0, size, MiB):
        buf = h.pread (MiB, o)
        if buf != model[o:o + MiB]:
            raise AssertionError ("final read %s: byte %d differs from the "
                                  "model" % (what, o + first_diff (buf, model[o:o + MiB])))
    h.shutdown ()
EOF
seed=${RA_CACHE_TEST_SEED:-$RANDOM}
info "seed $seed"
run_py "$tmpdir/concurrent.py" URI="$(uri front)" BACK="$(uri back)" \
  SOURCE="$tmpdir/source" SEED="$seed"
stop_server front
for key in invalidated_pages evictions async_pages; do
  [ "$(ra_stat front "$key")" -gt 0 ] ||
    fail "stats: $key is 0: the test did not exercise it"
done
[ "$(ra_stat front backend_errors)" -eq 0 ] || fail "backend read errors"
info "counters: $(ra_stat front client_reads page_hits page_misses async_pages evictions invalidated_pages) (client_reads page_hits page_misses async_pages evictions invalidated_pages)"
