#!/usr/bin/env bash
# KubeVirt CDI's import, with ra-cache in place of nbdkit's readahead
# filter (issue 27): `nbdkit --readonly --filter=ra-cache --filter=retry
# curl url=...` in front of an HTTP server (lighttpd on 127.0.0.1), and
# `qemu-img convert` of a qcow2 image from it, while the HTTP server is
# stopped for 2 s in the middle of the copy (killed, then started again
# on the same port): the retry filter under ra-cache reopens curl and
# retries, and the copy is identical to the image converted locally.
# Then the same with the xz filter under ra-cache and an xz-compressed
# qcow2 image (xz --block-size, so that the xz filter can seek).

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

requires lighttpd qemu-img xz md5sum python3
plugindir=$(nbdkit --dump-config | sed -n 's/^plugindir=//p')
filterdir=$(nbdkit --dump-config | sed -n 's/^filterdir=//p')
[ -f "$plugindir/nbdkit-curl-plugin.so" ] ||
  skip "nbdkit's curl plugin is not installed"
for f in retry xz delay; do
  [ -f "$filterdir/nbdkit-$f-filter.so" ] ||
    skip "nbdkit's $f filter is not installed"
done

# A qcow2 image of 48 MiB of guest data, random, with holes; its raw
# form is what every copy must equal.
mkdir "$tmpdir/www"
random_file "$tmpdir/data.raw" $((48 * 1024 * 1024))
truncate -s 64M "$tmpdir/data.raw"
qemu-img convert -f raw -O qcow2 "$tmpdir/data.raw" "$tmpdir/www/disk.qcow2" ||
  fail "qemu-img could not make the qcow2 image"
qemu-img convert -f qcow2 -O raw "$tmpdir/www/disk.qcow2" "$tmpdir/want.raw" ||
  fail "qemu-img could not read the qcow2 image back"
xz -k -T1 --block-size=1MiB -c "$tmpdir/www/disk.qcow2" > "$tmpdir/www/disk.qcow2.xz" ||
  fail "xz failed"
want=$(md5sum < "$tmpdir/want.raw")

# lighttpd on a free port of 127.0.0.1 (started again on the same port).
cpid=
at_cleanup '[ -n "$cpid" ] && kill "$cpid" 2>/dev/null'
lighttpd_start "$tmpdir/www" disk.qcow2
port=$lighttpd_port

# convert NAME URL-PATH [FILTER...]: the CDI stack over
# http://127.0.0.1:PORT/URL-PATH with FILTERs between ra-cache and retry,
# a qemu-img convert from it, and the HTTP server stopped for 2 s once
# the copy has written 8 MiB and is still running.  200 ms per backend
# read (the delay filter at the bottom, standing for a distant server)
# keep the copy going for several seconds.  (Progress is read from the
# target's allocated blocks: lighttpd buffers its access log, which
# shows the requests only some 40 at a time, so that a copy could end
# before its first lines were written.)
convert ()
{
  local name=$1 path=$2 i st written; shift 2
  start_server "$name" -r -v --filter="$FILTER" "$@" --filter=retry \
    --filter=delay curl url="http://127.0.0.1:$port/$path" rdelay=200ms \
    retries=10 retry-delay=1 ra-cache-stats="$tmpdir/$name.json"
  timeout "$CLIENT_TIMEOUT" qemu-img convert -f qcow2 -O raw "$(uri "$name")" \
    "$tmpdir/$name.raw" &
  cpid=$!
  # Wait for 8 MiB written, then stop the HTTP server for 2 s.
  written=0
  for ((i = 0; i < 300; i++)); do
    written=$(stat -c '%b * %B' "$tmpdir/$name.raw" 2>/dev/null || echo 0)
    (( written >= 8 * 1024 * 1024 )) && break
    kill -0 "$cpid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$cpid" 2>/dev/null ||
    fail "$name: the copy ended before the HTTP server could be stopped"
  lighttpd_stop
  info "$name: HTTP server stopped after $(( written >> 20 )) MiB written"
  sleep 2
  kill -0 "$cpid" 2>/dev/null ||
    { wait "$cpid" && st=0 || st=$?
      fail "$name: the copy ended while the HTTP server was stopped (status $st)"; }
  lighttpd_start "$tmpdir/www" disk.qcow2
  wait "$cpid" && st=0 || st=$?
  [ "$st" -eq 0 ] || fail "$name: qemu-img convert failed across the outage (status $st)"
  cpid=
  [ "$(md5sum < "$tmpdir/$name.raw")" = "$want" ] ||
    fail "$name: the copy differs from the image"
  grep -q 'retry [0-9]*: waiting' "$tmpdir/$name.log" ||
    fail "$name: the front's log shows no retry: was the outage seen?"
  stop_server "$name" || fail "$name: the front did not stop cleanly"
  read -r reads hits breads errs <<<"$(file_stat "$tmpdir/$name.json" \
    client_reads page_hits backend_reads backend_errors)"
  info "$name: identical; client_reads=$reads page_hits=$hits backend_reads=$breads backend_errors=$errs"
  (( hits > 0 )) || fail "$name: nothing was read from the cache"
}

convert qcow2 disk.qcow2
convert xz disk.qcow2.xz --filter=xz
info "ok"
