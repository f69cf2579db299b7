#!/usr/bin/env bash
# The curl plugin (thread model serialize_requests in nbdkit 1.32) against
# lighttpd on 127.0.0.1 (issue 12, item 8): the data must be right, the
# reads cached, and backend reads on different contexts (a client's and
# the workers') must overlap: serialize_requests only forbids overlapping
# calls on one context, so the filter must not serialize them all.

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

requires lighttpd qemu-img md5sum python3
[ -f "$(nbdkit --dump-config | sed -n 's/^plugindir=//p')/nbdkit-curl-plugin.so" ] ||
  skip "nbdkit's curl plugin is not installed"

size=$((32 * 1024 * 1024))
mkdir "$tmpdir/www"
random_file "$tmpdir/www/disk.img" "$size"

lighttpd_start "$tmpdir/www" disk.img
url=http://127.0.0.1:$lighttpd_port/disk.img

# 2 ms of delay per read, so that the reads in flight overlap visibly.
start_server front -v --filter="$FILTER" --filter=delay curl url="$url" \
  rdelay=2ms ra-cache-stats-socket="$tmpdir/front-stats.sock" \
  ra-cache-stats="$tmpdir/front.json"
timeout "$CLIENT_TIMEOUT" qemu-img convert -f raw -O raw "$(uri front)" \
  "$tmpdir/copy.img" || fail "qemu-img convert through ra-cache failed"
[ "$(md5sum < "$tmpdir/copy.img")" = "$(md5sum < "$tmpdir/www/disk.img")" ] ||
  fail "wrong data"
timeout "$CLIENT_TIMEOUT" qemu-img bench -f raw -c 256 -d 1 -s 64K \
  "$(uri front)" >/dev/null || fail "qemu-img bench failed"
# With one global lock there were at most 2 reads in flight (one worker,
# and the client's own sync read waiting for the lock).
read -r hwm <<<"$(live_stat front inflight_high_water)"
stop_server front || fail "the front did not stop cleanly"
read -r reads hits breads <<<"$(file_stat "$tmpdir/front.json" client_reads page_hits backend_reads)"
info "client_reads=$reads page_hits=$hits backend_reads=$breads inflight_high_water=$hwm"
(( reads > 0 && hits > 0 )) || fail "nothing was cached"
(( hwm > 2 )) || fail "backend reads never overlapped (inflight_high_water=$hwm)"
grep -q 'serializes requests per connection' "$tmpdir/front.log" ||
  fail "the log does not name the thread model"
# One read at a time per curl context: the default opens 4 background
# connections (1 for a plugin that carries many reads per connection).
grep -q 'ra-backend-connections=4 ' "$tmpdir/front.log" ||
  fail "the default background connections for curl are not 4: $(grep -o 'ra-backend-connections=[0-9]*' "$tmpdir/front.log")"
grep -q 'Range\|GET' "$tmpdir/access.log" || fail "lighttpd logged no request"
info "ok"
