#!/usr/bin/env bash
# ra-trace, through the command: the worked example of
# doc/readahead-rules.md exactly, G then E for a first read at a
# non-zero offset, two interleaved streams on one stream id reaching
# full-size branch C windows, separate stream ids, the
# timed simulation (kernel and adaptive windows over a 20 ms backend,
# congestion, a slow client), nbdkit log filter lines from a real log
# (nbdkit --filter=log, read with nbdsh), errors (FILE:LINE, exit 1) and
# --help.
#
# The log part needs nbdkit and nbdsh with the nbd module; where they are
# missing the other checks still run and the test then exits 77 (skip).
test_needs=""
. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

RA_TRACE=$top_builddir/ra-trace
POD=$top_srcdir/src/ra-trace.pod

[ -x "$RA_TRACE" ] || fail "$RA_TRACE is not built"

# The window rows of ra-trace's output, fields normalised to one space:
# read stream trigger branch start size async marker inserted batches
rows ()
{
  awk '/^# summary/ { exit } /^#/ { next } { $1 = $1; print }' "$1"
}

# One summary value: summary FILE KEY (the text before the colon).
summary ()
{
  awk -v k="$2:" 'found && index ($0, k) == 1 {
                    sub (/^[^:]*:[ ]*/, ""); split ($0, a, " "); print a[1]; exit }
                  /^# summary/ { found = 1 }' "$1"
}

expect_rows ()
{
  local out=$1 want=$2
  if [ "$(rows "$out")" != "$want" ]; then
    echo "expected windows:" >&2; echo "$want" >&2
    echo "got:" >&2; rows "$out" >&2
    fail "$3"
  fi
}

expect_summary ()
{
  local got
  got=$(summary "$1" "$2")
  [ "$got" = "$3" ] || fail "$4: summary '$2' is '$got', expected '$3'"
}

# ---- the worked example (doc/readahead-rules.md) -----------------------
# ra_max 32 pages (128K), one stream, 16 KiB reads from offset 0.
for i in $(seq 0 21); do echo "$((i * 16384)) 16384"; done > "$tmpdir/we.trace"
"$RA_TRACE" --mode=kernel --ra-max=128K --export-size=1G "$tmpdir/we.trace" > "$tmpdir/we.out"
expect_rows "$tmpdir/we.out" "\
1 0 sync A 0 8 4 4 8 2
2 0 async B 8 16 16 8 16 1
3 0 async B 24 32 32 24 32 1
7 0 async B 56 32 32 56 32 1
15 0 async B 88 32 32 88 32 1" "worked example"
expect_summary "$tmpdir/we.out" client_reads 22 "worked example"
expect_summary "$tmpdir/we.out" client_bytes 360448 "worked example"
expect_summary "$tmpdir/we.out" page_hits 87 "worked example"
expect_summary "$tmpdir/we.out" page_misses 1 "worked example"
expect_summary "$tmpdir/we.out" windows.A 1 "worked example"
expect_summary "$tmpdir/we.out" windows.B 4 "worked example"
expect_summary "$tmpdir/we.out" windows.G 0 "worked example"
expect_summary "$tmpdir/we.out" async_pages 116 "worked example"
expect_summary "$tmpdir/we.out" "read ahead never used" 32 "worked example"
expect_summary "$tmpdir/we.out" "read ahead unused at end" 32 "worked example"
expect_summary "$tmpdir/we.out" backend_reads 6 "worked example"
expect_summary "$tmpdir/we.out" backend_bytes 491520 "worked example"
expect_summary "$tmpdir/we.out" backend_bytes_per_client_byte 1.3636 "worked example"
info "worked example: A 0/8/4 m4, B 8/16/16 m8, B 24/32/32 m24, B 56/32/32 m56, B 88/32/32 m88"

