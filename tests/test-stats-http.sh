#!/usr/bin/env bash
# ra-cache-stats-listen (issue 27): the counters over HTTP.  GET /metrics
# is the Prometheus text the stats socket gives for "prometheus", GET
# /stats the JSON; HEAD, 404, 405, 400 and 431 answers, each with
# Content-Length and Connection: close; a client that stalls half way
# through its request is closed at the timeout without holding up
# others; 1000 connections at once neither crash nor stall the server,
# and NBD reads go on; a port in use, a bad port or address stop nbdkit
# before it forks, with the reason.  promtool, when installed, checks
# the /metrics body.

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

requires curl python3

port=$(free_port)
start_server mem -v --filter="$FILTER" memory 64M \
  ra-cache-stats-listen=127.0.0.1:"$port" \
  ra-cache-stats-socket="$tmpdir/mem-stats.sock"
url=http://127.0.0.1:$port

# 8M sequentially: readahead, hits, counters that are not all zero.
nbdsh_t -u "$(uri mem)" -c '
for i in range (64):
    h.pread (128 * 1024, i * 128 * 1024)
'

# get PATH [CURL-ARGS...]: the status, headers to $tmpdir/headers, body
# to $tmpdir/body.
get ()
{
  local path=$1; shift
  timeout 30 curl -sS --max-time 10 -o "$tmpdir/body" -D "$tmpdir/headers" \
    -w '%{http_code}' "$@" "$url$path"
}

header ()
{
  grep -i "^$1:" "$tmpdir/headers" | head -n 1 | cut -d: -f2- | tr -d '\r' |
    sed 's/^ *//'
}

# --- GET /metrics: the Prometheus text, as the Unix socket gives it -------
status=$(get /metrics) || fail "GET /metrics failed"
[ "$status" = 200 ] || fail "GET /metrics: status $status"
[ "$(header Content-Type)" = "text/plain; version=0.0.4; charset=utf-8" ] ||
  fail "GET /metrics: Content-Type '$(header Content-Type)'"
[ "$(header Connection)" = close ] || fail "GET /metrics: no Connection: close"
[ "$(header Content-Length)" = "$(stat_size "$tmpdir/body")" ] ||
  fail "GET /metrics: Content-Length $(header Content-Length), body $(stat_size "$tmpdir/body") bytes"
grep -q '^ra_cache_client_bytes_total 8388608$' "$tmpdir/body" ||
  fail "GET /metrics: no ra_cache_client_bytes_total 8388608"
grep -q '^# TYPE ra_cache_' "$tmpdir/body" || fail "GET /metrics: no # TYPE lines"
cp "$tmpdir/body" "$tmpdir/metrics.txt"
# The same series, in the same order, as "prometheus" on the Unix socket
# (the values of gauges such as uptime move between the two).
timeout 10 python3 - "$tmpdir/mem-stats.sock" > "$tmpdir/unix.txt" <<'PY'
import socket, sys
s = socket.socket (socket.AF_UNIX); s.settimeout (10); s.connect (sys.argv[1])
s.sendall (b"prometheus\n")
d = b""
while True:
    b = s.recv (65536)
    if not b: break
    d += b
sys.stdout.write (d.decode ())
PY
diff <(sed 's/ [^ ]*$//' "$tmpdir/unix.txt") \
     <(sed 's/ [^ ]*$//' "$tmpdir/metrics.txt") ||
  fail "/metrics and the Unix socket's \"prometheus\" differ in their series"
info "GET /metrics: 200, $(stat_size "$tmpdir/metrics.txt") bytes, the Unix socket's series"

# --- GET /stats: the JSON --------------------------------------------------
status=$(get /stats) || fail "GET /stats failed"
[ "$status" = 200 ] || fail "GET /stats: status $status"
[ "$(header Content-Type)" = application/json ] ||
  fail "GET /stats: Content-Type '$(header Content-Type)'"
[ "$(header Content-Length)" = "$(stat_size "$tmpdir/body")" ] ||
  fail "GET /stats: Content-Length does not match the body"
