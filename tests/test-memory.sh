#!/usr/bin/env bash
# ra-cache: memory stays bounded by ra-cache-size.
#
# A backend serves nbdkit's pattern plugin (1G); a front reads it through
# the nbd plugin, once without the filter (the baseline) and once with
# ra-cache-size=32M.  The same client load runs against each: 512M read
# sequentially in 256K requests by two connections (one from offset 0,
# one from 512M), then 4000 random reads of 4K..128K over the whole
# export, on two connections with requests in flight (nbd aio), every
# reply checked against the pattern.  That is 16 times the cache.
#
# The peak resident size of the front nbdkit (VmHWM in /proc/PID/status,
# read while it still runs; VmRSS is also sampled every 0.2 s) must stay
# under
#     baseline VmHWM + 1.5 x ra-cache-size + 64M
# (the cache's pages, plus generous room for page bookkeeping, in-flight
# backend buffers and malloc's slack), and the filter's own "cache
# bytes" counter must not exceed ra-cache-size.  The figures are printed.
#
# Meaningless under ASan/TSan (shadow memory, quarantine): skipped in a
# sanitizer build.

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

[ -z "${RA_CACHE_SANITIZERS:-}" ] ||
  skip "resident size under -fsanitize=$RA_CACHE_SANITIZERS says nothing about the filter"
grep -q '^VmHWM:' /proc/self/status 2>/dev/null ||
  skip "no VmHWM in /proc/PID/status"

cache_mb=32
cache=$((cache_mb * 1024 * 1024))

# kB of FIELD (VmHWM, VmRSS) of process PID.
vm_kb ()
{
  awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"
}

# Sample VmRSS of PID every 0.2 s into FILE (the largest seen), until
# killed.
sample_rss ()
{
  local pid=$1 out=$2 max=0 v
  while kill -0 "$pid" 2>/dev/null; do
    v=$(vm_kb "$pid" VmRSS 2>/dev/null) || break
    [ -n "$v" ] && [ "$v" -gt "$max" ] && { max=$v; echo "$max" > "$out"; }
    sleep 0.2
  done
}

cat > "$tmpdir/load.py" <<'EOF'
import os, random, struct

uri = os.environ["URI"]
MiB = 1024 * 1024

def check (buf, off):
    # The pattern plugin: each 8-byte aligned word is its offset, big-endian.
    first = (off + 7) & ~7
    for o in range (first, off + len (buf) - 7, 4096):
        got = struct.unpack_from (">Q", buf, o - off)[0]
        assert got == o, "offset %d: read %d" % (o, got)

hs = [nbd.NBD (), nbd.NBD ()]
for h in hs:
    h.connect_uri (uri)
size = hs[0].get_size ()
assert size >= 1024 * MiB, size

# Sequential: 2 x 256M, interleaved request by request.
chunk = 256 * 1024
for i in range (256 * MiB // chunk):
    for k, h in enumerate (hs):
        off = k * 512 * MiB + i * chunk
        check (h.pread (chunk, off), off)

# Random: 4000 reads, 8 in flight per connection.
rng = random.Random (1)
for h in hs:
    pending = []
    for i in range (2000):
        count = rng.choice ((4096, 16384, 65536, 131072))
        off = rng.randrange (0, size - count)
        buf = nbd.Buffer (count)
        cookie = h.aio_pread (buf, off)
        pending.append ((cookie, buf, off))
        while len (pending) >= 8 or (i == 1999 and pending):
            done = [p for p in pending if h.aio_command_completed (p[0])]
            if not done:
                h.poll (-1)
            for p in done:
                check (p[1].to_bytearray (), p[2])
                pending.remove (p)
for h in hs:
    h.shutdown ()
EOF

# measure NAME: run the load against server NAME; sets hwm and rss_max
# (kB) from the running server, then stops it.
measure ()
{
  local name=$1 pid sampler
  pid=$(server_pid "$name")
  sample_rss "$pid" "$tmpdir/$name.rss" &
  sampler=$!
  run_py "$tmpdir/load.py" URI="$(uri "$name")" ||
    fail "the client load through server $name failed"
  hwm=$(vm_kb "$pid" VmHWM)
  kill "$sampler" 2>/dev/null || true
  wait "$sampler" 2>/dev/null || true
  rss_max=$(cat "$tmpdir/$name.rss" 2>/dev/null || echo 0)
  [ -n "$hwm" ] || fail "no VmHWM for server $name (pid $pid)"
  stop_server "$name" || fail "server $name did not stop cleanly"
}

start_server back pattern 1G

start_server base nbd socket="$(sock back)"
measure base
base_hwm=$hwm base_rss=$rss_max

start_front front back ra-cache-size=${cache_mb}M
measure front
front_hwm=$hwm front_rss=$rss_max

bound=$((base_hwm + (3 * cache / 2 + 64 * 1024 * 1024) / 1024))
read -r cache_bytes evictions backend_bytes <<<"$(ra_stat front cache_bytes evictions backend_bytes)"

info "read through each front: 512M sequential + 4000 random reads (4K..128K) of a 1G export"
info "front without the filter:    VmHWM $((base_hwm / 1024)) MiB (sampled VmRSS max $((base_rss / 1024)) MiB)"
info "front with ra-cache-size=${cache_mb}M: VmHWM $((front_hwm / 1024)) MiB (sampled VmRSS max $((front_rss / 1024)) MiB)"
info "growth over the baseline: $(((front_hwm - base_hwm) / 1024)) MiB; bound: baseline + 1.5 x ${cache_mb}M + 64M = $((bound / 1024)) MiB"
info "filter: cache bytes at exit $cache_bytes, evictions $evictions, backend bytes $backend_bytes"

[ -n "$cache_bytes" ] && [ "$cache_bytes" -le "$cache" ] ||
  fail "cache bytes $cache_bytes exceeds ra-cache-size ($cache)"
[ -n "$evictions" ] && [ "$evictions" -gt 0 ] ||
  fail "no evictions: the load did not fill the cache"
[ "$front_hwm" -le "$bound" ] ||
  fail "peak RSS $((front_hwm / 1024)) MiB exceeds the bound $((bound / 1024)) MiB"
info "PASS"
