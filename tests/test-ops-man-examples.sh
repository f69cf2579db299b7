#!/usr/bin/env bash
# ra-cache operations (issue 15): the man page's example configuration file
# and the curl example's parameters are accepted as written.

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

requires python3

# --- the man page's examples are valid as written ---------------------
pod=$top_srcdir/plugins/ra-cache/nbdkit-ra-cache-filter.pod
sed -n '/^ # sizes are integers/,/^$/p' "$pod" | sed 's/^ //' > "$tmpdir/example.conf"
grep -q '^ra-io-max' "$tmpdir/example.conf" || fail "cannot find the example configuration file in the man page"
timeout 60 "$NBDKIT" -U - --filter="$FILTER" null 16M \
  ra-cache-config="$tmpdir/example.conf" --run 'exit 0' > "$tmpdir/ex.out" 2>&1 || {
  cat "$tmpdir/ex.out"; fail "the man page's example configuration file is refused"
}
# The HTTP example's parameters (with the null plugin instead of curl).
args=$(sed -n '/curl https:\/\/example.com\/disk.img \\$/{n;p;q}' "$pod")
[ -n "$args" ] || fail "cannot find the curl example's parameters in the man page"
# shellcheck disable=SC2086
timeout 60 "$NBDKIT" -U - --filter="$FILTER" null 16M $args --run 'exit 0' \
  > "$tmpdir/ex.out" 2>&1 || {
  cat "$tmpdir/ex.out"; fail "the man page's curl example parameters are refused: $args"
}
python3 - "$args" <<'PY' || fail "the curl example's windows stay under the congestion bound: $args"
import sys
kv = dict (a.split ("=") for a in sys.argv[1].split ())
size = lambda v: int (v[:-1]) << {"K": 10, "M": 20, "G": 30}[v[-1]]
ra_max, io_max = size (kv["ra-max"]), size (kv.get ("ra-io-max", "1M"))
threshold = int (kv.get ("ra-congestion-threshold", "9"))
sys.exit (0 if ra_max <= (threshold - 1) * io_max else 1)
PY
