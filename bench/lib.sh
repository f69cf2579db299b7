# shellcheck shell=bash
# bench/lib.sh: server and client helpers shared by the bench/ scripts
# and `./run.sh demo`.  Source it, then call bench_traps once (the traps
# that run bench_cleanup, or a cleanup of the script's own that calls it,
# and bench_init).
#
# Every nbdkit server runs in the foreground (-f) as a child of the
# script, on a Unix socket in a private temporary directory, so that it
# can be stopped by its own pid and waited for: the stats filter writes
# its file only when nbdkit exits.  The other servers: nbd-server (which
# always detaches; on a Unix socket too) and lighttpd (in the foreground,
# on 127.0.0.1 only, for nbdkit-curl-plugin).
#
# It builds on tests/functions.sh (in its library mode): starting and
# stopping servers (start_server, server_started, stop_server,
# terminate), their sockets and URIs, the stats reader (stats_json,
# file_stat) and the timeouts (CLIENT_TIMEOUT, SERVER_TIMEOUT) are the
# tests' own; the bench_* names below are what the benchmarks call.

# nbdsh and the libnbd binding live in Debian's python3: put /usr/bin
# before any other python3 (pyenv, venv) for the clients started here.
BENCH_PATH=/usr/bin:/bin:$PATH

: "${NBDKIT:=nbdkit}"
# Seconds a server gets to create its socket, and to exit on SIGTERM.
: "${SERVER_TIMEOUT:=30}"
# Seconds a client command gets before it counts as a hang.
: "${CLIENT_TIMEOUT:=300}"
# bench/rusage (built by make), for the rusage of the servers started
# with bench_start_timed.
: "${BENCH_RUSAGE:=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build/bench/rusage}"

bench_tmpdir=
bench_client_pid=

# shellcheck source=tests/functions.sh
ra_test_library=1 . "$(dirname "${BASH_SOURCE[0]}")/../tests/functions.sh"

bench_die ()
{
  echo "${0##*/}: $*" >&2
  exit 1
}

# bench_args "$@": a benchmark takes no arguments (it is configured by
# environment variables); -h or --help prints its header comment.
bench_args ()
{
  case "${1:-}" in
    -h|--help) sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    "") ;;
    *) bench_die "no arguments expected (configure with environment variables: $0 --help)" ;;
  esac
}

# bench_init: make the private temporary directory (short: Unix socket
# paths are limited to 107 bytes).
bench_init ()
{
  bench_tmpdir=$(mktemp -d /tmp/racache-bench.XXXXXX)
  tmpdir=$bench_tmpdir          # for tests/functions.sh
}

# bench_traps [FUNC]: run FUNC (default bench_cleanup; a script's own
# must call bench_cleanup) at exit, and exit 130, 143 or 129 on INT, TERM
# or HUP (so that it runs then too); then bench_init.
bench_traps ()
{
  # shellcheck disable=SC2064 # the function name, now
  trap "${1:-bench_cleanup}" EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'exit 129' HUP
  bench_init
}

# bench_outdir DIR NAME: a new directory in DIR (a tmpfs, say) for the
# clients' output, removed by bench_cleanup; its path in $bench_outdir.
bench_outdir=
bench_outdir ()
{
  bench_outdir=$(mktemp -d "$1/racache-$2.XXXXXX")
}

# bench_sock NAME: the socket of server NAME; bench_uri NAME: its NBD URI.
bench_sock ()
{
  sock "$@"
}

bench_uri ()
{
  uri "$@"
}

# bench_start NAME NBDKIT-ARGS...: start nbdkit on $(bench_sock NAME), its
# output in $bench_tmpdir/NAME.log, and wait until it accepts connections
# (nbdkit writes the pidfile only once the socket is bound).  Returns 1,
# with the server's log on stderr, if it exits or hangs at startup.
bench_start ()
{
  _bench_start_nbdkit "" "$@"
}

