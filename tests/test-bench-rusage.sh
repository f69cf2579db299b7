#!/usr/bin/env bash
# bench/rusage, the wrapper the benchmarks run the front server under:
# a real nbdkit under it, read by qemu-io and stopped by its own pid as
# the benchmarks do, leaves one record "USER SYS MINFLT MAJFLT MAXRSS"
# with the CPU to the microsecond and figures of a server that ran; the
# wrapper passes on its command's exit status and signal, and says why
# when it cannot run the command or write its record.
test_needs="nbdkit"
. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

RUSAGE=$top_builddir/bench/rusage
[ -x "$RUSAGE" ] || fail "bench/rusage is not built: $RUSAGE"
requires qemu-io
d=$tmpdir

# record_ok FILE: the last line is the five figures, CPU with six decimals.
record_ok ()
{
  tail -n 1 "$1" |
    grep -Eq '^[0-9]+\.[0-9]{6} [0-9]+\.[0-9]{6} [0-9]+ [0-9]+ [0-9]+$' ||
    fail "bench/rusage wrote no record in $1: $(cat "$1")"
}

# A server under the wrapper, as bench/lib.sh starts the front.
server_wrapper=("$RUSAGE" "$d/front.rusage")
start_server front memory 64M
server_wrapper=()
timeout 60 qemu-io -f raw -c "write -P 7 0 8M" -c "read -P 7 0 8M" \
  "$(uri front)" >"$d/qemu-io.out" 2>&1 ||
  fail "qemu-io through nbdkit under bench/rusage: $(cat "$d/qemu-io.out")"
stop_server front || fail "nbdkit under bench/rusage did not stop cleanly"
[ -s "$d/front.rusage" ] || fail "no record after the server stopped"
record_ok "$d/front.rusage"
# Stopped by SIGTERM, which nbdkit handles: a clean exit, one line.
[ "$(wc -l < "$d/front.rusage")" -eq 1 ] ||
  fail "nbdkit's clean exit recorded as a failure: $(cat "$d/front.rusage")"
read -r user sys minflt _ maxrss < "$d/front.rusage"
# A server that wrote and read 8 MiB of fresh memory took CPU, faulted
# in at least those 2048 pages and grew past them.
awk -v u="$user" -v s="$sys" 'BEGIN { exit !(u + s > 0) }' ||
  fail "no CPU time recorded: $(cat "$d/front.rusage")"
[ "$minflt" -ge 2048 ] || fail "minor faults $minflt < 2048 for 8 MiB written"
[ "$maxrss" -ge 8192 ] || fail "maximum RSS $maxrss KiB < 8 MiB written"

# ended NAME STATUS FIRST-LINE COMMAND...: COMMAND under the wrapper,
# its record in $d/NAME.rusage, must leave the wrapper with STATUS and a
# record whose first line is FIRST-LINE and whose last is the figures.
ended ()
{
  local name=$1 want=$2 line=$3 status=0; shift 3
  "$RUSAGE" "$d/$name.rusage" "$@" || status=$?
  [ "$status" -eq "$want" ] || fail "$*: the wrapper's status $status, not $want"
  [ "$(head -n 1 "$d/$name.rusage")" = "$line" ] ||
    fail "$*: the record does not begin \"$line\": $(cat "$d/$name.rusage")"
  record_ok "$d/$name.rusage"
}

# refused NAME STATUS WORD WRAPPER-ARGS...: the wrapper, given
# WRAPPER-ARGS, must exit with STATUS and a message on stderr naming WORD.
refused ()
{
  local name=$1 want=$2 word=$3 status=0; shift 3
  "$RUSAGE" "$@" 2>"$d/$name.err" || status=$?
  [ "$status" -eq "$want" ] || fail "$name: the wrapper's status $status, not $want"
  grep -q -- "$word" "$d/$name.err" ||
    fail "$name: no message names $word: $(cat "$d/$name.err")"
}

# The command's status is the wrapper's, and is recorded before the figures.
ended exit 3 "exit status 3" sh -c 'exit 3'
ended signal 137 "killed by signal 9" sh -c 'kill -KILL $$'

# A command that cannot be run: 127, a message naming it, no figures.
refused missing 127 no-such-command "$d/missing.rusage" "$d/no-such-command"
[ ! -s "$d/missing.rusage" ] || fail "figures recorded for a command never run"

# A record that cannot be written is an error before anything runs.
refused unwritable 2 no-such-dir "$d/no-such-dir/x" touch "$d/ran"
[ ! -e "$d/ran" ] || fail "the command ran although its record could not be written"

# No arguments: usage, status 2.
refused usage 2 usage

info PASS
