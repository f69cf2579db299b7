#!/usr/bin/env bash
# ra-cache: operations (issue 15).  Bad stats paths stop nbdkit before it
# forks into the background, with the error on stderr and a non-zero
# exit; relative paths are relative to where nbdkit was started; the
# stats file and socket are private; stale sockets are replaced; the
# version is visible; the JSON has what an operator reads first.

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

requires python3

# daemon_fails NAME PATTERN ARGS...: nbdkit *without* -f (so it would
# fork into the background) must refuse these ra-cache parameters: a
# non-zero exit, an error matching PATTERN on stderr, and no server left
# behind (no pidfile, no socket).
daemon_fails ()
{
  local name=$1 pattern=$2 status=0 pid; shift 2
  local sock=$tmpdir/$name.sock pidfile=$tmpdir/$name.pid
  timeout 60 "$NBDKIT" -U "$sock" -P "$pidfile" --filter="$FILTER" \
    null 16M "$@" </dev/null >"$tmpdir/$name.out" 2>"$tmpdir/$name.err" ||
    status=$?
  if [ -s "$pidfile" ]; then
    pid=$(cat "$pidfile")
    kill -TERM "$pid" 2>/dev/null || true
    fail "nbdkit forked a server (pid $pid) with: $*"
  fi
  [ "$status" -ne 0 ] || fail "nbdkit exited 0 with: $*"
  [ "$status" -ne 124 ] || fail "nbdkit hung with: $*"
  grep -Eq "error: .*$pattern" "$tmpdir/$name.err" || {
    cat "$tmpdir/$name.out" "$tmpdir/$name.err"
    fail "no error matching /$pattern/ on stderr with: $*"
  }
  [ ! -e "$sock" ] || fail "nbdkit left its socket behind with: $*"
  info "refused before forking: $* ($(grep -E 'error:' "$tmpdir/$name.err" | head -n 1))"
}

# --- 1. a stats socket that cannot be created fails nbdkit at once ------
daemon_fails bad-socket 'ra-cache-stats-socket: .*/missing-dir/s\.sock' \
  ra-cache-stats-socket="$tmpdir/missing-dir/s.sock"

# Servers started without -f (daemons) are not children of this shell:
# stop_daemons stops them by their pidfiles on every exit path.
daemons=()
stop_daemons ()
{
  local name pid
  for name in "${daemons[@]}"; do
    [ -s "$tmpdir/$name.pid" ] || continue
    pid=$(cat "$tmpdir/$name.pid")
    rm -f "$tmpdir/$name.pid"
    terminate "$pid" || {
      echo "$test_name: FAIL: daemon $name did not exit on SIGTERM" >&2
      return 1
    }
  done
}
trap 'st=$?; stop_daemons || st=1; (exit $st); cleanup' EXIT

# start_daemon NAME [DIR] ARGS...: nbdkit without -f, started in
# directory $tmpdir/NAME.d (made here); returns once it has forked.
start_daemon ()
{
  local name=$1 i; shift
  mkdir -p "$tmpdir/$name.d"
  daemons+=("$name")
  (cd "$tmpdir/$name.d" &&
     timeout 60 "$NBDKIT" -U "$tmpdir/$name.sock" -P "$tmpdir/$name.pid"        --filter="$FILTER" null 16M "$@" </dev/null        >"$tmpdir/$name.out" 2>"$tmpdir/$name.err") || {
    cat "$tmpdir/$name.out" "$tmpdir/$name.err"
    fail "nbdkit (daemon $name) did not start: $*"
  }
  # The child writes the pidfile after the fork, as the parent exits.
  for ((i = 0; i < 300; i++)); do
    [ -s "$tmpdir/$name.pid" ] && [ -S "$tmpdir/$name.sock" ] && return 0
    sleep 0.1
  done
  fail "daemon $name wrote no pidfile within 30 s"
}

# stop_daemon NAME: SIGTERM, and wait until it has gone.
stop_daemon ()
{
  local name=$1 pid
  pid=$(cat "$tmpdir/$name.pid")
  rm -f "$tmpdir/$name.pid"
  terminate "$pid" || fail "daemon $name did not exit within 30 s of SIGTERM"
}

# A good socket is bound before the fork and served after it.
start_daemon d1 ra-cache-stats-socket="$tmpdir/d1-stats.sock"
[ -S "$tmpdir/d1-stats.sock" ] || fail "no stats socket after the fork"
[ "$(stats_json socket "$tmpdir/d1-stats.sock" page_hits)" = 0 ] ||
  fail "the daemon's stats socket did not answer"
stop_daemon d1
[ ! -e "$tmpdir/d1-stats.sock" ] || fail "the stats socket was not removed"

# --- 2. a stats file that cannot be written is refused at start ----------
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

# --- 3. relative paths are relative to where nbdkit was started ---------
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

# --- 4. the stats file is private and written through a private file ----
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

# --- 6. the stats socket is 0600 without touching the process umask ------
start_daemon d6 ra-cache-stats-socket="$tmpdir/d6-stats.sock"
[ "$(stat -c %a "$tmpdir/d6-stats.sock")" = 600 ] ||
  fail "the stats socket is mode $(stat -c %a "$tmpdir/d6-stats.sock"), not 0600"
# nbdkit sets its umask to 0022 and ra-cache must leave it so.
pid=$(cat "$tmpdir/d6.pid")
umask_now=$(sed -n 's/^Umask:[[:space:]]*//p' "/proc/$pid/status")
[ -z "$umask_now" ] || [ "$umask_now" = 0022 ] ||
  fail "the server's umask is $umask_now, not nbdkit's 0022"
stop_daemon d6

# --- 5. a stale stats socket is replaced, a live one refused -------------
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

# --- 7. out of file descriptors: the stats thread backs off, not spins ---
# Not in a sanitizer build: the sanitizer runtime itself needs a file
# descriptor now and then, and with none left it ends the process
# without a word (seen once in CI's ASan tree).
if [ -n "${RA_CACHE_SANITIZERS:-}" ]; then
  info "SKIP part 7 (out of file descriptors): a -fsanitize=$RA_CACHE_SANITIZERS build"
elif command -v prlimit >/dev/null 2>&1; then
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
fi

# --- 10. a cache larger than memory is refused -----------------------------
daemon_fails huge 'ra-cache-size: [0-9]+ bytes is larger than (physical memory|the cgroup)' \
  ra-cache-size=100T

# --- 9. the filter's version is visible ----------------------------------
version=$(sed -n 's/^#define PACKAGE_VERSION "\(.*\)"$/\1/p' "$top_builddir/config.h")
[ -n "$version" ] || fail "no PACKAGE_VERSION in $top_builddir/config.h"
"$NBDKIT" --filter="$FILTER" null --help > "$tmpdir/help" 2>&1
grep -q "^filter: ra-cache (.*ra-cache $version)" "$tmpdir/help" || {
  head -n 3 "$tmpdir/help"; fail "--help does not show ra-cache $version"
}
# (nbdkit 1.32's --version can only print nbdkit's version for a filter.)

# --- 12. the JSON has what an operator reads first -------------------------
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

# --- 13. ra-cache-stats-interval rewrites the stats file, without -v ------
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

# --- 11. the man page's examples are valid as written ---------------------
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
