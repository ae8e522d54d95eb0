package prefixdecider

import (
	"context"
	"fmt"
	"strings"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/datalayer/prefixproducer"
	"github.com/pdgate/pdgate/plugins/lib/tokenestimate"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

// A fully cached long prompt resent with Prefer: if-available to the pod that holds
// it is forwarded, not answered 412. With GIE's 256-block cap the producer matched 4,096
// tokens of it and the gate rejected it every time. The producer is the real one (with its
// defaults), the prompt count the token estimate.
func TestConditionalDecodeLongCachedPrompt(t *testing.T) {
	cases := []struct {
		name   string
		bytes  int
		cached bool
		want   bool // 412
	}{
		{name: "22 KB fully cached forwards", bytes: 22_000, cached: true, want: false},
		{name: "100 KB fully cached forwards", bytes: 100_000, cached: true, want: false},
		{name: "22 KB not cached → 412", bytes: 22_000, cached: false, want: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doc := strings.Repeat("a cached document line of words, ", tc.bytes/33+1)[:tc.bytes]
			req := func(id string) *fwksched.LLMRequest {
				r := &fwksched.LLMRequest{RequestId: id, TargetModel: "m", Headers: map[string]string{"Prefer": "if-available"},
					Body: &fwksched.LLMRequestBody{ChatCompletions: &fwksched.ChatCompletionsRequest{Messages: []fwksched.Message{
						{Role: "user", Content: fwksched.Content{Raw: fmt.Sprint(tc.name, doc)}}}}}}
				r.TokenizedPrompt = tokenestimate.Estimate(r, tokenestimate.EstimateParams{})
				return r
			}
			prod := prefixproducer.New("prefix", prefixproducer.DefaultParameters(), nil)
			decode := eptest.Scheduling(eptest.Spec{Name: "decode-0", Address: "10.0.0.2", Port: "8000"})
			other := eptest.Scheduling(eptest.Spec{Name: "decode-1", Address: "10.0.0.3", Port: "8000"})
			eps := []fwksched.Endpoint{decode, other}
			if tc.cached {
				first := req("first")
				if err := prod.PrepareRequestData(context.Background(), first, eps); err != nil {
					t.Fatal(err)
				}
				prod.PreRequest(context.Background(), first, &fwksched.SchedulingResult{PrimaryProfileName: "decode",
					ProfileResults: map[string]*fwksched.ProfileRunResult{"decode": {TargetEndpoints: []fwksched.Endpoint{decode}}}})
				prod.Wait()
			}
			again := req("again")
			if err := prod.PrepareRequestData(context.Background(), again, eps); err != nil {
				t.Fatal(err)
			}
			d := New("d", Parameters{NonCachedTokens: 64})
			got, reason := d.ShouldRejectConditionalDecode(context.Background(), again, decode)
			if got != tc.want || d.CheckConditionalDecode(context.Background(), again, decode) != tc.want {
				t.Fatalf("412=%v (%s), want %v", got, reason, tc.want)
			}
		})
	}
}
