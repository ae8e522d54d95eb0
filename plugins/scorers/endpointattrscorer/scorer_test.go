package endpointattrscorer

import (
	"context"
	"encoding/json"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/internal/scalar"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func TestScore(t *testing.T) {
	s, err := Factory("gpu", json.RawMessage(`{"attributeKey":"GPUUtilization","producer":"dcgm-extractor",
	  "algorithm":{"type":"linear_lower_is_better","normalization":{"fixedRange":{"min":0.0,"max":1.0}}}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	mk := func(v float64) fwksched.Endpoint {
		e := eptest.Scheduling(eptest.Spec{Name: "p", NoMetrics: true})
		if v >= 0 {
			e.Put(scalar.Key("GPUUtilization", "dcgm-extractor"), &scalar.Value{V: v})
		}
		return e
	}
	for v, want := range map[float64]float64{0: 1, 0.25: 0.75, 1: 0, 1.5: 0, -1: 0} {
		e := mk(v)
		if got := s.(*Scorer).Score(context.Background(), nil, nil, []fwksched.Endpoint{e})[e]; got != want {
			t.Errorf("utilisation %v scored %v, want %v", v, got, want)
		}
	}
	if _, err := Factory("x", json.RawMessage(`{"attributeKey":"a","producer":"p","algorithm":{"type":"linear_lower_is_better","normalization":{"fixedRange":{"min":1,"max":1}}}}`), nil); err == nil {
		t.Fatal("empty range accepted")
	}
}