# The same in hex with comments and blank lines, from standard input;
# --quiet prints the same summary and no windows.
{
  echo "# the worked example, in hex"
  echo
  for i in $(seq 0 21); do printf '0x%x 0x4000 0   # read %d\n' $((i * 16384)) "$i"; done
} | "$RA_TRACE" --mode=kernel --ra-max=128K --export-size=1G --quiet > "$tmpdir/we-q.out"
[ -z "$(rows "$tmpdir/we-q.out")" ] || fail "--quiet printed windows"
diff <(sed -n '/^# summary/,$p' "$tmpdir/we.out") \
     <(sed -n '/^# summary/,$p' "$tmpdir/we-q.out") ||
  fail "the hex trace on stdin gives another summary"

# The default export size ends at the last page read: the fifth window
# starts at the end of the export and reads nothing.
"$RA_TRACE" --mode=kernel --ra-max=128K "$tmpdir/we.trace" > "$tmpdir/we-end.out"
grep -q '^# ra-trace: .* export-size=360448$' "$tmpdir/we-end.out" ||
  fail "default export size is not 360448"
[ "$(rows "$tmpdir/we-end.out" | tail -n 1)" = "15 0 async B 88 0 0 - 0 0" ] ||
  fail "window past the end of the export is not empty"

# ---- G then E --------------------------------------------------------------
printf '%s\n' "1048576 16384" "1064960 16384" > "$tmpdir/ge.trace"
"$RA_TRACE" --mode=kernel --ra-max=128K --export-size=1G "$tmpdir/ge.trace" > "$tmpdir/ge.out"
expect_rows "$tmpdir/ge.out" "\
1 0 sync G 256 4 0 - 4 1
2 0 sync E 260 8 4 264 8 2" "G then E"
info "first read at a non-zero offset: G (4 pages, no marker), then E (8/4)"

# ---- two interleaved streams on one stream id: branch C -----------------
# Stream X from 0, stream Y from 256 MiB (page 65536), 16 KiB reads,
# alternating, one stream state.
for i in $(seq 0 63); do
  echo "$((i * 16384)) 16384"
  echo "$((268435456 + i * 16384)) 16384"
done > "$tmpdir/il.trace"
"$RA_TRACE" --mode=kernel --ra-max=128K --export-size=1G "$tmpdir/il.trace" > "$tmpdir/il.out"
rows "$tmpdir/il.out" > "$tmpdir/il.rows"
nx=$(awk '$4 == "C" && $5 < 65536 && $6 == 32 && $7 == 32' "$tmpdir/il.rows" | wc -l)
ny=$(awk '$4 == "C" && $5 >= 65536 && $6 == 32 && $7 == 32' "$tmpdir/il.rows" | wc -l)
[ "$nx" -ge 3 ] && [ "$ny" -ge 3 ] ||
  fail "interleaved: full-size C windows: stream X $nx, stream Y $ny (want >= 3 each)"
# After warm-up (the first 16 reads) every window is an async C window of
# full size: no random reads, no sync misses.
late=$(awk '$1 > 16 && !($3 == "async" && $4 == "C" && $6 == 32)' "$tmpdir/il.rows")
[ -z "$late" ] || fail "interleaved: after warm-up: $late"
expect_summary "$tmpdir/il.out" "streams" 1 "interleaved"
info "interleaved streams on one state: $nx + $ny full-size C windows"

# On two stream ids each stream has its own state: B, never C.
for i in $(seq 0 63); do
  echo "$((i * 16384)) 16384 1"
  echo "$((268435456 + i * 16384)) 16384 2"
done > "$tmpdir/two.trace"
"$RA_TRACE" --mode=kernel --ra-max=128K --export-size=1G "$tmpdir/two.trace" > "$tmpdir/two.out"
expect_summary "$tmpdir/two.out" "streams" 2 "two streams"
expect_summary "$tmpdir/two.out" windows.C 0 "two streams"
[ "$(rows "$tmpdir/two.out" | awk '$2 == 2' | head -n 2 | awk '{ print $4 }' | tr -d '\n')" = GE ] ||
  fail "two streams: stream 2 does not start with G then E"

