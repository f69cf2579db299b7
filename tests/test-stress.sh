#!/usr/bin/env bash
# ra-cache under sustained mixed load, verified end to end.
#
#   STRESS_SECS=300 make check TESTS=tests/test-stress.sh
#
# runs each configuration for 5 minutes instead of the default 20 s.
#
# A 64 MiB file behind nbdkit's file plugin (1 ms read delay, writes
# undelayed, so writes land while reads of the same pages are in flight)
# is read and written through a ra-cache front by many connections at
# once, for STRESS_SECS seconds per configuration:
#
#   [0, 12M)    fio, 3 jobs (own 4 MiB region each): random 4 KiB reads
#               and writes, iodepth 8
#   [12M, 16M)  fio, 2 jobs (2 MiB each): random reads and writes of
#               1536 bytes, which straddle cache pages, iodepth 4
#   [16M, 32M)  fio, 2 jobs (8 MiB each): sequential 64 KiB reads and
#               writes (readahead windows over pages being written),
#               iodepth 4
#   [0, 64M)    fio, 1 job: sequential 128 KiB reads of the whole export,
#               not verified (it reads regions that change under it): it
#               fills the cache and starts windows everywhere
#   [32M, 40M)  nbdsh, 2 threads (4 MiB each, a connection to the front
#               and one to the backend): writes, zeroes, trims and
#               flushes at unaligned places and sizes, each followed by a
#               read through ra-cache that must match the model of the
#               region exactly (after a trim the model takes what the
#               backend holds); now and then the whole region
#   [40M, 64M)  nbdsh: sequential and random reads of a region nobody
#               writes, compared with the original data
#
# The fio jobs verify what they wrote with fio's own verification
# (verify=crc32c, then md5; verify_backlog, so blocks are read back
# through the cache while the load runs, and verify_fatal).  Afterwards:
# nothing in flight (inflight_now and cache_pages_inflight are 0), the
# whole export read through ra-cache is byte for byte what the backend
# holds read directly and what the file holds (sha256 of nbdcopy
# outputs), and the front exits cleanly.
#
# Two configurations: a normal cache (32M, ra-max=1M, ra-io-max=256K) and
# a tiny one (64K of 4K pages, 16 pages, ra-max=16K) in which pages are
# evicted all the time and the cache is often full of pages in flight.
# The whole test takes about 2 x STRESS_SECS + 15 s.

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

requires fio nbdcopy sha256sum python3
fio --enghelp=nbd >/dev/null 2>&1 || skip "fio has no nbd engine"

STRESS_SECS=${STRESS_SECS:-20}
# Every client gets the run time and this much more before it is a hang.
T=$((STRESS_SECS + 90))
CLIENT_TIMEOUT=$T                       # run_py's
seed=${RA_CACHE_TEST_SEED:-$RANDOM}
info "seed $seed, $STRESS_SECS s per configuration"

MiB=$((1024 * 1024))
size=$((64 * MiB))
random_file "$tmpdir/data" "$size"
cp "$tmpdir/data" "$tmpdir/disk"

start_server back --filter=delay file "$tmpdir/disk" rdelay=1ms

# The nbdsh clients: mode "model" (writes, zeroes, trims on its own
# region, checked against a model) or "reader" (a region nobody writes).
cat > "$tmpdir/model.py" <<'EOF'
import os, random, threading, time
URI, BACK = os.environ["URI"], os.environ["BACK"]
deadline = time.monotonic () + float (os.environ["SECS"])
seed = int (os.environ["SEED"])
KiB, MiB = 1024, 1024 * 1024
with open (os.environ["SOURCE"], "rb") as f:
    src = f.read ()
errors = []
counts = {}
lock = threading.Lock ()

def count (what, n = 1):
    with lock:
        counts[what] = counts.get (what, 0) + n

def first_diff (a, b):
    return next (i for i in range (len (a)) if a[i] != b[i])

def connect (uri):
    h = nbd.NBD ()
    h.connect_uri (uri)
    return h