# bench_stack_args CONFIG IMAGE DELAY RATE: the nbdkit arguments of the
# copy benchmarks' two servers (matrix.sh, passes.sh), in the arrays
# bench_back (nbdkit -r [--filter=rate] --filter=delay file IMAGE; RATE
# "-" for none) and bench_front (CONFIG's filters, then the nbd plugin
# reading $(bench_sock back)).  CONFIG: plain, readahead (CDI's
# --filter=readahead --filter=retry), readahead+cache, ra-cache (the
# caller's FILTER), ra-cache-base (FILTER_BASE); the ra-cache ones get
# the caller's ra_cache_args array too, ra-cache-base its
# ra_cache_base_args array instead where the caller set one.  (The caller
# passes DELAY 0 for a ceiling.)
bench_stack_args ()
{
  local c=$1 image=$2 delay=$3 rate=$4
  bench_back=(-r)
  [ "$rate" != - ] && bench_back+=(--filter=rate)
  bench_back+=(--filter=delay file "$image" rdelay="$delay")
  [ "$rate" != - ] && bench_back+=(rate="$rate" burstiness=0.1)
  bench_front=()
  case "$c" in
    readahead) bench_front=(--filter=readahead --filter=retry) ;;
    readahead+cache) bench_front=(--filter=readahead --filter=cache) ;;
    ra-cache) bench_front=(--filter="$FILTER") ;;
    ra-cache-base) bench_front=(--filter="$FILTER_BASE") ;;
  esac
  bench_front+=(nbd socket="$(bench_sock back)")
  if [ "$c" = ra-cache-base ] && [ -n "${ra_cache_base_args+set}" ]; then
    bench_front+=("${ra_cache_base_args[@]}")
  elif [[ "$c" = ra-cache* ]]; then
    bench_front+=("${ra_cache_args[@]}")
  fi
  return 0
}

# bench_check_rusage: die unless BENCH_RUSAGE can be run.
bench_check_rusage ()
{
  [ -x "$BENCH_RUSAGE" ] ||
    bench_die "$BENCH_RUSAGE does not exist: build it with make (or set BENCH_RUSAGE)"
}

# bench_start_timed NAME NBDKIT-ARGS...: the same, with nbdkit run under
# bench/rusage (BENCH_RUSAGE), which writes the server's own rusage (from
# wait4(): every thread, the whole life of the process, exit included;
# CPU to the microsecond) to $bench_tmpdir/NAME.rusage when it exits;
# bench_rusage NAME reads it once the server is stopped.  bench_stop
# signals nbdkit itself (the pid in its pidfile: the wrapper forwards no
# signal) and waits for the wrapper.
bench_start_timed ()
{
  bench_check_rusage
  _bench_start_nbdkit timed "$@"
}

# start_server of tests/functions.sh, but returning 1 instead of exiting.
_bench_start_nbdkit ()
{
  local timed=$1 name=$2; shift 2
  local sock=$bench_tmpdir/$name.sock pidfile=$bench_tmpdir/$name.pid
  local -a server_wrapper=()
  rm -f "$sock" "$pidfile" "$bench_tmpdir/$name".{rusage,srvpid,wrapped,log}
  # The record: user and system CPU seconds, minor and major page
  # faults, maximum resident set size in KiB (bench/rusage.c).
  if [ -n "$timed" ]; then
    server_wrapper=("$BENCH_RUSAGE" "$bench_tmpdir/$name.rusage")
    : > "$bench_tmpdir/$name.wrapped"
  fi
  "${server_wrapper[@]}" "$NBDKIT" -f -U "$sock" -P "$pidfile" "$@" \
    </dev/null >"$bench_tmpdir/$name.log" 2>&1 &
  _bench_wait_started "$name" $! "nbdkit $*" "$pidfile" test -S "$sock"
}

