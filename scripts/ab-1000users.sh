#!/usr/bin/env bash
# The 1000users preset against two proxy builds and the bare handler, in rotated order, once
# per run: p99.9 and the CPU each server process spent on the run (/proc/PID/stat). For A/B
# comparisons of the first wave's tail (issue 10, BENCHMARKS.md seventh round).
#
#   scripts/ab-1000users.sh DIR_A DIR_B [runs]
#
# DIR_A and DIR_B hold seckill-proxy builds (or wrappers that exec one with other settings);
# DIR_A's seckill-bench drives every run. STOCKA / STOCKB set each proxy's stock (default 100;
# STOCKB=0 gives the floor: every buyer answered from memory); YAML_B adds top-level config
# keys to proxy B; CLIENT_NICE runs the load generator at that nice level (both sides). The
# last line prints the median ratio of each proxy's p99.9 to the bare handler's of the same run.
# Each run also shows the machine's CPU over it (all processes, /proc/stat: generator, server,
# Redis, shop, kernel), and the last line its median ratio: what the run cost on the shared cores.
# PROFILE=DIR writes a CPU profile of each proxy over all the runs (DIR/A.pprof, DIR/B.pprof;
# compare them with `go tool pprof -top -diff_base DIR/B.pprof BIN DIR/A.pprof`).
# REF=sale replaces the bare handler by `seckill-bench bare-sale` (a per-user script call per
# request until sold out, then 410 from memory; winners hopped to the same shop; stock STOCKA):
# the smallest design that makes a winner's two round trips, so the ratio to it is what the
# proxy adds to them (the "bare" column then shows bare-sale).
# KEEP=DIR keeps each run's seckill-bench JSON report there (ka-*, kb-*, bare-*.json: the
# slowest requests with their outcomes and send times).
# PIN=1 gives the servers under test (both proxies, the bare handler) CPU 0 and everything else
# (the load generator, Redis, the shop) CPU 1 (taskset): the nearest this 2-core machine comes to
# a server on its own host; each server then runs on one core (Go sizes GOMAXPROCS by affinity).

set -euo pipefail
A=$(realpath "$1"); B=$(realpath "$2"); runs=${3:-6}
cd "$(dirname "$0")/.."; . scripts/lib.sh
BIN=$A bench_setup ab-1000users.sh "redis-server curl python3" redis-server redis-cli curl python3
on0=() on1=()
if [ -n "${PIN:-}" ]; then
  command -v taskset >/dev/null || { echo "PIN needs taskset (util-linux)" >&2; exit 1; }
  on0=(taskset -c 0) on1=(taskset -c 1)
fi
rp=$(port); sp=$(port); bp=$(port); pa=$(port); aa=$(port); pb=$(port); ab=$(port)
export SECKILL_SIGNING_SECRET="ab-$$" SECKILL_ADMIN_TOKEN="ab-admin-$$"
"${on1[@]}" redis-server --port "$rp" --bind 127.0.0.1 --save '' --appendonly no --dir "$w" --logfile "$w/r.log" & pids+=($!)
"${on1[@]}" "$A/seckill-bench" bare --status 200 --body '{"order_id":"bare"}' --listen "127.0.0.1:$sp" 2>/dev/null & pids+=($!)
if [ "${REF:-}" = sale ]; then # the smallest sale as the reference (see the top)
  for i in $(seq 100); do redis-cli -p "$rp" ping >/dev/null 2>&1 && break; sleep 0.05; done
  "${on0[@]}" "$A/seckill-bench" bare-sale --redis "127.0.0.1:$rp" --upstream "127.0.0.1:$sp" --stock "${STOCKA:-100}" --listen "127.0.0.1:$bp" 2>/dev/null & pids+=($!); bare_pid=$!
else
  "${on0[@]}" "$A/seckill-bench" bare --listen "127.0.0.1:$bp" 2>/dev/null & pids+=($!); bare_pid=$!
fi
sale_window 86400
mk() { proxy_head "$1" "$2" "$sp" "$rp"; printf 'activities:\n  - id: %s\n    start: %s\n    end: %s\n    skus: [ { id: s, stock: %s } ]\n    admission_rate: { rate: 1000000, burst: 1000000 }\n' "$3" "$start" "$end" "$4"; }
mk "$pa" "$aa" ka "${STOCKA:-100}" > "$w/a.yaml"; mk "$pb" "$ab" kb "${STOCKB:-100}" > "$w/b.yaml"
# YAML_B: top-level keys added to proxy B's config (e.g. identity: {request_id: {header: X-Other}}).
[ -z "${YAML_B:-}" ] || printf '%s\n' "$YAML_B" >> "$w/b.yaml"
for i in $(seq 100); do redis-cli -p "$rp" ping >/dev/null 2>&1 && break; sleep 0.05; done
"${on0[@]}" "$A/seckill-proxy" serve -c "$w/a.yaml" 2>"$w/a.log" & pids+=($!); a_pid=$!
"${on0[@]}" "$B/seckill-proxy" serve -c "$w/b.yaml" 2>"$w/b.log" & pids+=($!); b_pid=$!
for u in "http://127.0.0.1:$pa/_seckill/time" "http://127.0.0.1:$pb/_seckill/time" "http://127.0.0.1:$bp/"; do
  for i in $(seq 100); do curl -s -o /dev/null "$u" && break; sleep 0.05; done; done
