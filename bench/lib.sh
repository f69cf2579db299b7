# shellcheck shell=bash
# bench/lib.sh: server and client helpers shared by bench/compare.sh and
# `./run.sh demo`.  Source it; it does not set a trap itself: call
# bench_init once, and put bench_cleanup in your EXIT trap.
#
# Every nbdkit server runs in the foreground (-f) as a child of the
# script, on a Unix socket in a private temporary directory, so that it
# can be stopped by its own pid and waited for: the stats filter writes
# its file only when nbdkit exits.  Nothing here listens on TCP.

# nbdsh and the libnbd binding live in Debian's python3: put /usr/bin
# before any other python3 (pyenv, venv) for the clients started here.
BENCH_PATH=/usr/bin:/bin:$PATH

: "${NBDKIT:=nbdkit}"
# Seconds a server gets to create its socket, and to exit on SIGTERM.
: "${SERVER_TIMEOUT:=30}"
# Seconds a client command gets before it counts as a hang.
: "${CLIENT_TIMEOUT:=300}"

bench_tmpdir=
bench_servers=()
bench_client_pid=

bench_die ()
{
  echo "${0##*/}: $*" >&2
  exit 1
}

# bench_init: make the private temporary directory (short: Unix socket
# paths are limited to 107 bytes).
bench_init ()
{
  bench_tmpdir=$(mktemp -d /tmp/racache-bench.XXXXXX)
}

# bench_sock NAME: the socket of server NAME; bench_uri NAME: its NBD URI.
bench_sock ()
{
  echo "$bench_tmpdir/$1.sock"
}

bench_uri ()
{
  echo "nbd+unix:///?socket=$bench_tmpdir/$1.sock"
}

# bench_start NAME NBDKIT-ARGS...: start nbdkit on $(bench_sock NAME), its
# output in $bench_tmpdir/NAME.log, and wait until it accepts connections
# (nbdkit writes the pidfile only once the socket is bound).  Returns 1,
# with the server's log on stderr, if it exits or hangs at startup.
bench_start ()
{
  local name=$1; shift
  local sock=$bench_tmpdir/$name.sock pidfile=$bench_tmpdir/$name.pid
  local pid i
  rm -f "$sock" "$pidfile"
  "$NBDKIT" -f -U "$sock" -P "$pidfile" "$@" \
    </dev/null >"$bench_tmpdir/$name.log" 2>&1 &
  pid=$!
  echo "$pid" > "$bench_tmpdir/$name.bgpid"
  bench_servers+=("$name")
  for ((i = 0; i < SERVER_TIMEOUT * 10; i++)); do
    if [ -S "$sock" ] && [ -s "$pidfile" ]; then
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid" 2>/dev/null || true
      rm -f "$bench_tmpdir/$name.bgpid"
      echo "${0##*/}: server $name exited at startup: nbdkit $*" >&2
      sed 's/^/    /' "$bench_tmpdir/$name.log" >&2
      return 1
    fi
    sleep 0.1
  done
  echo "${0##*/}: server $name did not create its socket within ${SERVER_TIMEOUT}s: nbdkit $*" >&2
  bench_stop "$name"
  return 1
}

# bench_stop NAME: SIGTERM, wait for the exit (SIGKILL after
# SERVER_TIMEOUT seconds).  Safe to call twice.
bench_stop ()
{
  local name=$1 pidf=$bench_tmpdir/$1.bgpid pid i
  [ -f "$pidf" ] || return 0
  pid=$(cat "$pidf")
  rm -f "$pidf"
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < SERVER_TIMEOUT * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "${0##*/}: server $name (pid $pid) ignored SIGTERM for ${SERVER_TIMEOUT}s: killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

# bench_stop_all: stop every server still running, newest first (a front
# before the backend it reads from).
bench_stop_all ()
{
  local i
  for ((i = ${#bench_servers[@]} - 1; i >= 0; i--)); do
    bench_stop "${bench_servers[i]}"
  done
  bench_servers=()
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
