# ra-cache under injected faults: what the tests/test-faults-*.sh
# scripts share.  Source it after tests/functions.sh.  Every client runs
# under `timeout`; after each case the front must still be healthy: it
# answers a read with the right data, and once the load has stopped its
# live stats (ra-cache-stats-socket) settle to inflight_now == 0 (no
# backend read running or queued) and cache_pages_inflight == 0 (no
# placeholder page left that nothing will ever complete).  Where a case
# ends the front, it must exit within a bound of SIGTERM with status 0 or
# 143 and with no "Assertion" or "Segmentation" in its log.
#
# RA_CACHE_TEST_SEED picks the random choices (printed on each run).

requires cmp pgrep python3 nbdcopy
BENCH=$top_builddir/ra-bench
[ -x "$BENCH" ] || fail "ra-bench is not built: $BENCH"

seed=${RA_CACHE_TEST_SEED:-$RANDOM}
info "seed $seed"
RANDOM=$seed

# Clients still running when the test ends (it failed) are killed first:
# nbdkit does not exit on SIGTERM while an idle client stays connected.
client_pids=()
kill_tree ()
{
  local c
  for c in $(pgrep -P "$1" || true); do
    kill_tree "$c"
  done
  kill -KILL "$1" 2>/dev/null || true
}
kill_clients ()
{
  local p
  for p in "${client_pids[@]}"; do kill_tree "$p"; done
  return 0
}
at_cleanup kill_clients

# Every client command gets this long before it counts as a hang.
T=60
CLIENT_TIMEOUT=$T                       # run_py's
STALL=${STALL:-3}

# ---- helpers ---------------------------------------------------------------
# live_stat (tests/functions.sh) reads a running front's stats socket.

# settled NAME: wait (up to 15 s) until nothing is in flight in the
# front: no backend read running or queued, no page in flight.
settled ()
{
  local name=$1 i inflight pages
  for ((i = 0; i < 150; i++)); do
    v=$(live_stat "$name" inflight_now cache_pages_inflight)
    read -r inflight pages <<<"$v"
    [ "$inflight" = 0 ] && [ "$pages" = 0 ] && return 0
    sleep 0.1
  done
  fail "$name: still in flight 15 s after the load stopped:" \
       "inflight_now=$inflight cache_pages_inflight=$pages"
}

# healthy NAME SOURCE: the front answers reads with the right data
# (64 KiB at a few places, compared with SOURCE) and settles.
healthy ()
{
  local name=$1 src=$2
  timeout "$T" nbdsh -u "$(uri "$name")" -c "
with open ('$src', 'rb') as f:
    src = f.read ()
size = h.get_size ()
for off in (0, 4096 * 77 + 5, size // 2, size - 65536):
    assert h.pread (65536, off) == src[off:off + 65536], \
        'wrong data at %d' % off
" || fail "$name does not answer reads correctly any more"
  settled "$name"
}

# no_crash NAME: nothing in the server's log says it crashed.
no_crash ()
{
  if grep -E 'Assertion|Segmentation|double free|corrupted' \
       "$tmpdir/$1.log" >&2; then
    fail "$1: its log reports a crash"
  fi
}

# stop_clean NAME: SIGTERM, exit within 30 s, status 0 or 143 (from
# stop_server), nothing in the log.
stop_clean ()
{
  stop_server "$1" || fail "$1 did not stop cleanly"
  no_crash "$1"
}

# front NAME BACKEND [PARAMS...]: a ra-cache front with a stats socket.
front ()
{
  local name=$1 back=$2; shift 2
  start_front "$name" "$back" ra-cache-stats-socket="$tmpdir/$name-stats.sock" "$@"
}
