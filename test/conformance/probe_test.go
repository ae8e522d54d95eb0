package conformance

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// probeType is a test plugin both paths load from the same config: a PrepareData plugin that
// can block (the EPP-side timeout case) and a ResponseBody plugin that counts end-of-stream
// calls (the release hook a ledger relies on when a client goes away).
const probeType = "conformance-probe"

type probeParams struct {
	// ID names the instance, so a test finds the one its EPP built.
	ID string `json:"id"`
	// Block makes PrepareRequestData wait this long, or until its context ends.
	Block string `json:"block"`
}

type probe struct {
	tn    fwkplugin.TypedName
	block time.Duration

	prepared    atomic.Int32
	prepareDone atomic.Int32 // PrepareRequestData calls that returned
	sawCancel   atomic.Bool  // the PrepareData context ended before the block elapsed
	bodyEOS     atomic.Int32 // ResponseBody calls with EndOfStream
}

var probes sync.Map // id → *probe

func probeFactory(name string, raw json.RawMessage, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	var p probeParams
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, err
		}
	}
	pr := &probe{tn: fwkplugin.TypedName{Type: probeType, Name: name}}
	if p.Block != "" {
		d, err := time.ParseDuration(p.Block)
		if err != nil {
			return nil, err
		}
		pr.block = d
	}
	probes.Store(p.ID, pr)
	return pr, nil
}

func probeByID(id string) *probe {
	v, _ := probes.Load(id)
	p, _ := v.(*probe)
	return p
}

var (
	_ fwkrc.PrepareDataPlugin = (*probe)(nil)
	_ fwkrc.ResponseBody      = (*probe)(nil)
)

func (p *probe) TypedName() fwkplugin.TypedName { return p.tn }
func (p *probe) Produces() map[string]any       { return nil }
func (p *probe) Consumes() map[string]any       { return nil }

func (p *probe) PrepareRequestData(ctx context.Context, _ *fwksched.LLMRequest, _ []fwksched.Endpoint) error {
	p.prepared.Add(1)
	defer p.prepareDone.Add(1)
	if p.block <= 0 {
		return nil
	}
	select {
	case <-time.After(p.block):
	case <-ctx.Done():
		p.sawCancel.Store(true)
	}
	return nil
}

func (p *probe) ResponseBody(_ context.Context, _ *fwksched.LLMRequest, r *fwkrc.Response, _ *fwkdl.EndpointMetadata) {
	if r != nil && r.EndOfStream {
		p.bodyEOS.Add(1)
	}
}