# The marker column names the page that got the marker: after a read of
# page 4, a read of pages 0..3 is A 0/5/1 whose marker page, 4, is cached
# already and so gets none ("-").
printf '16384 4096\n0 16384\n' > "$tmpdir/mk.trace"
"$RA_TRACE" --mode=kernel --ra-max=128K "$tmpdir/mk.trace" > "$tmpdir/mk.out"
[ "$(rows "$tmpdir/mk.out")" = "\
1 0 sync G 4 1 0 - 1 1
2 0 sync A 0 5 1 - 4 1" ] || fail "marker page cached already: $(rows "$tmpdir/mk.out")"
info "a window whose marker page is cached already: marker -"

# The filter's defaults, and its configuration file: the worked example
# with ra-max and the mode from a file gives the same output; the
# command line overrides the file.
"$RA_TRACE" -q "$tmpdir/we.trace" > "$tmpdir/def.out"
grep -q '^# ra-trace: page-size=4096 ra-max=8388608 io-max=1048576 cache-size=268435456 ' \
  "$tmpdir/def.out" || fail "not the filter's defaults: $(head -n 1 "$tmpdir/def.out")"
grep -q '^# timing: mode=adaptive .* parallel=12 .* congestion-threshold=9$' "$tmpdir/def.out" ||
  fail "not the filter's default mode and threshold: $(sed -n 3p "$tmpdir/def.out")"
printf 'ra-max = "128K";\nra-mode = "kernel";\n' > "$tmpdir/ra.conf"
"$RA_TRACE" --config="$tmpdir/ra.conf" --export-size=1G "$tmpdir/we.trace" |
  cmp -s - "$tmpdir/we.out" || fail "--config: not the output of the same options"
"$RA_TRACE" --config="$tmpdir/ra.conf" --ra-max=64K --export-size=1G "$tmpdir/we.trace" |
  grep -q '^# ra-trace: page-size=4096 ra-max=65536 io-max=1048576 ' ||
  fail "--ra-max does not override the configuration file"
printf 'ra-congestion-threshold = 3;\n' > "$tmpdir/thr.conf"
"$RA_TRACE" -q --config="$tmpdir/thr.conf" --latency=1ms "$tmpdir/we.trace" |
  grep -q ' congestion-threshold=3$' || fail "--config: ra-congestion-threshold not used"
info "the filter's defaults; --config, overridden by the options"

# ---- errors: FILE:LINE, exit 1 -------------------------------------------
# expect_error DESCRIPTION MESSAGE-REGEX RA-TRACE-ARGS... (stdin: $tmpdir/in)
expect_error ()
{
  local what=$1 re=$2 rc=0
  shift 2
  "$RA_TRACE" "$@" < "$tmpdir/in" > "$tmpdir/err.out" 2> "$tmpdir/err.err" || rc=$?
  [ "$rc" -eq 1 ] || fail "$what: exit status $rc, expected 1"
  grep -Eq "$re" "$tmpdir/err.err" ||
    fail "$what: message '$(cat "$tmpdir/err.err")' does not match '$re'"
}

printf '0 4096\n\n4096 4096 7\nfoo 4096\n' > "$tmpdir/bad.trace"
: > "$tmpdir/in"
expect_error "not a number" \
  "^ra-trace: $tmpdir/bad.trace:4: OFFSET: 'foo' is not a number" "$tmpdir/bad.trace"
printf '0 4096 1 2\n' > "$tmpdir/in"
expect_error "too many fields" "^ra-trace: <stdin>:1: expected OFFSET LENGTH \[STREAM\]"
printf '# one number\n8192\n' > "$tmpdir/in"
expect_error "one field" "^ra-trace: <stdin>:2: expected OFFSET LENGTH \[STREAM\], found only one"
printf '0 0\n' > "$tmpdir/in"
expect_error "zero length" "^ra-trace: <stdin>:1: the length of a read must not be 0"
printf '0 4096\n0x1g 4096\n' > "$tmpdir/in"
expect_error "bad hex" "^ra-trace: <stdin>:2: OFFSET: '0x1g' is not a number"
printf '0 4096 stream\n' > "$tmpdir/in"
expect_error "bad stream" "^ra-trace: <stdin>:1: STREAM: 'stream' is not a number"
printf '9223372036854775807 2\n' > "$tmpdir/in"
expect_error "overflow" "^ra-trace: <stdin>:1: read .* ends past 2\^63-1"
printf '2026-12-03 09:06:04.715360 connection=1 Read id=1 count=0x4000 ...\n' > "$tmpdir/in"
expect_error "log Read without offset" \
  "^ra-trace: <stdin>:1: log Read line without offset= and count="
printf '2026-12-03 09:06:04.715360 connection=1 Read id=1 offset=0xzz count=0x4000 ...\n' > "$tmpdir/in"
expect_error "log Read bad offset" "^ra-trace: <stdin>:1: log Read line: bad offset '0xzz'"
printf '0 4096\n4096 8192\n' > "$tmpdir/in"
expect_error "past the export" \
  "^ra-trace: <stdin>:2: read at offset 4096 of 8192 bytes ends past the export size \(8192\)" \
  --export-size=8K
: > "$tmpdir/in"
expect_error "page size" "^ra-trace: --page-size: 3000 is out of range: a power of two" --page-size=3000
expect_error "page size too small" "^ra-trace: --page-size: 256 is out of range: a power of two from 512" --page-size=256
expect_error "io-max" "^ra-trace: --io-max: 2048 must be from one page \(4096\) to 32M" --io-max=2k
expect_error "ra-max pages" "^ra-trace: --ra-max: 6144 is not a whole number of pages" --ra-max=6k
expect_error "ra-max vs cache" "^ra-trace: --ra-max: 4194304 is larger than half of ra-cache-size" \
  --ra-max=4M --cache-size=4M
expect_error "default ra-max vs cache" "^ra-trace: ra-max: 8388608 is larger than half of ra-cache-size" \
  --cache-size=4M
expect_error "bad size" "^ra-trace: --cache-size: '12X' is not a size" --cache-size=12X
expect_error "missing file" "^ra-trace: $tmpdir/none: No such file" "$tmpdir/none"
expect_error "unknown option" "^ra-trace: unknown option '--frobnicate'" --frobnicate
printf '\nra-max = "2G";\n' > "$tmpdir/bad.conf"
expect_error "config value" "^ra-trace: $tmpdir/bad.conf:2: ra-max: 2147483648 is out of range: 0 \(readahead off\) to 1G" \
  --config="$tmpdir/bad.conf"
printf 'ra-max = "6k";\n' > "$tmpdir/bad.conf"
expect_error "config check" "^ra-trace: $tmpdir/bad.conf: ra-max: 6144 is not a whole number of pages" \
  --config="$tmpdir/bad.conf"
printf 'ra-frob = 1;\n' > "$tmpdir/bad.conf"
expect_error "config key" "^ra-trace: $tmpdir/bad.conf:1: ra-frob: unknown key" --config="$tmpdir/bad.conf"
expect_error "config missing" "^ra-trace: $tmpdir/none.conf: cannot read" --config="$tmpdir/none.conf"
info "bad input and bad options: clear messages, exit 1"

# ---- timing: a 20 ms backend over a 1 GiB/s link ---------------------------
# A sequential reader of 64 KiB requests over 256 MiB.  The simulation is
# deterministic: the bounds below follow from the model, not from the
# speed of this machine.
for i in $(seq 0 4095); do echo "$((i * 65536)) 65536"; done > "$tmpdir/seq.trace"
timed="--latency=20ms --bandwidth=1G"
# The scenarios below about the congestion bound are worked out for
# backend requests of 256K (the filter's default ra-io-max is 1M, with
# which an 8M window is 8 requests, below the threshold of 9).
io256="--io-max=256K"

# check_range WHAT VALUE LOW HIGH: LOW <= VALUE <= HIGH (decimals allowed)
check_range ()
{
  awk -v v="$2" -v lo="$3" -v hi="$4" 'BEGIN { exit !(v + 0 >= lo + 0 && v + 0 <= hi + 0) }' ||
    fail "$1: $2 is not within [$3, $4]"
}

# Kernel mode, ra-max 128K: the first window (0/32/16) is two requests,
# its sync part issued at 0 and its async part once that is read (as the
# filter queues it); the client reads the sync part at 20 ms + 64K /
# 1 GiB/s = 20.061036 ms and meets the marker there (window 2), then
# waits for the async part (40.122 ms) and meets window 2's marker at
# once (window 3).
"$RA_TRACE" --mode=kernel --ra-max=128K $timed "$tmpdir/seq.trace" > "$tmpdir/k20.out"
grep -q '^# timing: mode=kernel latency-ns=20000000 bandwidth=1073741824 parallel=12 client-gap-ns=0 congestion-threshold=9$' \
  "$tmpdir/k20.out" || fail "kernel 20 ms: no or wrong '# timing:' line"
[ "$(rows "$tmpdir/k20.out" | head -n 3)" = "\
1 0 sync A 0 32 16 16 32 2 0.000
2 0 async B 32 32 32 32 32 1 20.061
3 0 async B 64 32 32 64 32 1 40.122" ] ||
  fail "kernel 20 ms: first windows: $(rows "$tmpdir/k20.out" | head -n 3)"
expect_summary "$tmpdir/k20.out" page_misses 1 "kernel 20 ms"
expect_summary "$tmpdir/k20.out" backend_bytes 268435456 "kernel 20 ms"
expect_summary "$tmpdir/k20.out" async_skipped 0 "kernel 20 ms"
expect_summary "$tmpdir/k20.out" "largest window" 32 "kernel 20 ms"
# At least one 128K window per 20 ms (+ 1 ms for the transfers), at most
# two (the next window is triggered when the client reaches the marker,
# the first page of the current one): 6.2 to 13.1 MB/s.
kt=$(summary "$tmpdir/k20.out" "client throughput")
check_range "kernel 20 ms: throughput (bytes/s)" "$kt" \
  $((131072 * 1000 / 21)) $((2 * 131072 * 1000 / 20))
check_range "kernel 20 ms: simulated time (s)" "$(summary "$tmpdir/k20.out" "simulated time")" 20 43
check_range "kernel 20 ms: model latency (ns)" "$(summary "$tmpdir/k20.out" "model latency")" 20000000 21000000
[ "$(summary "$tmpdir/k20.out" "page waits on read ahead")" -gt 1000 ] ||
  fail "kernel 20 ms: the 128K windows are not late"
info "kernel, ra-max 128K, 20 ms: $kt bytes/s"

# Adaptive mode, ra-max 8M: the cap grows past 128K (up to the congestion
# bound, 8 requests of 256K) and the client is several times faster, yet
# no faster than the link.
"$RA_TRACE" --mode=adaptive --ra-max=8M $io256 $timed "$tmpdir/seq.trace" > "$tmpdir/a20.out"
grep -q '^# adaptive, in pages: adapt-min=32 self-max=512$' "$tmpdir/a20.out" ||
  fail "adaptive 20 ms: no or wrong '# adaptive' line"
at=$(summary "$tmpdir/a20.out" "client throughput")
check_range "adaptive 20 ms: throughput (bytes/s)" "$at" "$(awk -v k="$kt" 'BEGIN { print 4 * k }')" 1073741824
cap=$(summary "$tmpdir/a20.out" "stream 0 cap")
lates=$(summary "$tmpdir/a20.out" adapt_late)
[ "$cap" -gt 32 ] || [ "$lates" -gt 0 ] ||
  fail "adaptive 20 ms: cap $cap pages and $lates late events"
check_range "adaptive 20 ms: cap (pages)" "$cap" 33 512
check_range "adaptive 20 ms: largest window" "$(summary "$tmpdir/a20.out" "largest window")" 33 512
awk '!/^#/ && NF == 12 && $12 > 512 { exit 1 }' "$tmpdir/a20.out" ||
  fail "adaptive 20 ms: a cap above the congestion bound (512 pages)"
expect_summary "$tmpdir/a20.out" backend_bytes 268435456 "adaptive 20 ms"
# Every wait for a page read ahead is late feedback.
[ "$lates" = "$(summary "$tmpdir/a20.out" "page waits on read ahead")" ] ||
  fail "adaptive 20 ms: $lates late events, $(summary "$tmpdir/a20.out" "page waits on read ahead") waits on read ahead"
# Deterministic: the same run gives the same output.
"$RA_TRACE" --mode=adaptive --ra-max=8M $io256 $timed "$tmpdir/seq.trace" | cmp -s - "$tmpdir/a20.out" ||
  fail "adaptive 20 ms: two runs differ"
info "adaptive, ra-max 8M, 20 ms: $at bytes/s, cap $cap pages, $lates late events"

# Kernel mode with 8M windows of 32 requests of 256K: the congestion rule
# (9 requests in flight of --parallel 12) skips async parts; with 256
# slots (threshold 192) it never does.
"$RA_TRACE" -q --mode=kernel --ra-max=8M $io256 $timed "$tmpdir/seq.trace" > "$tmpdir/k8.out"
[ "$(summary "$tmpdir/k8.out" async_skipped)" -gt 0 ] ||
  fail "kernel 8M over 256K requests: no congestion skips"
"$RA_TRACE" -q --mode=kernel --ra-max=8M --parallel=256 $io256 $timed "$tmpdir/seq.trace" > "$tmpdir/k8p.out"
expect_summary "$tmpdir/k8p.out" async_skipped 0 "kernel 8M, --parallel 256"
grep -q ' congestion-threshold=192$' "$tmpdir/k8p.out" || fail "--parallel 256: threshold is not 192"

# A small cache and two sequential streams (own stream states, reads
# alternating): once both run, each cap is within the stream's share, a
# quarter of the cache over the markers (4M with two: 1024 / 8 = 128
# pages, below ra-max, 512 pages; a stream deciding just after taking its
# own marker may see only the other's: 1024 / 4 = 256 pages, the bound
# checked).  Read-ahead pages evicted unused reach the engine as waste
# events of the stream that read them.
awk 'BEGIN { for (i = 0; i < 2048; i++) {
  printf "%d 65536 0\n", i * 65536; printf "%d 65536 1\n", 536870912 + i * 65536 } }' \
  > "$tmpdir/two.trace"
