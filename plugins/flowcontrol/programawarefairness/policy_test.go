package programawarefairness

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	fwkfc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/flowcontrol"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/flowcontrol/mocks"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func band(now time.Time, queues map[string]time.Duration) *mocks.MockPriorityBandAccessor {
	var qs []fwkfc.FlowQueueAccessor
	for id, waited := range queues {
		key := fwkfc.FlowKey{ID: id}
		head := mocks.NewMockQueueItemAccessor(10, "req-"+id, key)
		head.EnqueueTimeV = now.Add(-waited)
		qs = append(qs, &mocks.MockFlowQueueAccessor{LenV: 1, PeekHeadV: head, FlowKeyV: key})
	}
	return &mocks.MockPriorityBandAccessor{IterateQueuesFunc: func(cb func(fwkfc.FlowQueueAccessor) bool) {
		for _, q := range qs {
			if !cb(q) {
				return
			}
		}
	}}
}

func req(program string) *fwksched.LLMRequest {
	return &fwksched.LLMRequest{RequestId: "r", Headers: map[string]string{"x-gateway-inference-fairness-id": program}}
}

func serve(p *Policy, program string, prompt, completion int) {
	p.PreRequest(context.Background(), req(program), nil)
	p.ResponseBody(context.Background(), req(program), &fwkrc.Response{EndOfStream: true,
		Usage: fwkrc.Usage{PromptTokens: prompt, CompletionTokens: completion}}, nil)
}

func TestPickLeastAttainedService(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	p := New("f", DefaultConfig(), c.now)
	serve(p, "heavy", 1000, 1000) // cost 3000
	serve(p, "light", 10, 10)     // cost 30
	// Same head wait: the program with less service wins.
	got, err := p.Pick(context.Background(), band(c.t, map[string]time.Duration{"heavy": time.Second, "light": time.Second}))
	if err != nil || got.FlowKey().ID != "light" {
		t.Fatalf("picked %v (%v), want light", got, err)
	}
	// The head wait weighs 0.2: a much longer wait of the heavy program does not beat 0.8 of service.
	got, _ = p.Pick(context.Background(), band(c.t, map[string]time.Duration{"heavy": time.Minute, "light": 0}))
	if got.FlowKey().ID != "light" {
		t.Fatalf("picked %s, want light", got.FlowKey().ID)
	}
	// Only head wait: the longest waiting program wins.
	p2 := New("f", Config{WeightService: 0, WeightHeadWait: 1}, c.now)
	got, _ = p2.Pick(context.Background(), band(c.t, map[string]time.Duration{"a": time.Second, "b": time.Minute}))
	if got.FlowKey().ID != "b" {
		t.Fatalf("picked %s, want b", got.FlowKey().ID)
	}
}

func TestDecayAndCost(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	p := New("f", DefaultConfig(), c.now)
	serve(p, "a", 100, 50) // 100 + 2×50
	if got := p.Attained("a"); got != 200 {
		t.Fatalf("attained %v, want 200", got)
	}
	c.t = c.t.Add(60 * time.Second) // one half-life
	if got := p.Attained("a"); got < 99.9 || got > 100.1 {
		t.Fatalf("attained after a half-life %v, want 100", got)
	}
}

func TestEmptyBandAndSweep(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	p := New("f", DefaultConfig(), c.now)
	if got, err := p.Pick(context.Background(), band(c.t, nil)); got != nil || err != nil {
		t.Fatalf("empty band picked %v, %v", got, err)
	}
	serve(p, "a", 1, 1)
	c.t = c.t.Add(2 * time.Hour)
	p.Sweep()
	if len(p.programs) != 0 {
		t.Fatalf("idle program not evicted: %v", p.programs)
	}
}

func TestParameters(t *testing.T) {
	for raw, want := range map[string]string{
		`{"strategy":"wfq"}`:         "strategy",
		`{"lasWeightService":-1}`:    "lasWeightService",
		`{"evictionSweepSeconds":0}`: "evictionSweepSeconds",
		`{"lasHalfLifeSecond":1}`:    "lasHalfLifeSecond",
	} {
		if _, err := ParseParameters("f", json.RawMessage(raw)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want one naming %s", raw, err, want)
		}
	}
	c, err := ParseParameters("f", json.RawMessage(`{"strategy":"las","lasHalfLifeSeconds":0,"evictionTtlSeconds":0}`))
	if err != nil || c.HalfLife != 0 || c.EvictionTTL != 0 || c.WeightService != 0.8 {
		t.Fatalf("%+v %v", c, err)
	}
}
