#!/usr/bin/env bash
# ra-cache: the stats socket's formats (issue 15).  A plain reader (sends
# nothing) still gets the same JSON document; "prometheus\n" gets the
# Prometheus text format with the same values; silent clients do not
# hold up others; ra-cache-stat prints plausible rows and clear errors.

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

requires nbdsh python3 timeout

STAT=$top_builddir/ra-cache-stat
[ -x "$STAT" ] || fail "ra-cache-stat is not built: $STAT"

start_server back pattern 64M
start_front front back ra-cache-stats-socket="$tmpdir/front-stats.sock"
S=$tmpdir/front-stats.sock

# 16M sequentially: readahead and hits.
nbdsh_t -u "$(uri front)" -c '
for i in range (128):
    h.pread (128 * 1024, i * 128 * 1024)
'

cat > "$tmpdir/formats.py" <<'PY'
import json, re, socket, sys, time
path = sys.argv[1]

def ask (request, shut=True):
    s = socket.socket (socket.AF_UNIX)
    s.settimeout (10)
    s.connect (path)
    if request is not None:
        s.sendall (request)
        if shut:
            s.shutdown (socket.SHUT_WR)
    data = b""
    while True:
        b = s.recv (65536)
        if not b:
            break
        data += b
    s.close ()
    return data.decode ()

def fail (msg):
    print ("FAIL: " + msg)
    sys.exit (1)

# The keys of schema 1, in order: a plain reader sees them unchanged.
# (A new key needs no change here: the JSON and Prometheus checks below
# cover every key of the document.)
KEYS = """version schema uptime_seconds page_size hit_ratio
backend_bytes_per_client_byte readahead_wasted_ratio ra_mode client_reads
client_bytes page_hits page_misses page_waits windows sync_pages
async_pages ahead_used_pages ahead_wasted_pages async_skipped
async_skipped_pages async_delayed async_promoted inflight_now
inflight_high_water backend_reads backend_bytes backend_errors
backend_reads_in_place direct_reads evictions invalidated_pages
cache_bytes backend_connections backend_connection_opens
backend_connection_failures backend_connections_lost backend_reconnects
backend_connections_late cache_pages cache_pages_inflight
cache_pages_unused cache_capacity_pages cache_memory_bytes memory_other_bytes markers_now
adapt_late adapt_early_triggers adapt_waste_events adapt_last_cap_bytes
backend_latency_us backend_page_us backend_slots backend_queue_delay_us
backend_base_latency_us backend_bdp_bytes async_held async_covered
windows_yielded""".split ()

def without_uptime (d):
    return {k: v for k, v in d.items () if k != "uptime_seconds"}

# 1. A plain reader (today's clients) gets JSON, within the short wait.
t = time.monotonic ()
plain = ask (None)
took = time.monotonic () - t
d = json.loads (plain)
# Keys are only ever added within a schema: every key of schema 1, in
# this order, with any newer ones among them.
keys = list (d.keys ())
if [k for k in keys if k in KEYS] != KEYS or len (set (keys)) != len (keys):
    fail ("the JSON keys of schema 1 changed: %s" % keys)
if not plain.startswith ("{\n  \"version\": ") or not plain.endswith ("}\n"):
    fail ("the JSON layout changed")
if took > 2:
    fail ("a plain reader waited %.2f s" % took)
if d["client_bytes"] != 16 << 20 or d["page_hits"] == 0:
    fail ("implausible counters: %s" % d)
print ("plain reader: JSON in %.3f s" % took)
# "json\n" gets the same document at once.
t = time.monotonic ()
if without_uptime (json.loads (ask (b"json\n", shut=False))) != without_uptime (d):
    fail ("\"json\" gave another document")
print ("json request: %.3f s" % (time.monotonic () - t))

# 2. Prometheus: same values.  Retry while the counters move.
for attempt in range (10):
    j1 = json.loads (ask (b"json\n"))
    prom = ask (b"prometheus\n", shut=False)
    j2 = json.loads (ask (b"json\n"))
    if without_uptime (j1) == without_uptime (j2):
        break
    time.sleep (0.2)
else:
    fail ("the counters never settled")
