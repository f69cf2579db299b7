#!/usr/bin/env bash
# ra-bench against real nbdkit servers: every pattern runs and reports
# sane numbers; the bytes and offsets the server saw are the ones asked
# for (stats and log filters); --json is valid JSON; connection and read
# failures exit non-zero with a clear message; --depth really keeps
# requests in flight; --help and the man page list the same options.
test_needs="nbdkit"
. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"
PY=/usr/bin/python3

BENCH=$top_builddir/ra-bench
[ -x "$BENCH" ] || fail "ra-bench is not built: $BENCH"
[ -x "$PY" ] || skip "no $PY"

# Servers: start_server/stop_server/uri of tests/functions.sh; the log
# filter's request logs are $d/NAME.reqlog (NAME.log is nbdkit's).
d=$tmpdir

# bench NAME ARGS...: run ra-bench with --json, output in $d/NAME.json,
# stderr in $d/NAME.err; fails the test if ra-bench fails.
bench ()
{
  local name=$1; shift
  timeout 60 "$BENCH" --json "$@" >"$d/$name.json" 2>"$d/$name.err" ||
    fail "ra-bench $* exited with $?: $(cat "$d/$name.err")"
  "$PY" -m json.tool "$d/$name.json" >/dev/null ||
    fail "ra-bench $* printed invalid JSON: $(cat "$d/$name.json")"
}

# check NAME PYTHON-EXPRESSION: the expression over the JSON object r
# must be true.
check ()
{
  "$PY" - "$d/$1.json" "$2" <<'PY' || fail "$1: $2 is false: $(cat "$d/$1.json")"
import json, sys
r = json.load(open(sys.argv[1]))
sys.exit(0 if eval("(" + sys.argv[2] + ")") else 1)
PY
}

# Sane numbers for any successful run.
sane ()
{
  check "$1" 'r["requests"] > 0 and r["bytes"] > 0
    and r["requests"] == r["reads"] + r["writes"]
    and r["bytes"] == r["bytes_read"] + r["bytes_written"]
    and r["bytes"] <= r["requests"] * r["request_size"]
    and r["elapsed_s"] > 0 and r["mb_per_s"] > 0 and r["iops"] > 0
    and abs(r["mb_per_s"] - r["bytes"] / r["elapsed_s"] / 1e6) <= 0.01 * r["mb_per_s"] + 0.01
    and abs(r["mib_per_s"] * 1048576 - r["mb_per_s"] * 1e6) <= 0.01 * r["mb_per_s"] * 1e6 + 1e4
    and 0 < r["latency_ms"]["min"] <= r["latency_ms"]["p50"] <= r["latency_ms"]["p90"]
        <= r["latency_ms"]["p99"] <= r["latency_ms"]["max"] <= r["elapsed_s"] * 1000 + 1'
}

# offsets LOGFILE: "connection offset count" of every read (or write) the
# log filter saw, in the order the server started them.
offsets ()
{
  sed -n 's/.*connection=\([0-9]*\) \(Read\|Write\) id=[0-9]* offset=\(0x[0-9a-f]*\) count=\(0x[0-9a-f]*\) .*/\1 \3 \4/p' "$1" |
    while read -r c o n; do echo "$c $((o)) $((n))"; done
}

K64=65536

# ---- usage errors: exit 2 with a message ------------------------------
for args in "" "--depth 0 -u x" "--size 1Q -u x" "--bogus -u x" \
            "--pattern nope -u x" "--time -1 -u x" "--time 0 -u x" "--time 1h -u x" "--write-ratio 0.5 -u x" \
            "--streams 3 -u x" "--stride-skip 2 -u x" "-p multiconn --streams 2 -c 3 -u x" \
            "-p interleaved --streams 2 -c 3 -u x" \
            "-s 128M -u x" "--bytes 0 -u x" "-u"; do
  set +e
  # shellcheck disable=SC2086
  "$BENCH" $args >"$d/usage.out" 2>"$d/usage.err"
  rc=$?
  set -e
  [ "$rc" -eq 2 ] || fail "ra-bench $args: exit $rc, expected 2"
  grep -q '^ra-bench: ' "$d/usage.err" || fail "ra-bench $args: no message"
done
rm -f "$d/usage.out" "$d/usage.err"
"$BENCH" --help | grep -q -- '--stride-skip' || fail "--help"
"$BENCH" --version | grep -q '^ra-bench ' || fail "--version"

# --help and the man page name the same options.
pod=$top_srcdir/src/ra-bench.pod
diff <("$BENCH" --help | grep -o -- '--[a-z][a-z-]*' | sort -u) \
     <(grep '^=item ' "$pod" | grep -o 'B<--[a-z-]*>' | sed 's/^B<//; s/>$//' | sort -u) ||
  fail "--help and $pod do not list the same options"

