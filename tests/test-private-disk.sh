#!/usr/bin/env bash
# A plugin without multi-conn consistency, with writes (issue 12, item 7):
# an sh plugin that gives each connection a private copy of the disk
# (legal: it does not advertise multi-conn).  A connection's own writes,
# flushed and read back, must read back as written, although ra-cache's
# other reads come from worker contexts (other private disks) and the
# shared cache.  Other connections still use the cache.

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

requires dd

size=$((4 * 1024 * 1024))
random_file "$tmpdir/base.img" "$size"

cat > "$tmpdir/plugin.sh" <<EOF2
#!/usr/bin/env bash
# Each open copies base.img to a private file named after the handle.
dir=$tmpdir
EOF2
cat >> "$tmpdir/plugin.sh" <<'EOF2'
case "$1" in
  thread_model) echo parallel ;;
  open)
    f=$(mktemp "$dir/priv.XXXXXX")
    cp "$dir/base.img" "$f"
    basename "$f" ;;
  close) rm -f "$dir/$2" ;;
  get_size) stat -c %s "$dir/base.img" ;;
  can_write|can_flush) exit 0 ;;
  can_multi_conn) exit 3 ;;
  flush) exit 0 ;;
  pread)
    dd if="$dir/$2" skip="$4" count="$3" iflag=skip_bytes,count_bytes \
       status=none ;;
  pwrite)
    dd of="$dir/$2" seek="$4" conv=notrunc oflag=seek_bytes status=none ;;
  *) exit 2 ;;
esac
EOF2
chmod +x "$tmpdir/plugin.sh"

start_server front -v --filter="$FILTER" sh "$tmpdir/plugin.sh" \
  ra-cache-stats="$tmpdir/front.json"

cat > "$tmpdir/rw.py" <<'PY'
import os
base = open (os.environ["BASE"], "rb").read ()
size = len (base)
bs = 65536
# A reader first: the cache fills from the workers' private disks.
r = nbd.NBD ()
r.connect_uri (os.environ["URI"])
for off in range (0, size, bs):
    assert r.pread (bs, off) == base[off:off + bs], "reader: wrong data"
# A writer writes the first 4 MiB... in 64K pieces, flushes, reads back.
w = nbd.NBD ()
w.connect_uri (os.environ["URI"])
assert not w.can_multi_conn ()
mine = bytes ([0x5a]) * size
for off in range (0, size, bs):
    w.pwrite (mine[off:off + bs], off)
w.flush ()
bad = sum (1 for off in range (0, size, bs)
           if w.pread (bs, off) != mine[off:off + bs])
print ("writer: %d of %d pieces wrong" % (bad, size // bs))
assert bad == 0
# The reader's private disk is untouched and it still reads through the
# cache (which the writes invalidated: the data is read again).
for off in range (0, size, bs):
    assert r.pread (bs, off) == base[off:off + bs], "reader: wrong data after"
r.shutdown ()
w.shutdown ()
PY
run_py "$tmpdir/rw.py" URI="$(uri front)" BASE="$tmpdir/base.img" ||
  fail "reads and writes went wrong (see above)"
stop_server front || fail "the front did not stop cleanly"
read -r reads hits <<<"$(file_stat "$tmpdir/front.json" client_reads page_hits)"
info "client_reads=$reads page_hits=$hits"
(( reads >= 128 && hits > 0 )) || fail "the reader was not cached"
n=$(grep -c 'reads through its own context, uncached' "$tmpdir/front.log" || true)
[ "$n" -eq 1 ] || fail "the switch to uncached reads was logged $n times, not once"
info "ok"
