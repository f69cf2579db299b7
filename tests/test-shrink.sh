#!/usr/bin/env bash
# A backend that shrinks while served (issue 12, item 4): the file plugin,
# the file truncated under it.  nbdkit asserts that every read lies within
# the export size its context learnt when it connected; a worker context
# opened after the truncation (or a later connection) must not be asked
# past its end.  Reads of bytes that no longer exist fail (EIO), the
# server lives and keeps serving what still exists.

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

size=$((32 * 1024 * 1024))
small=$((1024 * 1024))
random_file "$tmpdir/disk.img" "$size"
cp "$tmpdir/disk.img" "$tmpdir/orig.img"

start_server front -v --filter="$FILTER" file "$tmpdir/disk.img" \
  ra-cache-stats="$(stats_file front)"

cat > "$tmpdir/shrink.py" <<'PY'
import os
tmp = os.environ["TMP"]
small = int (os.environ["SMALL"])
orig = open (tmp + "/orig.img", "rb").read ()
h = nbd.NBD ()
h.connect_uri (os.environ["URI"])
bs = 65536
# Start a sequential stream (windows open, workers read ahead).
for off in range (0, 4 * bs, bs):
    assert h.pread (bs, off) == orig[off:off + bs]
os.truncate (tmp + "/disk.img", small)
errors = ok = 0
for off in range (4 * bs, 8 * 1024 * 1024, bs):
    try:
        buf = h.pread (bs, off)
        # Past the new end only pages cached before the truncation can
        # be served: the old data.
        assert buf == orig[off:off + bs], "wrong data at %d" % off
        ok += 1
    except nbd.Error as e:
        errors += 1
print ("first connection: %d reads ok, %d failed" % (ok, errors))
assert errors > 0
h.shutdown ()

# New connections see the small size; what exists reads right.
for n in range (3):
    h = nbd.NBD ()
    h.connect_uri (os.environ["URI"])
    assert h.get_size () == small, "size %d" % h.get_size ()
    for off in range (0, small, bs):
        assert h.pread (bs, off) == orig[off:off + bs], "wrong data at %d" % off
    h.shutdown ()
print ("new connections ok")
PY

run_py "$tmpdir/shrink.py" URI="$(uri front)" TMP="$tmpdir" SMALL="$small" ||
  fail "reads after the truncation went wrong (see above)"
kill -0 "$(server_pid front)" 2>/dev/null || fail "the server died"
# stop_server (at exit) fails the test if nbdkit crashed (status 134).
stop_server front || fail "the server did not stop cleanly"
if grep -q "Assertion" "$tmpdir/front.log"; then
  fail "nbdkit hit an assertion"
fi
# The three new connections saw another size than the cache's: their
# reads passed it by, counted as such.
read -r sreads sbytes <<<"$(ra_stat front uncached_reads_size_mismatch \
  uncached_bytes_size_mismatch)"
info "uncached_reads_size_mismatch=$sreads uncached_bytes_size_mismatch=$sbytes"
(( sreads == 3 * small / 65536 && sbytes == 3 * small )) ||
  fail "size-mismatch reads counted as $sreads ($sbytes bytes), not $((3 * small / 65536)) ($((3 * small)))"
info "ok"