# _bench_wait_started NAME PID WHAT PIDFILE READY-COMMAND...:
# server_started, and a server not ready in time is stopped.
_bench_wait_started ()
{
  local r=0
  server_started "$@" || r=$?
  [ "$r" -eq 2 ] && bench_stop "$1"
  [ "$r" -eq 0 ]
}

# bench_rusage NAME: "CPU_SECONDS MINOR_FAULTS MAJOR_FAULTS MAXRSS_KIB" of
# a stopped server started with bench_start_timed (CPU seconds = user +
# system, printed to the millisecond); "n/a n/a n/a n/a" if there is no
# record (the server was killed, or not timed).
bench_rusage ()
{
  local f=$bench_tmpdir/$1.rusage
  # bench/rusage writes "exit status N" or "killed by signal N" before
  # the figures when so: take the last line.
  if [ -s "$f" ] &&
     tail -n 1 "$f" | awk 'NF == 5 { printf "%.3f %d %d %d\n", $1 + $2, $3, $4, $5; ok = 1 }
                          END { exit !ok }'; then
    return 0
  fi
  echo "n/a n/a n/a n/a"
}

# bench_stop NAME: SIGTERM to the server, wait for its exit (SIGKILL after
# SERVER_TIMEOUT seconds).  Safe to call twice.
bench_stop ()
{
  local name=$1 pidf=$bench_tmpdir/$1.bgpid pid srv
  if [ -f "$bench_tmpdir/$name.daemonconf" ]; then
    _bench_stop_daemon "$name"
    return 0
  fi
  [ -f "$pidf" ] || return 0
  # A wrapper (bench/rusage) that never saw the server's pidfile: signal the
  # wrapper's children and then the wrapper (stop_server signals the
  # server's own pid when it is known).
  if [ ! -s "$bench_tmpdir/$name.srvpid" ] &&
     [ -f "$bench_tmpdir/$name.wrapped" ]; then
    pid=$(cat "$pidf")
    srv="$(bench_children "$pid") $pid"
    rm -f "$pidf"
    # shellcheck disable=SC2086 # srv is a list of pids
    terminate "$pid" $srv ||
      echo "${0##*/}: server $name (pid $srv) ignored SIGTERM for ${SERVER_TIMEOUT}s: killed it" >&2
    wait "$pid" 2>/dev/null || true
    return 0
  fi
  # Benchmarks do not judge how a server exits.
  stop_server "$name" any-status
}

