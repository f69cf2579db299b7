#!/usr/bin/env bash
# -D ra-cache.windows=1 (with -v): one debug line per window decided,
# naming its stream, trigger, branch (letter and name), start, size and
# async part in bytes.  A sequential reader from offset 0 gets branch A
# at 0 and then async triggers of branch B; random 4 KiB reads get
# branch G windows of just their pages; every window the stats count
# has its line; without the flag there is none.
. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

requires qemu-img

start_server back -r --filter=delay pattern 64M rdelay=1ms

run_front () # run_front NAME [NBDKIT-OPTIONS...]: the readers, then stop
{
  local name=$1; shift
  start_server "$name" -v "$@" --filter="$FILTER" nbd socket="$(sock back)" \
    ra-mode=kernel ra-cache-stats="$(stats_file "$name")"
  timeout "$CLIENT_TIMEOUT" qemu-img bench -f raw -s 64K -c 64 -d 1 \
    "$(uri "$name")" >/dev/null || fail "$name: qemu-img bench failed"
  timeout "$CLIENT_TIMEOUT" nbdsh -u "$(uri "$name")" -c '
for off in (40 << 20, 50 << 20, 60 << 20):
    h.pread (4096, off)
' || fail "$name: the random reads failed"
  stop_server "$name" || fail "$name did not stop cleanly"
}

run_front front -D ra-cache.windows=1
log=$tmpdir/front.log
grep -q 'ra-cache: window: stream [0-9]*, sync trigger at 0, branch A (initial): 0+[1-9][0-9]* bytes, async part [1-9]' "$log" ||
  fail "no branch A window at 0 in the log"
grep -q 'ra-cache: window: stream [0-9]*, async trigger at [0-9]*, branch B (sequential): [0-9]*+[1-9][0-9]* bytes' "$log" ||
  fail "no async trigger of branch B in the log"
for off in $((40 << 20)) $((50 << 20)) $((60 << 20)); do
  grep -q "sync trigger at $off, branch G (random): $off+4096 bytes, async part 0" "$log" ||
    fail "no branch G window of 4096 bytes at $off in the log"
done
lines=$(grep -c 'ra-cache: window: ' "$log")
read -r a b c d e f g n off forced <<<"$(ra_stat front windows.A windows.B \
  windows.C windows.D windows.E windows.F windows.G windows.N windows.off \
  windows.forced)"
counted=$((a + b + c + d + e + f + g + n + off + forced))
info "window lines $lines, windows counted $counted"
[ "$lines" -eq "$counted" ] ||
  fail "$lines window lines for $counted windows counted"

run_front quiet
! grep -q 'ra-cache: window: ' "$tmpdir/quiet.log" ||
  fail "window lines without -D ra-cache.windows=1"
info PASS