# ---- every pattern runs and reports sane numbers ----------------------
start_server pat --filter=log pattern 64M logfile="$d/pat.reqlog"
start_server mem memory 16M
P=$(uri pat)
bench seq         -u "$P" -s 64K -d 4 --bytes 8M
bench backward    -u "$P" -s 64K -d 4 -p backward --bytes 8M
bench interleaved -u "$P" -s 16K -d 4 -p interleaved --streams 4 --bytes 4M
bench multiconn   -u "$P" -s 16K -d 2 -p multiconn --streams 3 --bytes 3M
bench random      -u "$P" -s 4K  -d 8 -p random --time 300ms
bench strided     -u "$P" -s 64K -d 4 -p strided --stride-read 3 --stride-skip 2 --bytes 6M
bench mixed       -u "$(uri mem)" -s 4K -d 8 -p mixed --write-ratio 0.3 --bytes 8M
for p in seq backward interleaved multiconn random strided mixed; do
  sane "$p"
  check "$p" "r['pattern'] == '$p'"
done
check seq 'r["bytes"] == 8 * 2**20 and r["requests"] == 128 and r["connections"] == 1 and r["depth"] == 4'
check multiconn 'r["connections"] == 3 and r["streams"] == 3'
check random '0.3 <= r["elapsed_s"] < 5'
check mixed 'r["writes"] > 0 and r["reads"] > 0 and r["bytes"] == 8 * 2**20
  and 0.2 < r["writes"] / r["requests"] < 0.4'
# One connection per run, and three for multiconn: 8 in all.
stop_server pat
[ "$(offsets "$d/pat.reqlog" | cut -d' ' -f1 | sort -u | wc -l)" -eq 8 ] ||
  fail "the server saw $(offsets "$d/pat.reqlog" | cut -d' ' -f1 | sort -u | wc -l) connections, expected 8"
info "all patterns ran"

# Text output has the fields a person looks for.
start_server pat2 pattern 16M
timeout 60 "$BENCH" -u "$(uri pat2)" -s 64K --bytes 1M >"$d/text.out"
for f in 'throughput: .* MB/s, .* MiB/s' 'IOPS:' 'latency ms: *p50 .* p90 .* p99 .* max' \
         'bytes: *1048576 ' 'requests: *16 ' 'elapsed:'; do
  grep -q "$f" "$d/text.out" || fail "text output lacks '$f': $(cat "$d/text.out")"
done

# ---- the bytes the server read are the bytes asked for ----------------
start_server st --filter=stats pattern 64M statsfile="$d/st.txt"
bench st1 -u "$(uri st)" -s 64K -d 8 --bytes 10M
stop_server st
grep -q '^read: 160 ops, .* 10\.00 MiB' "$d/st.txt" ||
  fail "stats filter saw $(grep '^read:' "$d/st.txt"), expected 160 ops, 10.00 MiB"
check st1 'r["bytes"] == 10 * 2**20 and r["requests"] == 160'
# An odd byte count: the last request is shortened.
start_server st --filter=stats --filter=log pattern 64M statsfile="$d/st.txt" logfile="$d/st.reqlog"
bench st2 -u "$(uri st)" -s 64K -d 3 --bytes 1000000
stop_server st
grep -q '^read: 16 ops,' "$d/st.txt" || fail "stats: $(grep '^read:' "$d/st.txt"), expected 16 ops"
[ "$(offsets "$d/st.reqlog" | awk '{ s += $3 } END { print s }')" -eq 1000000 ] ||
  fail "server read $(offsets "$d/st.reqlog" | awk '{ s += $3 } END { print s }') bytes, expected 1000000"
check st2 'r["bytes"] == 1000000 and r["requests"] == 16'
info "byte counts match the server's"

# ---- offsets: the server sees the pattern -----------------------------
# logged NAME ARGS...: a fresh logged server, one run, the offsets (in
# units of 64K) the server saw, one line "conn block".
logged ()
{
  local name=$1; shift
  start_server "$name" --filter=log pattern 4M logfile="$d/$name.reqlog"
  bench "$name" -u "$(uri "$name")" -s 64K "$@"
  stop_server "$name"
  offsets "$d/$name.reqlog" | while read -r c o n; do
    [ "$n" -eq $K64 ] || fail "$name: a request of $n bytes"
    [ $((o % K64)) -eq 0 ] || fail "$name: unaligned offset $o"
    echo "$c $((o / K64))"
  done > "$d/$name.blocks"
}
blocks () { cut -d' ' -f2 "$d/$1.blocks" | tr '\n' ' ' | sed 's/ $//'; }
expect () { [ "$(blocks "$1")" = "$2" ] || fail "$1: server saw blocks '$(blocks "$1")', expected '$2'"; }

