#!/usr/bin/env bash
# ra-cache operations (issue 15): the filter's version is visible; the JSON has
# what an operator reads first; ra-cache-stats-interval rewrites the
# stats file without -v.

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

requires python3

# --- the filter's version is visible ----------------------------------
version=$(sed -n 's/^#define PACKAGE_VERSION "\(.*\)"$/\1/p' "$top_builddir/config.h")
[ -n "$version" ] || fail "no PACKAGE_VERSION in $top_builddir/config.h"
"$NBDKIT" --filter="$FILTER" null --help > "$tmpdir/help" 2>&1
grep -q "^filter: ra-cache (.*ra-cache $version)" "$tmpdir/help" || {
  head -n 3 "$tmpdir/help"; fail "--help does not show ra-cache $version"
}
# (nbdkit 1.32's --version can only print nbdkit's version for a filter.)

# --- the JSON has what an operator reads first -------------------------
start_daemon d12 ra-cache-stats-socket="$tmpdir/d12-stats.sock" \
  ra-cache-stats="$tmpdir/d12.json"
timeout "$CLIENT_TIMEOUT" nbdsh -u "nbd+unix:///?socket=$tmpdir/d12.sock" \
  -c 'h.pread (1 << 20, 0); h.pread (1 << 20, 0)'
read -r v schema up ps hr bpc wr ch cm <<<"$(stats_json socket "$tmpdir/d12-stats.sock" \
  version schema uptime_seconds page_size hit_ratio \
  backend_bytes_per_client_byte readahead_wasted_ratio page_hits page_misses)"
[ "$v" = "$version" ] || fail "JSON version is $v, not $version"
[ "$schema" = 1 ] || fail "JSON schema is $schema"
[ "$ps" = 4096 ] || fail "JSON page_size is $ps"
python3 -c "
import sys
up, hr, bpc, wr, h, m = map (float, sys.argv[1:])
assert up > 0, 'uptime_seconds %s' % up
assert abs (hr - h / (h + m)) < 1e-3, 'hit_ratio %s' % hr
assert 0 < bpc < 2, 'backend_bytes_per_client_byte %s' % bpc
assert 0 <= wr <= 1, 'readahead_wasted_ratio %s' % wr
" "$up" "$hr" "$bpc" "$wr" "$ch" "$cm" || fail "bad ratios in the JSON"
stop_daemon d12
[ "$(file_stat "$tmpdir/d12.json" version)" = "$version" ] ||
  fail "the stats file has no version"

# --- ra-cache-stats-interval rewrites the stats file, without -v ------
start_daemon d13 ra-cache-stats="$tmpdir/d13.json" ra-cache-stats-interval=1
for ((i = 0; i < 100; i++)); do
  [ -s "$tmpdir/d13.json" ] && break
  sleep 0.1
done
[ -s "$tmpdir/d13.json" ] ||
  fail "the stats file was not written within 10 s with ra-cache-stats-interval=1"
up1=$(file_stat "$tmpdir/d13.json" uptime_seconds)
sleep 2.5
up2=$(file_stat "$tmpdir/d13.json" uptime_seconds)
python3 -c "import sys; sys.exit (0 if float (sys.argv[2]) > float (sys.argv[1]) else 1)" \
  "$up1" "$up2" || fail "the stats file was not rewritten ($up1, then $up2)"
stop_daemon d13
