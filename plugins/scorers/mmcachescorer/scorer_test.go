package mmcachescorer

import (
	"context"
	"encoding/json"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/plugins/internal/encodercache"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func TestFactory(t *testing.T) {
	cases := []struct {
		raw, wantKey, wantErr string
	}{
		{"", encodercache.Key(""), ""},
		{"null", encodercache.Key(""), ""},
		{"{}", encodercache.Key(""), ""},
		{`{"producerName":"mine"}`, "MultiModalEncoderCacheMatchInfoKey/mine", ""},
		{`{"producer":"mine"}`, "", `unknown field "producer"`},
		{`[1]`, "", "invalid parameters"},
	}
	for _, tc := range cases {
		p, err := Factory("s", json.RawMessage(tc.raw), nil)
		if plugintest.WantErr(t, err, tc.wantErr, Type) {
			continue
		}
		if err != nil || p.(*Scorer).key != tc.wantKey || p.TypedName().Name != "s" {
			t.Errorf("%q: %+v %v, want key %s", tc.raw, p, err, tc.wantKey)
		}
	}
}

func TestScore(t *testing.T) {
	s, err := Factory("", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		info *encodercache.MatchInfo
		want float64
	}{
		{"no information", nil, 0},
		{"no items", &encodercache.MatchInfo{Matched: 0, Total: 0}, 0},
		{"none cached", &encodercache.MatchInfo{Matched: 0, Total: 4}, 0},
		{"some cached", &encodercache.MatchInfo{Matched: 1, Total: 4}, 0.25},
		{"all cached", &encodercache.MatchInfo{Matched: 3, Total: 3}, 1},
	}
	for _, tc := range cases {
		ep := eptest.Scheduling(eptest.Spec{Name: tc.name, NoMetrics: true})
		if tc.info != nil {
			ep.Put(encodercache.Key(""), tc.info)
		}
		if got := s.(*Scorer).Score(context.Background(), nil, nil, []fwksched.Endpoint{ep})[ep]; got != tc.want {
			t.Errorf("%s: score %v, want %v", tc.name, got, tc.want)
		}
	}
	if s.TypedName().Name != Type || s.(*Scorer).Category() != fwksched.Affinity {
		t.Errorf("name %v category %v", s.TypedName(), s.(*Scorer).Category())
	}
}
