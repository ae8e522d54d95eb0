package aibrixpdpair

import (
	"fmt"
	"sync"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/aibrix/internal/prefillpolicy"
	"github.com/pdgate/pdgate/plugins/lib/engineattr"
	"github.com/pdgate/pdgate/plugins/lib/pdknobs"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/lib/tokenload"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

type podSpec struct {
	name, role, roleset string
	config              string
	metrics             *engineattr.Metrics
	extra               map[string]string
}

func mkEndpoint(s podSpec) fwksched.Endpoint {
	labels := map[string]string{}
	if s.role != "" {
		labels[podmodel.LabelRoleName] = s.role
	}
	if s.roleset != "" {
		labels[podmodel.LabelRolesetName] = s.roleset
	}
	if s.config != "" {
		labels[protocol.AnnotationLabelPrefix+podmodel.AnnotationConfig] = s.config
	}
	for k, v := range s.extra {
		labels[k] = v
	}
	ep := eptest.Scheduling(eptest.Spec{Namespace: "ns", Name: s.name + "-rank-0", PodName: s.name,
		Address: "10.0.0." + fmt.Sprint(len(s.name)), Port: "8000", Labels: labels})
	if s.metrics != nil {
		ep.Put(engineattr.AttributeKey, s.metrics)
	}
	return ep
}

func mkPods(specs ...podSpec) ([]podmodel.Pod, []fwksched.Endpoint) {
	var pods []podmodel.Pod
	var eps []fwksched.Endpoint
	for _, s := range specs {
		ep := mkEndpoint(s)
		eps = append(eps, ep)
		pods = append(pods, podmodel.FromEndpoint(ep))
	}
	return pods, eps
}

func bucketCfg(lo, hi int, combined bool) string {
	return fmt.Sprintf(`{"profiles":{"default":{"routingStrategy":"pd","routingConfig":{"promptLenBucketMinLength":%d,"promptLenBucketMaxLength":%d,"combined":%v}}}}`, lo, hi, combined)
}

func newSel(t *testing.T, ledger LedgerSource) *Selector {
	t.Helper()
	return NewSelector(NewTracker(0, nil), prefillpolicy.NewPrefixTable(4, 1<<16), ledger, nil, 1)
}

func knobs(mut func(*pdknobs.Knobs)) pdknobs.Knobs {
	k := pdknobs.Defaults()
	if mut != nil {
		mut(&k)
	}
	return k
}

// fakeLedger implements tokenload.Ledger with one lock, recording whether charges happen
// inside Atomically.
type fakeLedger struct {
	mu        sync.Mutex
	inTx      bool
	prefill   map[tokenload.PodKey]float64
	decode    map[tokenload.PodKey]float64
	charges   []string
	outsideTx int
}

func newFakeLedger() *fakeLedger {
	return &fakeLedger{prefill: map[tokenload.PodKey]float64{}, decode: map[tokenload.PodKey]float64{}}
}

type fakeTx struct{ l *fakeLedger }

func (x fakeTx) Prefill(p tokenload.PodKey) tokenload.PrefillLoad {
	return tokenload.PrefillLoad{ActiveTokens: x.l.prefill[p]}
}
func (x fakeTx) Decode(p tokenload.PodKey, _ tokenload.DecodeRate) float64 { return x.l.decode[p] }
func (x fakeTx) ChargePrefill(c tokenload.PrefillCharge) {
	if !x.l.inTx {
		x.l.outsideTx++
	}
	x.l.prefill[c.Pod] += c.Tokens
	x.l.charges = append(x.l.charges, fmt.Sprintf("prefill %s %g", c.Pod, c.Tokens))
}
func (x fakeTx) ChargeDecode(c tokenload.DecodeCharge) {
	if !x.l.inTx {
		x.l.outsideTx++
	}
	x.l.decode[c.Pod] += c.Tokens
	x.l.charges = append(x.l.charges, fmt.Sprintf("decode %s %g", c.Pod, c.Tokens))
}

func (l *fakeLedger) Atomically(fn func(tx tokenload.Tx)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inTx = true
	fn(fakeTx{l})
	l.inTx = false
}
func (l *fakeLedger) NewTokens(_, _ string, prompt int, match int) int {
	if match >= 0 {
		return prompt * (100 - min(match, 100)) / 100
	}
	return prompt
}
func (l *fakeLedger) ReleasePrefillActive(string) {}
func (l *fakeLedger) ReleaseAll(string)           {}

func (l *fakeLedger) source() LedgerSource {
	return func() (tokenload.Ledger, tokenload.Defaults, error) {
		return l, tokenload.Defaults{RequestCost: 3500, KVWeight: 0.3}, nil
	}
}
