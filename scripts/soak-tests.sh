#!/usr/bin/env bash
# Prints the soak tests of internal/e2e as one -run alternation (a|b|c):
# every Test function whose first statement is `Soak(t)` or `e2e.Soak(t)`
# (internal/e2e/harness.go). `make test-soak` runs them.
set -euo pipefail
cd "$(dirname "$0")/.."
awk '/^func Test/ { n = $2; sub(/\(.*/, "", n) }
     /^\t(e2e\.)?Soak\(t\)$/ { print n }' internal/e2e/*_test.go | paste -sd'|' -
