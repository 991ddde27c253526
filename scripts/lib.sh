# Shared helpers of the benchmark scripts (source it; it runs nothing).

# port prints a free TCP port on 127.0.0.1.
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

# sale_window SECONDS sets $start (a minute ago) and $end (SECONDS from now),
# RFC 3339 in UTC, for an activity that is open now.
sale_window() {
  local now; now=$(date -u +%s)
  start=$(date -u -d "@$((now - 60))" +%Y-%m-%dT%H:%M:%SZ)
  end=$(date -u -d "@$((now + $1))" +%Y-%m-%dT%H:%M:%SZ)
}

# proxy_head LISTEN ADMIN SHOP REDIS prints the top of a proxy config whose
# local limits never refuse: benchmarks measure the path, not a 429.
proxy_head() {
  cat <<YAML
listen: "127.0.0.1:$1"
admin: { listen: "127.0.0.1:$2" }
upstream: { url: "http://127.0.0.1:$3", timeout: 3s }
redis: { addrs: ["127.0.0.1:$4"] }
limits:
  per_ip: { rate: 1000000, burst: 1000000 }
  per_device: { rate: 1000000, burst: 1000000 }
  per_user: { rate: 1000000, burst: 1000000 }
YAML
}

# bench_setup NAME "PACKAGES" TOOL...: exits 2 naming the packages to install when a TOOL is
# missing; makes the work dir $w and the process list $pids (append every background process:
# killed in reverse order and the dir removed on exit); builds seckill-proxy and seckill-bench
# into $w unless $BIN names prebuilt ones. Call it from the repository root.
bench_setup() {
  local name=$1 packages=$2; shift 2
  for c in "$@"; do
    command -v "$c" >/dev/null || { echo "$name: $c not found (apt-get install -y $packages)" >&2; exit 2; }
  done
  w=$(mktemp -d); pids=()
  trap bench_cleanup EXIT
  if [ -z "${BIN:-}" ]; then
    go build -o "$w/" ./cmd/seckill-proxy ./cmd/seckill-bench
    BIN=$w
  fi
}

bench_cleanup() {
  for ((i=${#pids[@]}-1; i>=0; i--)); do kill "${pids[i]}" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$w"
}
