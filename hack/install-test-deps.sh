#!/usr/bin/env bash
# Installs the Debian packages the integration and e2e tests need (real redis-server, and a real
# prometheus server for the dashboard e2e test and `pdgate lab --prometheus`).
# Idempotent: does nothing when everything is present.
set -euo pipefail
need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
if ((${#need[@]})); then
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
# The Debian package starts a system redis on 6379; tests start their own on free ports.
# The Debian package's service is not needed either: the lab starts its own on a free port.
echo "test dependencies present: redis-server $(redis-server --version | awk '{print $3}'), $(prometheus --version 2>&1 | head -1)"
