package lab

import (
	"fmt"
	"strconv"

	"github.com/pdgate/pdgate/cmd/epp/endpoints"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Data-parallel pods: a pod group with dataParallelSize N > 1 runs one simulator
// process per pod serving N vLLM DP ranks on consecutive ports, each its own engine and KV
// cache (cmd/sim --data-parallel-size), as vLLM's wide-EP/DP deployments expose one port per
// rank. Layout on the pod's loopback address:
//
//   - prefill pods (no sidecar): rank r on 8000 + r; the EPP sees one endpoint per rank,
//     "<pod>-rank-<r>", labelled pdgate.io/dp-rank, so the prefill profile picks a rank;
//   - decode and combined pods: the sidecar on 8000 (--data-parallel-size N) and rank r's
//     engine on 8200 + r (llm-d's layout: the sidecar owns the pod's primary port). The EPP
//     sees the sidecar as one endpoint, or with rankEndpoints one endpoint per rank at
//     8000 + r (an InferencePool with a targetPort per rank): data-parallel-profile-handler
//     then sends the gateway to 8000 and names the rank in x-data-parallel-host-port.
//
// The sidecar pins the decode leg to the rank the prefill reported (remote_dp_rank), so a
// request's decode runs on the same rank index as its prefill.

// DPRankLabel is the endpoint label holding a rank endpoint's data-parallel rank.
const DPRankLabel = "pdgate.io/dp-rank"

func validDataParallel(p PodSpec) error {
	n := p.DataParallelSize
	switch {
	case n < 0 || n > 16:
		return fmt.Errorf("dataParallelSize: must be in 1..16, got %d", n)
	case n > 1 && p.Engine != EngineVLLM:
		return fmt.Errorf("dataParallelSize: data-parallel ranks are simulated for vllm only, got %s", p.Engine)
	case n > 1 && p.Role == RoleEncode:
		return fmt.Errorf("dataParallelSize: not for encode pods")
	case p.RankEndpoints && (n <= 1 || !DecodeCapable(p.Role)):
		return fmt.Errorf("rankEndpoints: only for decode or combined pods with dataParallelSize > 1")
	}
	return nil
}

// DataParallel reports whether the pod serves several ranks.
func (p Pod) DataParallel() bool { return p.dpSize > 1 }

// DataParallelSize is the number of ranks the pod serves (1 without DP).
func (p Pod) DataParallelSize() int {
	if p.dpSize < 1 {
		return 1
	}
	return p.dpSize
}

// RankEngineAddr is rank r's engine address.
func (p Pod) RankEngineAddr(r int) string {
	return protocol.FormatHostPort(p.IP, strconv.Itoa(p.enginePort+r))
}

// RankEndpointName is the EPP endpoint name of rank r (GIE's "<pod>-rank-<r>").
func RankEndpointName(pod string, r int) string { return pod + "-rank-" + strconv.Itoa(r) }

// rankEndpoints reports whether the EPP sees the pod as one endpoint per rank.
func (p Pod) rankEndpoints() bool {
	return p.DataParallel() && (!p.HasSidecar() || p.Spec.RankEndpoints)
}

// endpointRecords are the pod's entries in the standalone endpoints file.
func (p *Plan) endpointRecords(pod Pod) []endpoints.Endpoint {
	labels, ann := p.Labels(pod), p.Annotations(pod)
	if !pod.rankEndpoints() {
		port := pod.enginePort
		if pod.HasSidecar() {
			port = pod.sidecarPort
		}
		return []endpoints.Endpoint{{Name: pod.Name, Namespace: Namespace, Address: pod.IP, Port: port,
			MetricsPort: pod.enginePort, Labels: labels, Annotations: ann}}
	}
	base := pod.enginePort
	if pod.HasSidecar() {
		base = pod.sidecarPort
	}
	var out []endpoints.Endpoint
	for r := 0; r < pod.dpSize; r++ {
		l := map[string]string{DPRankLabel: strconv.Itoa(r)}
		for k, v := range labels {
			l[k] = v
		}
		l[podmodel.LabelPort] = strconv.Itoa(pod.enginePort + r)
		out = append(out, endpoints.Endpoint{Name: RankEndpointName(pod.Name, r), Namespace: Namespace,
			Address: pod.IP, Port: base + r, MetricsPort: pod.enginePort + r, Labels: l, Annotations: ann})
	}
	return out
}

// rankAddrs lists every address of the pod's ranks beyond rank 0: engines and, with
// rankEndpoints, the rank endpoint addresses the EPP names (never dialled: the
// data-parallel-profile-handler rewrites them to the sidecar's port).
func (pod Pod) rankAddrs() (engines, endpoints []string) {
	for r := 1; r < pod.dpSize; r++ {
		engines = append(engines, pod.RankEngineAddr(r))
		if pod.rankEndpoints() && pod.HasSidecar() {
			endpoints = append(endpoints, protocol.FormatHostPort(pod.IP, strconv.Itoa(pod.sidecarPort+r)))
		}
	}
	return engines, endpoints
}