def model_thread (k, lo, hi):
    r = random.Random (seed * 10 + k)
    h, back = connect (URI), connect (BACK)
    # The region as it is now (another configuration may have run
    # before): the backend's word, checked through the cache.
    mine = bytearray (back.pread (hi - lo, lo))
    def check (a, b, what):
        buf = h.pread (b - a, a)
        if buf != mine[a - lo:b - lo]:
            i = first_diff (buf, mine[a - lo:b - lo])
            raise AssertionError ("model %d: after %s, byte %d read through "
                                  "ra-cache is stale or wrong" %
                                  (k, what, a + i))
        count ("verified reads")
        count ("verified bytes", b - a)
    check (lo, hi, "start")
    n = 0
    while time.monotonic () < deadline:
        n += 1
        cnt = r.choice ([1, 512, 4095, 4096, 4097, 12288 + 7,
                         r.randrange (1, 256 * KiB)])
        off = r.randrange (lo, hi - cnt)
        op = r.choice (["pwrite", "pwrite", "zero", "trim", "read"])
        if op == "pwrite":
            data = r.randbytes (cnt)
            h.pwrite (data, off,
                      nbd.CMD_FLAG_FUA if r.random () < 0.2 else 0)
            mine[off - lo:off - lo + cnt] = data
        elif op == "zero":
            h.zero (cnt, off)
            mine[off - lo:off - lo + cnt] = bytes (cnt)
        elif op == "trim":
            h.trim (cnt, off)
            # Trimmed bytes hold whatever the backend says now.
            mine[off - lo:off - lo + cnt] = back.pread (cnt, off)
        if op != "read":
            count (op)
        if r.random () < 0.05:
            h.flush ()
            count ("flush")
        # Read the change back with what is around it.
        a = max (lo, off - r.randrange (0, 64 * KiB))
        b = min (hi, off + cnt + r.randrange (0, 64 * KiB))
        check (a, b, "%s of %d at %d" % (op, cnt, off))
        if n % 200 == 0:
            check (lo, hi, "op %d" % n)
    check (lo, hi, "the end")
    h.shutdown ()
    back.shutdown ()

def reader_thread (k, lo, hi):
    r = random.Random (seed * 10 + k)
    h = connect (URI)
    off = lo
    while time.monotonic () < deadline:
        if r.random () < 0.7:               # sequential runs
            cnt = 64 * KiB
            if off + cnt > hi:
                off = lo
        else:
            cnt = r.randrange (1, 200 * KiB)
            off = r.randrange (lo, hi - cnt)
        buf = h.pread (cnt, off)
        if buf != src[off:off + cnt]:
            raise AssertionError ("reader: %d bytes at %d: byte %d is wrong" %
                                  (cnt, off, off + first_diff (buf, src[off:off + cnt])))
        count ("verified reads")
        count ("verified bytes", cnt)
        off += cnt
    h.shutdown ()

def run (fn, *args):
    try:
        fn (*args)
    except BaseException as e:
        errors.append (e)

threads = [threading.Thread (target = run, args = (model_thread, 0, 32 * MiB, 36 * MiB)),
           threading.Thread (target = run, args = (model_thread, 1, 36 * MiB, 40 * MiB)),
           threading.Thread (target = run, args = (reader_thread, 2, 40 * MiB, 64 * MiB))]
for t in threads:
    t.start ()
for t in threads:
    t.join ()
if errors:
    raise errors[0]
with open (os.environ["OUT"], "w") as f:
    f.write (" ".join ("%s=%d" % (k.replace (" ", "_"), v)
                       for k, v in sorted (counts.items ())) + "\n")
EOF

# fio_job FILE VERIFY: the fio job file (uri and runtime filled in).
fio_job ()
{
  cat > "$1" <<EOF
[global]
ioengine=nbd
uri=$(uri front)
time_based=1
runtime=$STRESS_SECS
randrepeat=0
verify=$2
verify_fatal=1
verify_backlog=32
verify_state_save=0
# A job keeps several requests in flight: without this fio may read a
# block back while its own next write to it is in flight, and a read
# that overlaps a write may return any mix of old and new bytes (through
# ra-cache it often does: the pages of one request are read separately).
serialize_overlap=1
rwmixread=50

[rw4k]
rw=randrw
bs=4k
iodepth=8
numjobs=3
offset=0
size=4M
offset_increment=4M

[rwodd]
rw=randrw
bs=1536
iodepth=4
numjobs=2
offset=12M
size=2M
offset_increment=2M

[seqrw]
rw=rw
bs=64k
iodepth=4
numjobs=2
offset=16M
size=8M
offset_increment=8M

[wholeread]
rw=read
bs=128k
iodepth=4
offset=0
size=64M
verify=0
EOF
}

# export_sum URI: sha256 of the whole export read with nbdcopy.
export_sum ()
{
  timeout "$T" nbdcopy "$1" - | sha256sum | cut -d' ' -f1
}

