package dataparallelprofile

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func TestProcessResultsRoutesThroughThePrimaryPort(t *testing.T) {
	p, err := Factory("dp", json.RawMessage(`{"primaryPort": 8000}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	rank3 := eptest.Scheduling(eptest.Spec{Name: "vllm-0-rank-3", PodName: "vllm-0", Address: "10.0.0.5", Port: "8003", NoMetrics: true})
	req := &fwksched.LLMRequest{Headers: map[string]string{protocol.HeaderDataParallelHostPort: "6.6.6.6:1"}}
	res, err := p.(*Handler).ProcessResults(context.Background(), nil, req,
		map[string]*fwksched.ProfileRunResult{"default": {TargetEndpoints: []fwksched.Endpoint{rank3}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := req.Headers[protocol.HeaderDataParallelHostPort]; got != "10.0.0.5:8003" {
		t.Fatalf("header %q, want the rank's 10.0.0.5:8003 (a client copy overwritten)", got)
	}
	md := res.ProfileResults[res.PrimaryProfileName].TargetEndpoints[0].GetMetadata()
	if md.Address != "10.0.0.5" || md.Port != "8000" {
		t.Fatalf("destination %s:%s, want 10.0.0.5:8000", md.Address, md.Port)
	}
}

func TestPick(t *testing.T) {
	h := New("dp", 8000)
	one := map[string]fwksched.SchedulerProfile{"default": nil}
	if got := h.Pick(context.Background(), nil, nil, one, nil); len(got) != 1 {
		t.Fatalf("first pick %v", got)
	}
	if got := h.Pick(context.Background(), nil, nil, one, map[string]*fwksched.ProfileRunResult{"default": nil}); len(got) != 0 {
		t.Fatalf("second pick %v", got)
	}
	if got := h.Pick(context.Background(), nil, nil, map[string]fwksched.SchedulerProfile{"a": nil, "b": nil}, nil); len(got) != 0 {
		t.Fatalf("two profiles picked %v", got)
	}
	if err := h.CheckProfiles([]string{"a", "b"}); err == nil {
		t.Fatal("two profiles accepted at startup")
	}
}

func TestParameters(t *testing.T) {
	for raw, want := range map[string]string{`{"primaryPort":0}`: "primaryPort=0", `{"primaryPort":70000}`: "primaryPort", `{"port":1}`: "port"} {
		if _, err := ParseParameters("dp", json.RawMessage(raw)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %s", raw, err, want)
		}
	}
	if p, err := ParseParameters("dp", nil); err != nil || p != 8000 {
		t.Fatalf("default %d %v", p, err)
	}
}
