#!/usr/bin/env bash
# Builds the images the chart runs (epp, sidecar, sim) with docker or podman:
#   REGISTRY=registry.example.com TAG=v0.1.0 hack/build-images.sh [--push]
set -euo pipefail
cd "$(dirname "$0")/.."
engine="${CONTAINER_ENGINE:-$(command -v docker || command -v podman || true)}"
[[ -n "${engine}" ]] || { echo "no docker or podman found" >&2; exit 1; }
registry="${REGISTRY:-ghcr.io}"; tag="${TAG:-latest}"
for b in epp sidecar sim; do
  ref="${registry}/pdgate/${b}:${tag}"
  "${engine}" build -f hack/images/Dockerfile --build-arg BINARY="${b}" -t "${ref}" .
  [[ "${1:-}" == "--push" ]] && "${engine}" push "${ref}"
done
