# ra-cache integration tests: shared helpers.  Source this file first:
#
#   . "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"
#
# It makes a private temporary directory ($tmpdir), and a trap that on
# every exit path (success, failure, set -e, signal) runs the at_cleanup
# commands, stops every server started with start_server and every
# daemon started with start_daemon, and removes $tmpdir.  Set
# RA_CACHE_KEEP_TMP=1 to keep $tmpdir for a post mortem.
#
# Servers listen on Unix sockets only: $tmpdir/NAME.sock.  Each runs in
# the foreground (nbdkit -f) as a child of the test, so that the test can
# stop it with SIGTERM and wait for it: ra-cache writes its counters
# (ra-cache-stats=FILE, read with ra_stat) at exit.
#
# top_srcdir, top_builddir, NBDKIT and PATH (with /usr/bin first, for
# nbdsh's python3) come from AM_TESTS_ENVIRONMENT; running a test by hand
# from the build directory also works.
#
# A test that needs less than nbdkit, nbdsh (with the nbd module) and
# the built filter says what it needs before sourcing this file, e.g.
# test_needs="nbdkit filter" or test_needs="" (the default is
# "nbdkit nbdsh filter"); a missing command skips the test, a filter not
# built fails it.
#
# Library mode (bench/lib.sh): with ra_test_library=1 set before
# sourcing, only the helpers are defined: no set -e, no checks, no
# temporary directory, no trap.  The caller sets tmpdir and stops its
# servers (stop_all_servers).

: "${top_builddir:=$PWD}"
: "${top_srcdir:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${NBDKIT:=nbdkit}"

# Client commands get this many seconds before they count as a hang; a
# server gets SERVER_TIMEOUT seconds to listen, and to exit on SIGTERM.
: "${CLIENT_TIMEOUT:=120}"
: "${SERVER_TIMEOUT:=30}"

test_name=$(basename "$0" .sh)
server_names=()

fail ()
{
  echo "$test_name: FAIL: $*" >&2
  exit 1
}

skip ()
{
  echo "$test_name: SKIP: $*" >&2
  exit 77
}

info ()
{
  echo "$test_name: $*"
}

# requires CMD...: skip the test unless every command exists.
requires ()
{
  local c
  for c in "$@"; do
    command -v "$c" >/dev/null 2>&1 || skip "$c is not installed"
  done
}


# The pid of server NAME (the nbdkit process itself).
server_pid ()
{
  cat "$tmpdir/$1.bgpid"
}

