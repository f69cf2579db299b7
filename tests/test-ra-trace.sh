#!/usr/bin/env bash
# ra-trace, through the command: the spec's worked example exactly, G then
# E for a first read at a non-zero offset, two interleaved streams on one
# stream id reaching full-size branch C windows, separate stream ids,
# nbdkit log filter lines from a real log (nbdkit --filter=log, read with
# nbdsh), errors (FILE:LINE, exit 1) and --help.
#
# The log part needs nbdkit and nbdsh with the nbd module; where they are
# missing the other checks still run and the test then exits 77 (skip).
set -euo pipefail

: "${top_builddir:=$PWD}"
: "${top_srcdir:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${NBDKIT:=nbdkit}"
# nbdsh runs "python3 -m nbd": the system python3 must come first.
PATH=/usr/bin:/bin:$PATH
export PATH

RA_TRACE=$top_builddir/ra-trace
POD=$top_srcdir/src/ra-trace.pod
name=test-ra-trace

fail () { echo "$name: FAIL: $*" >&2; exit 1; }
info () { echo "$name: $*"; }

[ -x "$RA_TRACE" ] || fail "$RA_TRACE is not built"

# Unix socket paths are limited to 107 bytes: keep the directory short.
tmpdir=$(mktemp -d /tmp/ra-trace-test.XXXXXX)
pidfile=$tmpdir/nbdkit.pid
sock=$tmpdir/nbdkit.sock

