#!/usr/bin/env bash
# A backend whose default export has a name (issue 12, item 1): nbd-server
# names its exports, and the nbd plugin with export=NAME, or
# --filter=exportname default-export=NAME, makes nbdkit resolve a client's
# "" to that name before the filter's .open.  The default export must be
# cached whatever its name (and the workers must read that same export);
# a client that names another export is served correctly, uncached.

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

requires nbd-server qemu-img md5sum

size=$((16 * 1024 * 1024))
random_file "$tmpdir/disk1.img" "$size"
head -c "$size" /dev/zero > "$tmpdir/other.img"

# nbd-server on a Unix socket only (unixsock: no TCP listener).  It
# daemonizes and writes its pid to the pidfile; stop it on every exit.
cat > "$tmpdir/ns.conf" <<EOF
[generic]
    unixsock = $tmpdir/ns.sock
[disk1]
    exportname = $tmpdir/disk1.img
    readonly = true
[other]
    exportname = $tmpdir/other.img
    readonly = true
EOF

stop_nbd_server ()
{
  local pid i
  [ -s "$tmpdir/ns.pid" ] || return 0
  pid=$(cat "$tmpdir/ns.pid")
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 50; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
}
on_exit ()
{
  local status=$?
  stop_nbd_server
  (exit "$status")
  cleanup
}
trap on_exit EXIT

timeout 30 nbd-server -C "$tmpdir/ns.conf" -p "$tmpdir/ns.pid" \
  >"$tmpdir/ns.log" 2>&1 ||
  { cat "$tmpdir/ns.log" >&2; fail "nbd-server did not start"; }
for ((i = 0; i < 100; i++)); do
  [ -S "$tmpdir/ns.sock" ] && [ -s "$tmpdir/ns.pid" ] && break
  sleep 0.1
done
[ -S "$tmpdir/ns.sock" ] || fail "nbd-server did not create its socket"

want=$(md5sum < "$tmpdir/disk1.img")

# copy_and_compare NAME EXPORT-IN-URI: copy the export through front NAME,
# compare with disk1.img.
copy_and_compare ()
{
  local name=$1 export=$2 out=$tmpdir/$1.out
  rm -f "$out"
  timeout "$CLIENT_TIMEOUT" qemu-img convert -f raw -O raw \
    "nbd+unix:///$export?socket=$(sock "$name")" "$out" ||
    fail "$name: qemu-img convert of export '$export' failed"
  [ "$(md5sum < "$out")" = "$want" ] ||
    fail "$name: export '$export': wrong data"
}

# stop NAME within 5 s of SIGTERM.
stop_quickly ()
{
  local pid t0 t1
  pid=$(server_pid "$1")
  t0=$(date +%s%N)
  stop_server "$1" || fail "$1 did not stop cleanly"
  t1=$(date +%s%N)
  (( (t1 - t0) / 1000000 < 5000 )) ||
    fail "$1 took $(( (t1 - t0) / 1000000 )) ms to exit on SIGTERM"
}

# Cached: client reads counted, pages hit.
check_cached ()
{
  local reads hits
  read -r reads hits <<<"$(file_stat "$tmpdir/$1.json" client_reads page_hits)"
  info "$1: client_reads=$reads page_hits=$hits"
  (( reads > 0 )) || fail "$1: no client read went through the cache"
  (( hits > 0 )) || fail "$1: no page hit"
}

# 1. nbd plugin, export=disk1: the client's "" is "disk1".
start_server front1 -v --filter="$FILTER" nbd socket="$tmpdir/ns.sock" \
  export=disk1 ra-cache-stats="$tmpdir/front1.json"
copy_and_compare front1 ""
timeout "$CLIENT_TIMEOUT" qemu-img bench -f raw -c 256 -d 1 -s 64K \
  "nbd+unix:///?socket=$(sock front1)" >/dev/null ||
  fail "front1: qemu-img bench failed"
stop_quickly front1
check_cached front1
# The workers read the export the clients read.
grep -q 'nbd: open readonly=1 exportname="disk1"' "$tmpdir/front1.log" ||
  fail "front1: the workers did not open export disk1"

# 2. --filter=exportname default-export=disk1 under ra-cache; a client
#    that names "other" gets the plugin's data (export=disk1 ignores the
#    name), uncached, and the log says so.
start_server front2 -v --filter="$FILTER" --filter=exportname \
  nbd socket="$tmpdir/ns.sock" export=disk1 default-export=disk1 \
  ra-cache-stats="$tmpdir/front2.json"
copy_and_compare front2 ""
# qemu-img convert keeps 8 reads of 2M in flight and is covered (read
# around the cache, no page made) as soon as its first trigger sees two
# of them: whether it makes any page depends on timing.  Reads at depth
# 1 always make and hit pages.
timeout "$CLIENT_TIMEOUT" qemu-img bench -f raw -c 256 -d 1 -s 64K \
  "nbd+unix:///?socket=$(sock front2)" >/dev/null ||
  fail "front2: qemu-img bench failed"
copy_and_compare front2 other
stop_quickly front2
check_cached front2
grep -q 'asked for another export than the default ("disk1")' \
  "$tmpdir/front2.log" ||
  fail "front2: the log does not say that export 'other' was not cached"
# ... and the counters say why: every byte of export 'other' (the
# convert reads each once), no other reason.
read -r oreads obytes sreads preads <<<"$(file_stat "$tmpdir/front2.json" \
  uncached_reads_other_export uncached_bytes_other_export \
  uncached_reads_size_mismatch uncached_reads_private_writes)"
info "front2: uncached_reads_other_export=$oreads uncached_bytes_other_export=$obytes"
disk1_size=$(stat -c %s "$tmpdir/disk1.img")
(( oreads > 0 && obytes >= disk1_size )) ||
  fail "front2: export 'other' read $obytes bytes uncached, not counted as $disk1_size"
(( sreads == 0 && preads == 0 )) ||
  fail "front2: uncached reads counted for another reason ($sreads, $preads)"
read -r oreads <<<"$(file_stat "$tmpdir/front1.json" uncached_reads_other_export)"
(( oreads == 0 )) || fail "front1: $oreads reads of the default export counted as uncached"

info "ok"
