#!/usr/bin/env bash
# A plugin without multi-conn consistency, with writes (issue 12, item 7):
# an sh plugin that gives each connection a private copy of the disk
# (legal: it does not advertise multi-conn).  A connection's own writes,
# flushed and read back, must read back as written, although ra-cache's
# other reads come from worker contexts (other private disks) and the
# shared cache.  Other connections still use the cache.
#
# Then (issue 23, row 3) a connection writes while one of its own reads
# is still on the cached path (the plugin holds that read for 1 s): the
# read must not put the connection's written data in the shared cache,
# so another connection reads its own, untouched disk.

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
    # The next read at 64 KiB waits 1 s when the test asks for it.
    if [ "$4" = 65536 ] && rm "$dir/slow" 2>/dev/null; then sleep 1; fi
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
# The writer's 64 reads back after its writes passed the cache by.
read -r preads pbytes <<<"$(file_stat "$tmpdir/front.json" \
  uncached_reads_private_writes uncached_bytes_private_writes)"
info "uncached_reads_private_writes=$preads uncached_bytes_private_writes=$pbytes"
(( preads == size / 65536 && pbytes == size )) ||
  fail "the writer's uncached reads counted as $preads ($pbytes bytes), not $((size / 65536)) ($size)"
n=$(grep -c 'reads through its own context, uncached' "$tmpdir/front.log" || true)
[ "$n" -eq 1 ] || fail "the switch to uncached reads was logged $n times, not once"

# ---- a write while the writer's own read is on the cached path ---------
start_server front2 -v --filter="$FILTER" sh "$tmpdir/plugin.sh"
cat > "$tmpdir/race.py" <<'PY'
import os, time
base = open (os.environ["BASE"], "rb").read ()
a = nbd.NBD ()
a.connect_uri (os.environ["URI"])
b = nbd.NBD ()
b.connect_uri (os.environ["URI"])
# A's unaligned read of its own page at 64K is held 1 s in the plugin ...
open (os.environ["SLOW"], "w").close ()
buf = nbd.Buffer (512)
c = a.aio_pread (buf, 65536 + 512)
time.sleep (0.3)
assert not os.path.exists (os.environ["SLOW"]), "the read did not reach the plugin"
# ... while A writes that page of its private disk.
mine = bytes ([0x5a]) * 4096
a.pwrite (mine, 65536)
a.flush ()
while not a.aio_command_completed (c):
    a.poll (-1)
assert a.pread (4096, 65536) == mine, "A does not read what it wrote"
# B has its own disk: never A's data, whatever the cache holds.
got = b.pread (4096, 65536)
assert got != mine, "B read A's private data (the shared cache has it)"
assert got == base[65536:65536 + 4096], "B read wrong data"
a.shutdown ()
b.shutdown ()
PY
run_py "$tmpdir/race.py" URI="$(uri front2)" BASE="$tmpdir/base.img" \
  SLOW="$tmpdir/slow" || fail "a write beside its own read leaked into the cache"
stop_server front2 || fail "the second front did not stop cleanly"
info "ok"
