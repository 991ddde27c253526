#!/usr/bin/env bash
# Issue 10: what the 1000users preset's p99.9 is made of. The preset (1,000 users in flight,
# ramp 0, 3 loops, a request id each) against a fresh proxy and against the bare handler,
# alternated, RUNS times, each on fresh stock. Per run and side: p50 / p99.9 / max, the
# process's CPU for the run; for the proxy also the script calls (EVALSHA and EVAL: a
# script Redis did not hold costs an EVAL per buy in flight), the mean reserve-script and
# shop times during the burst (its own metrics), and the slowest requests (user, try, sent
# at, latency, outcome) of both sides.
#
#   scripts/burst-bench.sh [runs]
# Knobs: STOCK (default 100; 0 = every answer SOLD_OUT from memory: the proxy's floor with no
# Redis call at all), GAP (seconds idle before each proxy run, default 1; above the proxy's
# upstream.idle_timeout of 4 s its connections to the shop are closed first), SLOWEST (how
# many slowest requests to list, default 5), BIN (prebuilt binaries).
set -euo pipefail
runs=${1:-3}
cd "$(dirname "$0")/.."
. scripts/lib.sh
bench_setup burst-bench.sh "redis-server curl python3" redis-server redis-cli curl python3
rp=$(port); pp=$(port); ap=$(port); sp=$(port); bp=$(port)
export SECKILL_SIGNING_SECRET="burst-$$-$RANDOM" SECKILL_ADMIN_TOKEN="burst-admin-$$"
redis-server --port "$rp" --bind 127.0.0.1 --save '' --appendonly no --dir "$w" --logfile "$w/redis.log" & pids+=($!)
"$BIN/seckill-bench" bare --status 200 --body '{"order_id":"bare"}' --listen "127.0.0.1:$sp" 2>/dev/null & pids+=($!)
"$BIN/seckill-bench" bare --listen "127.0.0.1:$bp" 2>/dev/null & pids+=($!); bare_pid=$!
sale_window 86400
{ proxy_head "$pp" "$ap" "$sp" "$rp"; cat <<YAML; } > "$w/c.yaml"
activities:
  - id: k1
    start: $start
    end: $end
    skus: [ { id: s, stock: ${STOCK:-100} } ]
    admission_rate: { rate: 1000000, burst: 1000000 }
YAML
for i in $(seq 100); do redis-cli -p "$rp" ping >/dev/null 2>&1 && break; sleep 0.05; done
"$BIN/seckill-proxy" preheat -c "$w/c.yaml" >/dev/null 2>&1
"$BIN/seckill-proxy" serve -c "$w/c.yaml" 2>"$w/proxy.log" & pids+=($!); proxy_pid=$!
for u in "http://127.0.0.1:$pp/_seckill/time" "http://127.0.0.1:$bp/"; do
  for i in $(seq 100); do curl -s -o /dev/null "$u" && break; sleep 0.05; done
done
pcpu() { awk -v t="$(getconf CLK_TCK)" '{ printf "%.3f", ($14 + $15) / t }' "/proc/$1/stat"; }
stat() { redis-cli -p "$rp" info commandstats | tr -d '\r' | awk -F'[:=,]' -v k="cmdstat_$1" '$1 == k {print $3}'; }
metric() { # name{labels}: a histogram's sum and count
  curl -s "http://127.0.0.1:$ap/metrics" | awk -v n="$1" -v l="$2" '
    index($1, n "_sum{") == 1 && index($1, l) {s = $2} index($1, n "_count{") == 1 && index($1, l) {c = $2}
    END {printf "%s %s", s + 0, c + 0}'
}
mean_ms() { awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " "); n = y[2] - x[2]; if (n > 0) printf "%.2f ms (%d)", (y[1] - x[1]) * 1000 / n, n; else print "-" }'; }
preset() { # url json prefix
  "$BIN/seckill-bench" run --preset 1000users --activity k1 --sku s --target "$1" --user-prefix "$3" \
    --quiet --slowest "${SLOWEST:-5}" --json "$2" >/dev/null 2>&1 || true
}
show() { # json cpu
  python3 - "$1" "$2" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); l = r["latency"]
print("p50 %.1f  p99.9 %.1f  max %.1f ms  %.0f answered/s  CPU %.3f s  %s" % (l["p50_ms"], l["p999_ms"], l["max_ms"], r["rps"], float(sys.argv[2]), r["outcomes"]))
for s in r.get("slowest", []):
    print("      slow: user %4d try %d  sent at %6.1f ms  took %6.1f ms  %s" % (s["user"], s["try"], s["sent_ms"], s["latency_ms"], s["outcome"]))
PY
}
echo "== $(nproc) cores, $(date -u +%FT%TZ), stock ${STOCK:-100}, gap ${GAP:-1}s, $runs runs"
for run in $(seq "$runs"); do
  "$BIN/seckill-proxy" preheat -c "$w/c.yaml" --activity k1 --force >/dev/null 2>&1
  echo "run $run (load $(cut -d' ' -f1 /proc/loadavg))"
  c0=$(pcpu "$bare_pid"); preset "http://127.0.0.1:$bp" "$w/b.json" "b$run-"; c1=$(pcpu "$bare_pid")
  echo "  bare : $(show "$w/b.json" "$(awk -v a="$c0" -v b="$c1" 'BEGIN {print b - a}')")"
  sleep "${GAP:-1}"
  redis-cli -p "$rp" config resetstat >/dev/null
  r0=$(metric seckill_redis_script_duration_seconds 'script="reserve"'); u0=$(metric seckill_upstream_duration_seconds 'outcome="ok"')
  c0=$(pcpu "$proxy_pid"); preset "http://127.0.0.1:$pp" "$w/p.json" "p$run-"; c1=$(pcpu "$proxy_pid")
  r1=$(metric seckill_redis_script_duration_seconds 'script="reserve"'); u1=$(metric seckill_upstream_duration_seconds 'outcome="ok"')
  echo "  proxy: $(show "$w/p.json" "$(awk -v a="$c0" -v b="$c1" 'BEGIN {print b - a}')")"
  echo "         EVALSHA $(stat evalsha)  EVAL $(e=$(stat eval); echo "${e:-0}")  reserve script $(mean_ms "$r0" "$r1")  shop $(mean_ms "$u0" "$u1")"
  python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))["latency"]["p999_ms"]; b=json.load(open(sys.argv[2]))["latency"]["p999_ms"]; print("  p99.9 proxy / bare: %.2f" % (p / b))' "$w/p.json" "$w/b.json"
  sleep 1
done