for cache in 4M 2M; do
  "$RA_TRACE" --mode=adaptive --ra-max=$((${cache%M} / 2))M --cache-size=$cache $io256 $timed \
    "$tmpdir/two.trace" > "$tmpdir/share$cache.out"
  share=$((${cache%M} * 256 / 4))
  awk -v m=$share '!/^#/ && NF == 12 && $12 > m { exit 1 }' "$tmpdir/share$cache.out" ||
    fail "cache $cache: a cap above the share ($share pages)"
  [ "$(summary "$tmpdir/share$cache.out" adapt_early_triggers)" -le \
    "$(summary "$tmpdir/share$cache.out" adapt_late)" ] ||
    fail "cache $cache: more early triggers than late events"
  evicted=$(summary "$tmpdir/share$cache.out" ahead_wasted_pages)
  waste=$(sed -n 's/^stream [0-9]* cap: .* waste \([0-9]*\))$/\1/p' "$tmpdir/share$cache.out" |
    awk '{ n += $1 } END { print n + 0 }')
  if [ "$evicted" -gt 0 ] && ! [ "$waste" -gt 0 ]; then
    fail "cache $cache: $evicted pages read ahead evicted unused, waste events '$waste'"
  fi
done

# One slot (--parallel=1, so a congestion threshold of 1): requests run
# one after another, each for at least 20 ms, and the client needs every
# one of them.
"$RA_TRACE" -q --mode=kernel --ra-max=128K --parallel=1 $timed "$tmpdir/seq.trace" > "$tmpdir/p1.out"
grep -q ' parallel=1 client-gap-ns=0 congestion-threshold=1$' "$tmpdir/p1.out" ||
  fail "--parallel 1: threshold is not 1"
