#!/usr/bin/env bash
# ra-cache operations (issue 15): out of file descriptors, the stats thread
# backs off instead of spinning, and answers once the limit is raised.

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

requires python3

# --- out of file descriptors: the stats thread backs off, not spins ---
# Not in a sanitizer build: the sanitizer runtime itself needs a file
# descriptor now and then, and with none left it ends the process
# without a word (seen once in CI's ASan tree).
[ -z "${RA_CACHE_SANITIZERS:-}" ] ||
  skip "a -fsanitize=$RA_CACHE_SANITIZERS build (the runtime needs descriptors)"
requires prlimit
start_daemon d7 ra-cache-stats-socket="$tmpdir/d7-stats.sock"
pid=$(cat "$tmpdir/d7.pid")
hard=$(prlimit --pid "$pid" --nofile --output HARD --noheadings)
# The lowest free descriptor number: a soft limit there makes the next
# accept4 fail with EMFILE.
low=0
while [ -e "/proc/$pid/fd/$low" ]; do low=$((low + 1)); done
prlimit --pid "$pid" --nofile="$low:$hard"
# A client waits (up to 20 s) for its document while nbdkit has no
# descriptor to accept it with.
STATS_WAIT=20 stats_json socket "$tmpdir/d7-stats.sock" page_hits \
  > "$tmpdir/d7.client" 2>&1 &
client=$!
sleep 0.5
t0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
sleep 2
t1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
prlimit --pid "$pid" --nofile="$hard:$hard"
wait "$client" || { cat "$tmpdir/d7.client"; fail "the stats client got no answer after the limit was raised"; }
[ "$(cat "$tmpdir/d7.client")" = 0 ] || fail "bad answer: $(cat "$tmpdir/d7.client")"
ticks=$((t1 - t0))
info "CPU ticks in 2 s at EMFILE: $ticks (of $(( $(getconf CLK_TCK) * 2 )))"
[ "$ticks" -lt "$(getconf CLK_TCK)" ] ||
  fail "nbdkit spent $ticks ticks of CPU in 2 s with accept4 failing (spinning?)"
stop_daemon d7
