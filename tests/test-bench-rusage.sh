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

# The command's status is the wrapper's, and is recorded before the figures.
status=0
"$RUSAGE" "$d/exit.rusage" sh -c 'exit 3' || status=$?
[ "$status" -eq 3 ] || fail "exit status 3 came back as $status"
[ "$(head -n 1 "$d/exit.rusage")" = "exit status 3" ] ||
  fail "exit status not recorded: $(cat "$d/exit.rusage")"
record_ok "$d/exit.rusage"

status=0
"$RUSAGE" "$d/signal.rusage" sh -c 'kill -KILL $$' || status=$?
[ "$status" -eq 137 ] || fail "death by SIGKILL came back as $status, not 137"
[ "$(head -n 1 "$d/signal.rusage")" = "killed by signal 9" ] ||
  fail "signal not recorded: $(cat "$d/signal.rusage")"
record_ok "$d/signal.rusage"

# A command that cannot be run: 127, a message naming it, no figures.
status=0
"$RUSAGE" "$d/missing.rusage" "$d/no-such-command" 2>"$d/missing.err" ||
  status=$?
[ "$status" -eq 127 ] || fail "a missing command gave $status, not 127"
grep -q "no-such-command" "$d/missing.err" ||
  fail "no message names the missing command: $(cat "$d/missing.err")"
[ ! -s "$d/missing.rusage" ] || fail "figures recorded for a command never run"

# A record that cannot be written is an error before anything runs.
status=0
"$RUSAGE" "$d/no-such-dir/x" touch "$d/ran" 2>"$d/unwritable.err" ||
  status=$?
[ "$status" -eq 2 ] || fail "an unwritable record gave $status, not 2"
[ ! -e "$d/ran" ] || fail "the command ran although its record could not be written"
grep -q "no-such-dir" "$d/unwritable.err" ||
  fail "no message names the unwritable record: $(cat "$d/unwritable.err")"

# No arguments: usage, status 2.
status=0
"$RUSAGE" 2>"$d/usage.err" || status=$?
[ "$status" -eq 2 ] || fail "no arguments gave status $status, not 2"
grep -q usage "$d/usage.err" ||
  fail "no usage message for no arguments: $(cat "$d/usage.err")"

info PASS
