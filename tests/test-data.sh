#!/usr/bin/env bash
# ra-cache: the data read through the filter is the data of the source.
#
# A backend serves a file of random bytes behind nbdkit's delay filter
# (1 ms per read, so prefetch really is in flight while clients read);
# a ra-cache front reads it through the nbd plugin.  The cache is
# smaller than the data (16M for 64M), so every pass evicts and reads
# the backend again.  Read through the front, the export must equal the
# file, byte for byte, for:
#  - nbdsh: a sequential pass with odd, unaligned request sizes, then
#    random offsets and sizes (some crossing pages, some of a few bytes);
#  - qemu-img convert to a raw file (several requests in flight), cmp;
#  - nbdcopy with 4 connections, cmp (the front must advertise
#    multi-conn, or nbdcopy would quietly use one);
# and for an export whose size is not a multiple of the page size
# (10 MiB + 1234 bytes): read whole, and at its end (the partial last
# page, the last byte, reads crossing into the last page), qemu-img cmp.

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

requires qemu-img nbdcopy cmp head

size=$((64 * 1024 * 1024))
random_file "$tmpdir/source" "$size"

start_server back --filter=delay file "$tmpdir/source" rdelay=1ms
start_front front back ra-cache-size=16M

cat > "$tmpdir/read.py" <<'EOF'
import os, random
rng = random.Random (int (os.environ["SEED"]))
with open (os.environ["SOURCE"], "rb") as f:
    src = f.read ()
h = nbd.NBD ()
h.connect_uri (os.environ["URI"])
size = h.get_size ()
assert size == len (src), (size, len (src))

def check (off, count, what):
    buf = h.pread (count, off)
    if buf != src[off:off + count]:
        bad = next (i for i in range (count) if buf[i] != src[off + i])
        raise AssertionError ("%s: read of %d bytes at %d differs from "
                              "the source at byte %d" %
                              (what, count, off, off + bad))

# Sequential, odd sizes: no request is page aligned after the first.
sizes = [4097, 65537, 1, 131071, 512, 1000003, 12345, 262144 + 3, 777]
off = n = 0
while off < size:
    count = min (sizes[n % len (sizes)], size - off)
    check (off, count, "sequential")
    off += count
    n += 1

# Random offsets and sizes.
for n in range (400):
    count = rng.choice ([1, 7, 511, 4095, 4096, 4097, 65536,
                         rng.randrange (1, 1 << 20)])
    off = rng.randrange (0, size - count + 1)
    check (off, count, "random")

# Short sequential runs from random places (E and F branches, markers
# of earlier streams found in the cache).
for n in range (20):
    off = rng.randrange (0, size - (1 << 20))
    for i in range (16):
        check (off, 65536 - 1, "run")
        off += 65536 - 1
h.shutdown ()
EOF
seed=${RA_CACHE_TEST_SEED:-$RANDOM}
info "nbdsh: sequential and random reads (seed $seed)"
run_py "$tmpdir/read.py" URI="$(uri front)" SOURCE="$tmpdir/source" SEED="$seed"

info "qemu-img convert"
timeout "$CLIENT_TIMEOUT" \
  qemu-img convert -f raw -O raw "$(uri front)" "$tmpdir/qemu.raw"
cmp "$tmpdir/source" "$tmpdir/qemu.raw" ||
  fail "qemu-img convert through ra-cache: the copy differs from the source"
rm -f "$tmpdir/qemu.raw"

# nbdcopy uses at most one connection per thread, and by default one
# thread per core.
info "nbdcopy --connections=4 --threads=4"
mc=$(nbdsh_t -u "$(uri front)" -c 'print (h.can_multi_conn ())')
[ "$mc" = True ] ||
  fail "the front does not advertise multi-conn: nbdcopy would use one connection"
before=$(grep -c 'accepted connection' "$tmpdir/front.log" || true)
timeout "$CLIENT_TIMEOUT" \
  nbdcopy --connections=4 --threads=4 "$(uri front)" "$tmpdir/nbdcopy.raw"
after=$(grep -c 'accepted connection' "$tmpdir/front.log" || true)
cmp "$tmpdir/source" "$tmpdir/nbdcopy.raw" ||
  fail "nbdcopy through ra-cache: the copy differs from the source"
rm -f "$tmpdir/nbdcopy.raw"
info "nbdcopy opened $((after - before)) connections"
[ $((after - before)) -ge 4 ] || fail "nbdcopy did not open 4 connections"

stop_server front
[ "$(ra_stat front async_pages)" -gt 0 ] ||
  fail "nothing was read ahead: the test did not exercise prefetch"
[ "$(ra_stat front evictions)" -gt 0 ] ||
  fail "nothing was evicted: the test did not exercise eviction"
[ "$(ra_stat front backend_errors)" -eq 0 ] || fail "backend read errors"
stop_server back
rm -f "$tmpdir/source"

# ---- an export that ends inside a page -----------------------------------

size=$((10 * 1024 * 1024 + 1234))
random_file "$tmpdir/odd" "$size"
start_server oddback --filter=delay file "$tmpdir/odd" rdelay=1ms
start_front oddfront oddback

cat > "$tmpdir/odd.py" <<'EOF'
import os
with open (os.environ["SOURCE"], "rb") as f:
    src = f.read ()
size = len (src)

def check (h, off, count, what):
    buf = h.pread (count, off)
    assert buf == src[off:off + count], \
        "%s: read of %d bytes at %d differs from the source" % (what, count, off)

# The end first, on a cold cache (fresh connections each time).
for off, count in [(size - 1234, 1234), (size - 1, 1), (size - 5000, 5000),
                   (size - 1234 - 4096, 4096 + 1234), (size - 100, 50)]:
    h = nbd.NBD ()
    h.connect_uri (os.environ["URI"])
    assert h.get_size () == size, h.get_size ()
    check (h, off, count, "end")
    h.shutdown ()

# Then the whole export sequentially: prefetch windows reach past the
# end and are clamped.
h = nbd.NBD ()
h.connect_uri (os.environ["URI"])
off = 0
while off < size:
    count = min (65536, size - off)
    check (h, off, count, "whole")
    off += count
# And the end again, now from the cache.
check (h, size - 1234, 1234, "end, cached")
check (h, size - 1, 1, "last byte, cached")
# Reading past the end is an error, not garbage.
try:
    h.pread (4096, size - 1234)
    raise AssertionError ("a read past the end of the export succeeded")
except nbd.Error:
    pass
h.shutdown ()
EOF
info "export of 10 MiB + 1234 bytes"
run_py "$tmpdir/odd.py" URI="$(uri oddfront)" SOURCE="$tmpdir/odd"
# qemu rounds an NBD export's size up to whole 512 byte sectors (reading
# the tail as zeros), so compare the export's bytes, and the whole copy
# with one that qemu-img makes from the backend directly.
timeout "$CLIENT_TIMEOUT" \
  qemu-img convert -f raw -O raw "$(uri oddfront)" "$tmpdir/odd.raw"
timeout "$CLIENT_TIMEOUT" \
  qemu-img convert -f raw -O raw "$(uri oddback)" "$tmpdir/odd.direct"
cmp -n "$size" "$tmpdir/odd" "$tmpdir/odd.raw" ||
  fail "qemu-img convert of the odd-sized export differs from the source"
cmp "$tmpdir/odd.direct" "$tmpdir/odd.raw" ||
  fail "qemu-img convert of the odd-sized export: through ra-cache and" \
       "from the backend directly differ"
stop_server oddfront
[ "$(ra_stat oddfront backend_errors)" -eq 0 ] || fail "backend read errors"
