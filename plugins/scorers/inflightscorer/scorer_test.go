package inflightscorer

import (
	"context"
	"testing"

	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	attrconcurrency "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/attribute/concurrency"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requestcontrol/requestdataproducer/inflightload"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/scorer/tokenload"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func TestParseParameters(t *testing.T) {
	tests := []struct {
		name, raw, wantErr string
		want               int64
	}{
		{name: "defaults", raw: ``, want: DefaultQueueThresholdTokens},
		{name: "null", raw: `null`, want: DefaultQueueThresholdTokens},
		{name: "set", raw: `{"queueThresholdTokens":131072}`, want: 131072},
		{name: "zero", raw: `{"queueThresholdTokens":0}`, wantErr: "inflight-load-scorer: parameter queueThresholdTokens=0: must be > 0"},
		{name: "negative", raw: `{"queueThresholdTokens":-5}`, wantErr: "queueThresholdTokens=-5"},
		{name: "unknown field", raw: `{"threshold":1}`, wantErr: `inflight-load-scorer "test": invalid parameters: json: unknown field "threshold"`},
		{name: "wrong type", raw: `{"queueThresholdTokens":"many"}`, wantErr: `inflight-load-scorer "test": invalid parameters`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParseParameters("test", []byte(tt.raw))
			if plugintest.WantErr(t, err, tt.wantErr) {
				return
			}
			if p.QueueThresholdTokens != tt.want {
				t.Fatalf("got %+v %v, want %d", p, err, tt.want)
			}
		})
	}
}

func endpoint(name string, load *attrconcurrency.InFlightLoad) fwksched.Endpoint {
	ep := eptest.Scheduling(eptest.Spec{Namespace: "ns", Name: name})
	if load != nil {
		ep.Put(attrconcurrency.InFlightLoadKey, load)
	}
	return ep
}

func TestScore(t *testing.T) {
	s, err := Factory("stuck", []byte(`{"queueThresholdTokens":1000}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	sc := s.(*Scorer)
	if sc.TypedName() != (fwkplugin.TypedName{Type: Type, Name: "stuck"}) || sc.Consumes() != nil || sc.Category() != fwksched.Distribution {
		t.Fatalf("typed name %v, consumes %v, category %v", sc.TypedName(), sc.Consumes(), sc.Category())
	}
	tests := []struct {
		name string
		load *attrconcurrency.InFlightLoad
		want float64
	}{
		{name: "no attribute", load: nil, want: 1},
		{name: "idle", load: &attrconcurrency.InFlightLoad{}, want: 1},
		{name: "a quarter", load: &attrconcurrency.InFlightLoad{Tokens: 250, Requests: 1}, want: 0.75},
		{name: "over the threshold", load: &attrconcurrency.InFlightLoad{Tokens: 5000, Requests: 9}, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ep := endpoint(tt.name, tt.load)
			got := sc.Score(context.Background(), nil, &fwksched.LLMRequest{}, []fwksched.Endpoint{ep})[ep]
			if got != tt.want {
				t.Fatalf("score %v, want %v", got, tt.want)
			}
		})
	}
}

// GIE's own scorer cannot be configured with the producer (v1.5.0 compares the two attribute
// pointers); this one can. If GIE fixes the check, the first case fails and this package can go.
func TestRunsWithTheProducer(t *testing.T) {
	producer, err := inflightload.InFlightLoadProducerFactory("producer", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	gie, err := tokenload.TokenLoadScorerFactory("gie", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ours, err := Factory("ours", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		scorer  fwkplugin.Plugin
		wantErr string
	}{
		{name: "GIE token-load-scorer", scorer: gie, wantErr: "data type mismatch"},
		{name: "inflight-load-scorer", scorer: ours},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := datalayer.ValidateAndOrderDataDependencies([]fwkplugin.Plugin{producer, tt.scorer})
			plugintest.WantErr(t, err, tt.wantErr)
		})
	}
}
