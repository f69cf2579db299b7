#!/usr/bin/env bash
# ra-cache: --help lists the parameters, and bad values stop nbdkit at
# startup with a message naming the parameter and what is wrong.

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

"$NBDKIT" --filter="$FILTER" null --help > "$tmpdir/help" 2>&1 ||
  fail "nbdkit --filter=ra-cache null --help failed"
for key in ra-cache-size ra-cache-page-size ra-mode ra-max ra-io-max \
           ra-max-background ra-congestion-threshold ra-congestion; do
  grep -q "^$key=" "$tmpdir/help" || {
    cat "$tmpdir/help"
    fail "--help does not list $key"
  }
done

# start_ok ARGS...: nbdkit starts with these ra-cache parameters (it runs
# a command that exits at once, so nothing keeps running).
start_ok ()
{
  timeout 60 "$NBDKIT" -U - --filter="$FILTER" null 16M "$@" \
    --run 'exit 0' > "$tmpdir/out" 2>&1 || {
    cat "$tmpdir/out"
    fail "nbdkit did not start with: $*"
  }
}

# start_fails PATTERN ARGS...: nbdkit must refuse these parameters, with
# an error matching the extended regular expression PATTERN.
start_fails ()
{
  local pattern=$1; shift
  if timeout 60 "$NBDKIT" -U - --filter="$FILTER" null 16M "$@" \
       --run 'exit 0' > "$tmpdir/out" 2>&1; then
    cat "$tmpdir/out"
    fail "nbdkit started with bad parameters: $*"
  fi
  grep -Eq "error: .*$pattern" "$tmpdir/out" || {
    cat "$tmpdir/out"
    fail "no clear error message for: $* (expected /$pattern/)"
  }
  info "refused $*: $(grep -E 'error:' "$tmpdir/out" | head -n 1)"
}

# Good values, including the limits, start.
start_ok
start_ok ra-cache-page-size=512 ra-max=0 ra-io-max=512
start_ok ra-cache-page-size=1M ra-cache-size=4M ra-max=2M ra-io-max=1M
start_ok ra-max=128K ra-cache-size=256K ra-io-max=128K
start_ok ra-max-background=1 ra-congestion-threshold=1
start_ok ra-max-background=256 ra-congestion-threshold=256
start_ok ra-mode=kernel
start_ok ra-mode=adaptive ra-max=0
start_ok ra-mode=adaptive ra-max=64K ra-io-max=4K

start_fails 'ra-cache-page-size.*3000.*power of two' ra-cache-page-size=3000
start_fails 'ra-cache-page-size.*power of two' ra-cache-page-size=256
start_fails 'ra-cache-page-size.*power of two' ra-cache-page-size=2M
start_fails 'ra-io-max.*100.*page' ra-io-max=100
start_fails 'ra-io-max' ra-io-max=64M
start_fails 'ra-io-max.*(whole number of pages|page)' ra-io-max=6000
start_fails 'ra-max.*half of ra-cache-size' ra-max=4M ra-cache-size=6M
start_fails 'ra-max.*half of ra-cache-size' ra-cache-size=1M
start_fails 'ra-max.*(whole number of pages|page)' ra-max=5000
start_fails 'ra-max.*1G' ra-max=2G ra-cache-size=8G
start_fails 'ra-max.*not a size' ra-max=banana
start_fails "ra-mode: 'fast' is not one of: kernel, adaptive" ra-mode=fast
start_fails 'ra-mode' ra-mode=
start_fails 'ra-max-background.*0' ra-max-background=0
start_fails 'ra-max-background.*257' ra-max-background=257
start_fails 'ra-congestion-threshold.*0' ra-congestion-threshold=0
start_fails 'ra-congestion-threshold.*13' ra-congestion-threshold=13
start_fails 'ra-congestion-threshold' ra-max-background=4 ra-congestion-threshold=5

# -D ra-cache.verbose=1 logs the backend reads (nbdkit 1.32 looks up the
# symbol "ra-cache_debug_verbose" for it).
timeout 60 "$NBDKIT" -v -D ra-cache.verbose=1 -U - --filter="$FILTER" \
  memory 1M --run 'nbdsh -u "$uri" -c "h.pread (4096, 0)"' \
  > "$tmpdir/out" 2>&1 || {
  cat "$tmpdir/out"
  fail "nbdkit -D ra-cache.verbose=1 failed"
}
if grep -E 'warning: -D ra-cache|does not contain' "$tmpdir/out" ||
   ! grep -q 'ra-cache: backend read 4096 bytes at 0' "$tmpdir/out"; then
  fail "-D ra-cache.verbose=1 does not log the backend reads"
fi
info "-D ra-cache.verbose=1 logs backend reads"