line_re = re.compile (r'^(ra_cache_[a-z0-9_]+)(\{([a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*)\})? (\S+)$')
# A metric whose name is not ra_cache_KEY says its JSON key in its HELP
# line: "(JSON: KEY.)", or "(JSON: KEY, in pages)" / "in microseconds"
# when Prometheus has it in bytes / seconds.
help_re = re.compile (r'\(JSON: ([a-z0-9_]+)(, in (pages|microseconds))?')
types, seen, helps, json_key = {}, {}, set (), {}
hist = {}
for line in prom.splitlines ():
    if line.startswith ("# HELP "):
        name = line.split ()[2]
        helps.add (name)
        m = help_re.search (line)
        if m:
            json_key[name] = (m.group (1), m.group (3))
        continue
    if line.startswith ("# TYPE "):
        _, _, name, typ = line.split ()
        if typ not in ("counter", "gauge", "histogram") or name in types:
            fail ("bad TYPE line: " + line)
        types[name] = typ
        continue
    m = line_re.match (line)
    if not m:
        fail ("not name{labels} value: %r" % line)
    name, labels, value = m.group (1), m.group (3), float (m.group (5))
    labels = dict (kv.split ("=", 1) for kv in labels.split (",")) if labels else {}
    labels = {k: v.strip ('"') for k, v in labels.items ()}
    base = re.sub (r'_(bucket|sum|count)$', '', name)
    if types.get (base) == "histogram":
        if base not in helps:
            fail ("no # HELP before " + name)
        h = hist.setdefault (base[len ("ra_cache_"):], {"le": []})
        if name.endswith ("_bucket"):
            h["le"].append ((labels["le"], value))
        else:
            h[name[len (base) + 1:]] = value
        continue
    if name not in types or name not in helps:
        fail ("no # TYPE/# HELP before " + name)
    if name == "ra_cache_info":
        want = {"version": j1["version"], "schema": str (j1["schema"]),
                "ra_mode": j1["ra_mode"]}
        if labels != want or value != 1:
            fail ("ra_cache_info: %s %s" % (labels, value))
        seen.update (version=1, schema=1, ra_mode=1)
        continue
    key = name[len ("ra_cache_"):]
    if types[name] == "counter":
        if not key.endswith ("_total"):
            fail ("counter without _total: " + name)
        key = key[:-len ("_total")]
    unit = None
    if name in json_key:
        key, unit = json_key[name]
    if key == "windows":
        want = j1["windows"][labels["branch"]]
        if not labels.get ("name"):
            fail ("no branch name label: " + line)
        seen.setdefault ("windows", set ()).add (labels["branch"])
    else:
        if key not in j1 or labels:
            fail ("no JSON key for " + line)
        want = j1[key]
        seen[key] = 1
    if unit == "pages":
        want = want * j1["page_size"]
    if key == "uptime_seconds":
        if not (j1[key] <= value <= j2[key]):
            fail ("uptime %s not between %s and %s" % (value, j1[key], j2[key]))
    elif unit == "microseconds":
        # The JSON rounds to 1 or 3 decimals of a microsecond.
        if abs (want / 1e6 - value) > 1e-9 * 1000:
            fail ("%s: Prometheus %s, JSON %s us" % (line, value, want))
    elif float (want) != value:
        fail ("%s: Prometheus %s, JSON %s" % (line, value, want))
# The histograms: the JSON's cumulative counts, per bound.
for key, h in hist.items ():
    if key not in j1:
        fail ("no JSON key for the histogram " + key)
    j = j1[key]
    les = [le for le, _ in h["le"]]
    want_les = ["%g" % x for x in j["le"]] + ["+Inf"]
    if les != want_les or [v for _, v in h["le"]] != [float (x) for x in j["cumulative"]]:
        fail ("histogram %s: Prometheus %s, JSON %s" % (key, h["le"], j))
    if h.get ("count") != j["count"] or abs (h.get ("sum", -1) - j["sum"]) > 1e-5:
        fail ("histogram %s: count/sum differ" % key)
    seen[key] = 1
if hist.get ("client_read_seconds", {}).get ("count", 0) < 128:
    fail ("client_read_seconds counted %s reads, not the 128 made" % hist.get ("client_read_seconds"))
if set (seen) != set (j1) or seen["windows"] != set (j1["windows"]):
    fail ("Prometheus lacks %s" % (set (j1) - set (seen)))
for name, typ in types.items ():
    if typ == "counter" and not name.endswith ("_total"):
        fail (name)
    if re.search (r'(_us|_now)$|cache_cache', name):
        fail ("not in base units, or a word twice: " + name)
print ("prometheus: %d metrics, values equal to the JSON's" % len (types))

# A request without a newline, then end-of-file, works too.
if not ask (b"prometheus").startswith ("# HELP ra_cache_"):
    fail ("\"prometheus\" then EOF did not get Prometheus")

# 3. Silent clients do not hold up others.
silent = []
for i in range (8):
    s = socket.socket (socket.AF_UNIX)
    s.connect (path)
    silent.append (s)
