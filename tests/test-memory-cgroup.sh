#!/usr/bin/env bash
# ra-cache in a memory cgroup of 512 MiB (a child of this process's own
# cgroup, v1 memory.limit_in_bytes or v2 memory.max; the test skips,
# saying why, where it cannot make one): a ra-cache-size of 128M starts
# quietly, 400M starts with the warning (ra-cache-size and the memory
# beyond page data are more than 3/4 of the limit; see MEMORY in the
# man page), 600M is refused.  Then memory_other_bytes, read from a
# server that served reads, stays within the man page's formula.

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

requires nbdsh
[ "$(id -u)" -eq 0 ] || skip "needs root to make a memory cgroup"

# This process's memory cgroup directory, and its kind.
cg_parent= limit_file=
while IFS=: read -r id ctrl path; do
  if [ "$id" = 0 ] && [ -z "$ctrl" ] &&
     [ -f "/sys/fs/cgroup$path/cgroup.controllers" ] &&
     grep -qw memory "/sys/fs/cgroup$path/cgroup.controllers" 2>/dev/null; then
    cg_parent=/sys/fs/cgroup$path limit_file=memory.max
  elif [[ ",$ctrl," = *,memory,* ]] && [ -d "/sys/fs/cgroup/memory$path" ]; then
    cg_parent=/sys/fs/cgroup/memory$path limit_file=memory.limit_in_bytes
  fi
done < /proc/self/cgroup
[ -n "$cg_parent" ] || skip "no memory cgroup controller for this process"
cg=$cg_parent/ra-cache-test-$$
mkdir "$cg" 2>/dev/null || skip "cannot make a cgroup under $cg_parent"
at_cleanup 'rmdir "$cg" 2>/dev/null'
limit=$((512 * 1024 * 1024))
echo "$limit" > "$cg/$limit_file" 2>/dev/null ||
  skip "cannot set $limit_file in $cg"
info "cgroup $cg, $limit_file = $(cat "$cg/$limit_file")"

# nbdkit started inside the cgroup (start_server's wrapper).
server_wrapper=(sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$cg")

start_server quiet --filter="$FILTER" memory 1G ra-cache-size=128M
grep -q 'ra-cache: warning' "$tmpdir/quiet.log" &&
  fail "ra-cache-size=128M in 512 MiB warned: $(grep 'ra-cache: warning' "$tmpdir/quiet.log")"
grep -q "ra-cache-test-$$" "/proc/$(server_pid quiet)/cgroup" ||
  fail "nbdkit is not in the test's cgroup"
stop_server quiet || fail "server quiet did not stop cleanly"

start_server warned --filter="$FILTER" memory 1G ra-cache-size=400M
grep -q 'ra-cache: warning: ra-cache-size (419430400 bytes) and the memory beyond page data (about [0-9]* bytes: see MEMORY in nbdkit-ra-cache-filter(1)) are more than 3/4 of the cgroup (v[12]) memory limit' \
  "$tmpdir/warned.log" ||
  fail "ra-cache-size=400M in 512 MiB did not warn: $(cat "$tmpdir/warned.log")"
info "warned: $(grep -o 'ra-cache: warning.*' "$tmpdir/warned.log")"
stop_server warned || fail "server warned did not stop cleanly"

"${server_wrapper[@]}" "$NBDKIT" -f -U "$tmpdir/refused.sock" --filter="$FILTER" memory 1G \
  ra-cache-size=600M > "$tmpdir/refused.log" 2>&1 &&
  fail "ra-cache-size=600M in 512 MiB started"
grep -q 'ra-cache-size: 629145600 bytes is larger than the cgroup (v[12]) memory limit' \
  "$tmpdir/refused.log" ||
  fail "ra-cache-size=600M: not the expected message: $(cat "$tmpdir/refused.log")"

# memory_other_bytes after reads: within the formula for the readers at
# once (one connection of 16 threads) and the 12 background reads.
server_wrapper=()
start_server front --filter="$FILTER" memory 256M ra-cache-size=256M \
  ra-cache-stats="$tmpdir/front.json"
timeout "$CLIENT_TIMEOUT" nbdsh -u "$(uri front)" -c '
import random
rng = random.Random (2)
for i in range (200):
    h.pread (rng.choice ((4096, 65536, 1048576)), rng.randrange (0, 255) * 1048576)
for off in range (0, 64 * 1048576, 262144):
    h.pread (262144, off)
' || fail "nbdsh reads failed"
stop_server front || fail "server front did not stop cleanly"
read -r other <<<"$(file_stat "$tmpdir/front.json" memory_other_bytes)"
formula=$(( (256 * 1048576 / 4096) * 96 + 1048576 * (16 + 12) + 4 * 1048576 ))
info "memory_other_bytes $other; the formula for one connection: $formula"
[ -n "$other" ] && [ "$other" -gt 0 ] || fail "no memory_other_bytes"
[ "$other" -le "$formula" ] || fail "memory_other_bytes $other is above the formula ($formula)"
info "ok"
