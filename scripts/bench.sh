#!/usr/bin/env bash
# Standard benchmark run (make bench): on one machine, in one run,
#   (a) the demo shop directly, (b) an ordinary route through the proxy,
#   (c) a buy spike through the proxy (1,000 users x 3 tries, stock 100),
#   (d) the 3 s ramp / 10 s hold spike profile.
# Starts its own redis-server, demo shop and proxy on free ports; stops them.
# Needs wrk for (a)/(b) (apt-get install -y wrk); skips them without it.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
OUT=${OUT:-bench-results}
DUR=${DUR:-10s}
mkdir -p "$OUT"
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
. scripts/lib.sh  # the cd above made the repository root the working directory
RP=$(port); SP=$(port); PP=$(port); AP=$(port)
export SECKILL_SIGNING_SECRET=bench-secret SECKILL_ADMIN_TOKEN=bench-admin
redis-server --port "$RP" --bind 127.0.0.1 --save "" --appendonly no --dir "$tmp" --logfile "$tmp/redis.log" &
pids+=($!)
"$BIN/seckill-bench" shop --listen "127.0.0.1:$SP" --db "sqlite:$tmp/shop.db" --log-format console 2>"$tmp/shop.log" &
pids+=($!)
sale_window 3600
{ proxy_head "$PP" "$AP" "$SP" "$RP"; cat <<YAML; } > "$tmp/proxy.yaml"
activities:
  - id: act_bench
    start: $start
    end: $end
    skus: [ { id: "30021", stock: 100 } ]
    shards: 4
    admission_rate: { rate: 1000000, burst: 1000000 }
    verify: { url: "http://127.0.0.1:$SP/internal/orders?token={token}" }
  - id: act_spike
    start: $start
    end: $end
    skus: [ { id: "30021", stock: 1000 } ]
    shards: 8
    admission_rate: { rate: 1000000, burst: 1000000 }
YAML
"$BIN/seckill-proxy" serve -c "$tmp/proxy.yaml" 2>"$tmp/proxy.log" &
pids+=($!)
for i in $(seq 100); do curl -fs "http://127.0.0.1:$PP/_seckill/time" >/dev/null && break; sleep 0.1; done
"$BIN/seckill-proxy" preheat -c "$tmp/proxy.yaml" --log-format console
echo "== machine: $(nproc) cores, $(uname -r), $(date -u +%FT%TZ)"
if command -v wrk >/dev/null; then
  echo "== (a) shop directly: wrk -t2 -c64 -d$DUR http://127.0.0.1:SHOP/hello"
  wrk -t2 -c64 -d"$DUR" --latency "http://127.0.0.1:$SP/hello" | tee "$OUT/a-shop-direct.txt"
  echo "== (b) ordinary route through the proxy: wrk -t2 -c64 -d$DUR http://127.0.0.1:PROXY/hello"
  wrk -t2 -c64 -d"$DUR" --latency "http://127.0.0.1:$PP/hello" | tee "$OUT/b-proxy-passthrough.txt"
else
  echo "wrk not installed: skipping (a) and (b) (apt-get install -y wrk)"
fi
echo "== (c) buy spike through the proxy: seckill-bench run --preset 1000users"
"$BIN/seckill-bench" run --target "http://127.0.0.1:$PP" --preset 1000users --activity act_bench --sku 30021 \
  --redis "127.0.0.1:$RP" --shop "http://127.0.0.1:$SP" --proxy-bin "$BIN/seckill-proxy" --proxy-config "$tmp/proxy.yaml" \
  --json "$OUT/c-1000users.json" --chart "$OUT/c-1000users.svg" --quiet | tee "$OUT/c-1000users.txt"
echo "== (d) spike profile through the proxy: seckill-bench run --preset spike (ramp 3 s, hold 10 s)"
"$BIN/seckill-bench" run --target "http://127.0.0.1:$PP" --preset spike --activity act_spike --sku 30021 \
  --redis "127.0.0.1:$RP" --shop "http://127.0.0.1:$SP" --proxy-bin "$BIN/seckill-proxy" --proxy-config "$tmp/proxy.yaml" \
  --json "$OUT/d-spike.json" --chart "$OUT/d-spike.svg" --quiet | tee "$OUT/d-spike.txt"
echo "results in $OUT/"
