#!/usr/bin/env bash
# The near rule (branch N, adaptive mode) through ra-trace, on a trace
# recorded from a file system read through the kernel
# (tests/traces/fs-small.trace: bench/fs.sh's small-file workload, nbdkit
# log filter lines, three connections) and on random reads:
#
# - adaptive mode takes N windows on the file system trace and, over a
#   1 ms backend, misses less than half as often as kernel mode, which
#   never takes N;
# - 4 KiB random reads over 1 GiB (a fixed pseudo-random sequence) read
#   in adaptive mode take no N window and read ahead no more pages than
#   kernel mode (whose few come from context readahead, branch F, where
#   a read lands just after cached pages).
test_needs=""
. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

RA_TRACE=$top_builddir/ra-trace
TRACE=$top_srcdir/tests/traces/fs-small.trace

[ -x "$RA_TRACE" ] || fail "$RA_TRACE is not built"
[ -f "$TRACE" ] || fail "$TRACE is missing"

# One summary value: summary FILE KEY (the text before the colon).
summary ()
{
  awk -v k="$2:" 'found && index ($0, k) == 1 {
                    sub (/^[^:]*:[ ]*/, ""); split ($0, a, " "); print a[1]; exit }
                  /^# summary/ { found = 1 }' "$1"
}

for mode in adaptive kernel; do
  timeout 60 "$RA_TRACE" --mode="$mode" --latency=1ms "$TRACE" > "$tmpdir/$mode.out" ||
    fail "ra-trace --mode=$mode failed on $TRACE"
done
[ "$(summary "$tmpdir/adaptive.out" client_reads)" = 600 ] || fail "the trace should hold 600 reads"
nn=$(summary "$tmpdir/adaptive.out" windows.N)
nk=$(summary "$tmpdir/kernel.out" windows.N)
ma=$(summary "$tmpdir/adaptive.out" page_misses)
mk=$(summary "$tmpdir/kernel.out" page_misses)
echo "$test_name: file system trace: adaptive $nn N windows, $ma page misses; kernel $nk N windows, $mk page misses"
[ "$nn" -gt 0 ] || fail "adaptive mode took no N window on the file system trace"
[ "$nk" -eq 0 ] || fail "kernel mode took $nk N windows"
[ $((2 * ma)) -lt "$mk" ] || fail "adaptive mode missed $ma pages, not less than half of kernel mode's $mk"
# The N windows are in the window rows too.
awk '/^# summary/ { exit } /^#/ { next } $4 == "N" { n++ } END { exit !(n > 0) }' \
  "$tmpdir/adaptive.out" || fail "no window row of branch N"

# Random 4 KiB reads over 1 GiB, a fixed LCG sequence.
awk 'BEGIN { x = 12345
             for (i = 0; i < 20000; i++) {
               x = (x * 16807) % 2147483647
               printf "%d 4096\n", (x % 262144) * 4096 } }' > "$tmpdir/random.trace"
for mode in adaptive kernel; do
  timeout 60 "$RA_TRACE" --mode="$mode" --latency=1ms --export-size=1G \
    "$tmpdir/random.trace" > "$tmpdir/random-$mode.out" ||
    fail "ra-trace --mode=$mode failed on random reads"
done
nr=$(summary "$tmpdir/random-adaptive.out" windows.N)
ahead=$(summary "$tmpdir/random-adaptive.out" async_pages)
ahead_k=$(summary "$tmpdir/random-kernel.out" async_pages)
amp=$(summary "$tmpdir/random-adaptive.out" backend_bytes_per_client_byte)
echo "$test_name: random 4 KiB reads: $nr N windows, $ahead pages read ahead (kernel mode $ahead_k, by context readahead), amplification $amp"
[ "$nr" -eq 0 ] || fail "random reads took $nr N windows"
[ "$ahead" -le "$ahead_k" ] || fail "random reads: $ahead pages read ahead, more than kernel mode's $ahead_k"
echo "$test_name: PASS"