# Depth 1: the server's order is the client's order.
logged seq1 --length 1M
expect seq1 "$(seq -s ' ' 0 15)"
logged back1 --length 1M -p backward
expect back1 "$(seq -s ' ' 15 -1 0)"
logged region1 --offset 256K --length 512K
expect region1 "4 5 6 7 8 9 10 11"
logged strided1 --length 1M -p strided --stride-read 2 --stride-skip 3
expect strided1 "0 1 5 6 10 11 15"
logged strided2 --bytes 640K -p strided --stride-read 1 --stride-skip 3
expect strided2 "0 4 8 12 16 20 24 28 32 36"
# 4 streams over 16 blocks: parts of 4 blocks, round-robin.
logged inter1 --length 1M -p interleaved --streams 4
expect inter1 "0 4 8 12 1 5 9 13 2 6 10 14 3 7 11 15"
# With a bound the streams wrap inside their parts.
logged inter2 --length 512K -p interleaved --streams 2 --bytes 768K
expect inter2 "0 4 1 5 2 6 3 7 0 4 1 5"
[ "$(cut -d' ' -f1 "$d/inter2.blocks" | sort -u | wc -l)" -eq 1 ] ||
  fail "interleaved used more than one connection"
# multiconn: each connection is one ascending stream over its part.
logged multi1 --length 1M -p multiconn --streams 2
for c in $(cut -d' ' -f1 "$d/multi1.blocks" | sort -u); do
  got=$(awk -v c="$c" '$1 == c { print $2 }' "$d/multi1.blocks" | tr '\n' ' ' | sed 's/ $//')
  [ "$got" = "0 1 2 3 4 5 6 7" ] || [ "$got" = "8 9 10 11 12 13 14 15" ] ||
    fail "multiconn connection $c read blocks '$got'"
done
[ "$(cut -d' ' -f1 "$d/multi1.blocks" | sort -u | wc -l)" -eq 2 ] || fail "multiconn: not 2 connections"
# interleaved on C connections: stream s on connection s % C, each
# connection round-robin over its own streams.  per_conn NAME: the
# blocks of each server connection, one line per connection, sorted.
per_conn ()
{
  local c
  for c in $(cut -d' ' -f1 "$d/$1.blocks" | sort -u); do
    awk -v c="$c" '$1 == c { print $2 }' "$d/$1.blocks" | tr '\n' ' ' | sed 's/ $//'
    echo
  done | sort
}
# expect_conns NAME LINE...: per_conn NAME is exactly these lines.
expect_conns ()
{
  local name=$1; shift
  [ "$(per_conn "$name")" = "$(printf '%s\n' "$@" | sort)" ] ||
    fail "$name: connections read '$(per_conn "$name" | tr '\n' '|')', expected '$(printf '%s|' "$@")'"
}
# 4 streams of 4 blocks on 2 connections: streams 0, 2 and 1, 3.
logged inter3 --length 1M -p interleaved --streams 4 -c 2
expect_conns inter3 "0 8 1 9 2 10 3 11" "4 12 5 13 6 14 7 15"
# Uneven: 5 streams on 2 connections: streams 0, 2, 4 and 1, 3.
logged inter4 --length 1280K -p interleaved --streams 5 -c 2
expect_conns inter4 "0 8 16 1 9 17 2 10 18 3 11 19" "4 12 5 13 6 14 7 15"
# The benchmark's shape: 64 streams (one block each here) on 8
# connections, connection i reading blocks i, i+8, ..., i+56.
logged inter5 -p interleaved --streams 64 -c 8
mapfile -t want < <(for i in $(seq 0 7); do seq -s ' ' "$i" 8 63; done)
expect_conns inter5 "${want[@]}"
check inter5 'r["connections"] == 8 and r["streams"] == 64 and r["requests"] == 64'
# With a bound and depth 2, streams wrap inside their parts and stay on
# their connection: the parts (of 4 blocks) each connection read.
logged inter6 --length 1M -p interleaved --streams 4 -c 2 -d 2 --bytes 2M
parts=$(for c in $(cut -d' ' -f1 "$d/inter6.blocks" | sort -u); do
          awk -v c="$c" '$1 == c { print int($2 / 4) }' "$d/inter6.blocks" |
            sort -u | tr '\n' ' ' | sed 's/ $//'
          echo
        done | sort | tr '\n' '|')
[ "$parts" = "0 2|1 3|" ] ||
  fail "interleaved -c 2 -d 2 --bytes 2M: connections read parts '$parts', expected '0 2|1 3|'"