/usr/bin/python3 -m json.tool "$tmpdir/body" >/dev/null ||
  fail "GET /stats: not JSON"
[ "$(file_stat "$tmpdir/body" client_bytes)" = 8388608 ] ||
  fail "GET /stats: client_bytes is not 8388608"
# A query string is not part of the path.
[ "$(get '/stats?x=1')" = 200 ] || fail "GET /stats?x=1 is not 200"
info "GET /stats: 200, valid JSON"

# --- HEAD, 404, 405 --------------------------------------------------------
# (HEAD's empty body: in raw.py below.)
status=$(get /metrics -I) || fail "HEAD /metrics failed"
[ "$status" = 200 ] || fail "HEAD /metrics: status $status"
[ "$(header Content-Length)" -gt 1000 ] ||
  fail "HEAD /metrics: Content-Length $(header Content-Length)"
status=$(get /nope) || fail "GET /nope failed"
[ "$status" = 404 ] || fail "GET /nope: status $status, not 404"
[ "$(header Connection)" = close ] || fail "404: no Connection: close"
status=$(get /metrics -X POST -d x=1) || fail "POST /metrics failed"
[ "$status" = 405 ] || fail "POST /metrics: status $status, not 405"
[ "$(header Allow)" = "GET, HEAD" ] || fail "405 without Allow: GET, HEAD"
info "HEAD 200, /nope 404, POST 405"

# --- raw requests: 400 and 431, a slow client, 1000 connections --------
# Everything runs against the server under test; each socket has a
# timeout, and the whole script CLIENT_TIMEOUT.
cat > "$tmpdir/raw.py" <<'PY'
import os, resource, socket, subprocess, sys, time
port, uri = int (sys.argv[1]), sys.argv[2]
addr = ("127.0.0.1", port)

def fail (msg):
    print ("FAIL: " + msg)
    sys.exit (1)

def ask (data, wait=10):
    s = socket.create_connection (addr, timeout=wait)
    s.sendall (data)
    d = b""
    while True:
        b = s.recv (65536)
        if not b:
            break
        d += b
    s.close ()
    return d

def status (answer):
    return answer.split (b"\r\n", 1)[0].decode (errors="replace")

# GET /metrics: the status line, or "reset" (the server closed the
# connection at once, unread: beyond its connections), within some
# seconds.
def metrics_answers (within):
    t = time.monotonic ()
    try:
        st = status (ask (b"GET /metrics HTTP/1.0\r\n\r\n"))
    except ConnectionResetError:
        st = "reset"
    took = time.monotonic () - t
    if took > within:
        fail ("/metrics took %.2f s" % took)
    return st, took

def nbd_read ():
    subprocess.run (["timeout", "60", "nbdsh", "-u", uri, "-c",
                     "assert len (h.pread (1 << 20, 16 << 20)) == 1 << 20"],
                    check=True)

# Malformed: 400 with Content-Length and Connection: close.
for bad in (b"garbage\r\n\r\n", b"GET /metrics\r\n\r\n",
            b"GET /metrics HTTP/2.0\r\n\r\n", b"GET  /metrics HTTP/1.1\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nHost: x\r\n continued\r\n\r\n",
            b"\x00\x01\x02\r\n\r\n"):
    a = ask (bad)
    if status (a) != "HTTP/1.1 400 Bad Request" or b"\r\nContent-Length: 16\r\n" not in a \
       or b"\r\nConnection: close\r\n" not in a:
        fail ("%r: %r" % (bad, a))
# HEAD: the head of GET's answer, and nothing after it.
a = ask (b"HEAD /metrics HTTP/1.0\r\n\r\n")
if status (a) != "HTTP/1.1 200 OK" or not a.endswith (b"\r\n\r\n") \
   or b"\r\nContent-Length: " not in a:
    fail ("HEAD /metrics: %r" % a[:300])
a = ask (b"HEAD /nope HTTP/1.0\r\n\r\n")
if status (a) != "HTTP/1.1 404 Not Found" or not a.endswith (b"\r\n\r\n"):
    fail ("HEAD /nope: %r" % a[:300])
