#!/usr/bin/env bash
# Installs the Debian packages the integration and e2e tests need (real redis-server).
# Idempotent: does nothing when everything is present.
set -euo pipefail
need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
if ((${#need[@]})); then
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
# The Debian package starts a system redis on 6379; tests start their own on free ports.
echo "test dependencies present: redis-server $(redis-server --version | awk '{print $3}')"