# Stop the server started by this test, if any: SIGTERM, wait, SIGKILL.
stop_server ()
{
  local pid i
  [ -s "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  rm -f "$pidfile"
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  echo "$name: nbdkit (pid $pid) did not exit on SIGTERM" >&2
  kill -KILL "$pid" 2>/dev/null || true
}

cleanup ()
{
  local status=$?
  set +e
  stop_server
  if [ "$status" -ne 0 ] && [ "$status" -ne 77 ]; then
    for f in "$tmpdir/nbdkit.err" "$tmpdir/nbdkit.log"; do
      [ -s "$f" ] || continue
      echo "---- last lines of $(basename "$f") ----" >&2
      tail -n 20 "$f" >&2
    done
  fi
  rm -rf "$tmpdir"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# The window rows of ra-trace's output, fields normalised to one space:
# read stream trigger branch start size async marker inserted batches
rows ()
{
  awk '/^# summary/ { exit } /^#/ { next } { $1 = $1; print }' "$1"
}

# One summary value: summary FILE KEY (the text before the colon).
summary ()
{
  awk -v k="$2:" 'found && index ($0, k) == 1 {
                    sub (/^[^:]*:[ ]*/, ""); split ($0, a, " "); print a[1]; exit }
                  /^# summary/ { found = 1 }' "$1"
}

expect_rows ()
{
  local out=$1 want=$2
  if [ "$(rows "$out")" != "$want" ]; then
    echo "expected windows:" >&2; echo "$want" >&2
    echo "got:" >&2; rows "$out" >&2
    fail "$3"
  fi
}

expect_summary ()
{
  local got
  got=$(summary "$1" "$2")
  [ "$got" = "$3" ] || fail "$4: summary '$2' is '$got', expected '$3'"
}

# ---- the spec's worked example ------------------------------------------
# ra_max 32 pages (128K), one stream, 16 KiB reads from offset 0.
for i in $(seq 0 21); do echo "$((i * 16384)) 16384"; done > "$tmpdir/we.trace"
"$RA_TRACE" --ra-max=128K --export-size=1G "$tmpdir/we.trace" > "$tmpdir/we.out"
expect_rows "$tmpdir/we.out" "\
1 0 sync A 0 8 4 4 8 2
2 0 async B 8 16 16 8 16 1
3 0 async B 24 32 32 24 32 1
7 0 async B 56 32 32 56 32 1
15 0 async B 88 32 32 88 32 1" "worked example"
expect_summary "$tmpdir/we.out" "reads" 22 "worked example"
expect_summary "$tmpdir/we.out" "client bytes" 360448 "worked example"
expect_summary "$tmpdir/we.out" "page hits" 87 "worked example"
expect_summary "$tmpdir/we.out" "page misses" 1 "worked example"
expect_summary "$tmpdir/we.out" "windows A" 1 "worked example"
expect_summary "$tmpdir/we.out" "windows B" 4 "worked example"
expect_summary "$tmpdir/we.out" "windows G" 0 "worked example"
expect_summary "$tmpdir/we.out" "pages read ahead" 116 "worked example"
expect_summary "$tmpdir/we.out" "read ahead never used" 32 "worked example"
expect_summary "$tmpdir/we.out" "read ahead unused at end" 32 "worked example"
expect_summary "$tmpdir/we.out" "backend requests" 6 "worked example"
expect_summary "$tmpdir/we.out" "backend bytes" 491520 "worked example"
expect_summary "$tmpdir/we.out" "amplification" 1.364 "worked example"
info "worked example: A 0/8/4 m4, B 8/16/16 m8, B 24/32/32 m24, B 56/32/32 m56, B 88/32/32 m88"

# The same in hex with comments and blank lines, from standard input;
# --quiet prints the same summary and no windows.
{
  echo "# the worked example, in hex"
  echo
  for i in $(seq 0 21); do printf '0x%x 0x4000 0   # read %d\n' $((i * 16384)) "$i"; done
} | "$RA_TRACE" --ra-max=128K --export-size=1G --quiet > "$tmpdir/we-q.out"
[ -z "$(rows "$tmpdir/we-q.out")" ] || fail "--quiet printed windows"
diff <(sed -n '/^# summary/,$p' "$tmpdir/we.out") \
     <(sed -n '/^# summary/,$p' "$tmpdir/we-q.out") ||
  fail "the hex trace on stdin gives another summary"

# The default export size ends at the last page read: the fifth window
# starts at the end of the export and reads nothing.
"$RA_TRACE" --ra-max=128K "$tmpdir/we.trace" > "$tmpdir/we-end.out"
grep -q '^# ra-trace: .* export-size=360448$' "$tmpdir/we-end.out" ||
  fail "default export size is not 360448"
[ "$(rows "$tmpdir/we-end.out" | tail -n 1)" = "15 0 async B 88 0 0 - 0 0" ] ||
  fail "window past the end of the export is not empty"

# ---- G then E --------------------------------------------------------------
printf '%s\n' "1048576 16384" "1064960 16384" > "$tmpdir/ge.trace"
"$RA_TRACE" --ra-max=128K --export-size=1G "$tmpdir/ge.trace" > "$tmpdir/ge.out"
expect_rows "$tmpdir/ge.out" "\
1 0 sync G 256 4 0 - 4 1
2 0 sync E 260 8 4 264 8 2" "G then E"
info "first read at a non-zero offset: G (4 pages, no marker), then E (8/4)"

# ---- two interleaved streams on one stream id: branch C -----------------
# Stream X from 0, stream Y from 256 MiB (page 65536), 16 KiB reads,
# alternating, one stream state.
for i in $(seq 0 63); do
  echo "$((i * 16384)) 16384"
  echo "$((268435456 + i * 16384)) 16384"
done > "$tmpdir/il.trace"
"$RA_TRACE" --ra-max=128K --export-size=1G "$tmpdir/il.trace" > "$tmpdir/il.out"
rows "$tmpdir/il.out" > "$tmpdir/il.rows"
nx=$(awk '$4 == "C" && $5 < 65536 && $6 == 32 && $7 == 32' "$tmpdir/il.rows" | wc -l)
ny=$(awk '$4 == "C" && $5 >= 65536 && $6 == 32 && $7 == 32' "$tmpdir/il.rows" | wc -l)
[ "$nx" -ge 3 ] && [ "$ny" -ge 3 ] ||
  fail "interleaved: full-size C windows: stream X $nx, stream Y $ny (want >= 3 each)"
# After warm-up (the first 16 reads) every window is an async C window of
# full size: no random reads, no sync misses.
late=$(awk '$1 > 16 && !($3 == "async" && $4 == "C" && $6 == 32)' "$tmpdir/il.rows")
[ -z "$late" ] || fail "interleaved: after warm-up: $late"
expect_summary "$tmpdir/il.out" "streams" 1 "interleaved"
info "interleaved streams on one state: $nx + $ny full-size C windows"

# On two stream ids each stream has its own state: B, never C.
for i in $(seq 0 63); do
  echo "$((i * 16384)) 16384 1"
  echo "$((268435456 + i * 16384)) 16384 2"
done > "$tmpdir/two.trace"
"$RA_TRACE" --ra-max=128K --export-size=1G "$tmpdir/two.trace" > "$tmpdir/two.out"
expect_summary "$tmpdir/two.out" "streams" 2 "two streams"
expect_summary "$tmpdir/two.out" "windows C" 0 "two streams"
[ "$(rows "$tmpdir/two.out" | awk '$2 == 2' | head -n 2 | awk '{ print $4 }' | tr -d '\n')" = GE ] ||
  fail "two streams: stream 2 does not start with G then E"

# ---- errors: FILE:LINE, exit 1 -------------------------------------------
# expect_error DESCRIPTION MESSAGE-REGEX RA-TRACE-ARGS... (stdin: $tmpdir/in)
expect_error ()
{
  local what=$1 re=$2 rc=0
  shift 2
  "$RA_TRACE" "$@" < "$tmpdir/in" > "$tmpdir/err.out" 2> "$tmpdir/err.err" || rc=$?
  [ "$rc" -eq 1 ] || fail "$what: exit status $rc, expected 1"
  grep -Eq "$re" "$tmpdir/err.err" ||
    fail "$what: message '$(cat "$tmpdir/err.err")' does not match '$re'"
}

printf '0 4096\n\n4096 4096 7\nfoo 4096\n' > "$tmpdir/bad.trace"
: > "$tmpdir/in"
expect_error "not a number" \
  "^ra-trace: $tmpdir/bad.trace:4: OFFSET: 'foo' is not a number" "$tmpdir/bad.trace"
printf '0 4096 1 2\n' > "$tmpdir/in"
expect_error "too many fields" "^ra-trace: <stdin>:1: expected OFFSET LENGTH \[STREAM\]"
printf '# one number\n8192\n' > "$tmpdir/in"
expect_error "one field" "^ra-trace: <stdin>:2: expected OFFSET LENGTH \[STREAM\], found only one"
printf '0 0\n' > "$tmpdir/in"
expect_error "zero length" "^ra-trace: <stdin>:1: the length of a read must not be 0"
printf '0 4096\n0x1g 4096\n' > "$tmpdir/in"
expect_error "bad hex" "^ra-trace: <stdin>:2: OFFSET: '0x1g' is not a number"
printf '0 4096 stream\n' > "$tmpdir/in"
expect_error "bad stream" "^ra-trace: <stdin>:1: STREAM: 'stream' is not a number"
printf '9223372036854775807 2\n' > "$tmpdir/in"
expect_error "overflow" "^ra-trace: <stdin>:1: read .* ends past 2\^63-1"
printf '2026-12-03 09:06:04.715360 connection=1 Read id=1 count=0x4000 ...\n' > "$tmpdir/in"
expect_error "log Read without offset" \
  "^ra-trace: <stdin>:1: log Read line without offset= and count="
printf '2026-12-03 09:06:04.715360 connection=1 Read id=1 offset=0xzz count=0x4000 ...\n' > "$tmpdir/in"
expect_error "log Read bad offset" "^ra-trace: <stdin>:1: log Read line: bad offset '0xzz'"
printf '0 4096\n4096 8192\n' > "$tmpdir/in"
expect_error "past the export" \
  "^ra-trace: <stdin>:2: read at offset 4096 of 8192 bytes ends past the export size \(8192\)" \
  --export-size=8K
: > "$tmpdir/in"
expect_error "page size" "^ra-trace: --page-size: 3000 must be a power of two" --page-size=3000
expect_error "page size too small" "^ra-trace: --page-size: 256 must be a power of two from 512" --page-size=256
expect_error "io-max" "^ra-trace: --io-max: 2048 is smaller than one page \(4096\)" --io-max=2k
expect_error "ra-max pages" "^ra-trace: --ra-max: 6144 is not a whole number of pages" --ra-max=6k
expect_error "ra-max vs cache" "^ra-trace: --ra-max: 4194304 is larger than half of --cache-size" \
  --cache-size=4M
expect_error "bad size" "^ra-trace: --cache-size: '12X' is not a size" --cache-size=12X
expect_error "missing file" "^ra-trace: $tmpdir/none: No such file" "$tmpdir/none"
expect_error "unknown option" "^ra-trace: unknown option '--frobnicate'" --frobnicate
info "bad input and bad options: clear messages, exit 1"

# ---- --help, --version, and the man page agree ----------------------------
"$RA_TRACE" --help > "$tmpdir/help.out"
grep -q '^Usage: ra-trace ' "$tmpdir/help.out" || fail "--help has no usage line"
"$RA_TRACE" --version | grep -Eq '^ra-trace \(ra-cache\) [0-9]' || fail "--version"
for opt in $(grep -Eo -- '--[a-z][a-z-]+' "$tmpdir/help.out" | sort -u); do
  grep -q -- "$opt" "$POD" || fail "$opt is in --help but not in $POD"
done
for opt in $(grep -Eo -- 'B<--[a-z][a-z-]+' "$POD" | sed 's/^B<//' | sort -u); do
  grep -q -- "$opt" "$tmpdir/help.out" || fail "$opt is in $POD but not in --help"
done
while IFS= read -r key; do
  grep -qF "$key" "$POD" || fail "summary key '$key' is not documented in $POD"
done < <(sed -n '/^# summary/,$ s/^\([a-z][a-zA-Z ]*\):.*/\1/p' "$tmpdir/we.out")
info "--help, --version and the man page agree"

# ---- a real log from nbdkit's log filter ----------------------------------
log_skip=
if ! command -v "$NBDKIT" >/dev/null 2>&1; then
  log_skip="nbdkit is not installed"
elif ! command -v nbdsh >/dev/null 2>&1; then
  log_skip="nbdsh is not installed"
elif ! nbdsh -n -c 'import nbd' >/dev/null 2>&1; then
  log_skip="nbdsh cannot import the nbd module (python3-libnbd)"
fi
if [ -n "$log_skip" ]; then
  info "SKIP the log filter part: $log_skip"
  exit 77
fi

log=$tmpdir/nbdkit.log
"$NBDKIT" -U "$sock" -P "$pidfile" --filter=log memory 1M logfile="$log" \
  2> "$tmpdir/nbdkit.err"
for ((i = 0; i < 300; i++)); do
  [ -S "$sock" ] && [ -s "$pidfile" ] && break
  sleep 0.1
done
[ -S "$sock" ] && [ -s "$pidfile" ] || fail "nbdkit did not start"
uri="nbd+unix:///?socket=$sock"
# Connection 1: the worked example.  Connection 2: a write and a flush
# (ignored), then two reads at 512 KiB (G then E on its own state).
timeout 60 nbdsh -u "$uri" -c '
for i in range (22):
    h.pread (16384, i * 16384)
'
timeout 60 nbdsh -u "$uri" -c '
h.pwrite (b"x" * 4096, 4096)
h.flush ()
h.pread (16384, 524288)
h.pread (16384, 524288 + 16384)
h.pread (100, 5000)
'
stop_server                     # the log is complete once nbdkit exits
[ -s "$log" ] || fail "nbdkit wrote no log"

conns=($(sed -n 's/.* connection=\([0-9]*\) Read .*/\1/p' "$log" | uniq))
[ "${#conns[@]}" -eq 2 ] || fail "expected reads on 2 connections in the log, got: ${conns[*]}"
c1=${conns[0]} c2=${conns[1]}
nreads=$(grep -c ' Read id=' "$log")
[ "$nreads" -eq 25 ] || fail "expected 25 Read lines in the log, got $nreads"

"$RA_TRACE" --ra-max=128K "$log" > "$tmpdir/log.out"
grep -q '^# ra-trace: .* export-size=1048576$' "$tmpdir/log.out" ||
  fail "log: export size is not the Connect line's 1048576"
expect_rows "$tmpdir/log.out" "\
1 $c1 sync A 0 8 4 4 8 2
2 $c1 async B 8 16 16 8 16 1
3 $c1 async B 24 32 32 24 32 1
7 $c1 async B 56 32 32 56 32 1
15 $c1 async B 88 32 32 88 32 1
23 $c2 sync G 128 4 0 - 4 1
24 $c2 sync E 132 8 4 136 8 2" "log filter"
expect_summary "$tmpdir/log.out" "reads" 25 "log filter"
expect_summary "$tmpdir/log.out" "streams" 2 "log filter"
expect_summary "$tmpdir/log.out" "client bytes" $((24 * 16384 + 100)) "log filter"

# The same reads written as a plain trace give the same windows.
sed -n 's/.* connection=\([0-9]*\) Read id=[0-9]* offset=\(0x[0-9a-f]*\) count=\(0x[0-9a-f]*\) .*/\2 \3 \1/p' \
  "$log" > "$tmpdir/log.trace"
"$RA_TRACE" --ra-max=128K --export-size=1M "$tmpdir/log.trace" > "$tmpdir/log-plain.out"
diff "$tmpdir/log.out" "$tmpdir/log-plain.out" ||
  fail "the log and the same reads as a plain trace differ"
info "nbdkit log filter: $nreads Read lines on connections $c1 and $c2 replayed"

# Log lines and plain lines may be mixed; other log lines are ignored.
{ head -n 8 "$log"; echo "0x100000 4096 9"; } > "$tmpdir/mixed.trace"
"$RA_TRACE" --ra-max=128K --export-size=2M -q "$tmpdir/mixed.trace" > "$tmpdir/mixed.out"
expect_summary "$tmpdir/mixed.out" "streams" 2 "mixed trace"
info "PASS"
