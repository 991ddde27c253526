#!/usr/bin/env bash
# Issue 10: Redis CPU per reserve call, measured inside Redis alone (no proxy, no HTTP):
# redis-benchmark sends the exact calls the proxy sends to a private redis-server, the
# server pinned to CPU 1 and the benchmark to CPU 0; the figure is the server's CPU
# (INFO cpu, user + sys) divided by the calls or winners, alternating the variants ROUNDS
# times (the host drifts, so read the pairs, not the absolute values).
#
#   repeat buyer (a buyer at their limit, last reservation confirmed):
#     8keys-memo    reserve.lua of dd293e5: 8 KEYS, ARGV[7] "0" (reads the epoch)
#     6keys-nomemo  this reserve.lua's common call with buyer_memo: 0 (6 KEYS, "2")
#     6keys-memo    the same with the buyer memo on ("0")
#   winners (a new buyer per call, stock 10^9; the hashes grow as it runs):
#     single        reserve.lua, one call per winner
#     batch16       scripts/micro/batch-winners.lua, 16 winners per call (the bare floor:
#                   no limit parsing, no per-buyer replies)
#     reservebatch6, reservebatch16  lua/reservebatch.lua, what the proxy sends under load,
#                   6 and 16 buyers per call
#     single+h, reservebatch16+h  the same with the holders bitset (KEYS[7]: what the
#                   proxy sends with client_cache, the default)
#     single+h+alias, reservebatch16+h+alias  and each winner's session holder alias
#                   (identity.user.session; decisions §62)
#
#   scripts/redis-micro.sh [rounds]
set -euo pipefail
rounds=${1:-3}
cd "$(dirname "$0")/.."
. scripts/lib.sh
for c in redis-server redis-cli redis-benchmark taskset git python3; do
  command -v "$c" >/dev/null || { echo "redis-micro.sh: $c not found (apt-get install -y redis-server util-linux git python3)" >&2; exit 2; }
done
w=$(mktemp -d); p=$(port)
pin_srv=1; pin_cli=0; [ "$(nproc)" -ge 2 ] || { pin_srv=0; pin_cli=0; }
taskset -c $pin_srv redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no --dir "$w" --logfile "$w/r.log" & srv=$!
trap 'kill $srv 2>/dev/null || true; wait $srv 2>/dev/null || true; rm -rf "$w"' EXIT
for i in $(seq 100); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.05; done
r() { redis-cli -p "$p" "$@"; }
cpu() { r info cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.6f", s}'; }
# run NAME PER N PIPELINE args...: Redis CPU µs per PER-th of a call, N calls
run() {
  local name=$1 per=$2 n=$3 pl=$4; shift 4
  local a b; a=$(cpu)
  taskset -c $pin_cli redis-benchmark -p "$p" -c 16 -P "$pl" -r 1000000000 -n "$n" -q EVALSHA "$@" >/dev/null
  b=$(cpu)
  awk -v a="$a" -v b="$b" -v n="$name" -v c="$n" -v per="$per" 'BEGIN { printf "  %-22s %6.2f\n", n, (b - a) * 1e6 / (c * per) }'
}
old=
if git show dd293e5:lua/reserve.lua > "$w/reserve-old.lua" 2>/dev/null; then
  old=$(r script load "$(cat "$w/reserve-old.lua")")
else
  echo "redis-micro.sh: commit dd293e5 is not in this clone (shallow?): the 8keys-memo row is left out" >&2
fi
new=$(r script load "$(cat lua/reserve.lua)")
batch=$(r script load "$(cat scripts/micro/batch-winners.lua)")
rbatch=$(r script load "$(cat lua/reservebatch.lua)")

K='{rep:0}'
r hset "s:$K:stock:s" r 10 i 11 p 0 c 1 x 0 >/dev/null
r hset "s:$K:users" r5 "1|T0" >/dev/null
r hset "s:$K:res" T0 "c|r5|1|1796096866059|O-1|" >/dev/null
r set "s:$K:epoch" 1234 >/dev/null
k8="s:$K:stock:s s:$K:users s:$K:res s:$K:pending s:$K:log s:$K:out:s s:$K:movesin s:$K:epoch"
k6="s:$K:stock:s s:$K:users s:$K:res s:$K:pending s:$K:out:s s:$K:epoch"
a6="r5 1 1 T1 1796096866059 1796269648000"
echo "== $(redis-server --version | cut -d' ' -f1-3), $(nproc) cores; Redis CPU µs per repeat-buyer call (PURCHASED), redis-benchmark -c 16 -P 16"
for i in $(seq "$rounds"); do
  # shellcheck disable=SC2086
  { if [ -n "$old" ]; then run 8keys-memo 1 400000 16 "$old" 8 $k8 $a6 0; fi; run 6keys-nomemo 1 400000 16 "$new" 6 $k6 $a6 2; run 6keys-memo 1 400000 16 "$new" 6 $k6 $a6 0; }
done

W='{win:0}'
r hset "w:$W:stock:s" r 1000000000 i 1000000000 p 0 c 0 x 0 >/dev/null
kw="w:$W:stock:s w:$W:users w:$W:res w:$W:pending w:$W:out:s w:$W:epoch"
kh="$kw w:$W:holders:s"
b16=""; for i in $(seq 16); do b16="$b16 u$i:__rand_int__ t$i:__rand_int__"; done
rb16=""; for i in $(seq 16); do rb16="$rb16 u$i:__rand_int__ 1 1 t$i:__rand_int__"; done
rb6=""; for i in $(seq 6); do rb6="$rb6 u$i:__rand_int__ 1 1 t$i:__rand_int__"; done
al16=""; for i in $(seq 16); do al16="$al16 $(printf %02x "$i")c1d2e3f4a5b6c7d8e9f0a1"; done
echo "== Redis CPU µs per winner (a new buyer each), redis-benchmark -c 16 -P 4"
for i in $(seq "$rounds"); do
  # shellcheck disable=SC2086
  { run single 1 200000 4 "$new" 6 $kw u:__rand_int__ 1 1 t:__rand_int__ 1796096866059 1796269648000 2
    run batch16 16 12500 4 "$batch" 6 $kw 1 1796096866059 1796269648000 $b16
    run reservebatch6 6 33000 4 "$rbatch" 6 $kw 1796096866059 1796269648000 2 $rb6
    run reservebatch16 16 12500 4 "$rbatch" 6 $kw 1796096866059 1796269648000 2 $rb16
    run single+h 1 200000 4 "$new" 7 $kh u:__rand_int__ 1 1 t:__rand_int__ 1796096866059 1796269648000 2
    run single+h+alias 1 200000 4 "$new" 7 $kh u:__rand_int__ 1 1 t:__rand_int__ 1796096866059 1796269648000 2 00c1d2e3f4a5b6c7d8e9f0a1
    run reservebatch16+h 16 12500 4 "$rbatch" 7 $kh 1796096866059 1796269648000 2 $rb16
    run reservebatch16+h+alias 16 12500 4 "$rbatch" 7 $kh 1796096866059 1796269648000 2a $rb16 $al16; }
done
echo "  (winners so far: $(r hlen "w:$W:users"); every later round meets bigger hashes)"
