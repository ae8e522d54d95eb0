package aibrixdecodescorer

import (
	"context"
	"strings"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/lib/engineattr"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func ep(name string, m *engineattr.Metrics) fwksched.Endpoint {
	e := eptest.Scheduling(eptest.Spec{Namespace: "ns", Name: name, PodName: name})
	if m != nil {
		e.Put(engineattr.AttributeKey, m)
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
	busy := ep("busy", &engineattr.Metrics{Running: 9, HasRunning: true})
	idle := ep("idle", &engineattr.Metrics{Running: 1, HasRunning: true})
	cold := ep("cold", nil) // cold start: 1 + pending(0) = 1
	got := s.Score(context.Background(), nil, &fwksched.LLMRequest{Headers: map[string]string{}}, []fwksched.Endpoint{busy, idle, cold})
	if got[busy] != 0 || got[idle] != 1 || got[cold] != 1 {
		t.Fatalf("scores %v", got)
	}
}
