package loadawarescorer

import (
	"context"
	"encoding/json"
	"testing"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func TestScore(t *testing.T) {
	tests := []struct {
		name   string
		params string
		queue  int
		want   float64
	}{
		{"empty queue", `{}`, 0, 0.5},
		{"half the default threshold", `{}`, 64, 0.25},
		{"at the threshold", `{}`, 128, 0},
		{"over the threshold", `{}`, 500, 0},
		{"custom threshold", `{"threshold":10}`, 5, 0.25},
		{"non-positive threshold takes the default", `{"threshold":0}`, 64, 0.25},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Factory("s", json.RawMessage(tt.params), nil)
			if err != nil {
				t.Fatal(err)
			}
			ep := eptest.Scheduling(eptest.Spec{Name: "p", Metrics: &fwkdl.Metrics{WaitingQueueSize: tt.queue}})
			if got := p.(*Scorer).Score(context.Background(), nil, nil, []fwksched.Endpoint{ep})[ep]; got != tt.want {
				t.Fatalf("score %v, want %v", got, tt.want)
			}
		})
	}
}
