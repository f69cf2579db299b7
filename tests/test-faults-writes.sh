#!/usr/bin/env bash
# ra-cache under injected faults (helpers and the health checks that end
# every case: tests/faults.sh).
#
# Failing writes: the backend has the error filter failing pwrite,
# zero and trim (100%, switched on by a file).  A region is read (and
# cached, checked by page_hits), then a write, a zero and a trim into
# it fail with EIO; reading it through ra-cache afterwards returns
# exactly what the backend holds (read directly), which is still the
# original data: nothing of the failed write was cached.  With errors
# off, the same operations succeed and are visible through ra-cache.

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"
. "$top_srcdir/tests/faults.sh"

size=$((32 * 1024 * 1024))
random_file "$tmpdir/data" "$size"

# ---- failing writes -----------------------------------------------------
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
