package proxy

import (
	"encoding/json"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/pdgate/pdgate/cmd/sidecar/jsonbody"
)

// Data-parallel decode engines (vLLM --data-parallel-size N behind one sidecar): rank r of
// the local engine listens on the --engine-url port + r. The decode leg goes to
//
//  1. the rank the prefill engine reports in its kv_transfer_params (vLLM's remote_dp_rank):
//     the decode is pinned to the prefill's rank;
//  2. else the rank named by x-data-parallel-host-port (llm-d's data-parallel-profile-handler:
//     the rank endpoint's port, the sidecar's --listen port + r);
//  3. else the --engine-url port (or x-pdgate-decoder-port), rank 0.
//
// With --kv-side-channel-port-stride S > 0, a prefill that reports rank r gets its
// remote_port (the NIXL side channel the decode engine connects to) offset by r × S: vLLM's
// DP ranks each serve their own side-channel port.

// DataParallel configures the rank handling; the zero value (size 0 or 1) turns it off.
type DataParallel struct {
	// Size is the number of ranks of the local decode engine.
	Size int
	// ListenPort is the sidecar's --listen port (rank 0's endpoint port).
	ListenPort int
	// SideChannelStride offsets the reported remote_port by rank × stride (0 = off).
	SideChannelStride int
}

// enabled reports whether ranks are in use.
func (d DataParallel) enabled() bool { return d.Size > 1 }

// ranks maps data-parallel ranks to the local engine's ports.
type ranks struct {
	dp DataParallel
	// engineURL is --engine-url: rank 0's port.
	engineURL *url.URL
}

// port is the local engine port of rank r ("" when r is out of range).
func (k ranks) port(r int) string {
	dp := k.dp
	if !dp.enabled() || r < 0 || r >= dp.Size {
		return ""
	}
	base, err := strconv.Atoi(k.engineURL.Port())
	if err != nil {
		return ""
	}
	return strconv.Itoa(base + r)
}

// fromHeader maps x-data-parallel-host-port ("host:port" of the rank endpoint) to the engine
// port of that rank; "" when absent, malformed or out of range.
func (k ranks) fromHeader(v string) string {
	dp := k.dp
	v = strings.TrimSpace(v)
	if !dp.enabled() || v == "" || dp.ListenPort == 0 {
		return ""
	}
	_, port, err := net.SplitHostPort(v)
	if err != nil {
		return ""
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return ""
	}
	return k.port(n - dp.ListenPort)
}

// pin applies the prefill's reported rank to the decode leg and the side-channel port; it
// returns the rank (-1 when none was reported or ranks are off).
func (k ranks) pin(rq *request, params *jsonbody.Object) int {
	dp := k.dp
	if !dp.enabled() || params == nil {
		return -1
	}
	raw, ok := params.Raw("remote_dp_rank")
	if !ok {
		return -1
	}
	var r int
	if json.Unmarshal(raw, &r) != nil || r < 0 {
		return -1
	}
	if port := k.port(r); port != "" {
		rq.decoderPort = port
	} else {
		rq.log.Info("prefill reported a data-parallel rank outside --data-parallel-size; decode keeps its port", "remote_dp_rank", r, "size", dp.Size)
		return -1
	}
	if dp.SideChannelStride > 0 {
		if raw, ok := params.Raw("remote_port"); ok {
			var base int
			if json.Unmarshal(raw, &base) == nil && base > 0 {
				params.SetInt("remote_port", int64(base+r*dp.SideChannelStride))
			}
		}
	}
	rq.log.V(1).Info("decode pinned to the prefill's data-parallel rank", "rank", r, "port", rq.decoderPort)
	return r
}
