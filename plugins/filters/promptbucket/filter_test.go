package promptbucket

import (
	"context"
	"fmt"
	"strings"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func ep(name, cfg string) fwksched.Endpoint {
	labels := map[string]string{}
	if cfg != "" {
		labels[protocol.AnnotationLabelPrefix+podmodel.AnnotationConfig] = cfg
	}
	return eptest.Scheduling(eptest.Spec{Namespace: "ns", Name: name, PodName: name, Labels: labels})
}

func bucket(lo, hi int) string {
	return fmt.Sprintf(`{"profiles":{"default":{"routingConfig":{"promptLenBucketMinLength":%d,"promptLenBucketMaxLength":%d}},"big":{"routingConfig":{"promptLenBucketMinLength":5000}}}}`, lo, hi)
}

func TestFilter(t *testing.T) {
	pods := []fwksched.Endpoint{ep("short", bucket(0, 100)), ep("long", bucket(101, 0)), ep("free", "")}
	tests := []struct {
		tokens  int
		profile string
		want    string
	}{
		{0, "", "short,free"}, {100, "", "short,free"}, {101, "", "long,free"}, {1 << 20, "", "long,free"},
		{200, "big", "free"}, {5000, "big", "short,long,free"},
	}
	f, err := Factory("b", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		req := &fwksched.LLMRequest{Headers: map[string]string{protocol.HeaderConfigProfile: tt.profile},
			TokenizedPrompt: &fwksched.TokenizedPrompt{TokenIDs: make([]uint32, tt.tokens)}}
		if tt.tokens == 0 {
			req.TokenizedPrompt = nil
			req.Body = &fwksched.LLMRequestBody{Completions: &fwksched.CompletionsRequest{Prompt: fwksched.Prompt{Raw: ""}}}
		}
		var got []string
		for _, e := range f.(*Filter).Filter(context.Background(), fwksched.NewCycleState(), req, pods) {
			got = append(got, e.GetMetadata().PodName)
		}
		if strings.Join(got, ",") != tt.want {
			t.Errorf("%d tokens, profile %q: got %v want %s", tt.tokens, tt.profile, got, tt.want)
		}
	}
	if _, err := Factory("b", []byte(`{"x":1}`), nil); err == nil {
		t.Fatal("parameters must be refused")
	}
}