# bench_stop_all: stop every server still running, newest first (a front
# before the backend it reads from).
bench_stop_all ()
{
  local i
  for ((i = ${#server_names[@]} - 1; i >= 0; i--)); do
    bench_stop "${server_names[i]}"
  done
  server_names=()
}

# ---- servers other than nbdkit ---------------------------------------------

# bench_unix_listening PATH: whether a Unix socket PATH is listening
# (from /proc/net/unix: flag __SO_ACCEPTCON, 00010000).
bench_unix_listening ()
{
  awk -v p="$1" '$NF == p && $4 == "00010000" { ok = 1 } END { exit !ok }' /proc/net/unix
}

# bench_tcp_listening PORT: whether something listens on 127.0.0.1:PORT
# (from /proc/net/tcp: state 0A).
bench_tcp_listening ()
{
  local want
  want=$(printf '0100007F:%04X' "$1")
  awk -v a="$want" '$2 == a && $4 == "0A" { ok = 1 } END { exit !ok }' /proc/net/tcp
}

# bench_free_port: a TCP port of 127.0.0.1 that nothing uses now (from
# /proc/net/tcp and tcp6; another program may still take it before us,
# and the server that cannot bind then fails at startup, as reported).
bench_free_port ()
{
  local port i used
  used=$(awk 'NR > 1 { split($2, a, ":"); print a[2] }' /proc/net/tcp /proc/net/tcp6 2>/dev/null)
  for ((i = 0; i < 100; i++)); do
    port=$((20000 + RANDOM % 40000))
    grep -qx "$(printf '%04X' "$port")" <<<"$used" || { echo "$port"; return 0; }
  done
  echo "${0##*/}: no free TCP port found" >&2
  return 1
}

# bench_start_nbd_server NAME FILE EXPORT: nbd-server exporting FILE
# read-only under the name EXPORT (the only export: a client must ask for
# it by name) on $(bench_sock NAME), configured by $bench_tmpdir/NAME.conf.
# nbd-server always detaches: its -d ("do not fork") serves a single
# connection and exits, while the filters open several.  bench_stop finds
# its processes (the daemon and its per-connection children) by that
# configuration file, which only they have on their command line, sends
# them SIGTERM (the daemon then stops its children, removes its pidfile
# and exits 0) and waits until they are gone (SIGKILL after
# SERVER_TIMEOUT).  The pidfile alone is not enough: a daemon that got
# SIGTERM in its first instants was seen to live on.  nbd-server logs to
# syslog only.
bench_start_nbd_server ()
{
  local name=$1 file=$2 export=$3 i
  local sock=$bench_tmpdir/$1.sock pidfile=$bench_tmpdir/$1.pid
  local conf=$bench_tmpdir/$1.conf
  command -v nbd-server >/dev/null 2>&1 ||
    bench_die "nbd-server is not installed: apt-get install nbd-server"
  rm -f "$sock" "$pidfile"
  cat > "$conf" <<EOF
[generic]
    unixsock = $sock
    allowlist = false
[$export]
    exportname = $file
    readonly = true
EOF
  echo "$conf" > "$bench_tmpdir/$name.daemonconf"
  server_names+=("$name")
  if ! nbd-server -C "$conf" -p "$pidfile" </dev/null >"$bench_tmpdir/$name.log" 2>&1; then
    echo "${0##*/}: nbd-server $name failed to start:" >&2
    sed 's/^/    /' "$bench_tmpdir/$name.log" >&2
    bench_stop "$name"
    return 1
  fi
  for ((i = 0; i < SERVER_TIMEOUT * 10; i++)); do
    [ -s "$pidfile" ] && bench_unix_listening "$sock" && return 0
    sleep 0.1
  done
  echo "${0##*/}: nbd-server $name was not listening on $sock within ${SERVER_TIMEOUT}s (it logs to syslog only)" >&2
  bench_stop "$name"
  return 1
}

# _bench_pids_with_arg ARG: the live (not zombie) processes that have ARG
# as one of their arguments.
_bench_pids_with_arg ()
{
  local f pid
  for f in /proc/[0-9]*/cmdline; do
    pid=${f#/proc/}; pid=${pid%/cmdline}
    [ "$pid" = "$$" ] || [ "$pid" = "$BASHPID" ] && continue
    tr '\0' '\n' < "$f" 2>/dev/null | grep -qxF -- "$1" || continue
    _bench_alive "$pid" && echo "$pid"
  done
}

# _bench_alive PID: PID exists and is not a zombie (a detached daemon's
# parent is init, which may reap it late).
_bench_alive ()
{
  local line
  read -r line 2>/dev/null < "/proc/$1/stat" || return 1
  [[ "${line##*) }" != Z* ]]
}

_bench_stop_daemon ()
{
  local name=$1 conf pids i
  conf=$(cat "$bench_tmpdir/$name.daemonconf")
  rm -f "$bench_tmpdir/$name.daemonconf"
  for ((i = 0; i < SERVER_TIMEOUT * 10; i++)); do
    pids=$(_bench_pids_with_arg "$conf")
    [ -n "$pids" ] || return 0
    # Again every second: a signal in the daemon's first instants may be lost.
    # shellcheck disable=SC2086 # a list of pids
    (( i % 10 == 0 )) && kill -TERM $pids 2>/dev/null
    sleep 0.1
  done
  echo "${0##*/}: server $name (pids $pids) ignored SIGTERM for ${SERVER_TIMEOUT}s: killing it" >&2
  # shellcheck disable=SC2086
  kill -KILL $pids 2>/dev/null || true
}

# bench_start_lighttpd NAME DOCROOT: lighttpd in the foreground (-D) serving
# DOCROOT on 127.0.0.1 on a free port, written to $bench_tmpdir/NAME.port;
# configuration $bench_tmpdir/NAME.conf, its stderr (errors) in NAME.log.  Static files
# with Range requests (what nbdkit-curl-plugin sends) are lighttpd's
# default.
bench_start_lighttpd ()
{
  local name=$1 docroot=$2 port
  local pidfile=$bench_tmpdir/$1.pid conf=$bench_tmpdir/$1.conf
  command -v lighttpd >/dev/null 2>&1 ||
    bench_die "lighttpd is not installed: apt-get install lighttpd"
  port=$(bench_free_port) || return 1
  echo "$port" > "$bench_tmpdir/$name.port"
  rm -f "$pidfile"
  cat > "$conf" <<EOF
server.document-root = "$docroot"
server.bind = "127.0.0.1"
server.port = $port
server.pid-file = "$pidfile"
mimetype.assign = ( "" => "application/octet-stream" )
EOF
  lighttpd -D -f "$conf" </dev/null >"$bench_tmpdir/$name.log" 2>&1 &
  _bench_wait_started "$name" $! "lighttpd -D -f $conf (port $port)" \
    "$pidfile" bench_tcp_listening "$port"
}

# bench_port NAME: the TCP port of server NAME (bench_start_lighttpd).
bench_port ()
{
  cat "$bench_tmpdir/$1.port"
}

# bench_client OUT COMMAND...: run COMMAND (a program or a function) with
# its stdout in OUT, in the background, and wait for it.  bash runs a
# trap only once the foreground command is done; a background command
# waited for lets SIGTERM/SIGINT stop the script at once, and
# bench_cleanup stops the client too.
bench_client ()
{
  local out=$1 rc=0; shift
  "$@" > "$out" &
  bench_client_pid=$!
  wait "$bench_client_pid" || rc=$?
  bench_client_pid=
  return "$rc"
}

# bench_children PID: the pids of PID's child processes (from /proc: procps
# is not on a minimal Debian).
bench_children ()
{
  local f line fields
  for f in /proc/[0-9]*/stat; do
    read -r line 2>/dev/null < "$f" || continue
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    read -r -a fields <<<"${line##*) }"
    if [ "${fields[1]:-}" = "$1" ]; then
      f=${f#/proc/}
      echo "${f%/stat}"
    fi
  done
}

# bench_cleanup: for the EXIT trap.
bench_cleanup ()
{
  local p
  if [ -n "$bench_client_pid" ]; then
    # The client's own processes (timeout, qemu-img, fio...), then it.
    for p in $(bench_children "$bench_client_pid") "$bench_client_pid"; do
      kill -TERM "$p" 2>/dev/null || true
    done
    wait "$bench_client_pid" 2>/dev/null || true
    bench_client_pid=
  fi
  bench_stop_all
  if [ -n "$bench_outdir" ]; then
    rm -rf "$bench_outdir"
    bench_outdir=
  fi
  if [ -n "$bench_tmpdir" ] && [ -d "$bench_tmpdir" ]; then
    if [ -n "${BENCH_KEEP_TMP:-}" ]; then
      echo "${0##*/}: keeping $bench_tmpdir" >&2
    else
      rm -rf "$bench_tmpdir"
    fi
  fi
}

# bench_qemu_img URI SIZE COUNT DEPTH: sequential reads with qemu-img
# bench from offset 0; prints the seconds it took.
bench_qemu_img ()
{
  local uri=$1 size=$2 count=$3 depth=$4 out
  out=$(timeout "$CLIENT_TIMEOUT" qemu-img bench -f raw -t none \
          -c "$count" -d "$depth" -s "$size" "$uri" 2>&1) ||
    { echo "$out" >&2; echo "qemu-img bench failed on $uri" >&2; return 1; }
  sed -n 's/^Run completed in \([0-9.]*\) seconds\.$/\1/p' <<<"$out" | grep . ||
    { echo "$out" >&2; echo "cannot parse qemu-img bench output" >&2; return 1; }
}

# bench_export_size URI: the size of the export in bytes.
bench_export_size ()
{
  PATH=$BENCH_PATH timeout "$CLIENT_TIMEOUT" nbdinfo --size "$1"
}

# bench_stats_read_bytes FILE: bytes read through nbdkit-stats-filter,
# from its "read: N ops, T s, SIZE UNIT, ..." line (0 when nothing was
# read).  The filter rounds to 3 significant decimals, which is plenty
# for a ratio.
bench_stats_read_bytes ()
{
  awk '
    /^read:/ {
      for (i = 1; i <= NF; i++) {
        if ($(i + 1) ~ /^(bytes|KiB|MiB|GiB|TiB|PiB|EiB),?$/ && $i ~ /^[0-9.]+$/) {
          u = $(i + 1); sub(/,$/, "", u); v = $i
          m = 1
          if (u == "KiB") m = 1024
          else if (u == "MiB") m = 1024 ^ 2
          else if (u == "GiB") m = 1024 ^ 3
          else if (u == "TiB") m = 1024 ^ 4
          else if (u == "PiB") m = 1024 ^ 5
          else if (u == "EiB") m = 1024 ^ 6
          printf "%.0f\n", v * m; found = 1; exit
        }
      }
    }
    END { if (!found) print 0 }
  ' "$1"
}

# bench_ratio A B [DIGITS]: A / B, or "n/a" when either is not a number
# or B is zero.
bench_ratio ()
{
  awk -v a="$1" -v b="$2" -v d="${3:-2}" 'BEGIN {
    if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/ || b + 0 == 0) { print "n/a"; exit }
    printf "%.*f\n", d, a / b
  }'
}

# bench_mbps BYTES SECONDS: MB/s (10^6 bytes per second), 3 significant
# figures at most.
bench_mbps ()
{
  awk -v b="$1" -v s="$2" 'BEGIN {
    if (s + 0 <= 0) { print "n/a"; exit }
    r = b / s / 1e6
    if (r >= 100) printf "%.0f\n", r
    else if (r >= 10) printf "%.1f\n", r
    else printf "%.2f\n", r
  }'
}

# bench_size_bytes SIZE: 4K, 64k, 1M, 4G, 512 ... in bytes.
bench_size_bytes ()
{
  awk -v s="$1" 'BEGIN {
    n = s; u = toupper(substr(s, length(s)))
    m = 1
    if (u == "K") m = 1024; else if (u == "M") m = 1024 ^ 2
    else if (u == "G") m = 1024 ^ 3; else if (u == "T") m = 1024 ^ 4
    if (m > 1) n = substr(s, 1, length(s) - 1)
    if (n !~ /^[0-9]+$/) { print "bad size: " s > "/dev/stderr"; exit 1 }
    printf "%.0f\n", n * m
  }'
}

# bench_median_line FIELD: of the lines on stdin, the median by the number
# in FIELD (the lower middle one for an even count).
bench_median_line ()
{
  sort -g -k"$1","$1" | awk '{ l[NR] = $0 } END { if (NR) print l[int((NR + 1) / 2)] }'
}

# bench_per_gib CPU_SECONDS BYTES: CPU seconds per GiB (2^30 bytes), 3
# significant figures at most; "n/a" when either is not a number.
bench_per_gib ()
{
  awk -v c="$1" -v b="$2" 'BEGIN {
    if (c !~ /^[0-9.]+$/ || b !~ /^[0-9]+$/ || b + 0 == 0) { print "n/a"; exit }
    r = c / (b / 1024 ^ 3)
    if (r >= 100) printf "%.0f\n", r
    else if (r >= 10) printf "%.1f\n", r
    else printf "%.2f\n", r
  }'
}
