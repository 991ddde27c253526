#!/usr/bin/env bash
# Makes sure redis-server and redis-cli are installed: the tests and the demo
# start their own throwaway servers. Installs them with apt-get when run as
# root; otherwise says exactly what to run.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "redis-server not found: installing it (apt-get install -y redis-server)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq redis-server >/dev/null
  command -v redis-server >/dev/null 2>&1 && exit 0
fi
cat >&2 <<'MSG'
redis-server is not installed, and this script cannot install it (not root, or no apt-get).
Install it, then run the command again:
    sudo apt-get update && sudo apt-get install -y redis-server
MSG
exit 1