# terminate PID [SIGNAL-PIDS...]: SIGTERM to SIGNAL-PIDS (default PID),
# then wait up to SERVER_TIMEOUT seconds for PID to go; if it has not,
# SIGKILL them all and return 1.  (SIGNAL-PIDS: the server under a
# wrapper such as bench/rusage, which does not forward SIGTERM.)
terminate ()
{
  local pid=$1 i; shift
  local -a sig=("$@")
  [ ${#sig[@]} -gt 0 ] || sig=("$pid")
  kill -TERM "${sig[@]}" 2>/dev/null || return 0
  for ((i = 0; i < SERVER_TIMEOUT * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "${sig[@]}" "$pid" 2>/dev/null || true
  return 1
}

# stop_server NAME [any-status]: stop one server: SIGTERM, then wait up
# to SERVER_TIMEOUT s for it to exit.  A server that hangs at shutdown (reported,
# then killed) or crashes (any exit status but 0 or 143, which is
# nbdkit's after a clean shutdown on SIGTERM) fails the test, unless
# any-status is given (a server that is not the code under test).
stop_server ()
{
  local name=$1 any=${2:-} pid srv status=0
  [ -f "$tmpdir/$name.bgpid" ] || return 0
  pid=$(server_pid "$name")
  # The server itself, which may run under a wrapper (server_wrapper).
  srv=$(cat "$tmpdir/$name.srvpid" 2>/dev/null || echo "$pid")
  rm -f "$tmpdir/$name.bgpid" "$tmpdir/$name.srvpid"
  if ! terminate "$pid" "$srv"; then
    wait "$pid" 2>/dev/null || true
    echo "$test_name: FAIL: server $name (pid $pid) did not exit" \
         "within $SERVER_TIMEOUT s of SIGTERM" >&2
    return 1
  fi
  wait "$pid" 2>/dev/null || status=$?
  [ "$any" = any-status ] && return 0
  case $status in
    0|143) ;;
    *) echo "$test_name: FAIL: server $name exited with status $status" \
            "(crash?)" >&2
       return 1 ;;
  esac
}

# at_cleanup CMD...: run CMD on every exit path, before the servers are
# stopped (newest first): unmount, detach, kill a client.
cleanup_cmds=()
at_cleanup ()
{
  cleanup_cmds+=("$*")
}

cleanup ()
{
  local status=$? name
  set +e
  for ((i = ${#cleanup_cmds[@]} - 1; i >= 0; i--)); do
    eval "${cleanup_cmds[i]}"
  done
  if ! stop_daemons && [ "$status" -eq 0 ]; then
    status=1
  fi
  if ! stop_all_servers && [ "$status" -eq 0 ]; then
    status=1
  fi
  if [ "$status" -ne 0 ] && [ "$status" -ne 77 ]; then
    for name in "${server_names[@]}"; do
      if [ -s "$tmpdir/$name.log" ]; then
        echo "---- last lines of server $name's log ----" >&2
        tail -n 30 "$tmpdir/$name.log" >&2
      fi
    done
  fi
  if [ -n "${RA_CACHE_KEEP_TMP:-}" ]; then
    echo "$test_name: keeping $tmpdir" >&2
  else
    rm -rf "$tmpdir"
  fi
  exit "$status"
}

# stop_all_servers [any-status]: stop every server still running, newest
# first (a front before the backend it reads from).  Returns 1 if one
# did not stop cleanly (see stop_server).
stop_all_servers ()
{
  local i r=0
  for ((i = ${#server_names[@]} - 1; i >= 0; i--)); do
    stop_server "${server_names[i]}" "$@" || r=1
  done
  server_names=()
  return $r
}

# start_server NAME NBDKIT-ARGS...
# Start nbdkit on $tmpdir/NAME.sock, stderr and stdout to $tmpdir/NAME.log,
# and wait until it accepts connections (it writes its pidfile only after
# binding the socket).
start_server ()
{
  local name=$1; shift
  local sock=$tmpdir/$name.sock pidfile=$tmpdir/$name.pid

  rm -f "$sock" "$pidfile"
  "${server_wrapper[@]}" "$NBDKIT" -f -U "$sock" -P "$pidfile" "$@" \
    </dev/null >>"$tmpdir/$name.log" 2>&1 &
  server_started "$name" $! "nbdkit $*" "$pidfile" test -S "$sock" ||
    fail "server $name did not start: nbdkit $*"
}

# A command that start_server runs nbdkit under (bench/lib.sh: bench/rusage).
server_wrapper=()

# server_started NAME PID WHAT PIDFILE READY-COMMAND...: record server
# NAME, started in the background as PID (NAME.bgpid; stop_server stops
# it), and wait up to SERVER_TIMEOUT s until PIDFILE is written and
# READY-COMMAND succeeds (nbdkit writes its pidfile only once its socket
# listens).  The server's own pid (from PIDFILE) goes to NAME.srvpid.
# Returns 1, with the server's log on stderr, if it exits at startup, 2
# if it is still not ready (it is left running for stop_server).
server_started ()
{
  local name=$1 pid=$2 what=$3 pidfile=$4 i
  shift 4
  echo "$pid" > "$tmpdir/$name.bgpid"
  server_names+=("$name")
  for ((i = 0; i < SERVER_TIMEOUT * 10; i++)); do
    if [ -s "$pidfile" ] && "$@" 2>/dev/null; then
      cat "$pidfile" > "$tmpdir/$name.srvpid"
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid" 2>/dev/null || true
      rm -f "$tmpdir/$name.bgpid"
      echo "$test_name: server $name exited at startup: $what" >&2
      sed 's/^/    /' "$tmpdir/$name.log" >&2
      return 1
    fi
    sleep 0.1
  done
  echo "$test_name: server $name was not ready within ${SERVER_TIMEOUT}s: $what" >&2
  return 2
}

# The socket and the NBD URI of server NAME.
sock ()
{
  echo "$tmpdir/$1.sock"
}

uri ()
{
  echo "nbd+unix:///?socket=$tmpdir/$1.sock"
}

# start_front NAME BACKEND-NAME [RA-CACHE-PARAMETERS...]
# A ra-cache front reading server BACKEND-NAME through the nbd plugin,
# with -v (its log has the counters at exit) and, unless the parameters
# name another, ra-cache-stats=$(stats_file NAME): ra_stat reads the
# counters from there once the server has stopped.
start_front ()
{
  local name=$1 back=$2 a stats=ra-cache-stats=$tmpdir/$1.json; shift 2
  for a in "$@"; do
    case $a in ra-cache-stats=*) stats= ;; esac
  done
  start_server "$name" -v --filter="$FILTER" nbd socket="$(sock "$back")" \
    "$@" ${stats:+"$stats"}
}

# stats_file NAME: where the counters of server NAME go at exit, for a
# front started with start_server (pass ra-cache-stats="$(stats_file NAME)").
stats_file ()
{
  echo "$tmpdir/$1.json"
}

# The JSON counters of a front (ra-cache-stats=FILE or the
# ra-cache-stats-socket): stats_json socket PATH KEY... or stats_json file
# PATH KEY... prints the values of the KEYs, space separated.  A KEY is
# a JSON key of the man page's STATS section; windows.A ... windows.G
# are the windows by branch.  A socket gets STATS_WAIT seconds (default
# 10) to answer.  This is the one reader of the counters in the tests.
stats_json ()
{
  local wait=${STATS_WAIT:-10}
  timeout $((wait + 5)) python3 - "$wait" "$@" <<'EOF'
import json, socket, sys
wait, kind, path, keys = float (sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
if kind == "socket":
    s = socket.socket (socket.AF_UNIX)
    s.settimeout (wait)
    s.connect (path)
    data = b""
    while True:
        b = s.recv (65536)
        if not b:
            break
        data += b
    d = json.loads (data)
else:
    d = json.load (open (path))
def get (k):
    v = d
    for part in k.split ("."):
        v = v[part]
    return str (v)
print (" ".join (get (k) for k in keys))
EOF
}

# ra_stat NAME KEY...: values from the counters server NAME wrote at exit
# ($(stats_file NAME)), e.g. ra_stat front backend_errors.
ra_stat ()
{
  local name=$1; shift
  [ -s "$(stats_file "$name")" ] ||
    fail "server $name wrote no counters to $(stats_file "$name")"
  file_stat "$(stats_file "$name")" "$@"
}

# live_stat NAME KEY...: values from the stats socket of running front
# NAME ($tmpdir/NAME-stats.sock).
live_stat ()
{
  local name=$1; shift
  stats_json socket "$tmpdir/$name-stats.sock" "$@" ||
    fail "the stats socket of $name did not answer"
}

# file_stat FILE KEY...: values from a stats file written at exit.
file_stat ()
{
  local f=$1; shift
  stats_json file "$f" "$@" || fail "cannot read $* from the stats file $f"
}

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

# ---- ra-cache daemons: nbdkit without -f ----------------------------------
# Servers started without -f (daemons) are not children of this shell:
# stop_daemons stops them by their pidfiles (cleanup does, on every exit
# path).
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

# start_daemon NAME [DIR] ARGS...: nbdkit without -f, started in
# directory $tmpdir/NAME.d (made here); returns once it has forked.
start_daemon ()
{
  local name=$1 i; shift
  mkdir -p "$tmpdir/$name.d"
  daemons+=("$name")
  (cd "$tmpdir/$name.d" &&
     timeout 60 "$NBDKIT" -U "$tmpdir/$name.sock" -P "$tmpdir/$name.pid" \
       --filter="$FILTER" null 16M "$@" </dev/null \
       >"$tmpdir/$name.out" 2>"$tmpdir/$name.err") || {
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

# term_within NAME SECS: SIGTERM ends server NAME within SECS seconds.
term_within ()
{
  local pid i
  pid=$(server_pid "$1")
  kill -TERM "$pid"
  for ((i = 0; i < $2 * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null && fail "$1 still runs $2 s after SIGTERM"
  wait "$pid" 2>/dev/null || true
  rm -f "$tmpdir/$1.bgpid"
}

# nbdsh with a timeout: any client command that hangs fails the test.
nbdsh_t ()
{
  timeout "$CLIENT_TIMEOUT" nbdsh "$@"
}

# run_py FILE [NAME=VALUE...]: run a Python script with nbdsh (whose
# python3 has the nbd module), with a timeout.  Parameters are passed in
# the environment.
run_py ()
{
  local f=$1; shift
  env "$@" timeout "$CLIENT_TIMEOUT" nbdsh -n \
    -c "exec (compile (open ('$f').read (), '$f', 'exec'))"
}

# free_port: a TCP port on 127.0.0.1 that nothing listens on now (the
# kernel's choice; another process could take it before the caller
# binds it, and the caller's server then fails to start, saying so).
free_port ()
{
  python3 -c 'import socket; s = socket.socket (); s.bind (("127.0.0.1", 0)); print (s.getsockname ()[1])'
}

# An HTTP server for the curl plugin: lighttpd serving directory DIR on
# a free port of 127.0.0.1, $lighttpd_port (kept when it is started
# again), logging requests to $tmpdir/access.log.  lighttpd_start DIR
# FILE starts it and waits until it serves FILE; lighttpd_stop stops it;
# every exit path stops it.
lighttpd_pid= lighttpd_port=
lighttpd_start ()
{
  local i
  if [ -z "$lighttpd_port" ]; then
    lighttpd_port=$(free_port)
    at_cleanup lighttpd_stop
  fi
  cat > "$tmpdir/lighttpd.conf" <<EOF
server.document-root = "$1"
server.bind = "127.0.0.1"
server.port = $lighttpd_port
server.errorlog = "$tmpdir/lighttpd-error.log"
server.modules = ( "mod_accesslog" )
accesslog.filename = "$tmpdir/access.log"
EOF
  lighttpd -D -f "$tmpdir/lighttpd.conf" >>"$tmpdir/lighttpd.log" 2>&1 &
  lighttpd_pid=$!
  for ((i = 0; i < 100; i++)); do
    timeout 5 python3 -c "import urllib.request as u; u.urlopen ('http://127.0.0.1:$lighttpd_port/$2').read (1)" \
      2>/dev/null && return 0
    kill -0 "$lighttpd_pid" 2>/dev/null || break
    sleep 0.1
  done
  cat "$tmpdir/lighttpd.log" "$tmpdir/lighttpd-error.log" >&2 2>/dev/null
  fail "lighttpd did not start on port $lighttpd_port"
}
lighttpd_stop ()
{
  [ -n "$lighttpd_pid" ] || return 0
  kill -TERM "$lighttpd_pid" 2>/dev/null &&
    { wait "$lighttpd_pid" 2>/dev/null || true; }
  lighttpd_pid=
}

# A file of random bytes: random_file PATH SIZE-IN-BYTES.
random_file ()
{
  head -c "$2" /dev/urandom > "$1"
  [ "$(stat_size "$1")" -eq "$2" ] || fail "could not make $1"
}

stat_size ()
{
  stat -c %s "$1"
}

# wait_for TEST-ARGS...: wait up to 10 s for `test TEST-ARGS...` to hold
# (wait_for -S SOCKET, wait_for -f FILE), else fail.
wait_for ()
{
  local i
  for ((i = 0; i < 100; i++)); do
    test "$@" && return 0
    sleep 0.1
  done
  fail "timed out waiting for: test $*"
}

# ---- a kernel block device: nbdfuse and a loop device ---------------------

# kernel_dev_init WHY: skip unless root (WHY: what needs it), /dev/fuse
# and the tools; make $tmpdir/mnt (nbdfuse's) and $tmpdir/fs (the mount
# point); undo mounts, loop device and nbdfuse on every exit path.
kernel_dev_init ()
{
  export PATH=/usr/sbin:/sbin:$PATH
  [ "$(id -u)" -eq 0 ] || skip "needs root ($1)"
  [ -c /dev/fuse ] || skip "no /dev/fuse: FUSE is not available here"
  requires nbdfuse losetup mkfs.ext4 mountpoint
  loop=
  fuse_pid=
  mkdir -p "$tmpdir/mnt" "$tmpdir/fs"
  at_cleanup kernel_dev_undo
}

kernel_dev_undo ()
{
  mountpoint -q "$tmpdir/fs" && umount "$tmpdir/fs"
  [ -n "$loop" ] && losetup -d "$loop"
  mountpoint -q "$tmpdir/mnt" && umount "$tmpdir/mnt"
  [ -n "$fuse_pid" ] && kill "$fuse_pid" 2>/dev/null &&
    wait "$fuse_pid" 2>/dev/null
  return 0
}

# kernel_attach NAME [-r]: server NAME's export as the loop device $loop
# (-r: read-only), through nbdfuse.
kernel_attach ()
{
  local ro=${2:-}

  nbdfuse $ro "$tmpdir/mnt" --unix "$(sock "$1")" &
  fuse_pid=$!
  wait_for -f "$tmpdir/mnt/nbd"
  if ! loop=$(losetup $ro -f --show "$tmpdir/mnt/nbd" 2>"$tmpdir/losetup.err"); then
    loop=
    skip "losetup cannot attach a loop device here: $(cat "$tmpdir/losetup.err")"
  fi
}

# kernel_detach NAME: unmount $tmpdir/fs, detach $loop, end nbdfuse, stop
# server NAME (a failure if it does not stop cleanly).
kernel_detach ()
{
  umount "$tmpdir/fs"
  losetup -d "$loop"; loop=
  umount "$tmpdir/mnt"
  wait "$fuse_pid" || true; fuse_pid=
  stop_server "$1" || fail "the front $1 did not stop cleanly"
}

# ---- a test (not bench/lib.sh) -------------------------------------------
if [ -z "${ra_test_library:-}" ]; then
  set -euo pipefail
  # The filter as built (not installed).
  FILTER=$top_builddir/plugins/ra-cache/.libs/nbdkit-ra-cache-filter.so
  export top_srcdir top_builddir NBDKIT
  # nbdsh runs "python3 -m nbd": the system python3 must come first;
  # but a wrapper named nbdkit ($NBDKIT given as a path: the sanitizer
  # build's tests/sanitizer-bin/nbdkit) must stay ahead of /usr/bin, for
  # the tests that run nbdkit by name.
  PATH=/usr/bin:/bin:$PATH
  case $NBDKIT in
    */*) PATH=$(dirname "$NBDKIT"):$PATH ;;
  esac
  export PATH

  requires timeout
  for need in ${test_needs-nbdkit nbdsh filter}; do
    case $need in
      nbdkit) requires "$NBDKIT" ;;
      nbdsh)
        requires nbdsh
        nbdsh -n -c 'import nbd' >/dev/null 2>&1 ||
          skip "nbdsh cannot import the nbd module (python3-libnbd)" ;;
      filter) [ -f "$FILTER" ] || fail "the filter is not built: $FILTER" ;;
      *) fail "functions.sh: unknown need '$need'" ;;
    esac
  done

  # Unix socket paths are limited to 107 bytes: keep the directory short.
  tmpdir=$(mktemp -d /tmp/ra-cache-test.XXXXXX)
  trap cleanup EXIT
  trap 'exit 1' INT TERM HUP
fi
