#!/usr/bin/env bash
# ra-cache: adaptive mode (ra-mode=adaptive, the default) against real
# nbdkit backends.
#
# 1. The backend model and the cap follow the backend: a sequential
#    reader over a backend 10 ms away makes the stats show a backend
#    latency of at least 10 ms and a largest window of at least 2M; a
#    backend with no added delay is measured too.  (Its latency and
#    window depend on how loaded this machine is: they are only
#    reported.  tests/unit/test-adaptive.c checks the sizing itself, with
#    a clock.)
# 2. Kernel mode (ra-mode=kernel) measures and decides none of it.
# 3. Waste: 64 sequential streams on 8 connections sharing a 32M cache,
#    over a backend 1 ms away.  Kernel mode with ra-max=8M reads ahead far
#    more than the cache can keep (most of it was evicted unused before
#    pages read once were evicted first); adaptive mode's fair share and
#    waste feedback must waste less than half of kernel mode's share of
#    the pages read ahead, or at most a fifth of them.  (The issue's
#    target, 10%, is measured by bench/adaptive.sh; a test on a loaded
#    machine or a sanitizer build can only compare.)
# 4. Data read in adaptive mode over a delayed backend is the backend's.
#
# Figures come from ra-cache-stats=FILE (JSON written at exit).

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

requires cmp nbdcopy
BENCH=$top_builddir/ra-bench
[ -x "$BENCH" ] || fail "ra-bench is not built: $BENCH"

# run_front NAME BACKEND CLIENT-ARGS -- RA-PARAMS...: a fresh front, one
# ra-bench run, the front stopped so its stats file is written.
run_front ()
{
  local name=$1 back=$2 args=()
  shift 2
  while [ "$1" != -- ]; do args+=("$1"); shift; done
  shift
  start_front "$name" "$back" ra-cache-stats="$tmpdir/$name.json" "$@"
  timeout "$CLIENT_TIMEOUT" "$BENCH" -u "$(uri "$name")" "${args[@]}" \
    > "$tmpdir/$name.bench" 2>&1 || {
    cat "$tmpdir/$name.bench"
    fail "$name: ra-bench ${args[*]} failed"
  }
  stop_server "$name"
  [ -s "$tmpdir/$name.json" ] || fail "$name: no stats file"
}

start_server far --filter=delay pattern 1G rdelay=10ms
start_server near pattern 1G

# ---- 1. the model and the cap follow the backend -----------------------
run_front a_far far -p seq -s 64K -d 1 -b 256M --
run_front a_near near -p seq -s 64K -d 1 -b 256M --
[ "$(file_stat "$tmpdir/a_far.json" ra_mode)" = adaptive ] ||
  fail "the default mode is not adaptive"
lat_far=$(file_stat "$tmpdir/a_far.json" backend_latency_us)
lat_near=$(file_stat "$tmpdir/a_near.json" backend_latency_us)
cap_far=$(file_stat "$tmpdir/a_far.json" adapt_last_cap_bytes)
cap_near=$(file_stat "$tmpdir/a_near.json" adapt_last_cap_bytes)
info "10 ms backend: latency ${lat_far} us, largest window $cap_far; no delay: ${lat_near} us, $cap_near"
awk -v l="$lat_far" 'BEGIN { exit !(l >= 9000 && l < 1000000) }' ||
  fail "10 ms backend measured at $lat_far us"
# The delay is a floor; what comes on top (copies on a loaded machine)
# can be anything: 11 ms per 1M read from the backend without delay was
# seen under make -j2 check, 20 ms in the ASan tree, more than the 10 ms
# backend measured in a quieter moment.  So that one is only measured.
awk -v n="$lat_near" 'BEGIN { exit !(n > 0) }' ||
  fail "the backend without delay was not measured ($lat_near us)"
{ [ "$cap_far" -ge $((2 << 20)) ] && [ "$cap_far" -le $((8 << 20)) ]; } ||
  fail "10 ms backend: largest window $cap_far, not within 2M..8M"
# A reader that congests itself skips the async part of nearly every
# window (kernel mode with ra-congestion-threshold=4 here: 25 of about 30
# windows).  Adaptive mode keeps a window one read below the threshold,
# so a trigger that meets the previous window's reads and one more still
# running or queued (a loaded machine: make distcheck saw one) may skip
# once or twice; more is the failure.
skipped=$(file_stat "$tmpdir/a_far.json" async_skipped)
info "10 ms backend: async parts skipped: $skipped"
[ "$skipped" -le 2 ] ||
  fail "a lone sequential reader congested itself in adaptive mode ($skipped async parts skipped)"

# ---- 2. kernel mode decides none of it ----------------------------------
run_front k_far far -p seq -s 64K -d 1 -b 64M -- ra-mode=kernel
[ "$(file_stat "$tmpdir/k_far.json" ra_mode)" = kernel ] || fail "ra-mode=kernel"
for key in adapt_late adapt_early_triggers adapt_waste_events \
           adapt_last_cap_bytes; do
  [ "$(file_stat "$tmpdir/k_far.json" $key)" -eq 0 ] ||
    fail "kernel mode: $key is $(file_stat "$tmpdir/k_far.json" $key)"
done
[ "$(file_stat "$tmpdir/k_far.json" backend_latency_us)" = 0.0 ] ||
  fail "kernel mode measured the backend"

# ---- 3. waste with many streams in a small cache ------------------------
# waste FILE: pages read ahead and evicted unused / pages read ahead.
waste ()
{
  file_stat "$1" ahead_wasted_pages async_pages |
    awk '{ printf "%.3f\n", $1 / ($2 > 0 ? $2 : 1) }'
}
many=(-p interleaved --streams 64 -c 8 -s 64K -d 1 -b 1G)
start_server ms1 --filter=delay pattern 1G rdelay=1ms
run_front w_kernel ms1 "${many[@]}" -- ra-mode=kernel ra-cache-size=32M
run_front w_adaptive ms1 "${many[@]}" -- ra-cache-size=32M
wk=$(waste "$tmpdir/w_kernel.json")
wa=$(waste "$tmpdir/w_adaptive.json")
info "64 streams, 32M cache: evicted unused / read ahead: kernel $wk, adaptive $wa ($(file_stat "$tmpdir/w_adaptive.json" adapt_waste_events) waste events)"
# Since pages read once are evicted first (drop-behind), kernel mode no
# longer loses most of its read-ahead pages here (0.87 before, 0.04 to
# 0.07 after): adaptive mode must then stay below a fifth, as both do.
awk -v a="$wa" -v k="$wk" 'BEGIN { exit !(a < k / 2 || a <= 0.2) }' ||
  fail "adaptive mode wasted $wa of its read-ahead pages (kernel mode $wk)"

# ---- 4. data ------------------------------------------------------------
start_server slow --filter=delay pattern 96M rdelay=2ms
start_front d_front slow
timeout "$CLIENT_TIMEOUT" nbdcopy "$(uri d_front)" "$tmpdir/got" ||
  fail "nbdcopy through the adaptive front failed"
start_server ref pattern 96M
timeout "$CLIENT_TIMEOUT" nbdcopy "$(uri ref)" "$tmpdir/want" ||
  fail "nbdcopy from the reference failed"
cmp "$tmpdir/got" "$tmpdir/want" || fail "adaptive mode returned wrong data"
rm -f "$tmpdir/got" "$tmpdir/want"
info "96M read through an adaptive front over a 2 ms backend: right"
