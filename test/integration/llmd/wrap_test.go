package llmd

import (
	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/pdgate/pdgate/cmd/epp/extproc"
)

// wrapServer puts the EPP's ext_proc wrapper (routing-header stripping and removal, immediate
// answers such as the conditional-decode 412) around GIE's StreamingServer, as the EPP does.
func wrapServer(s extproc.Processor) extProcPb.ExternalProcessorServer {
	return extproc.New(s, extproc.Options{})
}