expect_summary "$tmpdir/p1.out" "read ahead unused at end" 0 "--parallel 1"
check_range "--parallel 1: simulated time (s)" "$(summary "$tmpdir/p1.out" "simulated time")" \
  "$(awk -v n="$(summary "$tmpdir/p1.out" backend_reads)" 'BEGIN { print n * 0.020 }')" 1000

# A client that spends 1 ms per 64K read over a 1 ms backend: adaptive
# windows stay below the bound and the client hardly waits: 64K per ms.
"$RA_TRACE" -q --mode=adaptive --ra-max=8M $io256 --latency=1ms --bandwidth=1G \
  --client-gap=1ms "$tmpdir/seq.trace" > "$tmpdir/gap.out"
check_range "client gap: throughput" "$(summary "$tmpdir/gap.out" "client throughput")" 64880000 65552000
check_range "client gap: stall time" "$(summary "$tmpdir/gap.out" "stall time")" 0 0.041
check_range "client gap: cap" "$(summary "$tmpdir/gap.out" "stream 0 cap")" 32 256
info "slow client, 1 ms: cap $(summary "$tmpdir/gap.out" "stream 0 cap") pages"

# Latency 0 and no bandwidth limit is the instant replay: the output is
# exactly that of no timing option at all.
"$RA_TRACE" --mode=kernel --latency=0 --parallel=3 --ra-max=128K --export-size=1G \
  "$tmpdir/we.trace" | cmp -s - "$tmpdir/we.out" ||
  fail "--latency=0 --mode=kernel changes the output"

