#!/usr/bin/env bash
# Issue 11 §1 benchmark (make shop-protect-bench): does upstream.max_inflight
# protect the legacy shop? On free ports it starts redis-server, the legacy
# demo shop on PostgreSQL (seckill-bench shop --legacy, a fresh database,
# dropped after) and, once per phase, seckill-proxy serve in front of it:
#   unloaded  UNLOADED_N buyers one at a time, sync mode: the shop's own
#             latency when nothing queues in it (its "unloaded p99")
#   sync      today's sync mode: UNITS units, SPIKE_USERS buyers, SPIKE_CONC
#             in flight, no bound: every winner goes to the shop at once
#   boundN    the same spike with upstream.max_inflight: N and overflow:
#             queue (winners past it answered 202 QUEUED, sent by the queue
#             workers as slots free up), for each N of MAX_INFLIGHT (a list)
#   adaptive  (ADAPTIVE=1) the same with adaptive: true between
#             MIN_INFLIGHT and ADAPT_MAX
# Per phase: the shop's order latency measured inside it (handler start to
# answer, database pool and row-lock waits included: GET /internal/latency),
# its peak concurrent orders, the buyers' latency (the load generator), the
# time until nothing is pending (or pending stops moving: winners the shop
# did not answer in time are left to the reconciler), and the invariants
# (seckill-proxy status and the shop's summary: UNITS orders, UNITS
# confirmed, or how many outcomes are unknown).
# Everything started here is stopped on exit.
#
# On this project's 2-core box the buyers' side (load generator, proxy, its
# Redis) runs under `nice -n $NICE` (default 10): in production it runs on
# other machines than the shop, and the shop's latency should show what the
# shop is sent, not that the generator took its CPU. PostgreSQL and the shop
# run at normal priority. The proxy's redis.timeout is 1s (a 200 ms timeout
# refuses buys whenever this shared box stalls a process that long).
#
# Knobs (environment): BIN, PG (admin DSN), OUT, UNITS, SPIKE_USERS,
#   SPIKE_CONC, UNLOADED_N, MAX_INFLIGHT (list), ADAPTIVE, MIN_INFLIGHT,
#   ADAPT_MAX, NICE
# Needs: redis-server, psql, python3, curl, a PostgreSQL reachable with PG.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
OUT=${OUT:-bench-results}
PG=${PG:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
UNITS=${UNITS:-20000}
SPIKE_USERS=${SPIKE_USERS:-25000}
SPIKE_CONC=${SPIKE_CONC:-1000}
UNLOADED_N=${UNLOADED_N:-2000}
MAX_INFLIGHT=${MAX_INFLIGHT-"1 2 4"}
ADAPTIVE=${ADAPTIVE:-0}
MIN_INFLIGHT=${MIN_INFLIGHT:-2}
ADAPT_MAX=${ADAPT_MAX:-64}
NICE=${NICE:-10}
# nice execs the command: $! is the process itself, so kill reaches it.
buyers_side=(nice -n "$NICE")
SKU=30021
for c in redis-server psql python3 curl "$BIN/seckill-bench" "$BIN/seckill-proxy"; do
  command -v "$c" >/dev/null || { echo "shop-protect-bench.sh: $c not found (make build)" >&2; exit 2; }
done
mkdir -p "$OUT"
tmp=$(mktemp -d)
db="seckill_protect_$$"
db_made=0
pids=()
proxy_pid=
cleanup() {
  set +e
  [ -n "$proxy_pid" ] && kill "$proxy_pid" 2>/dev/null && wait "$proxy_pid" 2>/dev/null
  for ((i=${#pids[@]}-1; i>=0; i--)); do kill "${pids[i]}" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  if [ "$db_made" = 1 ]; then psql -q "$PG" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
. scripts/lib.sh
died() {
  echo "shop-protect-bench.sh: $1" >&2
  for f in "$tmp"/*.log; do [ -s "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }; done
  exit 1
}
wait_http() { for _ in $(seq 200); do curl -fs -o /dev/null "$1" && return 0; sleep 0.05; done; died "$2 did not come up at $1"; }
wait_tcp() { for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; died "$2 not listening on $1"; }

RP=$(port) SP=$(port)
export SECKILL_SIGNING_SECRET="protect-$$-$RANDOM"
psql -q "$PG" -c "CREATE DATABASE $db" >/dev/null
db_made=1
shop_db="${PG%%\?*}"; shop_db="${shop_db%/*}/$db?sslmode=disable"

phases=(unloaded sync)
for m in $MAX_INFLIGHT; do phases+=("bound$m"); done
[ "$ADAPTIVE" = 1 ] && phases+=(adaptive)
stock_flags=()
for ph in "${phases[@]}"; do
  n=$UNITS; [ "$ph" = unloaded ] && n=$UNLOADED_N
  stock_flags+=(--stock "act_$ph/$SKU=$n")
done

"${buyers_side[@]}" redis-server --port "$RP" --bind 127.0.0.1 --save "" --appendonly no --dir "$tmp" --logfile "$tmp/redis.log" &
pids+=($!)
"$BIN/seckill-bench" shop --legacy "${stock_flags[@]}" --listen "127.0.0.1:$SP" --db "$shop_db" \
  --log-format console 2>"$tmp/shop.log" &
pids+=($!)
wait_tcp "$RP" redis-server
wait_http "http://127.0.0.1:$SP/internal/latency" shop
sale_window 86400

# phase NAME UNITS USERS CONC UPSTREAM_YAML: one proxy, one run, one row.
results="$tmp/results.jsonl"
phase() {
  local name=$1 units=$2 users=$3 conc=$4 extra=$5 act="act_$1"
  local PP AP; PP=$(port) AP=$(port)
  cat >"$tmp/$name.yaml" <<YAML
listen: "127.0.0.1:$PP"
admin: { listen: "127.0.0.1:$AP" }
upstream:
  url: "http://127.0.0.1:$SP"
  timeout: 3s
$extra
redis: { addrs: ["127.0.0.1:$RP"], timeout: 1s }
limits:
  per_ip: { rate: 1000000, burst: 1000000 }
  per_device: { rate: 1000000, burst: 1000000 }
  per_user: { rate: 1000000, burst: 1000000 }
activities:
  - id: $act
    start: $start
    end: $end
    skus: [ { id: "$SKU", stock: $units } ]
    admission_rate: { rate: 1000000, burst: 1000000 }
    queue: { workers: 64, rate: 1000000 }
    verify: { url: "http://127.0.0.1:$SP/internal/orders?token={token}" }
YAML
  "${buyers_side[@]}" "$BIN/seckill-proxy" serve -c "$tmp/$name.yaml" 2>"$tmp/proxy-$name.log" &
  proxy_pid=$!
  wait_http "http://127.0.0.1:$PP/_seckill/time" "seckill-proxy ($name)"
  "$BIN/seckill-proxy" preheat -c "$tmp/$name.yaml" --log-format console >"$tmp/preheat-$name.log" 2>&1 || died "preheat $name failed"
  curl -fs -X POST -o /dev/null "http://127.0.0.1:$SP/internal/latency/reset"
  # The in-flight limit in force, every 250 ms (it moves with adaptive).
  ( while sleep 0.25; do
      curl -fs "http://127.0.0.1:$AP/metrics" 2>/dev/null | sed -n 's/^seckill_upstream_inflight_limit{activity="[^"]*"} //p'
    done >"$tmp/limits-$name.txt" ) &
  local sampler=$!
  local t0; t0=$(date +%s.%N)
  "${buyers_side[@]}" "$BIN/seckill-bench" run --target "http://127.0.0.1:$PP" --activity "$act" --sku "$SKU" --users "$users" --tries 1 \
    --concurrency "$conc" --timeout 30s --xff --quiet --json "$tmp/run-$name.json" >"$tmp/run-$name.txt" 2>"$tmp/run-$name.log" \
    || died "load run $name failed"
  # Queued winners are still being sent: wait until nothing is pending, or
  # until pending stops moving for 10 s (winners the shop did not answer
  # within upstream.timeout stay pending for the reconciler: pending_timeout).
  local st= last= still=0
  for _ in $(seq 3000); do
    st=$("$BIN/seckill-proxy" status -c "$tmp/$name.yaml" --activity "$act" --json 2>/dev/null || true)
    local p; p=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["activities"][0]["skus"][0]["pending"])' "$st" 2>/dev/null || echo x)
    [ "$p" = 0 ] && break
    if [ "$p" = "$last" ]; then still=$((still + 1)); [ "$still" -ge 50 ] && break; else still=0; last=$p; fi
    sleep 0.2
  done
  local t1; t1=$(date +%s.%N)
  kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null || true
  local lat sum
  lat=$(curl -fs "http://127.0.0.1:$SP/internal/latency")
  sum=$(curl -fs "http://127.0.0.1:$SP/internal/summary?activity=$act")
  curl -fs "http://127.0.0.1:$AP/metrics" >"$tmp/metrics-$name.txt" || true
  python3 - "$name" "$units" "$t0" "$t1" "$lat" "$sum" "$st" "$tmp/run-$name.json" "$tmp/metrics-$name.txt" "$tmp/limits-$name.txt" >>"$results" <<'PY'
import json, re, sys
name, units, t0, t1, lat, summ, st, runf, metf, limf = sys.argv[1:]
limits = [int(float(l)) for l in open(limf) if l.strip()]
overflow = {}
for line in open(metf):
    m = re.match(r'seckill_upstream_overflow_total\{activity="[^"]*",outcome="([a-z]+)"\} (\S+)', line)
    if m:
        overflow[m.group(1)] = int(float(m.group(2)))
run = json.load(open(runf))
s = json.loads(st)["activities"][0]["skus"][0]
summ = json.loads(summ)
print(json.dumps({"phase": name, "units": int(units), "done_s": round(float(t1) - float(t0), 2),
  "shop": json.loads(lat), "orders": summ["orders"], "status": s, "overflow": overflow, "limits": limits,
  "buyers": {"p50_ms": run["latency"]["p50_ms"], "p99_ms": run["latency"]["p99_ms"], "outcomes": run["outcomes"]}}))
PY
  kill "$proxy_pid"; wait "$proxy_pid" 2>/dev/null || true; proxy_pid=
}

echo "== machine: $(nproc) cores, $(uname -r), $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== PostgreSQL $(psql -At "$PG" -c 'show server_version'), $(redis-server --version | cut -d' ' -f1-3)"
phase unloaded "$UNLOADED_N" "$UNLOADED_N" 1 ""
phase sync "$UNITS" "$SPIKE_USERS" "$SPIKE_CONC" ""
for m in $MAX_INFLIGHT; do
  phase "bound$m" "$UNITS" "$SPIKE_USERS" "$SPIKE_CONC" "  max_inflight: $m
  overflow: queue"
done
if [ "$ADAPTIVE" = 1 ]; then
  phase adaptive "$UNITS" "$SPIKE_USERS" "$SPIKE_CONC" "  max_inflight: $ADAPT_MAX
  adaptive: true
  min_inflight: $MIN_INFLIGHT
  overflow: queue"
fi
cp "$results" "$OUT/shop-protect.jsonl"
python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
base = next(r for r in rows if r["phase"] == "unloaded")["shop"]["p99_us"]
print(f"{'phase':<9} {'shop p50':>9} {'shop p99':>9} {'p99/unloaded':>12} {'shop p99.9':>10} {'shop max':>9} {'peak conc':>9} {'orders':>7} {'confirmed':>9} {'pending':>7} {'settled':>8} {'buyer p50':>9} {'buyer p99':>9}  answers")
for r in rows:
    sh, st, b = r["shop"], r["status"], r["buyers"]
    # pending left = winners whose outcome the proxy does not know (the shop
    # did not answer within upstream.timeout): the reconciler settles them.
    note = ""
    if not st["ok"]:
        note = "  STOCK INVARIANT BROKEN"
    elif st["pending"] or st["confirmed"] != r["units"] or r["orders"] != r["units"]:
        note = f"  ({st['pending']} unknown outcomes left for the reconciler; shop holds {r['orders']} orders)"
    print(f"{r['phase']:<9} {sh['p50_us']/1000:>7.2f}ms {sh['p99_us']/1000:>7.2f}ms {sh['p99_us']/base:>11.1f}x {sh['p999_us']/1000:>8.1f}ms {sh['max_us']/1000:>7.1f}ms {sh['peak_concurrent']:>9} {r['orders']:>7} {st['confirmed']:>9} {st['pending']:>7} {r['done_s']:>7.1f}s {b['p50_ms']:>7.1f}ms {b['p99_ms']:>7.1f}ms  {dict(sorted(b['outcomes'].items()))}{'  overflow ' + str(r['overflow']) if r['overflow'] else ''}{note}")
    if r["limits"] and len(set(r["limits"])) > 1:
        ls = sorted(r["limits"])
        print(f"{'':<9} limit over the sale (every 250 ms): min {ls[0]}, median {ls[len(ls)//2]}, max {ls[-1]}; {r['limits']}")
PY