# A head over 4 KiB: 431.
a = ask (b"GET /metrics HTTP/1.1\r\nX-Long: " + b"x" * 5000 + b"\r\n\r\n")
if not status (a).startswith ("HTTP/1.1 431 "):
    fail ("a 5 KB head: %r" % a[:100])
# Bare LF line ends, and a request line then end-of-file, are answered.
if status (ask (b"GET /metrics HTTP/1.0\n\n")) != "HTTP/1.1 200 OK":
    fail ("LF line ends not answered")
s = socket.create_connection (addr, timeout=10)
s.sendall (b"GET /stats HTTP/1.0\r\n")
s.shutdown (socket.SHUT_WR)
if not s.recv (100).startswith (b"HTTP/1.1 200 OK"):
    fail ("a request line then end-of-file not answered")
s.close ()
print ("400 for 7 malformed requests, 431 for a 5 KB head, HEAD without a body")

# A slow client: half a request, then nothing.  Others are answered at
# once meanwhile; the server closes it at its timeout (5 s).
slow = socket.create_connection (addr, timeout=30)
slow.sendall (b"GET /metr")
t0 = time.monotonic ()
for i in range (3):
    st, took = metrics_answers (2.0)
    if st != "HTTP/1.1 200 OK":
        fail ("with a slow client: %s" % st)
    time.sleep (0.5)
try:
    d = slow.recv (100)
except ConnectionResetError:
    d = b""
closed = time.monotonic () - t0
if d != b"":
    fail ("the slow client got %r" % d)
if not 3 <= closed <= 10:
    fail ("the slow client was closed after %.1f s, not about 5" % closed)
slow.close ()
print ("slow client: closed after %.1f s; /metrics answered meanwhile" % closed)

# 1000 connections at once: first silent ones, held open.
soft, hard = resource.getrlimit (resource.RLIMIT_NOFILE)
if soft < 1100:
    resource.setrlimit (resource.RLIMIT_NOFILE, (min (hard, 4096), hard))
conns = []
t = time.monotonic ()
for i in range (1000):
    conns.append (socket.create_connection (addr, timeout=10))
print ("1000 silent connections open in %.2f s" % (time.monotonic () - t))
# The server is not stalled: a new request gets an answer at once (503,
# or a reset when the request arrives after the server has closed,
# while the slots are taken), and NBD reads go on.
st, took = metrics_answers (2.0)
if st not in ("HTTP/1.1 200 OK", "HTTP/1.1 503 Service Unavailable", "reset"):
    fail ("with 1000 connections open: %s" % st)
print ("with 1000 connections open: /metrics %r in %.3f s" % (st, took))
nbd_read ()
for s in conns:
    s.close ()
time.sleep (0.5)
st, took = metrics_answers (2.0)
if st != "HTTP/1.1 200 OK":
    fail ("after the 1000 closed: %s" % st)

