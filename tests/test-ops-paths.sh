#!/usr/bin/env bash
# ra-cache operations (issue 15): relative stats paths are relative to where
# nbdkit was started; the stats file and socket are private (0600, no
# symlink followed, the umask untouched); a stale socket is replaced, a
# live one or a regular file refused.

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

requires python3

# --- relative paths are relative to where nbdkit was started ---------
# (nbdkit chdirs to / when it forks), from the command line and from a
# configuration file alike.
start_daemon d2 ra-cache-stats=st.json ra-cache-stats-socket=s.sock
[ -S "$tmpdir/d2.d/s.sock" ] ||
  fail "a relative ra-cache-stats-socket is not in the start directory"
stop_daemon d2
[ -s "$tmpdir/d2.d/st.json" ] ||
  fail "a relative ra-cache-stats file is not in the start directory"
[ ! -e "$tmpdir/d2.d/s.sock" ] || fail "the relative socket was not removed"
mkdir -p "$tmpdir/d3.d/sub"
printf 'ra-cache-stats = "sub/f.json";\nra-cache-stats-socket = "f.sock";\n' \
  > "$tmpdir/d3.d/sub/ra.conf"
start_daemon d3 ra-cache-config=sub/ra.conf
[ -S "$tmpdir/d3.d/f.sock" ] ||
  fail "a relative socket path in the configuration file is not relative to the start directory"
stop_daemon d3
[ -s "$tmpdir/d3.d/sub/f.json" ] ||
  fail "a relative stats path in the configuration file is not relative to the start directory"

# --- the stats file is private and written through a private file ----
# A symlink planted where ra-cache used to write its temporary file
# (FILE.tmp) must not be followed.
mkdir -p "$tmpdir/d4.d"
echo "victim" > "$tmpdir/victim"
ln -s "$tmpdir/victim" "$tmpdir/d4.d/st.json.tmp"
start_daemon d4 ra-cache-stats=st.json
stop_daemon d4
[ "$(cat "$tmpdir/victim")" = victim ] ||
  fail "the stats file was written through a symlink at FILE.tmp"
[ "$(stat -c %a "$tmpdir/d4.d/st.json")" = 600 ] ||
  fail "the stats file is mode $(stat -c %a "$tmpdir/d4.d/st.json"), not 0600"
[ "$(file_stat "$tmpdir/d4.d/st.json" client_reads)" = 0 ] ||
  fail "the stats file is not the JSON document"
[ "$(find "$tmpdir/d4.d" -name 'st.json.*' ! -name st.json.tmp | wc -l)" = 0 ] ||
  fail "a temporary stats file was left behind"

# --- the stats socket is 0600 without touching the process umask ------
start_daemon d6 ra-cache-stats-socket="$tmpdir/d6-stats.sock"
[ "$(stat -c %a "$tmpdir/d6-stats.sock")" = 600 ] ||
  fail "the stats socket is mode $(stat -c %a "$tmpdir/d6-stats.sock"), not 0600"
# nbdkit sets its umask to 0022 and ra-cache must leave it so.
pid=$(cat "$tmpdir/d6.pid")
umask_now=$(sed -n 's/^Umask:[[:space:]]*//p' "/proc/$pid/status")
[ -z "$umask_now" ] || [ "$umask_now" = 0022 ] ||
  fail "the server's umask is $umask_now, not nbdkit's 0022"
stop_daemon d6

# --- a stale stats socket is replaced, a live one refused -------------
# A socket nobody listens on, as a crashed server leaves behind.
python3 -c '
import socket, sys
s = socket.socket (socket.AF_UNIX)
s.bind (sys.argv[1])' "$tmpdir/d5-stats.sock"
[ -S "$tmpdir/d5-stats.sock" ] || fail "could not make a stale socket"
start_daemon d5 ra-cache-stats-socket="$tmpdir/d5-stats.sock"
[ "$(stats_json socket "$tmpdir/d5-stats.sock" page_misses)" = 0 ] ||
  fail "the stale stats socket was not replaced"
# A second server on the same, live, socket is refused.
daemon_fails live 'ra-cache-stats-socket: .*another server is using' \
  ra-cache-stats-socket="$tmpdir/d5-stats.sock"
[ -S "$tmpdir/d5-stats.sock" ] || fail "the refused server removed the live socket"
[ "$(stats_json socket "$tmpdir/d5-stats.sock" page_misses)" = 0 ] ||
  fail "the first server's socket no longer answers"
stop_daemon d5
# A regular file is refused, and left alone.
echo "not a socket" > "$tmpdir/d5-file"
daemon_fails regular 'ra-cache-stats-socket: .*exists and is not a socket \(it is a regular file\)' \
  ra-cache-stats-socket="$tmpdir/d5-file"
[ "$(cat "$tmpdir/d5-file")" = "not a socket" ] || fail "the regular file was changed"
