package mmcacheproducer

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/plugins/internal/encodercache"
	"github.com/pdgate/pdgate/plugins/scorers/mmcachescorer"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func req(hashes ...string) *fwksched.LLMRequest {
	tp := &fwksched.TokenizedPrompt{TokenIDs: []uint32{1, 2, 3}}
	for _, h := range hashes {
		tp.MultiModalFeatures = append(tp.MultiModalFeatures, fwksched.MultiModalFeature{Modality: "image", Hash: h})
	}
	return &fwksched.LLMRequest{TokenizedPrompt: tp}
}

func eps() []fwksched.Endpoint {
	var out []fwksched.Endpoint
	for _, n := range []string{"a", "b"} {
		out = append(out, eptest.Scheduling(eptest.Spec{Name: n, NoMetrics: true}))
	}
	return out
}

// The producer and the scorer together: an endpoint that encoded an image scores its share.
func TestProducerAndScorer(t *testing.T) {
	prod := plugintest.Build[*Producer](t, Factory, "mm", `{"cacheSizeInMB": 2048}`, nil)
	first := eps()
	if err := prod.PrepareRequestData(context.Background(), req("img1", "img2", "img1"), first); err != nil {
		t.Fatal(err)
	}
	prod.PreRequest(context.Background(), req("img1", "img2"), &fwksched.SchedulingResult{PrimaryProfileName: "d",
		ProfileResults: map[string]*fwksched.ProfileRunResult{"d": {TargetEndpoints: first[:1]}}})
	next := eps()
	_ = prod.PrepareRequestData(context.Background(), req("img1", "img3"), next)
	s, _ := mmcachescorer.Factory("s", json.RawMessage(`{"producerName":"mm"}`), nil)
	scores := s.(*mmcachescorer.Scorer).Score(context.Background(), nil, nil, next)
	if scores[next[0]] != 0.5 || scores[next[1]] != 0 {
		t.Fatalf("scores a=%v b=%v, want 0.5 and 0", scores[next[0]], scores[next[1]])
	}
	v, _ := next[0].Get(encodercache.Key("mm"))
	if m := v.(*encodercache.MatchInfo); m.Matched != 1 || m.Total != 2 {
		t.Fatalf("match info %+v", m)
	}
}

func TestParameters(t *testing.T) {
	warned := ""
	n, err := ParseParameters("mm", json.RawMessage(`{"cacheSizeInMB": 2048}`), func(m string) { warned = m })
	if err != nil || n != 1024 || !strings.Contains(warned, "cacheSizeInMB") {
		t.Fatalf("alias: %d %v %q", n, err, warned)
	}
	if n, _ := ParseParameters("mm", nil, nil); n != 2048 {
		t.Fatalf("default capacity %d, want 4096 MB / 2 MB", n)
	}
	if _, err := ParseParameters("mm", json.RawMessage(`{"cacheSize": 1}`), nil); err == nil {
		t.Fatal("unknown key accepted")
	}
}
