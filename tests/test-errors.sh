#!/usr/bin/env bash
# ra-cache: backend read errors.
#
# 1. Sync errors (nbdkit's error filter under ra-cache, switched on by a
#    file): a client read whose pages fail to read gets EIO; once the
#    errors stop, the same reads succeed with the right data (failed
#    pages are not left in the cache, in flight or empty).
# 2. Errors that hit only async reads never fail a client.  A sh plugin
#    fails a read when (a) it is made on a read-only context: the
#    filter's background workers open theirs read-only, clients connect
#    read-write; and (b) the client is idle, between two reads (it
#    creates a file after each read and removes it before the next).
#    A sync read is always finished before the client's read returns,
#    so whatever fails is an async read (a worker may also read a
#    window's sync part, but only while the client waits for it).  A
#    client streaming through the export must get every read right, and
#    the test checks that errors really were injected.
# 3. Random errors (error-pread-rate=20%) under two concurrent clients:
#    every read either fails with EIO or returns the right data; then,
#    with errors off, everything reads back right.
# Every client command runs under timeout: a hang fails the test.

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

requires dd

size=$((4 * 1024 * 1024))
random_file "$tmpdir/data" "$size"

cat > "$tmpdir/client.py" <<'EOF'
import errno, os, random
with open (os.environ["SOURCE"], "rb") as f:
    src = f.read ()
h = nbd.NBD ()
h.connect_uri (os.environ["URI"])
size = h.get_size ()
assert size == len (src)
mode = os.environ["MODE"]
rng = random.Random (int (os.environ.get ("SEED", "1")))
ok = failed = 0

def read (off, count, expect):
    """expect: "ok", "eio" or "either"."""
    global ok, failed
    try:
        buf = h.pread (count, off)
    except nbd.Error as e:
        if expect == "ok":
            raise AssertionError ("read of %d at %d failed: %s" %
                                  (count, off, e))
        assert e.errnum == errno.EIO, \
            "read of %d at %d: error %s, not EIO" % (count, off, e)
        failed += 1
        return
    if expect == "eio":
        raise AssertionError ("read of %d at %d succeeded during errors" %
                              (count, off))
    assert buf == src[off:off + count], \
        "read of %d at %d returned wrong data" % (count, off)
    ok += 1

offsets = [0, 16384, 1 << 20, size - 4096, 123456]
if mode == "sync-errors":
    for off in offsets:
        read (off, 4096, "eio")
    read (0, 65536, "eio")
elif mode == "after-errors":
    for off in offsets:
        read (off, 4096, "ok")
    for off in range (0, size, 65536):
        read (off, 65536, "ok")
elif mode == "stream":
    # The idle file exists exactly while no read of this client is in
    # progress; pause a little while idle so that async reads run then.
    import time
    idle = os.environ["IDLE"]
    for off in range (0, int (os.environ.get ("STREAM_BYTES", size)), 16384):
        os.unlink (idle)
        read (off, 16384, "ok")
        open (idle, "w").close ()
        time.sleep (0.005)
elif mode == "random-errors":
    for n in range (150):
        if n % 3 == 0:
            count = rng.randrange (1, 200000)
            off = rng.randrange (0, size - count)
        else:                           # short sequential runs
            count = 32768
            off = (off + count) % (size - count) if n else 0
        read (off, count, "either")
    print ("%s: %d reads failed, %d succeeded" % (mode, failed, ok))
    with open (os.environ["COUNTS"], "a") as f:
        f.write ("%d %d\n" % (failed, ok))
h.shutdown ()
EOF

# ---- 1. sync errors --------------------------------------------------------
start_server front -v --filter="$FILTER" --filter=error file "$tmpdir/data" \
  error-pread-rate=100% error-pread-file="$tmpdir/errors-on" \
  ra-cache-stats="$(stats_file front)"
touch "$tmpdir/errors-on"
run_py "$tmpdir/client.py" URI="$(uri front)" SOURCE="$tmpdir/data" \
  MODE=sync-errors
