#!/usr/bin/env bash
# ra-cache operations (issue 15): bad stats paths and a cache larger than
# memory stop nbdkit before it forks into the background, with the error
# on stderr and a non-zero exit; a good stats socket is bound before the
# fork and served after it.

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

requires python3

# --- a stats socket that cannot be created fails nbdkit at once ------
daemon_fails bad-socket 'ra-cache-stats-socket: .*/missing-dir/s\.sock' \
  ra-cache-stats-socket="$tmpdir/missing-dir/s.sock"

# A good socket is bound before the fork and served after it.
start_daemon d1 ra-cache-stats-socket="$tmpdir/d1-stats.sock"
[ -S "$tmpdir/d1-stats.sock" ] || fail "no stats socket after the fork"
[ "$(stats_json socket "$tmpdir/d1-stats.sock" page_hits)" = 0 ] ||
  fail "the daemon's stats socket did not answer"
stop_daemon d1
[ ! -e "$tmpdir/d1-stats.sock" ] || fail "the stats socket was not removed"

# --- a stats file that cannot be written is refused at start ----------
daemon_fails bad-file 'ra-cache-stats: .*/missing-dir/x\.json' \
  ra-cache-stats="$tmpdir/missing-dir/x.json"
mkdir "$tmpdir/a-dir"
daemon_fails dir-file 'ra-cache-stats: .*a-dir is a directory' \
  ra-cache-stats="$tmpdir/a-dir"
if [ "$(id -u)" -ne 0 ]; then
  mkdir "$tmpdir/ro"; chmod 0555 "$tmpdir/ro"
  daemon_fails ro-file 'ra-cache-stats: .*not writable' \
    ra-cache-stats="$tmpdir/ro/x.json"
fi

# --- a cache larger than memory is refused -----------------------------
daemon_fails huge 'ra-cache-size: [0-9]+ bytes is larger than (physical memory|the cgroup)' \
  ra-cache-size=100T
