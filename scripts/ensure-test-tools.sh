#!/usr/bin/env bash
# Installs the optional tools some tests use, when run as root with apt-get:
#   promtool (Debian package prometheus): deploy/prometheus alert unit tests
#   chromium: the admin dashboard test renders the page headless
# Without them those tests skip; this script never fails the build.
# The prometheus package's service must not keep running: it would listen
# on :9090 and other ports the tests may use. policy-rc.d stops apt from
# starting it; any prometheus process left is stopped by its pid.
set -uo pipefail
need=()
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || need+=(chromium)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "optional test tools missing (${need[*]}): their tests will skip. Install: sudo apt-get install -y ${need[*]}" >&2
  exit 0
fi
echo "installing optional test tools: ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
added_policy=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && added_policy=1
fi
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null || echo "apt-get install ${need[*]} failed: those tests will skip" >&2
[ -n "$added_policy" ] && rm -f /usr/sbin/policy-rc.d
# The package just installed started its service anyway (no policy-rc.d
# support): stop that server, by pid.
if [[ " ${need[*]} " == *" prometheus "* ]]; then
  for pid in $(pgrep -x -u prometheus prometheus 2>/dev/null); do
    kill "$pid" 2>/dev/null || true
  done
fi
exit 0
