package contract

import (
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
)

// PrefillReleaser is implemented by plugins holding a per-request charge on the prefill pod
// whose active part ends when the prefill leg returns (pd-token-ledger). With
// --prefill-release-address the EPP gives the sidecar a signed callback
// (protocol.HeaderPrefillRelease); when the sidecar reports that the request's prefill leg
// returned, the EPP calls ReleasePrefillActive on every configured PrefillReleaser. The
// response-header hook may release the same charge again later: implementations must make a
// second release (and a release for an unknown request) a no-op.
type PrefillReleaser interface {
	fwkplugin.Plugin
	ReleasePrefillActive(requestID string)
}

// PrefillReleasers returns the configured plugins implementing PrefillReleaser.
func PrefillReleasers(plugins []fwkplugin.Plugin) []PrefillReleaser {
	return implementing[PrefillReleaser](plugins)
}
