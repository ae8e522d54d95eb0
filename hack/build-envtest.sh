#!/usr/bin/env bash
# Builds the envtest control plane (kube-apiserver and etcd) from the Go module proxy into
# bin/envtest/, the directory KUBEBUILDER_ASSETS points at. Versions are pinned; a binary that
# is already built for the pinned version is kept. No prebuilt binary is downloaded.
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.35.3}"        # k8s.io/kubernetes
STAGING_VERSION="${STAGING_VERSION:-v0.35.3}"  # matching k8s.io/* staging modules
ETCD_VERSION="${ETCD_VERSION:-v3.6.5}"         # the etcd kubernetes ${KUBE_VERSION} is tested with

root="$(cd "$(dirname "$0")/.." && pwd)"
out="${root}/bin/envtest"
stamp="${out}/.versions"
want="kube-apiserver=${KUBE_VERSION} etcd=${ETCD_VERSION}"
mkdir -p "${out}"
if [[ -x "${out}/kube-apiserver" && -x "${out}/etcd" && -f "${stamp}" && "$(cat "${stamp}")" == "${want}" ]]; then
  echo "envtest binaries up to date in ${out} (${want})"
  exit 0
fi

work="${root}/bin/.envtest-src"
rm -rf "${work}"
mkdir -p "${work}/apiserver" "${work}/etcd"

# kube-apiserver: k8s.io/kubernetes replaces its staging modules with ./staging paths, which
# do not exist in the module zip; point them at the published k8s.io/* modules instead.
staging=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
  cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api
  cri-client csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms
  kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics
  mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller)
{
  echo "module pdgate.local/envtest-apiserver"
  echo
  echo "go 1.25.0"
  echo
  echo "require k8s.io/kubernetes ${KUBE_VERSION}"
  echo
  echo "replace ("
  for m in "${staging[@]}"; do echo "	k8s.io/${m} => k8s.io/${m} ${STAGING_VERSION}"; done
  echo ")"
} > "${work}/apiserver/go.mod"
cat > "${work}/apiserver/tools.go" <<'GO'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
(
  cd "${work}/apiserver"
  GOFLAGS=-mod=mod go mod tidy >/dev/null
  echo "building kube-apiserver ${KUBE_VERSION} (several minutes on a cold cache)"
  CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags="-s -w" -o "${out}/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
)

cat > "${work}/etcd/go.mod" <<GO
module pdgate.local/envtest-etcd

go 1.25.0

require go.etcd.io/etcd/server/v3 ${ETCD_VERSION}
GO
cat > "${work}/etcd/tools.go" <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
(
  cd "${work}/etcd"
  GOFLAGS=-mod=mod go mod tidy >/dev/null
  echo "building etcd ${ETCD_VERSION}"
  CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags="-s -w" -o "${out}/etcd" go.etcd.io/etcd/server/v3
)

echo "${want}" > "${stamp}"
rm -rf "${work}"
echo "envtest binaries ready in ${out}: export KUBEBUILDER_ASSETS=${out}"
