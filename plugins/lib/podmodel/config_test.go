package podmodel

import (
	"encoding/json"
	"testing"
)

func TestResolveProfile(t *testing.T) {
	raw := `{"defaultProfile":"base","profiles":{
	  "base":{"routingStrategy":"pd"},
	  "default":{"routingStrategy":"random"},
	  "long":{"routingConfig":{"promptTokensGte":1000}},
	  "longbig":{"routingConfig":{"promptTokensGte":1000,"maxTokensGte":500}},
	  "short":{"routingConfig":{"promptTokensLt":1000}},
	  "a-short":{"routingConfig":{"promptTokensLt":1000}}}}`
	cfg, err := ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		header string
		hints  AutoHints
		want   string
	}{
		{"", AutoHints{MaxTokens: -1}, "base"},
		{"default", AutoHints{MaxTokens: -1}, "default"},
		{"missing", AutoHints{MaxTokens: -1}, "base"},
		{"auto", AutoHints{PromptTokens: 999, MaxTokens: -1}, "a-short"}, // tie on hint count → name order
		{"auto", AutoHints{PromptTokens: 1000, MaxTokens: -1}, "long"},   // maxTokens absent: longbig cannot match
		{"auto", AutoHints{PromptTokens: 1000, MaxTokens: 499}, "long"},
		{"auto", AutoHints{PromptTokens: 1000, MaxTokens: 500}, "longbig"}, // most specific wins
	}
	for _, tt := range tests {
		name, p := cfg.Resolve(tt.header, tt.hints)
		if name != tt.want || p == nil {
			t.Errorf("Resolve(%q,%+v)=%q want %q", tt.header, tt.hints, name, tt.want)
		}
	}
	noDefault, _ := ParseConfig(`{"profiles":{"x":{}}}`)
	if name, p := noDefault.Resolve("", AutoHints{}); p != nil || name != "" {
		t.Errorf("no default profile must resolve to nothing, got %q", name)
	}
	autoNoMatch, _ := ParseConfig(`{"profiles":{"default":{},"x":{"routingConfig":{"promptTokensGte":5}}}}`)
	if name, _ := autoNoMatch.Resolve("auto", AutoHints{PromptTokens: 1}); name != "default" {
		t.Errorf("auto without match → default, got %q", name)
	}
	var nilCfg *ModelConfig
	if _, p := nilCfg.Resolve("x", AutoHints{}); p != nil {
		t.Error("nil config resolves to nothing")
	}
}

func TestParseConfigFields(t *testing.T) {
	cfg, err := ParseConfig(`{"lockedRoutingStrategy":"pd","profiles":{"default":{"requestsPerSecond":5,
	  "routingConfig":{"promptLenBucketMinLength":-3,"promptLenBucketMaxLength":-1,"promptLengthBucketing":true,
	  "bucketServe":true,"bucketServeMode":"rps","prefillScorePolicy":"least_request","decodeScorePolicy":"least_request",
	  "prefixCache":{"standardDeviationFactor":2},"pd":{"minMatchPct":10}}}}}`)
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Profiles["default"]
	lo, hi, _ := p.RoutingConfig.BucketBounds()
	if cfg.LockedRoutingStrategy != "pd" || p.RequestsPerSecond != 5 || lo != 0 || hi != 0 ||
		!*p.RoutingConfig.PromptLengthBucketing || p.RoutingConfig.PrefixCache.StandardDeviationFactor != 2 ||
		string(p.RoutingConfig.PD["minMatchPct"]) != "10" {
		t.Fatalf("%+v", p)
	}
}

func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{`{"profiles":{"default":{}}}`, `{`, `[]`, `{"profiles":null}`,
		`{"profiles":{"a":{"routingConfig":{"pd":{"x":1}}}}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cfg, err := parseConfig(s)
		if err != nil {
			return
		}
		if len(cfg.Profiles) == 0 {
			t.Fatal("accepted a config without profiles")
		}
		if _, err := json.Marshal(cfg); err != nil {
			t.Fatal(err)
		}
		cfg.Resolve("auto", AutoHints{PromptTokens: len(s), MaxTokens: -1})
	})
}