rm "$tmpdir/errors-on"
run_py "$tmpdir/client.py" URI="$(uri front)" SOURCE="$tmpdir/data" \
  MODE=after-errors
stop_server front
[ "$(ra_stat front backend_errors)" -gt 0 ] || fail "no backend error was counted"
info "sync errors: EIO while they lasted, right data after"

# ---- 2. errors in async parts only -----------------------------------------
cat > "$tmpdir/plugin.sh" <<'EOF'
#!/usr/bin/env bash
case "$1" in
  thread_model) echo parallel ;;
  open)
    # The handle records whether the context is read-only.
    echo "ro-$2-$(mktemp -u XXXXXX)" ;;
  get_size) echo "$SIZE" ;;
  pread)
    if [ -e "$T/idle" ] && [[ $2 == ro-true-* ]]; then
      echo "$4 $3" >> "$T/injected"
      echo "EIO injected into a read-only (worker) context" >&2
      exit 1
    fi
    dd if="$T/data" skip="$4" count="$3" iflag=skip_bytes,count_bytes \
      status=none
    ;;
  can_write) exit 3 ;;
  close) ;;
  *) exit 2 ;;
esac
EOF
chmod +x "$tmpdir/plugin.sh"
export T="$tmpdir" SIZE="$size"
# -D ra-cache.verbose=1: should this fail, the log says which thread
# made each backend read (a client's, or a worker's: no thread name).
start_server front2 -v -D ra-cache.verbose=1 --filter="$FILTER" \
  sh "$tmpdir/plugin.sh" ra-max=128K ra-io-max=64K \
  ra-cache-stats="$(stats_file front2)"
touch "$tmpdir/idle"
run_py "$tmpdir/client.py" URI="$(uri front2)" SOURCE="$tmpdir/data" \
  MODE=stream IDLE="$tmpdir/idle" STREAM_BYTES=$((2 * 1024 * 1024))
rm "$tmpdir/idle"
[ -s "$tmpdir/injected" ] ||
  fail "no error was injected into an async read: the test proved nothing"
run_py "$tmpdir/client.py" URI="$(uri front2)" SOURCE="$tmpdir/data" \
  MODE=after-errors
stop_server front2
[ "$(ra_stat front2 backend_errors)" -gt 0 ] || fail "no backend error was counted"
info "async errors: $(wc -l < "$tmpdir/injected") async reads failed, no client read did"

# ---- 3. random errors, two clients at once ---------------------------------
start_server front3 -v --filter="$FILTER" --filter=error \
  --filter=delay file "$tmpdir/data" rdelay=1ms \
  error-pread-rate=20% error-pread-file="$tmpdir/errors-on" \
  ra-cache-size=1M ra-max=256K
touch "$tmpdir/errors-on"
seed=${RA_CACHE_TEST_SEED:-$RANDOM}
info "random errors (seed $seed)"
: > "$tmpdir/counts"
run_py "$tmpdir/client.py" URI="$(uri front3)" SOURCE="$tmpdir/data" \
  MODE=random-errors SEED="$seed" COUNTS="$tmpdir/counts" &
pid=$!
run_py "$tmpdir/client.py" URI="$(uri front3)" SOURCE="$tmpdir/data" \
  MODE=random-errors SEED="$((seed + 1))" COUNTS="$tmpdir/counts" ||
  fail "the second client failed"
wait "$pid" || fail "the first client failed"
rm "$tmpdir/errors-on"
read -r failed ok < <(awk '{ f += $1; o += $2 } END { print f, o }' \
                        "$tmpdir/counts")
[ "$failed" -gt 0 ] || fail "no client read failed at a 20% error rate"
[ "$ok" -gt 0 ] || fail "no client read succeeded at a 20% error rate"
run_py "$tmpdir/client.py" URI="$(uri front3)" SOURCE="$tmpdir/data" \
  MODE=after-errors
stop_server front3
info "random errors: $failed reads failed with EIO, $ok returned the right data"
