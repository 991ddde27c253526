#!/usr/bin/env bash
# Issue 4 comparison run (make compare). In one run, on free ports, it starts:
#   redis-server                      (throwaway, no persistence)
#   (a) legacy shop alone             seckill-bench shop --legacy on PostgreSQL (a fresh database, dropped after)
#   (b) seckill-proxy serve           in front of that same shop process
#   (c) seckill-bench bare            fixed 410 body: the machine's ceiling
#   (d) seckill-bench bare-redis      one EVALSHA per request: the architecture's ceiling
#   (e) nginx proxy_pass              to that same shop (worker_processes 2, keepalive upstream)
# and runs `seckill-bench compare` twice against all of them:
#   closed loop  (rate 0, fixed number of requests): peak answered/s  → throughput ratios
#   open loop    (the spike preset: ramp, hold, drop): latency at the same offered load
# then scripts/contended-bench.sh (issue 10, its own processes): the paths that reach Redis
# against their bare references — repeat buyer vs bare-redis --per-user, winner vs
# seckill-bench hop to the same shop, sold out vs bare, the 1000users preset's p99.9 —
# with Redis µs per script call, alternated, C_RUNS times.
# Tables, JSON and a ratio summary go to $OUT. Everything started here is stopped on exit.
#
# Knobs (environment): OUT, BIN, PG (admin DSN), STOCK,
#   CL_USERS CL_TRIES CL_CONC          closed loop (default 20000 users × 3 tries, 500 in flight)
#   RATE RAMP HOLD SPIKE_USERS SPIKE_CONC  open loop (default: spike preset, 5000/s, 3s ramp, 10s hold)
#   SHARDS (the activity's shards; default: the config default — 1 on a single Redis)
#   PAUSE (between targets), SKIP_CLOSED=1 / SKIP_SPIKE=1 / SKIP_CONTENDED=1
#   C_SECS C_CONNS C_RUNS              contended paths (default wrk -d5s -c64, 3 runs)
# Needs: redis-server, nginx, psql, python3, a PostgreSQL reachable with PG.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
OUT=${OUT:-bench-results}
PG=${PG:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
STOCK=${STOCK:-100}
CL_USERS=${CL_USERS:-20000} CL_TRIES=${CL_TRIES:-3} CL_CONC=${CL_CONC:-500}
RATE=${RATE:-5000} RAMP=${RAMP:-3s} HOLD=${HOLD:-10s} SPIKE_USERS=${SPIKE_USERS:-10000} SPIKE_CONC=${SPIKE_CONC:-500}
PAUSE=${PAUSE:-3s}
ACT=act_1001 SKU=30021
for c in redis-server nginx psql python3 "$BIN/seckill-bench" "$BIN/seckill-proxy"; do
  command -v "$c" >/dev/null || { echo "compare.sh: $c not found (make build; apt-get install -y nginx redis-server postgresql-client)" >&2; exit 2; }
done
mkdir -p "$OUT"
rm -f "$OUT"/compare-{closed,spike}.json "$OUT"/compare-contended.txt  # the summary reads only this run's files
tmp=$(mktemp -d)
db="seckill_bench_$$"
db_made=0
pids=()
cleanup() {
  set +e
  for ((i=${#pids[@]}-1; i>=0; i--)); do kill "${pids[i]}" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  if [ "$db_made" = 1 ]; then psql -q "$PG" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
. scripts/lib.sh  # the cd above made the repository root the working directory
died() { # what: show the logs, then exit (cleanup still stops everything)
  echo "compare.sh: $1" >&2
  for f in "$tmp"/*.log; do [ -s "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }; done
  exit 1
}
wait_http() { # url what
  for _ in $(seq 200); do curl -fs -o /dev/null "$1" && return 0; sleep 0.05; done
  died "$2 did not come up at $1"
}
wait_tcp() { # port what
  for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done
  died "$2 not listening on $1"
}
RP=$(port) SP=$(port) PP=$(port) AP=$(port) BP=$(port) BRP=$(port) NP=$(port)
export SECKILL_SIGNING_SECRET="compare-$$-$RANDOM" SECKILL_ADMIN_TOKEN="compare-admin-$$"

psql -q "$PG" -c "CREATE DATABASE $db" >/dev/null
db_made=1
shop_db="${PG%%\?*}"; shop_db="${shop_db%/*}/$db?sslmode=disable"

redis-server --port "$RP" --bind 127.0.0.1 --save "" --appendonly no --dir "$tmp" --logfile "$tmp/redis.log" &
pids+=($!)
# One shop process serves (a), (b) and (e): legacy mode sells from its stock row on every order, with or
# without a proxy token, so behind the proxy it is the same unmodified shop. compare resets it between runs.
"$BIN/seckill-bench" shop --legacy --stock "$ACT/$SKU=$STOCK" --listen "127.0.0.1:$SP" --db "$shop_db" \
  --log-format console 2>"$tmp/shop.log" &
pids+=($!)
"$BIN/seckill-bench" bare --listen "127.0.0.1:$BP" 2>"$tmp/bare.log" &
pids+=($!)

sale_window 86400
# Limits high enough never to refuse the bench's users: the table measures the cost of the path, not a 429.
{ proxy_head "$PP" "$AP" "$SP" "$RP"; cat <<YAML; } > "$tmp/proxy.yaml"
activities:
  - id: $ACT
    start: $start
    end: $end
    skus: [ { id: "$SKU", stock: $STOCK } ]${SHARDS:+
    shards: $SHARDS}
    admission_rate: { rate: 1000000, burst: 1000000 }
    verify: { url: "http://127.0.0.1:$SP/internal/orders?token={token}" }
YAML
cat >"$tmp/nginx.conf" <<NGINX
worker_processes 2;
pid $tmp/nginx.pid;
error_log $tmp/nginx-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $tmp/nginx-body;
  proxy_temp_path $tmp/nginx-proxy;
  fastcgi_temp_path $tmp/nginx-fastcgi;
  uwsgi_temp_path $tmp/nginx-uwsgi;
  scgi_temp_path $tmp/nginx-scgi;
  upstream shop { server 127.0.0.1:$SP; keepalive 256; }
  server {
    listen 127.0.0.1:$NP;
    location / {
      proxy_pass http://shop;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
    }
  }
}
NGINX
nginx -t -q -c "$tmp/nginx.conf" -g 'daemon off;' 2>"$tmp/nginx-t.log" || { cat "$tmp/nginx-t.log" >&2; exit 1; }
nginx -c "$tmp/nginx.conf" -g 'daemon off;' 2>>"$tmp/nginx-error.log" &
pids+=($!)

wait_tcp "$RP" redis-server
"$BIN/seckill-proxy" serve -c "$tmp/proxy.yaml" 2>"$tmp/proxy.log" &
pids+=($!)
wait_http "http://127.0.0.1:$SP/internal/summary?activity=$ACT" shop
wait_http "http://127.0.0.1:$PP/_seckill/time" seckill-proxy
wait_tcp "$BP" bare
wait_tcp "$NP" nginx
"$BIN/seckill-proxy" preheat -c "$tmp/proxy.yaml" --log-format console >"$tmp/preheat.log" 2>&1 || died "preheat failed"

# bare-redis sets its stock once at start: one fresh instance per comparison.
bare_redis_pid=
start_bare_redis() {
  if [ -n "$bare_redis_pid" ]; then kill "$bare_redis_pid" 2>/dev/null || true; wait "$bare_redis_pid" 2>/dev/null || true; fi
  "$BIN/seckill-bench" bare-redis --redis "127.0.0.1:$RP" --stock "$STOCK" --listen "127.0.0.1:$BRP" 2>"$tmp/bare-redis.log" &
  bare_redis_pid=$!
  pids+=($bare_redis_pid)
  wait_tcp "$BRP" bare-redis
}

common=(--activity "$ACT" --sku "$SKU" --xff --quiet --pause "$PAUSE"
  --legacy "http://127.0.0.1:$SP" --proxy "http://127.0.0.1:$PP" --nginx "http://127.0.0.1:$NP"
  --bare-redis "http://127.0.0.1:$BRP" --bare "http://127.0.0.1:$BP"
  --shop "http://127.0.0.1:$SP" --proxy-bin "$BIN/seckill-proxy" --proxy-config "$tmp/proxy.yaml")
stamp=$(date -u +%FT%TZ)
header() {
  echo "== machine: $(nproc) cores, $(uname -r), $stamp, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "== $(nginx -v 2>&1), $(redis-server --version | cut -d' ' -f1-3), PostgreSQL $(psql -At "$PG" -c 'show server_version')"
}
status=0
# In the background and waited for, so a signal reaches the traps at once (and cleanup stops it).
run_compare() { # kind flags...
  local kind=$1; shift
  "$BIN/seckill-bench" compare "${common[@]}" "$@" --json "$OUT/compare-$kind.json" \
    > >(tee -a "$OUT/compare-$kind.txt") 2> >(tee "$OUT/compare-$kind.log" >&2) &
  local p=$!
  pids+=("$p")
  wait "$p" || status=$?
}
if [ "${SKIP_CLOSED:-0}" != 1 ]; then
  start_bare_redis
  {
    header
    echo "== closed loop: seckill-bench compare --rate 0 --users $CL_USERS --tries $CL_TRIES --concurrency $CL_CONC (stock $STOCK)"
  } | tee "$OUT/compare-closed.txt"
  run_compare closed --rate 0 --ramp 0 --hold 0 --users "$CL_USERS" --tries "$CL_TRIES" --concurrency "$CL_CONC"
fi
if [ "${SKIP_SPIKE:-0}" != 1 ]; then
  start_bare_redis
  {
    header
    echo "== open loop: seckill-bench compare --preset spike --rate $RATE --ramp $RAMP --hold $HOLD --users $SPIKE_USERS --concurrency $SPIKE_CONC (stock $STOCK)"
  } | tee "$OUT/compare-spike.txt"
  run_compare spike --preset spike --rate "$RATE" --ramp "$RAMP" --hold "$HOLD" --users "$SPIKE_USERS" --concurrency "$SPIKE_CONC"
fi

if [ "${SKIP_CONTENDED:-0}" != 1 ]; then
  command -v wrk >/dev/null || { echo "compare.sh: wrk not found (apt-get install -y wrk); SKIP_CONTENDED=1 skips the contended rows" >&2; exit 2; }
  {
    header
    echo "== contended paths (issue 10): scripts/contended-bench.sh ${C_SECS:-5} ${C_CONNS:-64} ${C_RUNS:-3}"
  } | tee "$OUT/compare-contended.txt"
  BIN="$BIN" scripts/contended-bench.sh "${C_SECS:-5}" "${C_CONNS:-64}" "${C_RUNS:-3}" 2>"$OUT/compare-contended.log" \
    | tee -a "$OUT/compare-contended.txt" || status=$?
fi

# Issue 4's targets, from the JSON just written.
python3 - "$OUT" "$STOCK" <<'PY' | tee "$OUT/compare-summary.txt"
import json, os, sys
out = sys.argv[1]
def load(name):
    p = os.path.join(out, name)
    if not os.path.exists(p):
        return None
    return {r["name"]: r for r in json.load(open(p))}
def verdict(ok):
    return "MET" if ok else "SHORT"
def checks(r):
    bad = [c for c in r.get("checks") or [] if not c.get("ok")]
    if bad:
        return "%d check(s) BROKEN" % len(bad)
    return "invariants ok" if r.get("checks") else "no checks"
def row(r, n):
    w = r["outcomes"].get("WIN", 0) + r["outcomes"].get("OK", 0)
    return f"{n}: {w} sold of {sys.argv[2]}, {r['transport_errors']} transport errors, {r['server_errors']} 5xx, {checks(r)}"
# Closed loop: peak answered/s (and p99 at saturation). Open loop: every target that keeps up
# answers the offered rate, so only latency (and who could not keep up) tells them apart.
for kind, f in (("closed loop (throughput)", "compare-closed.json"), ("open-loop spike (latency at the same offered load)", "compare-spike.json")):
    rows = load(f)
    if not rows:
        continue
    print(f"== issue 4 targets, {kind}")
    p, leg, ng, br = (rows.get(n) for n in ("proxy", "legacy", "nginx", "bare-redis"))
    closed = f == "compare-closed.json"
    if p and leg:
        q = p["latency"]["p99_ms"] / leg["latency"]["p99_ms"] if leg["latency"]["p99_ms"] else float("inf")
        line = f"proxy vs legacy: p99 {p['latency']['p99_ms']:.2f} / {leg['latency']['p99_ms']:.2f} ms = {q:.3f} (target <= 0.1: {verdict(q <= 0.1)})"
        if closed:
            r = p["rps"] / leg["rps"] if leg["rps"] else float("inf")
            line = f"proxy vs legacy: answered/s {p['rps']:.0f} / {leg['rps']:.0f} = {r:.2f}x (target >= 10x: {verdict(r >= 10)}); " + line[len("proxy vs legacy: "):]
        else:
            line += f"; answered/s {p['rps']:.0f} vs {leg['rps']:.0f} ({p['sent']} sent to each)"
        print(line)
    for other, name, target in ((br, "bare-redis", 0.9), (ng, "nginx", 1.1)):
        if not (p and other):
            continue
        if closed:
            r = p["rps"] / other["rps"]
            print(f"proxy vs {name}: answered/s {p['rps']:.0f} / {other['rps']:.0f} = {r:.2f}x (target >= {target}x: {verdict(r >= target)}); "
                  f"p99 {p['latency']['p99_ms']:.2f} vs {other['latency']['p99_ms']:.2f} ms")
        else:
            print(f"proxy vs {name}: p99 {p['latency']['p99_ms']:.2f} vs {other['latency']['p99_ms']:.2f} ms, "
                  f"p99.9 {p['latency']['p999_ms']:.2f} vs {other['latency']['p999_ms']:.2f} ms")
    for n in ("legacy", "proxy", "nginx"):
        if rows.get(n):
            print(row(rows[n], n))
PY
if [ -s "$OUT/compare-contended.txt" ]; then
  { echo "== issue 10 targets, contended paths (median of the runs)"; sed -n '/^Median/,$p' "$OUT/compare-contended.txt" | tail -n +2; } | tee -a "$OUT/compare-summary.txt"
fi
echo "results in $OUT/compare-{closed,spike}.{txt,json,log}, $OUT/compare-contended.txt and $OUT/compare-summary.txt"
exit "$status"
