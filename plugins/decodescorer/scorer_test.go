package decodescorer

import (
	"context"
	"math"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/enginemetrics"
)

func TestNormalize(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	tests := []struct {
		in, want []float64
	}{
		{[]float64{}, []float64{}},
		{[]float64{5}, []float64{1}},
		{[]float64{2, 2}, []float64{1, 1}},
		{[]float64{1, 3, 2}, []float64{1, 0, 0.5}},
		{[]float64{1, inf, nan}, []float64{1, 0, 0}},
		{[]float64{nan, nan}, []float64{0, 0}},
		{[]float64{math.Inf(-1), 3}, []float64{1, 1}},
	}
	for _, tt := range tests {
		got := Normalize(tt.in)
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("Normalize(%v)=%v want %v", tt.in, got, tt.want)
				break
			}
		}
	}
}

func ep(name string, m *enginemetrics.Metrics) fwksched.Endpoint {
	e := fwksched.NewEndpoint(&fwkdl.EndpointMetadata{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}, PodName: name}, fwkdl.NewMetrics(), nil)
	if m != nil {
		e.Put(enginemetrics.AttributeKey, m)
	}
	return e
}

func TestScorerPlugin(t *testing.T) {
	if _, err := Factory("d", []byte(`{"decodeScorePolicy":"token_load"}`), nil); err == nil || !strings.Contains(err.Error(), "aibrix-pd-pair") {
		t.Fatalf("token_load must be refused: %v", err)
	}
	pl, err := Factory("d", []byte(`{"decodeScorePolicy":"least_request"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := pl.(*Scorer)
	busy := ep("busy", &enginemetrics.Metrics{Running: 9, HasRunning: true})
	idle := ep("idle", &enginemetrics.Metrics{Running: 1, HasRunning: true})
	cold := ep("cold", nil) // cold start: 1 + pending(0) = 1
	got := s.Score(context.Background(), nil, &fwksched.LLMRequest{Headers: map[string]string{}}, []fwksched.Endpoint{busy, idle, cold})
	if got[busy] != 0 || got[idle] != 1 || got[cold] != 1 {
		t.Fatalf("scores %v", got)
	}
}
