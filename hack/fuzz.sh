#!/usr/bin/env bash
# Runs every Fuzz* target in the module for a bounded time each (default 10s).
set -euo pipefail
t="${1:-10s}"
cd "$(dirname "$0")/.."
for pkg in $(go list ./... | grep -v '/hack/'); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | awk '{print $2}'); do
    echo "== $pkg $f ($t)"
    go test -run '^$' -fuzz "^${f}\$" -fuzztime "$t" "$pkg"
  done
done
