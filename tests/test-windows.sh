#!/usr/bin/env bash
# ra-cache: the backend sees exactly the reads doc/readahead-rules.md predicts.
#
# A backend server logs every request it receives (nbdkit's log filter);
# a ra-cache front reads it through the nbd plugin with ra-mode=kernel,
# ra-max=128K and ra-io-max=128K: 32 pages of 4 KiB, the worked
# example of doc/readahead-rules.md.
#
# 1. A client reading 16 KiB at a time from offset 0 to the end of a
#    1 MiB export: the windows are the worked example's (A: 0/8/4, then
#    B: 8/16/16, 24/32/32, 56/32/32, 88/32/32, ... every 32 pages), and
#    a batch never mixes the sync and the async part, so the backend
#    reads (offset, count) are exactly:
#      [0,16K)      window 1 sync part, pages 0-3 (the client waits)
#      [16K,32K)    window 1 async part, pages 4-7 (marker on 4)
#      [32K,96K)    window 2, pages 8-23, all async (marker on 8)
#      [96K,224K)   window 3, pages 24-55 (marker on 24)
#      [224K,352K) ... one 128 KiB read per 32 pages ...
#      [992K,1M)    window 10, pages 248-279 clamped to the export: 248-255
#    The client reads the whole export, so it waits for every one of
#    these reads and all of them are in the log when it is done.
# 2. A random reader (fresh servers; small reads at page offsets far
#    apart, never page 0, some unaligned): branch G every time, so the
#    backend reads exactly the pages each request names, and nothing
#    else.

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

requires grep sed sort diff

# backend_reads LOGFILE: the reads the backend received, "offset count"
# in decimal, one a line, sorted.
backend_reads ()
{
  # nbdkit 1.32's log filter writes, for each read:
  #   DATE TIME connection=N Read id=K offset=0x2000 count=0x1000 ...
  sed -n 's/.* Read id=[0-9]* offset=\(0x[0-9a-f]*\) count=\(0x[0-9a-f]*\) .*/\1 \2/p' \
      "$1" |
    while read -r off count; do
      printf '%d %d\n' "$off" "$count"
    done | sort -n
}

# ---- 1. sequential reader: the worked example --------------------------

start_server back1 --filter=log pattern 1M logfile="$tmpdir/back1.reqlog"
start_front front1 back1 ra-mode=kernel ra-max=128K ra-io-max=128K

cat > "$tmpdir/seq.py" <<'EOF'
import os, struct
h = nbd.NBD ()
h.connect_uri (os.environ["URI"])
size = h.get_size ()
assert size == 1024 * 1024, size
for off in range (0, size, 16384):
    buf = h.pread (16384, off)
    # The pattern plugin: each 8 bytes hold their own offset, big endian.
    for i in (0, 8, 4096, 16384 - 8):
        (v,) = struct.unpack_from (">Q", buf, i)
        assert v == off + i, "wrong data at %d: %d" % (off + i, v)
h.shutdown ()
EOF
run_py "$tmpdir/seq.py" URI="$(uri front1)"
stop_server front1
stop_server back1

K=1024
{
  echo "0 $((16*K))"
  echo "$((16*K)) $((16*K))"
  echo "$((32*K)) $((64*K))"
  for ((page = 24; page + 32 <= 256; page += 32)); do
    echo "$((page*4*K)) $((128*K))"
  done
  echo "$((992*K)) $((32*K))"
} | sort -n > "$tmpdir/seq.expected"
backend_reads "$tmpdir/back1.reqlog" > "$tmpdir/seq.actual"
if ! diff -u "$tmpdir/seq.expected" "$tmpdir/seq.actual"; then
  fail "sequential reader: the backend reads differ from the worked example's windows"
fi
# The windows by branch, as the filter counted them.
[ "$(ra_stat front1 windows.A)" -eq 1 ] || fail "expected one branch A window"
[ "$(ra_stat front1 windows.B)" -eq 9 ] || fail "expected 9 branch B windows"
[ "$(ra_stat front1 windows.G)" -eq 0 ] || fail "sequential reads counted as random"
info "sequential reader: $(wc -l < "$tmpdir/seq.actual") backend reads, as the worked example predicts"

# ---- 2. random reader: exactly the requested pages ---------------------

start_server back2 --filter=log pattern 64M logfile="$tmpdir/back2.reqlog"
start_front front2 back2 ra-mode=kernel ra-max=128K ra-io-max=128K

cat > "$tmpdir/random.py" <<'EOF'
import os, random, struct
page = 4096
rng = random.Random (int (os.environ["SEED"]))
h = nbd.NBD ()
h.connect_uri (os.environ["URI"])
nr_pages = h.get_size () // page
# Page indices at least 100 pages apart (more than ra-max back and far
# from prev_pos), never page 0, in random order.
slots = list (range (1, nr_pages // 100 - 1))
rng.shuffle (slots)
expected = []
for n, slot in enumerate (slots[:60]):
    p = slot * 100 + rng.randrange (50)
    kind = n % 4
    if kind == 0:                       # one aligned page
        off, count = p * page, page
        pages = (p, 1)
    elif kind == 1:                     # a few bytes inside a page
        off, count = p * page + 1000, 100
        pages = (p, 1)
    elif kind == 2:                     # a page, unaligned: two pages
        off, count = p * page + 2048, page
        pages = (p, 2)
    else:                               # three aligned pages
        off, count = p * page, 3 * page
        pages = (p, 3)
    buf = h.pread (count, off)
    first = (off + 7) // 8 * 8
    if first + 8 <= off + count:
        (v,) = struct.unpack_from (">Q", buf, first - off)
        assert v == first, "wrong data at %d: %d" % (first, v)
    expected.append ((pages[0] * page, pages[1] * page))
h.shutdown ()
with open (os.environ["EXPECTED"], "w") as f:
    for off, count in sorted (expected):
        f.write ("%d %d\n" % (off, count))
EOF
seed=${RA_CACHE_TEST_SEED:-$RANDOM}
info "random reader: seed $seed"
run_py "$tmpdir/random.py" URI="$(uri front2)" SEED="$seed" \
  EXPECTED="$tmpdir/random.expected"
stop_server front2
stop_server back2

backend_reads "$tmpdir/back2.reqlog" > "$tmpdir/random.actual"
if ! diff -u "$tmpdir/random.expected" "$tmpdir/random.actual"; then
  fail "random reader: the backend read more than the requested pages"
fi
[ "$(ra_stat front2 windows.G)" -eq 60 ] || fail "expected 60 branch G windows"
[ "$(ra_stat front2 async_pages)" -eq 0 ] || fail "random reads read ahead"
info "random reader: 60 reads, only the requested pages reached the backend"