run_config ()
{
  local name=$1 verify=$2; shift 2
  local pid_fio pid_py st v inflight pages fio_ops sums

  info "$name: ra-cache $*"
  start_front front back ra-cache-stats-socket="$tmpdir/front-stats.sock" "$@"
  fio_job "$tmpdir/$name.fio" "$verify"
  timeout "$T" fio --output-format=json --output="$tmpdir/$name-fio.json" \
    "$tmpdir/$name.fio" > "$tmpdir/$name-fio.log" 2>&1 &
  pid_fio=$!
  run_py "$tmpdir/model.py" URI="$(uri front)" BACK="$(uri back)" \
    SOURCE="$tmpdir/data" SECS="$STRESS_SECS" SEED="$((seed + ${#name}))" \
    OUT="$tmpdir/$name-model.out" &
  pid_py=$!
  st=0
  wait "$pid_py" || st=$?
  [ "$st" -eq 0 ] ||
    fail "$name: the nbdsh clients failed (status $st): see above"
  st=0
  wait "$pid_fio" || st=$?
  if [ "$st" -ne 0 ]; then
    grep -E 'verify|error|bad' "$tmpdir/$name-fio.log" >&2 || true
    fail "$name: fio failed (status $st; 124 is a hang)"
  fi
  fio_ops=$(python3 - "$tmpdir/$name-fio.json" <<'EOF'
import json, sys
d = json.load (open (sys.argv[1]))
tot = {"read": 0, "write": 0, "trim": 0}
for j in d["jobs"]:
    assert j["error"] == 0, "fio job %s: error %d" % (j["jobname"], j["error"])
    for k in tot:
        tot[k] += j[k]["total_ios"]
verified = [j for j in d["jobs"] if j["jobname"] != "wholeread"]
assert all (j["write"]["total_ios"] > 0 for j in verified), "a job wrote nothing"
print ("fio_reads=%d fio_writes=%d" % (tot["read"], tot["write"]))
EOF
) || fail "$name: fio's results"

  # Nothing left in flight once the load is over.
  for ((i = 0; i < 150; i++)); do
    v=$(live_stat front inflight_now cache_pages_inflight)
    read -r inflight pages <<<"$v"
    [ "$inflight" = 0 ] && [ "$pages" = 0 ] && break
    sleep 0.1
  done
  [ "$inflight" = 0 ] && [ "$pages" = 0 ] ||
    fail "$name: in flight after the load: inflight_now=$inflight" \
         "cache_pages_inflight=$pages"

  # The whole export: through ra-cache, from the backend, in the file.
  sums="$(export_sum "$(uri front)") $(export_sum "$(uri back)")"
  sums="$sums $(sha256sum < "$tmpdir/disk" | cut -d' ' -f1)"
  read -r a b c <<<"$sums"
  [ ${#a} -eq 64 ] || fail "$name: could not read the export through ra-cache"
  [ "$a" = "$b" ] ||
    fail "$name: the export read through ra-cache differs from the backend's"
  [ "$b" = "$c" ] || fail "$name: the backend does not serve the file's data"

  v=$(live_stat front invalidated_pages evictions backend_errors direct_reads client_reads page_hits)
  read -r inval evict errs direct creads hits <<<"$v"
  [ "$errs" = 0 ] || fail "$name: $errs backend read errors"
  [ "$inval" -gt 0 ] || fail "$name: no page was invalidated: no write hit the cache"
  stop_server front || fail "$name: the front did not stop cleanly"
  if grep -E 'Assertion|Segmentation|double free|corrupted' \
       "$tmpdir/front.log" >&2; then
    fail "$name: the front's log reports a crash"
  fi
  mv "$tmpdir/front.log" "$tmpdir/front-$name.log"
  info "$name: $fio_ops $(cat "$tmpdir/$name-model.out")"
  info "$name: client reads $creads, page hits $hits, invalidated pages $inval," \
       "evictions $evict, direct reads $direct; export identical through" \
       "ra-cache and from the backend (sha256 ${a:0:16}...)"
  [ -n "${need_evictions:-}" ] && [ "$evict" -eq 0 ] &&
    fail "$name: no eviction in a tiny cache"
  return 0
}

run_config normal crc32c ra-cache-size=32M ra-max=1M ra-io-max=256K
need_evictions=1 run_config tiny md5 ra-cache-size=64K ra-cache-page-size=4K \
  ra-max=16K ra-io-max=16K
