package simbench

import (
	"fmt"
	"net"

	"k8s.io/apimachinery/pkg/types"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"

	"github.com/pdgate/pdgate/cmd/pdgate/lab"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Pod roles in a simulated fleet.
const (
	RolePrefill  = "prefill"
	RoleDecode   = "decode"
	RoleCombined = "combined"
)

// PodSpec is one simulated pod as the EPP sees it.
type PodSpec struct {
	Name   string
	Role   string // prefill, decode or combined
	Engine string // vllm
	IP     string
	Port   string
	// Labels are the endpoint labels, pod annotations already mirrored under
	// protocol.AnnotationLabelPrefix as the EPP does.
	Labels map[string]string
}

// Addr is host:port, the form of x-prefiller-host-port.
func (p PodSpec) Addr() string { return net.JoinHostPort(p.IP, p.Port) }

func (p PodSpec) metadata() *fwkdl.EndpointMetadata {
	nn := types.NamespacedName{Namespace: "default", Name: p.Name}
	return &fwkdl.EndpointMetadata{NamespacedName: nn, PodName: p.Name, Address: p.IP, Port: p.Port, Labels: p.Labels}
}

// FleetPD is n pods as rolesets of one prefill and one decode pod, labelled for both llm-d
// (llm-d.ai/role) and AIBrix (role-name, roleset-name), the way `pdgate lab` labels pods, so
// every P/D config routes the same fleet.
func FleetPD(n int, model string) []PodSpec {
	out := make([]PodSpec, n)
	for i := range out {
		role := RolePrefill
		if i%2 == 1 {
			role = RoleDecode
		}
		out[i] = fleetPod(i, role, model)
		out[i].Labels[podmodel.LabelRoleName] = role
		out[i].Labels[podmodel.LabelRolesetName] = fmt.Sprintf("rs-%d", i/2)
	}
	return out
}

// FleetCombined is n combined pods (prefill and decode on one GPU each).
func FleetCombined(n int, model string) []PodSpec {
	out := make([]PodSpec, n)
	for i := range out {
		out[i] = fleetPod(i, RoleCombined, model)
	}
	return out
}

func fleetPod(i int, role, model string) PodSpec {
	llmd := map[string]string{RolePrefill: "prefill", RoleDecode: "decode", RoleCombined: "both"}[role]
	return PodSpec{
		Name: fmt.Sprintf("%s-%d", role, i), Role: role, Engine: "vllm",
		IP: fmt.Sprintf("10.%d.%d.%d", 1+i>>16&255, i>>8&255, i&255), Port: "8000",
		Labels: map[string]string{
			podmodel.LabelLLMDRole: llmd, podmodel.LabelModelName: model, podmodel.LabelEngine: "vllm",
			podmodel.LabelPort: "8000", podmodel.LabelGIEEngineType: "vllm",
		},
	}
}

// FleetFromLab lays out a lab topology exactly as `pdgate lab` shows it to the EPP: the same
// labels and annotations, and the sidecar's port as the endpoint of decode-capable pods.
func FleetFromLab(t *lab.Topology) ([]PodSpec, error) {
	plan, err := lab.NewPlan(t, lab.PlanOptions{Subnet: "127.0.10"})
	if err != nil {
		return nil, fmt.Errorf("lay out topology %s: %w", t.Name, err)
	}
	out := make([]PodSpec, 0, len(plan.Pods))
	for _, p := range plan.Pods {
		role := p.Role
		if role != RolePrefill && role != RoleDecode && role != RoleCombined {
			return nil, fmt.Errorf("topology %s: pod %s has role %q; the simulation models prefill, decode and combined pods", t.Name, p.Name, role)
		}
		host, port, err := net.SplitHostPort(p.Endpoint())
		if err != nil {
			return nil, fmt.Errorf("pod %s endpoint: %w", p.Name, err)
		}
		labels := plan.Labels(p)
		for k, v := range plan.Annotations(p) {
			labels[protocol.AnnotationLabelPrefix+k] = v
		}
		out = append(out, PodSpec{Name: p.Name, Role: role, Engine: p.Engine, IP: host, Port: port, Labels: labels})
	}
	return out, nil
}
