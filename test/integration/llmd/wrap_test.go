package llmd

import (
	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// wrapServer is where the EPP's ext_proc wrapper goes around GIE's StreamingServer.
func wrapServer(s extProcPb.ExternalProcessorServer) extProcPb.ExternalProcessorServer { return s }
