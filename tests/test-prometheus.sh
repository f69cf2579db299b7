#!/usr/bin/env bash
# ra-cache-stats-listen (issue 27) against a real Prometheus: it scrapes
# the filter's /metrics every second, its target comes up (up == 1) and
# the ra_cache series are stored.  Skipped when prometheus is not
# installed (Debian package prometheus).

. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"

requires prometheus curl python3

port=$(free_port)
start_server mem --filter="$FILTER" memory 64M \
  ra-cache-stats-listen=127.0.0.1:"$port"
nbdsh_t -u "$(uri mem)" -c 'h.pread (1 << 20, 0)'

prom_port=$(free_port)
mkdir "$tmpdir/tsdb"
cat > "$tmpdir/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: ra-cache
    static_configs:
      - targets: ['127.0.0.1:$port']
EOF
prometheus --config.file="$tmpdir/prometheus.yml" \
  --storage.tsdb.path="$tmpdir/tsdb" \
  --web.listen-address=127.0.0.1:"$prom_port" \
  </dev/null >"$tmpdir/prometheus.log" 2>&1 &
prom_pid=$!
at_cleanup "kill $prom_pid 2>/dev/null; wait $prom_pid 2>/dev/null"

# query PROMQL: the result vector of an instant query, as JSON.
query ()
{
  timeout 10 curl -sS --max-time 5 -G \
    --data-urlencode "query=$1" "http://127.0.0.1:$prom_port/api/v1/query"
}

# The target up, and a ra_cache series stored: up to 45 s (Prometheus
# starts, then scrapes every second).
ok=
for ((i = 0; i < 450; i++)); do
  kill -0 "$prom_pid" 2>/dev/null || {
    cat "$tmpdir/prometheus.log"
    fail "prometheus exited"
  }
  up=$(query "up{job=\"ra-cache\"}" 2>/dev/null) || up=
  bytes=$(query 'ra_cache_client_bytes_total' 2>/dev/null) || bytes=
  if python3 - "$up" "$bytes" <<'PY'
import json, sys
try:
    up, b = (json.loads (a)["data"]["result"] for a in sys.argv[1:3])
except Exception:
    sys.exit (1)
sys.exit (0 if up and up[0]["value"][1] == "1" and b and
          b[0]["value"][1] == str (1 << 20) else 1)
PY
  then
    ok=1
    break
  fi
  sleep 0.1
done
if [ -z "$ok" ]; then
  echo "up: $up"; echo "ra_cache_client_bytes_total: $bytes"
  tail -n 20 "$tmpdir/prometheus.log"
  fail "prometheus did not scrape the filter within 45 s"
fi
info "prometheus scraped the filter after $((i / 10)).$((i % 10)) s: up == 1, ra_cache_client_bytes_total == 1048576"
# What Prometheus thinks of the scrape: no errors.
targets=$(timeout 10 curl -sS --max-time 5 \
  "http://127.0.0.1:$prom_port/api/v1/targets") || fail "no /api/v1/targets"
python3 - "$targets" <<'PY' || fail "the target reports a scrape error"
import json, sys
t = json.loads (sys.argv[1])["data"]["activeTargets"][0]
print ("target %s: health %s, lastError %r, lastScrapeDuration %s s"
       % (t["scrapeUrl"], t["health"], t["lastError"], t["lastScrapeDuration"]))
sys.exit (0 if t["health"] == "up" and not t["lastError"] else 1)
PY
info "ok"
