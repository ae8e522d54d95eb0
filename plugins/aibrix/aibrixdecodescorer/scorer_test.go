package aibrixdecodescorer

import (
	"context"
	"strings"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/lib/engineattr"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
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

// The request's config-profile header picks the decode policy from the candidates' model
// config; without it the plugin's own policy scores. The two policies rank the pods apart:
// least_request prefers the pod with fewer running requests, conductor the one whose
// estimated time between tokens is shorter.
func TestScorerProfileOverride(t *testing.T) {
	pl, err := Factory("d", []byte(`{"decodeScorePolicy":"least_request"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := pl.(*Scorer)
	cfg := `{"profiles":{"cond":{"routingConfig":{"decodeScorePolicy":"conductor"}}}}`
	labelled := func(name string, m *engineattr.Metrics) fwksched.Endpoint {
		e := eptest.Scheduling(eptest.Spec{Namespace: "ns", Name: name, PodName: name,
			Labels: map[string]string{protocol.AnnotationLabelPrefix + podmodel.AnnotationConfig: cfg}})
		e.Put(engineattr.AttributeKey, m)
		return e
	}
	fast := labelled("fast", &engineattr.Metrics{Running: 9, HasRunning: true, GenThroughput: 1000, HasGenThroughput: true})
	slow := labelled("slow", &engineattr.Metrics{Running: 1, HasRunning: true, GenThroughput: 10, HasGenThroughput: true})
	eps := []fwksched.Endpoint{fast, slow}
	score := func(profile string) map[fwksched.Endpoint]float64 {
		return s.Score(context.Background(), nil, &fwksched.LLMRequest{Headers: map[string]string{protocol.HeaderConfigProfile: profile}}, eps)
	}
	if got := score(""); got[fast] != 0 || got[slow] != 1 {
		t.Fatalf("no profile: scores %v, want least_request's fast 0, slow 1", got)
	}
	if got := score("cond"); got[fast] != 1 || got[slow] != 0 {
		t.Fatalf("profile cond: scores %v, want conductor's fast 1, slow 0", got)
	}
}
