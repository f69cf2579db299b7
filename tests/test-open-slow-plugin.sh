#!/usr/bin/env bash
# The background connection's open, slow, against nbdkit's sh plugin
# (issue 23): the first open of each server is the client's and returns
# at once; every later one (the workers' background connection) takes
# OPEN_SECS and logs its start and end to an event file.
#
# 1. A plugin that serializes all requests: the slow background open
#    does not hold up the client's calls (its handshake and its reads
#    are answered while that open is still under way).
# 2. Shutdown during the slow open: nbdkit waits for the open to return
#    and closes what it opened before the plugin is unloaded (the
#    plugin's unload method runs after the open's end), and exits
#    cleanly.

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"
requires dd

# plugin NAME THREAD-MODEL OPEN-SECS: an sh plugin script in $tmpdir/NAME.
plugin ()
{
  local dir=$tmpdir/$1
  mkdir -p "$dir"
  head -c $((1 << 20)) /dev/urandom > "$dir/disk.img"
  cat > "$dir/plugin.sh" <<EOF
#!/usr/bin/env bash
dir=$dir
model=$2
secs=$3
EOF
  cat >> "$dir/plugin.sh" <<'EOF'
case "$1" in
  thread_model) echo "$model" ;;
  open)
    if ! mkdir "$dir/client-opened" 2>/dev/null; then
      echo open-start >> "$dir/events"
      sleep "$secs"
      echo open-end >> "$dir/events"
    fi
    echo h ;;
  close) echo close >> "$dir/events" ;;
  unload) echo unload >> "$dir/events" ;;
  get_size) stat -c %s "$dir/disk.img" ;;
  pread)
    dd if="$dir/disk.img" skip="$4" count="$3" iflag=skip_bytes,count_bytes \
       status=none ;;
  *) exit 2 ;;
esac
EOF
  chmod +x "$dir/plugin.sh"
}

# events NAME: the event file's lines, on one line.
events ()
{
  tr '\n' ' ' < "$tmpdir/$1/events" 2>/dev/null || true
}

# ---- 1. serialize_all_requests: a slow background open --------------
plugin ser serialize_all_requests 4
start_server ser -v --filter="$FILTER" sh "$tmpdir/ser/plugin.sh"
DIR=$tmpdir/ser timeout "$CLIENT_TIMEOUT" nbdsh -u "$(uri ser)" -c '
import os
d = os.environ["DIR"]
want = open (d + "/disk.img", "rb").read ()
for off in range (0, 1 << 20, 65536):
    assert h.pread (65536, off) == want[off:off + 65536], "wrong data"
' 2>&1 || fail "serialize: the client failed"
ev=$(events ser)
info "serialize: events when the client had read 1 MiB: $ev"
[[ $ev == *open-start* ]] || fail "serialize: no background open was started"
[[ $ev != *open-end* ]] ||
  fail "serialize: the client's calls waited for the background open ($ev)"
stop_server ser || fail "serialize: the front did not stop cleanly"

# ---- 2. shutdown while the background open is under way -----------------
plugin down parallel 2
start_server down -v --filter="$FILTER" sh "$tmpdir/down/plugin.sh" \
  ra-cache-stats="$tmpdir/down.json"
timeout "$CLIENT_TIMEOUT" nbdsh -u "$(uri down)" -c 'h.pread (4096, 0)' ||
  fail "shutdown: the client failed"
for ((i = 0; i < 50; i++)); do
  [[ $(events down) == *open-start* ]] && break
  sleep 0.1
done
ev=$(events down)
[[ $ev == *open-start* && $ev != *open-end* ]] ||
  fail "shutdown: the background open is not under way ($ev)"
pid=$(server_pid down)
kill -TERM "$pid"
status=0
timeout 30 tail --pid="$pid" -f /dev/null || fail "shutdown: nbdkit did not exit"
wait "$(cat "$tmpdir/down.bgpid")" || status=$?
rm -f "$tmpdir/down.bgpid"
sleep 3                         # an open left behind would end now
ev=$(events down)
info "shutdown: exit status $status; events: $ev"
[ "$status" = 0 ] || fail "shutdown: nbdkit exited with status $status"
! grep -E 'Assertion|Segmentation|ERROR: [A-Za-z]*Sanitizer' "$tmpdir/down.log" ||
  fail "shutdown: nbdkit crashed"
[[ $ev =~ open-end.*close.*unload ]] ||
  fail "shutdown: the plugin was unloaded before the background open returned ($ev)"
[ -s "$tmpdir/down.json" ] || fail "shutdown: no stats file"
info "ok"