: > "$tmpdir/in"
expect_error "latency without unit" \
  "^ra-trace: --latency: '20' is not a time: a number and a unit ns, us, ms or s" --latency=20
expect_error "negative latency" "^ra-trace: --latency: '-5ms' is not a time" --latency=-5ms
expect_error "latency too long" "^ra-trace: --latency: '2h' is not a time" --latency=2h
expect_error "latency over an hour" "^ra-trace: --latency: '3601s' is not a time" --latency=3601s
"$RA_TRACE" -q --latency=1.5ms --client-gap=250us --export-size=1M /dev/null |
  grep -q '^# timing: .*latency-ns=1500000 .*client-gap-ns=250000 ' ||
  fail "--latency=1.5ms --client-gap=250us are not 1500000 ns and 250000 ns"
expect_error "client gap" "^ra-trace: --client-gap: '1.ms' is not a time" --client-gap=1.ms
expect_error "mode" "^ra-trace: --mode: 'linux' is not one of: kernel, adaptive" --mode=linux
expect_error "bandwidth 0" "^ra-trace: --bandwidth: must not be 0" --bandwidth=0
expect_error "bandwidth" "^ra-trace: --bandwidth: '1Gb/s' is not a size" --bandwidth=1Gb/s
expect_error "parallel 0" "^ra-trace: --parallel: 0 is out of range: 1 to 256" --parallel=0
expect_error "parallel 257" "^ra-trace: --parallel: 257 is out of range: 1 to 256" --parallel=257
expect_error "parallel text" "^ra-trace: --parallel: 'x' is not a whole number" --parallel=x
info "timing: kernel and adaptive bounds, congestion, bad values"

