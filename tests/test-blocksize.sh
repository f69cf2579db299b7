#!/usr/bin/env bash
# The backend's block size limits (issue 12, item 3): under ra-cache,
# nbdkit-blocksize-policy-filter with blocksize-error-policy=error fails
# every request outside the limits it sets.  Every backend read of the
# filter (client, sync part, workers, NBD_CMD_CACHE) must respect the
# maximum (ra-io-max is 1M by default) and the minimum (larger than the
# cache page here), and the data must be right.

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

cat > "$tmpdir/read.py" <<'PY'
import os, random, struct
def size_arg (v):
    m = {"K": 1024, "M": 1024 * 1024}
    return int (v[:-1]) * m[v[-1]] if v[-1] in m else int (v)
h = nbd.NBD ()
h.connect_uri (os.environ["URI"])
size = h.get_size ()
mn = h.get_block_size (nbd.SIZE_MINIMUM)
mx = h.get_block_size (nbd.SIZE_MAXIMUM)
want_mn, want_mx = size_arg (os.environ["MIN"]), size_arg (os.environ["MAX"])
assert mn == want_mn and mx == want_mx, \
    "advertised minimum %d maximum %d, want %d %d" % (mn, mx, want_mn, want_mx)
bs = size_arg (os.environ["BS"])

def check (off, n):
    buf = h.pread (n, off)
    # The pattern plugin: every 8 bytes hold their offset, big endian.
    first = off - off % 8
    for o in range (first, off + n, 8 * 509):
        if o < off:
            continue
        if o % 8 == 0 and o + 8 <= off + n:
            got = struct.unpack (">Q", buf[o - off:o - off + 8])[0]
            assert got == o, "wrong data at %d: %d" % (o, got)

errors = 0
def read (off, n):
    global errors
    try:
        check (off, n)
    except nbd.Error as e:
        errors += 1
        print ("read of %d at %d failed: %s" % (n, off, e))

# 128 sequential reads of bs, then random ones, then NBD_CMD_CACHE.
for i in range (128):
    read (i * bs, bs)
random.seed (12)
for i in range (128):
    read (random.randrange (size // bs) * bs, bs)
try:
    h.cache (4 * 1024 * 1024, size // 2)
except nbd.Error as e:
    errors += 1
    print ("NBD_CMD_CACHE failed: %s" % e)
for i in range (64):
    read (size // 2 + i * bs, bs)
h.shutdown ()
print ("errors %d" % errors)
assert errors == 0, "%d requests failed" % errors
PY

# run_case NAME MIN PREFERRED MAX READ-SIZE [RA-CACHE-PARAMETERS...]
run_case ()
{
  local name=$1 min=$2 pref=$3 max=$4 bs=$5 reads hits
  shift 5
  start_server "$name" -v --filter="$FILTER" --filter=blocksize-policy \
    pattern 64M blocksize-minimum="$min" blocksize-preferred="$pref" \
    blocksize-maximum="$max" blocksize-error-policy=error \
    ra-cache-stats="$tmpdir/$name.json" "$@"
  run_py "$tmpdir/read.py" URI="$(uri "$name")" MIN="$min" MAX="$max" \
    BS="$bs" || fail "$name: reads through ra-cache failed (see above)"
  stop_server "$name" || fail "$name did not stop cleanly"
  read -r reads hits <<<"$(file_stat "$tmpdir/$name.json" client_reads page_hits)"
  info "$name: client_reads=$reads page_hits=$hits"
  (( reads > 0 && hits > 0 )) || fail "$name: nothing was cached"
}

# The maximum below ra-io-max (1M).
run_case max256k 512 64K 256K 64K
# A minimum larger than the cache page (4K): reads widened to 64K blocks.
run_case min64k 64K 64K 1M 64K
# Both, with 512-byte pages and ra-io-max above the maximum.
run_case both 4K 4K 128K 4K ra-cache-page-size=512 ra-io-max=2M

info "ok"
