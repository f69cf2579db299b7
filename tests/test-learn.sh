#!/usr/bin/env bash
# ra-cache-learn=FILE against real processes: a front over a 1 ms
# backend serving a file; a "boot" (scattered reads in a fixed order,
# from nbdsh with a checksum of everything read, and fio randread with
# a fixed seed) is recorded, then replayed by a fresh front: the data is
# the backend's, the replay read it ahead (replay_used_pages) and the
# clients missed far less.  Then: a write to the backend between runs
# (the replayed data is the new data), the merge of two runs, a learned
# file larger than the cache (paced: little evicted unused), another
# workload with the file (the replay stops), the file rewritten at
# intervals, and the files to ignore (garbage, truncated,
# another export) and the paths to refuse.
test_needs="nbdkit filter"
. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"
requires fio
d=$tmpdir
learn=$d/disk.learn

# The backend: 64 MiB of random data in a file, 1 ms away.
head -c $((64 << 20)) /dev/urandom > "$d/disk.img"
start_server back --filter=delay file "$d/disk.img" rdelay=1ms

cat > "$d/boot.py" <<'PY'
# N reads of 4K to 16K at the start of distinct 16K slots of [REGION,
# REGION + SPAN) (as a boot reads each block once), in an order fixed by
# SEED; prints the sha256 of all the data read, from the NBD server at
# URI, or from the file FILE.
import hashlib, os, random
rnd = random.Random (int (os.environ["SEED"]))
region, span = int (os.environ["REGION"]), int (os.environ["SPAN"])
sha = hashlib.sha256 ()
reads = [(region + slot * 16384, 4096 * rnd.choice ((1, 1, 2, 4)))
         for slot in rnd.sample (range (span // 16384), int (os.environ["N"]))]
if os.environ.get ("FILE"):
    with open (os.environ["FILE"], "rb") as f:
        for off, n in reads:
            f.seek (off); sha.update (f.read (n))
else:
    import nbd
    h = nbd.NBD ()
    h.connect_uri (os.environ["URI"])
    for off, n in reads:
        sha.update (h.pread (n, off))
    h.shutdown ()
print (sha.hexdigest ())
PY

# boot NAME SEED REGION SPAN N: the boot through front NAME; its
# checksum must be the file's.
boot ()
{
  local got want
  got=$(run_py "$d/boot.py" URI="$(uri "$1")" SEED="$2" REGION="$3" \
          SPAN="$4" N="$5") || fail "the boot through $1 failed"
  want=$(SEED="$2" REGION="$3" SPAN="$4" N="$5" FILE="${img:-$d/disk.img}" \
           /usr/bin/python3 "$d/boot.py")
  [ "$got" = "$want" ] ||
    fail "$1: the data read is not the backend's ($got, want $want)"
}

fio_boot ()
{
  timeout "$CLIENT_TIMEOUT" fio --name=boot --ioengine=nbd \
    --uri="$(uri "$1")" --rw=randread --bs=4k --offset=32M --size=4M \
    --randseed=42 --iodepth=1 --output="$d/fio-$1.out" ||
    fail "fio through $1 failed: $(cat "$d/fio-$1.out")"
}

# ---- record, then replay ---------------------------------------------------
start_front rec back ra-cache-learn="$learn"
boot rec 1 0 $((24 << 20)) 1500
fio_boot rec
stop_server rec
[ -s "$learn" ] || fail "no learned file was written"
[ "$(stat -c %a "$learn")" = 600 ] || fail "the learned file is not mode 0600"
read -r recorded misses1 <<< "$(ra_stat rec learn_recorded_pages page_misses)"
[ "$recorded" -gt 2000 ] || fail "only $recorded pages recorded"
info "recorded $recorded pages ($(stat -c %s "$learn") bytes), $misses1 misses"

start_front rep back ra-cache-learn="$learn"
boot rep 1 0 $((24 << 20)) 1500
fio_boot rep
stop_server rep
read -r seq replayed used wasted misses2 <<< \
  "$(ra_stat rep learn_sequence_pages replay_pages replay_used_pages \
       replay_wasted_pages page_misses)"
info "replay: sequence $seq pages, replayed $replayed, used $used," \
  "wasted $wasted; misses $misses2 (recording run: $misses1)"
[ "$seq" -eq "$recorded" ] || fail "sequence $seq pages, recorded $recorded"
[ "$used" -ge $((seq * 9 / 10)) ] ||
  fail "the clients read only $used of $seq pages through the replay"
[ "$misses2" -le $((misses1 / 5)) ] ||
  fail "the replay left $misses2 misses (without it: $misses1)"
grep -q "ra-cache-learn: .*ignored" "$d/rep.log" &&
  fail "a good file was ignored: $(grep "ra-cache-learn: " "$d/rep.log")"

# ---- another workload with this file: the replay stops --------------------
# Reads at random over [20M, 64M) (a tenth of them in the last 4M of
# the boot's region): they read pages of the replay's windows by chance,
# but do not follow the learned order.  A copy of the file: this run
# rewrites it.
cp "$learn" "$d/other-workload.learn"
start_front rnd back ra-cache-learn="$d/other-workload.learn"
boot rnd 7 $((20 << 20)) $((44 << 20)) 1500
stop_server rnd
read -r rreplayed rused <<< "$(ra_stat rnd replay_pages replay_used_pages)"
info "a random reader with the boot's file: replayed $rreplayed, used $rused"
[ "$rreplayed" -le $((seq / 3)) ] ||
  fail "the replay went on for a random reader: $rreplayed pages replayed"

# ---- a write between runs: the replay reads the new data ----------------
/usr/bin/python3 - "$d/disk.img" <<'PY'
import os, sys
with open (sys.argv[1], "r+b") as f:
    for off in range (0, 24 << 20, 1 << 20):
        f.seek (off + 8192); f.write (os.urandom (65536))
PY
start_front rep2 back ra-cache-learn="$learn"
boot rep2 1 0 $((24 << 20)) 1500
stop_server rep2
[ "$(ra_stat rep2 replay_used_pages)" -gt 0 ] || fail "no replay after the write"

# ---- the merge of two runs, and what fades --------------------------------
# A run that reads another region: the file then has both (this run's
# first); the next run that reads only the boot lets the other fade.
start_front other back ra-cache-learn="$learn"
boot other 2 $((40 << 20)) $((16 << 20)) 400
stop_server other
read -r rec_other seq_other <<< "$(ra_stat other learn_recorded_pages learn_sequence_pages)"
start_front merged back ra-cache-learn="$learn"
boot merged 2 $((40 << 20)) $((16 << 20)) 400
stop_server merged
read -r seq_merged used_merged <<< "$(ra_stat merged learn_sequence_pages replay_used_pages)"
[ "$seq_merged" -ge $((seq_other + rec_other)) ] ||
  fail "merged sequence $seq_merged pages < $seq_other + $rec_other"
# Its region comes first in the file: replayed at once.
[ "$used_merged" -ge $((rec_other * 9 / 10)) ] ||
  fail "the merged file replayed only $used_merged of $rec_other pages"
info "merge: $seq_other + $rec_other pages -> $seq_merged; used $used_merged"

# ---- a learned file larger than the cache: paced ----------------------------
big=$d/big.learn
start_front bigrec back ra-cache-learn="$big" ra-cache-size=32M
boot bigrec 3 0 $((64 << 20)) 4000
stop_server bigrec
start_front bigrep back ra-cache-learn="$big" ra-cache-size=4M ra-max=1M
boot bigrep 3 0 $((64 << 20)) 4000
stop_server bigrep
read -r bseq breplayed bused bwasted <<< \
  "$(ra_stat bigrep learn_sequence_pages replay_pages replay_used_pages \
       replay_wasted_pages)"
info "file of $bseq pages, cache of 1024: replayed $breplayed, used $bused," \
  "wasted $bwasted"
[ "$bseq" -gt 4096 ] || fail "the big file has only $bseq pages"
[ "$bused" -ge $((bseq / 2)) ] || fail "the replay was used for $bused pages only"
[ "$bwasted" -le $((breplayed / 5)) ] ||
  fail "$bwasted of $breplayed replayed pages evicted unused: not paced"

# ---- written at intervals, while the server runs ----------------------------
rm -f "$d/iv.learn"
start_front iv back ra-cache-learn="$d/iv.learn" ra-cache-stats-interval=1
boot iv 4 0 $((1 << 20)) 50
wait_for -s "$d/iv.learn" || fail "no learned file within the interval"
stop_server iv

# ---- files to ignore, with one message, then rewritten ----------------------
check_ignored ()
{
  local name=$1 pattern=$2; shift 2
  start_front "$name" "$@"
  boot "$name" 5 0 $((1 << 20)) 20
  stop_server "$name"
  [ "$(grep -c "ra-cache-learn: .*ignored: $pattern.*; it will be rewritten" \
        "$d/$name.log")" -eq 1 ] ||
    fail "$name: not one message /$pattern/: $(grep ra-cache-learn "$d/$name.log")"
  [ "$(ra_stat "$name" learn_sequence_pages)" -eq 0 ] ||
    fail "$name: the ignored file was replayed"
  # Rewritten: the next run reads it.
  start_front "$name-next" "$@"
  boot "$name-next" 5 0 $((1 << 20)) 20
  stop_server "$name-next"
  [ "$(ra_stat "$name-next" learn_sequence_pages)" -gt 0 ] ||
    fail "$name: the file was not rewritten"
}
head -c 5000 /dev/urandom > "$d/g.learn"
check_ignored garbage "not a learned file" back ra-cache-learn="$d/g.learn"
cp "$learn" "$d/t.learn"
truncate -s -7 "$d/t.learn"
check_ignored truncated "truncated or garbled" back ra-cache-learn="$d/t.learn"
# Another export: the same file over a backend of another size.
head -c $((32 << 20)) /dev/urandom > "$d/small.img"
start_server small --filter=delay file "$d/small.img" rdelay=1ms
cp "$learn" "$d/f.learn"
img=$d/small.img check_ignored foreign "learned on another export" small \
  ra-cache-learn="$d/f.learn"

# ---- paths refused before nbdkit forks ----------------------------------------
daemon_fails nodir 'ra-cache-learn: .*cannot use the directory' \
  ra-cache-learn="$d/no/such/dir/x.learn"
mkdir "$d/adir"
daemon_fails isdir 'ra-cache-learn: .* is a directory' \
  ra-cache-learn="$d/adir"