# ---- --help, --version, and the man page agree ----------------------------
"$RA_TRACE" --help > "$tmpdir/help.out"
grep -q '^Usage: ra-trace ' "$tmpdir/help.out" || fail "--help has no usage line"
"$RA_TRACE" --version | grep -Eq '^ra-trace \(ra-cache\) [0-9]' || fail "--version"
for opt in $(grep -Eo -- '--[a-z][a-z-]+' "$tmpdir/help.out" | sort -u); do
  grep -q -- "$opt" "$POD" || fail "$opt is in --help but not in $POD"
done
for opt in $(grep -Eo -- 'B<--[a-z][a-z-]+' "$POD" | sed 's/^B<//' | sort -u); do
  grep -q -- "$opt" "$tmpdir/help.out" || fail "$opt is in $POD but not in --help"
done
while IFS= read -r key; do
  grep -qF "$key" "$POD" || fail "summary key '$key' is not documented in $POD"
done < <(sed -n '/^# summary/,/^# counters/ s/^\([a-z][a-zA-Z ]*\):.*/\1/p' "$tmpdir/we.out" "$tmpdir/a20.out")
info "--help, --version and the man page agree"

# ---- a real log from nbdkit's log filter ----------------------------------
log_skip=
if ! command -v "$NBDKIT" >/dev/null 2>&1; then
  log_skip="nbdkit is not installed"