[ "$(wc -l < "$d/inter6.blocks")" -eq 32 ] || fail "inter6: $(wc -l < "$d/inter6.blocks") reads, expected 32"
info "interleaved streams spread over connections"
# Random with a seed: aligned, inside the region, reproducible.
logged rand1 --length 1M -p random --bytes 2M --seed 7
logged rand2 --length 1M -p random --bytes 2M --seed 7
[ "$(blocks rand1)" = "$(blocks rand2)" ] || fail "random: same seed, different offsets"
awk '$2 > 15 { exit 1 }' "$d/rand1.blocks" || fail "random: offset outside the region"
[ "$(cut -d' ' -f2 "$d/rand1.blocks" | sort -u | wc -l)" -gt 8 ] || fail "random: too few distinct offsets"
# Deeper queues change the order the server logs, not the set.
logged seq8 --length 2M -d 8
[ "$(cut -d' ' -f2 "$d/seq8.blocks" | sort -n | tr '\n' ' ' | sed 's/ $//')" = "$(seq -s ' ' 0 31)" ] ||
  fail "seq depth 8 did not read each block once"
logged back8 --length 2M -d 8 -p backward
[ "$(cut -d' ' -f2 "$d/back8.blocks" | sort -n | tr '\n' ' ' | sed 's/ $//')" = "$(seq -s ' ' 0 31)" ] ||
  fail "backward depth 8 did not read each block once"
info "offsets are right for every pattern"

# ---- --depth keeps requests in flight ---------------------------------
# 40 reads of 20 ms: serially 0.8 s; 8 at a time about 0.1 s.
start_server slow --filter=log --filter=delay pattern 16M rdelay=20ms logfile="$d/slow.reqlog"
bench depth8 -u "$(uri slow)" -s 4K -d 8 --bytes 160K
stop_server slow
check depth8 'r["requests"] == 40 and r["elapsed_s"] < 0.4'
# The log filter (outside the delay) shows how many reads overlapped.
overlap=$(awk '/ Read id=/ { n++; if (n > m) m = n } /\.\.\.Read id=/ { n-- } END { print m }' "$d/slow.reqlog")
[ "$overlap" -ge 4 ] || fail "depth 8: at most $overlap reads were in flight at the server"
start_server slow --filter=log --filter=delay pattern 16M rdelay=20ms logfile="$d/slow1.reqlog"
bench depth1 -u "$(uri slow)" -s 4K -d 1 --bytes 40K
stop_server slow
overlap1=$(awk '/ Read id=/ { n++; if (n > m) m = n } /\.\.\.Read id=/ { n-- } END { print m }' "$d/slow1.reqlog")
[ "$overlap1" -eq 1 ] || fail "depth 1: $overlap1 reads were in flight at once"
check depth1 'r["latency_ms"]["p50"] >= 19'
info "depth 8 kept up to $overlap reads in flight (depth 1: $overlap1)"

# ---- failures ---------------------------------------------------------
set +e
"$BENCH" -u "nbd+unix:///?socket=$d/missing.sock" >"$d/missing.out" 2>"$d/missing.err"
rc=$?
set -e
[ "$rc" -ne 0 ] && [ "$rc" -ne 2 ] || fail "missing socket: exit $rc"
grep -q "cannot connect to nbd+unix:///?socket=$d/missing.sock: .*No such file" "$d/missing.err" ||
  fail "missing socket: unclear message: $(cat "$d/missing.err")"
[ ! -s "$d/missing.out" ] || fail "missing socket: results printed"

start_server eio --filter=error pattern 16M error-pread=EIO error-pread-rate=100%
set +e
"$BENCH" -u "$(uri eio)" -s 64K -d 4 --bytes 1M --json >"$d/eio.out" 2>"$d/eio.err"
rc=$?
set -e
[ "$rc" -eq 1 ] || fail "read error: exit $rc, expected 1"
grep -q 'read failed at offset [0-9]* length 65536 on .*: Input/output error' "$d/eio.err" ||
  fail "read error: unclear message: $(cat "$d/eio.err")"
[ ! -s "$d/eio.out" ] || fail "read error: results printed as if it worked"
# nbdkit 1.32 itself may abort (raw_send_socket: sock >= 0) when a client
# drops its connection after errors: not the code under test.
stop_server eio any-status

set +e
"$BENCH" -u "$(uri pat2)" -p mixed -s 4K --bytes 64K >"$d/ro.out" 2>"$d/ro.err"
rc=$?
set -e
[ "$rc" -eq 1 ] && grep -q 'read-only' "$d/ro.err" ||
  fail "mixed on a read-only export: exit $rc: $(cat "$d/ro.err")"
info "failures are reported"

info PASS