pcpu() { awk -v t="$(getconf CLK_TCK)" '{ printf "%.3f", ($14 + $15) / t }' "/proc/$1/stat"; }
# the machine's busy CPU seconds so far (all cores: generator, server, Redis, shop, kernel)
mcpu() { awk -v t="$(getconf CLK_TCK)" '/^cpu / { printf "%.3f", ($2 + $3 + $4 + $7 + $8) / t }' /proc/stat; }
one() { # url act pid
  [ "$2" != - ] && "$A/seckill-proxy" preheat -c "$w/${2#k}.yaml" --activity "$2" --force >/dev/null 2>&1
  [ "$2" != - ] || [ "${REF:-}" != sale ] || curl -s -o /dev/null -X POST "$1/_reset"
  local c0; c0=$(pcpu "$3")
  local m0; m0=$(mcpu)
  "${on1[@]}" nice -n "${CLIENT_NICE:-0}" "$A/seckill-bench" run --preset 1000users --activity "${2/-/x}" --sku s --target "$1" --user-prefix "p$RANDOM-" ${KEEP:+--slowest 20} --quiet --json "$w/o.json" >/dev/null 2>&1 || true
  local c1; c1=$(pcpu "$3")
  local m1; m1=$(mcpu)
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("%.1f" % r["latency"]["p999_ms"], end=" ")' "$w/o.json"
  [ -z "${KEEP:-}" ] || cp "$w/o.json" "$KEEP/${2/-/bare}-$(date +%s%N).json"
  awk -v a="$c0" -v b="$c1" -v m0="$m0" -v m1="$m1" 'BEGIN{printf "%.0fms %.0fms", (b-a)*1000, (m1-m0)*1000}'
}
if [ -n "${PROFILE:-}" ]; then # long enough for every run (a run takes ~4.5 s); stopped below
  mkdir -p "$PROFILE"
  for x in A:$aa B:$ab; do
    curl -s -H "Authorization: Bearer $SECKILL_ADMIN_TOKEN" -o "$PROFILE/${x%%:*}.pprof" \
      "http://127.0.0.1:${x#*:}/debug/pprof/profile?seconds=$((runs * 5 + 2))" & prof+=($!)
  done
  sleep 0.2
fi
echo "run | bare p99.9 cpu machine | A p99.9 cpu machine | B p99.9 cpu machine"
for r in $(seq "$runs"); do
  declare -A out
  order=(bare A B); case $((r % 3)) in 1) order=(A B bare);; 2) order=(B bare A);; esac
  for x in "${order[@]}"; do
    case $x in bare) out[$x]=$(one "http://127.0.0.1:$bp" - "$bare_pid");; A) out[$x]=$(one "http://127.0.0.1:$pa" ka "$a_pid");; B) out[$x]=$(one "http://127.0.0.1:$pb" kb "$b_pid");; esac
    sleep 1
  done
  echo "$r | ${out[bare]} | ${out[A]} | ${out[B]}"
done | tee "$w/rows"
[ -z "${PROFILE:-}" ] || wait "${prof[@]}"
awk -F'|' '
  function med(x, n,   i, j, v) { # insertion sort (POSIX awk has no asort), then the median
    for (i = 2; i <= n; i++) { v = x[i]; for (j = i - 1; j >= 1 && x[j] > v; j--) x[j + 1] = x[j]; x[j + 1] = v }
    return (n % 2) ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2
  }
  { split($2, b, " "); split($3, a, " "); split($4, c, " "); n++; ra[n] = a[1] / b[1]; rb[n] = c[1] / b[1]
    ma[n] = a[3] / b[3]; mb[n] = c[3] / b[3] }
  END { printf "median p99.9 ratio to bare: A %.2f, B %.2f\n", med(ra, n), med(rb, n)
        printf "median machine-CPU ratio to bare (the run: generator, server, Redis, shop, kernel): A %.2f, B %.2f\n", med(ma, n), med(mb, n) }' "$w/rows"