elif ! command -v nbdsh >/dev/null 2>&1; then
  log_skip="nbdsh is not installed"
elif ! nbdsh -n -c 'import nbd' >/dev/null 2>&1; then
  log_skip="nbdsh cannot import the nbd module (python3-libnbd)"
fi
if [ -n "$log_skip" ]; then
  info "SKIP the log filter part: $log_skip"
  exit 77
fi

log=$tmpdir/logged.reqlog
start_server logged --filter=log memory 1M logfile="$log"
uri=$(uri logged)
# Connection 1: the worked example.  Connection 2: a write and a flush
# (ignored), then two reads at 512 KiB (G then E on its own state).
timeout 60 nbdsh -u "$uri" -c '
for i in range (22):
    h.pread (16384, i * 16384)
'
timeout 60 nbdsh -u "$uri" -c '
h.pwrite (b"x" * 4096, 4096)
h.flush ()
h.pread (16384, 524288)
h.pread (16384, 524288 + 16384)
h.pread (100, 5000)
'
stop_server logged              # the log is complete once nbdkit exits
[ -s "$log" ] || fail "nbdkit wrote no log"

conns=($(sed -n 's/.* connection=\([0-9]*\) Read .*/\1/p' "$log" | uniq))
[ "${#conns[@]}" -eq 2 ] || fail "expected reads on 2 connections in the log, got: ${conns[*]}"
c1=${conns[0]} c2=${conns[1]}
nreads=$(grep -c ' Read id=' "$log")
[ "$nreads" -eq 25 ] || fail "expected 25 Read lines in the log, got $nreads"

"$RA_TRACE" --mode=kernel --ra-max=128K "$log" > "$tmpdir/log.out"
grep -q '^# ra-trace: .* export-size=1048576$' "$tmpdir/log.out" ||
  fail "log: export size is not the Connect line's 1048576"
expect_rows "$tmpdir/log.out" "\
1 $c1 sync A 0 8 4 4 8 2
2 $c1 async B 8 16 16 8 16 1
3 $c1 async B 24 32 32 24 32 1
7 $c1 async B 56 32 32 56 32 1
15 $c1 async B 88 32 32 88 32 1
23 $c2 sync G 128 4 0 - 4 1
24 $c2 sync E 132 8 4 136 8 2" "log filter"
expect_summary "$tmpdir/log.out" client_reads 25 "log filter"
expect_summary "$tmpdir/log.out" "streams" 2 "log filter"
expect_summary "$tmpdir/log.out" client_bytes $((24 * 16384 + 100)) "log filter"

# The same reads written as a plain trace give the same windows.
sed -n 's/.* connection=\([0-9]*\) Read id=[0-9]* offset=\(0x[0-9a-f]*\) count=\(0x[0-9a-f]*\) .*/\2 \3 \1/p' \
  "$log" > "$tmpdir/log.trace"
"$RA_TRACE" --mode=kernel --ra-max=128K --export-size=1M "$tmpdir/log.trace" > "$tmpdir/log-plain.out"
diff "$tmpdir/log.out" "$tmpdir/log-plain.out" ||
  fail "the log and the same reads as a plain trace differ"
info "nbdkit log filter: $nreads Read lines on connections $c1 and $c2 replayed"

# Log lines and plain lines may be mixed; other log lines are ignored.
{ head -n 8 "$log"; echo "0x100000 4096 9"; } > "$tmpdir/mixed.trace"
"$RA_TRACE" --mode=kernel --ra-max=128K --export-size=2M -q "$tmpdir/mixed.trace" > "$tmpdir/mixed.out"
expect_summary "$tmpdir/mixed.out" "streams" 2 "mixed trace"
info "PASS"
