#!/usr/bin/env bash
# Traffic control: requests/s of the locally refused paths (NOT_STARTED,
# SOLD_OUT after sell-out, RATE_LIMITED) through the real proxy binary,
# against a bare fasthttp handler with a fixed body, one load generator
# (wrk), one run. Prints a markdown table for BENCHMARKS.md.
#   scripts/traffic-bench.sh [seconds] [connections]
set -euo pipefail
secs=${1:-10}; conns=${2:-64}
cd "$(dirname "$0")/.."
w=$(mktemp -d); pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$w"; }
trap cleanup EXIT
go build -o "$w/" ./cmd/seckill-proxy ./cmd/seckill-bench
. scripts/lib.sh  # the cd above made the repository root the working directory
rp=$(port); pp=$(port); ap=$(port); bp=$(port)
redis-server --port "$rp" --save '' --appendonly no --daemonize no >/dev/null & pids+=($!)
cat > "$w/c.yaml" <<YAML
listen: "127.0.0.1:$pp"
admin: { listen: "127.0.0.1:$ap" }
upstream: { url: "http://127.0.0.1:$bp" }
redis: { addrs: ["127.0.0.1:$rp"] }
limits: { per_ip: { rate: 1, burst: 1 } }
activities:
  - { id: notstarted, route: { path: "/ns/{sku}" }, start: 2099-01-01T00:00:00Z, end: 2099-01-02T00:00:00Z, skus: [{ id: s, stock: 1 }] }
  - { id: soldout, route: { path: "/so/{sku}" }, start: 2020-01-01T00:00:00Z, end: 2099-01-01T00:00:00Z, skus: [{ id: s, stock: 0 }], shards: 2 }
  - { id: limited, route: { path: "/rl/{sku}" }, start: 2020-01-01T00:00:00Z, end: 2099-01-01T00:00:00Z, skus: [{ id: s, stock: 1000000 }] }
YAML
sleep 0.3
"$w/seckill-proxy" preheat -c "$w/c.yaml" >/dev/null 2>&1
"$w/seckill-proxy" serve -c "$w/c.yaml" 2>"$w/proxy.log" & pids+=($!)
"$w/seckill-bench" bare --listen "127.0.0.1:$bp" 2>/dev/null & pids+=($!)
for i in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$pp/_seckill/time" && break; sleep 0.1; done
curl -s -o /dev/null -X POST -H 'X-User-Id: u1' "http://127.0.0.1:$pp/rl/s" # spend the one token
rps() { wrk -t1 -c"$conns" -d"${secs}s" "$@" 2>&1 | awk '/Requests\/sec/ {print $2}'; }
check() { curl -s -X POST -H 'X-User-Id: u1' "http://127.0.0.1:$pp$1" | head -c 40; }
echo "sample answers: $(check /ns/s) | $(check /so/s) | $(check /rl/s)" >&2
lua="$w/post.lua"; printf 'wrk.method="POST"\nwrk.headers["X-User-Id"]="u1"\n' > "$lua"
bare=$(rps -s "$lua" "http://127.0.0.1:$bp/")
ns=$(rps -s "$lua" "http://127.0.0.1:$pp/ns/s")
so=$(rps -s "$lua" "http://127.0.0.1:$pp/so/s")
rl=$(rps -s "$lua" "http://127.0.0.1:$pp/rl/s")
echo "| path | requests/s | ratio to bare |"
echo "|---|---:|---:|"
echo "| bare fasthttp, fixed body | $bare | 1.00 |"
for row in "NOT_STARTED $ns" "SOLD_OUT $so" "RATE_LIMITED $rl"; do
  set -- $row; printf '| proxy %s | %s | %.2f |\n' "$1" "$2" "$(echo "$2 / $bare" | bc -l)"
done
