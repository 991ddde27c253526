#!/usr/bin/env bash
# A sale's first wave on a fresh proxy: the 1000users preset (1,000 users in flight, 3 loops
# each, stock 100) against a proxy started a second before, then against the bare handler,
# RUNS times; each run once with the proxy's listener workers warmed (server.warm_workers,
# the default) and once without (warm_workers: 0), in alternating order, each on a proxy of
# its own. Prints each run's p99.9 against the bare handler's of the same pair, the answers
# other than WIN / SOLD_OUT (STORE_UNAVAILABLE: a reserve reply waited past redis.timeout),
# and the medians. BENCHMARKS.md, ninth round.
#
#   scripts/first-wave-bench.sh [runs]        (BIN: prebuilt binaries)
set -euo pipefail
runs=${1:-6}
cd "$(dirname "$0")/.."
. scripts/lib.sh
bench_setup first-wave-bench.sh "redis-server curl python3" redis-server redis-cli curl python3
rp=$(port); sp=$(port); bp=$(port)
export SECKILL_SIGNING_SECRET="fw-$$" SECKILL_ADMIN_TOKEN="fw-admin-$$"
redis-server --port "$rp" --bind 127.0.0.1 --save '' --appendonly no --dir "$w" --logfile "$w/r.log" & pids+=($!)
"$BIN/seckill-bench" bare --status 200 --body '{"order_id":"bare"}' --listen "127.0.0.1:$sp" 2>/dev/null & pids+=($!)
"$BIN/seckill-bench" bare --listen "127.0.0.1:$bp" 2>/dev/null & pids+=($!)
for i in $(seq 100); do redis-cli -p "$rp" ping >/dev/null 2>&1 && break; sleep 0.05; done
for i in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$bp/" && break; sleep 0.05; done
sale_window 86400
summary() { # json: "p99.9 others"
  python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
o = r.get("outcomes", {})
other = " ".join("%s=%d" % (k, v) for k, v in sorted(o.items()) if k not in ("WIN", "SOLD_OUT"))
print("%.1f %s" % (r["latency"]["p999_ms"], other or "-"))' "$1" 2>/dev/null || echo "- -"
}
one() { # warm_workers -> "proxy_p999 others bare_p999"
  local pa aa ppid
  pa=$(port); aa=$(port)
  { proxy_head "$pa" "$aa" "$sp" "$rp"
    printf 'server: { warm_workers: %s }\nactivities:\n  - id: fw\n    start: %s\n    end: %s\n' "$1" "$start" "$end"
    printf '    skus: [ { id: s, stock: 100 } ]\n    admission_rate: { rate: 1000000, burst: 1000000 }\n'; } > "$w/p.yaml"
  "$BIN/seckill-proxy" preheat -c "$w/p.yaml" --force >/dev/null 2>&1
  "$BIN/seckill-proxy" serve -c "$w/p.yaml" 2>"$w/p.log" & ppid=$!
  for i in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$pa/_seckill/time" && break; sleep 0.05; done
  sleep 1 # the start-up warm-up is done by then; the wave comes as the sale opens
  "$BIN/seckill-bench" run --preset 1000users --activity fw --sku s --target "http://127.0.0.1:$pa" \
    --user-prefix "p$RANDOM-" --quiet --json "$w/p.json" >/dev/null 2>"$w/p.err" || { echo "proxy run failed: $(tail -1 "$w/p.err")" >&2; rm -f "$w/p.json"; }
  kill "$ppid"; wait "$ppid" 2>/dev/null || true
  sleep 1
  "$BIN/seckill-bench" run --preset 1000users --activity fw --sku s --target "http://127.0.0.1:$bp" \
    --user-prefix "b$RANDOM-" --quiet --json "$w/b.json" >/dev/null 2>"$w/b.err" || { echo "bare run failed: $(tail -1 "$w/b.err")" >&2; rm -f "$w/b.json"; }
  read -r pq po < <(summary "$w/p.json"); read -r bq _ < <(summary "$w/b.json")
  echo "$pq $po $bq"
  sleep 1
}
echo "== $(nproc) cores, $(date -u +%FT%TZ), $runs runs, each: a fresh proxy, its first wave, then the bare handler"
echo "| run | warmed: proxy / bare p99.9 ms | ratio | other answers | not warmed: proxy / bare p99.9 ms | ratio | other answers |"
echo "|---|---|---:|---|---|---:|---|"
for r in $(seq "$runs"); do
  if [ $((r % 2)) = 1 ]; then a=$(one 1024); b=$(one 0); else b=$(one 0); a=$(one 1024); fi
  read -r ap ao ab <<<"$a"; read -r bp_ bo bb <<<"$b"
  ra=$(awk -v x="$ap" -v y="$ab" 'BEGIN { if (x + 0 > 0 && y + 0 > 0) printf "%.2f", x / y; else print "-" }')
  rb=$(awk -v x="$bp_" -v y="$bb" 'BEGIN { if (x + 0 > 0 && y + 0 > 0) printf "%.2f", x / y; else print "-" }')
  echo "| $r | $ap / $ab | **$ra** | $ao | $bp_ / $bb | **$rb** | $bo |"
  [ "$ra" = - ] || [ "$rb" = - ] || echo "$ra $rb" >> "$w/ratios"
done
awk 'function med(x, n,   i, j, v) { for (i = 2; i <= n; i++) { v = x[i]; for (j = i - 1; j >= 1 && x[j] > v; j--) x[j + 1] = x[j]; x[j + 1] = v }
       return (n % 2) ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2 }
     { n++; a[n] = $1; b[n] = $2; if ($1 < $2) better++ }
     END { if (n == 0) { print "no run gave figures"; exit 1 }; printf "median p99.9 ratio to bare: warmed %.2f, not warmed %.2f; warmed better in %d of %d runs\n", med(a, n), med(b, n), better, n }' "$w/ratios" 2>/dev/null || echo "no run gave figures"