# 1000 requests at once: each ends in an answer (200 or 503) or a
# reset, none hangs.
conns = []
for i in range (1000):
    s = socket.create_connection (addr, timeout=10)
    try:
        s.sendall (b"GET /metrics HTTP/1.0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    conns.append (s)
count = {}
for s in conns:
    d = b""
    try:
        while True:
            b = s.recv (65536)
            if not b:
                break
            d += b
        what = status (d) if d else "closed"
    except ConnectionResetError:
        what = "reset"
    except socket.timeout:
        fail ("a connection of the 1000 hung")
    if what == "HTTP/1.1 200 OK":
        head, body = d.split (b"\r\n\r\n", 1)
        if ("\r\nContent-Length: %d\r\n" % len (body)).encode () not in head + b"\r\n":
            fail ("a 200 of the 1000 was cut short")
    count[what] = count.get (what, 0) + 1
    s.close ()
print ("1000 requests at once: %s" % count)
if count.get ("HTTP/1.1 200 OK", 0) < 1:
    fail ("none of the 1000 requests got 200")
st, took = metrics_answers (2.0)
if st != "HTTP/1.1 200 OK":
    fail ("after 1000 requests: %s" % st)
nbd_read ()
print ("after them: /metrics 200 in %.3f s, NBD reads work" % took)
PY
timeout "$CLIENT_TIMEOUT" python3 "$tmpdir/raw.py" "$port" "$(uri mem)" ||
  fail "raw HTTP requests (above)"
kill -0 "$(server_pid mem)" || fail "the server died"

# --- promtool --------------------------------------------------------------
if command -v promtool >/dev/null 2>&1; then
  # 0: clean; 3: lint findings (names not in base units, ...);
  # anything else: the body does not parse.  Both are failures.
  r=0
  timeout 30 promtool check metrics < "$tmpdir/metrics.txt" \
    > "$tmpdir/promtool.out" 2>&1 || r=$?
  [ "$r" -eq 0 ] ||
    { cat "$tmpdir/promtool.out"
      fail "promtool check metrics reported problems (status $r)"; }
  info "promtool check metrics: no problems"
else
  info "promtool is not installed (Debian package prometheus): not checking /metrics with it"
fi

# --- errors at start --------------------------------------------------------
daemon_fails inuse "ra-cache-stats-listen: 127\.0\.0\.1:$port: Address already in use" \
  ra-cache-stats-listen=127.0.0.1:"$port"
daemon_fails inuse2 "ra-cache-stats-listen: 127\.0\.0\.1:$port: Address already in use" \
  ra-cache-stats-listen="$port"
# Bound before the port failed, the stats socket is removed again.
daemon_fails inuse3 "ra-cache-stats-listen: 127\.0\.0\.1:$port: Address already in use" \
  ra-cache-stats-socket="$tmpdir/inuse3-stats.sock" ra-cache-stats-listen="$port"
[ ! -e "$tmpdir/inuse3-stats.sock" ] ||
  fail "the stats socket was left behind when the port was in use"
daemon_fails port0 "ra-cache-stats-listen: '0': the port '0' is not a number from 1 to 65535" \
  ra-cache-stats-listen=0
daemon_fails portbig "the port '65536' is not a number from 1 to 65535" \
  ra-cache-stats-listen=127.0.0.1:65536
daemon_fails portnan "the port 'http' is not a number from 1 to 65535" \
  ra-cache-stats-listen=127.0.0.1:http
daemon_fails noport "the port '' is not a number" ra-cache-stats-listen=127.0.0.1:
daemon_fails noaddr "no address before the port" ra-cache-stats-listen=:9100
daemon_fails v6bare "an IPv6 address goes in brackets" ra-cache-stats-listen=::1:9100
daemon_fails badaddr "ra-cache-stats-listen: 300\.1\.1\.1:9100: '300\.1\.1\.1' is not an address" \
  ra-cache-stats-listen=300.1.1.1:9100
daemon_fails badv6 "ra-cache-stats-listen: \[::g\]:9100: '::g' is not an address" \
  ra-cache-stats-listen='[::g]:9100'

daemon_fails notmine "ra-cache-stats-listen: 192\.0\.2\.1:9100: Cannot assign requested address" \
  ra-cache-stats-listen=192.0.2.1:9100
# In the configuration file: the key, and a bad value at its line.
printf 'ra-cache-stats-listen = "127.0.0.1:0";\n' > "$tmpdir/bad.conf"
daemon_fails conf "bad.conf:1: ra-cache-stats-listen: '127.0.0.1:0': the port" \
  ra-cache-config="$tmpdir/bad.conf"
port2=$(free_port)
printf 'ra-cache-stats-listen = "localhost:%s";\n' "$port2" > "$tmpdir/good.conf"
start_server conf --filter="$FILTER" memory 64M ra-cache-config="$tmpdir/good.conf"
[ "$(timeout 30 curl -sS --max-time 10 -o /dev/null -w '%{http_code}' \
      "http://localhost:$port2/metrics")" = 200 ] ||
  fail "ra-cache-stats-listen from the configuration file: no 200"
info "the key in a configuration file: localhost:$port2 serves /metrics"

# The server under test still serves, and stops cleanly (stop_server
# checks its exit status).
[ "$(get /metrics)" = 200 ] || fail "GET /metrics at the end"
stop_server conf
stop_server mem
info "ok"