t = time.monotonic ()
ask (b"prometheus\n", shut=False)
took = time.monotonic () - t
if took > 0.5:
    fail ("8 silent clients held up a request for %.2f s" % took)
for s in silent:
    s.settimeout (10)
    data = b""
    while True:
        b = s.recv (65536)
        if not b:
            break
        data += b
    json.loads (data)
    s.close ()
print ("8 silent clients: a request answered in %.3f s, each got JSON" % took)
PY
timeout "$CLIENT_TIMEOUT" python3 "$tmpdir/formats.py" "$S" ||
  fail "the stats formats are wrong (above)"

# --- ra-cache-stat --------------------------------------------------------
out=$(timeout 30 "$STAT" "$S" 1 2) || fail "ra-cache-stat $S 1 2 failed"
echo "$out"
[ "$(wc -l <<<"$out")" -eq 4 ] || fail "ra-cache-stat 1 2: not 2 header and 2 rows"
rows=$(tail -n 2 <<<"$out")
read -r cmb bmb hit ahead wasted skipped infl mem < <(head -n 1 <<<"$rows")
python3 - "$cmb" "$bmb" "$hit" "$ahead" "$mem" <<'PY' || fail "implausible first row"
import sys
c, b, hit, ahead, mem = sys.argv[1:]
assert float (c) > 0 and float (b) > 0, "no MB/s"
assert 0 < float (hit) <= 100, "hit %"
assert int (ahead) > 0, "no readahead"
assert float (mem) > 0, "no cache memory"
PY
# The second row: an idle interval.
read -r cmb bmb hit ahead wasted skipped infl mem < <(tail -n 1 <<<"$rows")
[ "$cmb" = 0.00 ] && [ "$hit" = - ] && [ "$ahead" = 0 ] ||
  fail "ra-cache-stat: the idle interval is not idle: $(tail -n 1 <<<"$rows")"

[ "$(timeout 30 "$STAT" -1 "$S" 1 5 | wc -l)" -eq 3 ] ||
  fail "ra-cache-stat -1: not one row"
[ "$(timeout 30 "$STAT" "$S" | wc -l)" -eq 3 ] ||
  fail "ra-cache-stat SOCKET: not one row"

# A server that answers without reading the request (an older ra-cache,
# or one with many clients waiting): no SIGPIPE, no ECONNRESET failure.
timeout 10 python3 - "$S" > "$tmpdir/doc.json" <<'PY'
import socket, sys
s = socket.socket (socket.AF_UNIX); s.settimeout (10); s.connect (sys.argv[1])
d = b""
while True:
    b = s.recv (65536)
    if not b: break
    d += b
sys.stdout.write (d.decode ())
PY
timeout 30 python3 - "$tmpdir/old.sock" "$tmpdir/doc.json" <<'PY' &
import socket, sys, time
doc = open (sys.argv[2], "rb").read ()
l = socket.socket (socket.AF_UNIX); l.bind (sys.argv[1]); l.listen (8)
for i in range (3):
    c, _ = l.accept ()
    time.sleep (0.05)     # the request has arrived, unread
    c.sendall (doc); c.close ()
PY
oldpid=$!
for ((i = 0; i < 100; i++)); do [ -S "$tmpdir/old.sock" ] && break; sleep 0.1; done
out=$(timeout 30 "$STAT" "$tmpdir/old.sock" 0.1 3) ||
  fail "ra-cache-stat against a server that does not read failed"
[ "$(wc -l <<<"$out")" -eq 5 ] || fail "ra-cache-stat vs a non-reading server: $out"
wait "$oldpid" || fail "the fake server failed"

# Errors: exit 1 and a clear message.
expect_error ()
{
  local re=$1 out; shift
  if out=$(timeout 30 "$STAT" "$@" 2>&1); then
    fail "ra-cache-stat $* succeeded"
  fi
  grep -q -- "$re" <<<"$out" || fail "ra-cache-stat $*: '$out' lacks '$re'"
}
expect_error "no such socket" "$tmpdir/none.sock"
expect_error "missing SOCKET"
expect_error "INTERVAL 'x'" "$S" x
expect_error "INTERVAL '0'" "$S" 0
expect_error "COUNT '0'" "$S" 1 0
expect_error "too many arguments" "$S" 1 2 3
touch "$tmpdir/plain"
expect_error "connection refused\|Connection refused" "$tmpdir/plain"
"$STAT" --help | grep -q -- "--once" || fail "--help lacks --once"
info "ok"
