package aibrixpdpair

import (
	"strings"
	"testing"

	"github.com/pdgate/pdgate/plugins/lib/contract"
	"github.com/pdgate/pdgate/plugins/lib/pdknobs"
	"github.com/pdgate/pdgate/plugins/lib/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/tokenload"
)

func TestRemainingWork(t *testing.T) {
	pods, _ := mkPods(
		podSpec{name: "a-p", role: "prefill", roleset: "a"}, podSpec{name: "a-d", role: "decode", roleset: "a"},
		podSpec{name: "b-p", role: "prefill", roleset: "b"}, podSpec{name: "b-d", role: "decode", roleset: "b"},
	)
	k := knobs(func(k *pdknobs.Knobs) {
		k.PrefillScorePolicy, k.DecodeScorePolicy = pdknobs.PrefillTokenLoad, pdknobs.DecodeTokenLoad
	})
	history := strings.Repeat("the previous turns of a long conversation ", 100) // 4,200 chars
	followUp := history + strings.Repeat("a new question ", 10)                  // +150
	tests := []struct {
		name        string
		rw          *RemainingWork
		holders     []string // pods that served the history
		prefillLoad map[string]float64
		want        string // roleset
		wantLocal   bool
	}{
		{"without it the least loaded prefill pod wins", nil, []string{"ns/a-p", "ns/a-d"},
			map[string]float64{"ns/a-p": 5000, "ns/b-p": 0}, "b", false},
		{"a follow-up stays on the decode pod that holds its history, which prefills the new turn",
			&RemainingWork{}, []string{"ns/a-p", "ns/a-d"}, map[string]float64{"ns/a-p": 5000, "ns/b-p": 0}, "a", true},
		{"a new turn larger than a chunk goes to the prefill pod that holds the history, busy or not",
			&RemainingWork{LocalPrefillMaxTokens: 100}, []string{"ns/a-p", "ns/a-d"}, map[string]float64{"ns/a-p": 1000, "ns/b-p": 0}, "a", false},
		{"unless the holder's queue is longer than computing everything elsewhere",
			&RemainingWork{LocalPrefillMaxTokens: 100}, []string{"ns/a-p", "ns/a-d"}, map[string]float64{"ns/a-p": 12000, "ns/b-p": 0}, "b", false},
		{"nothing cached anywhere: the least loaded pair", &RemainingWork{}, nil,
			map[string]float64{"ns/a-p": 5000, "ns/b-p": 0}, "b", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newFakeLedger()
			for pod, load := range tt.prefillLoad {
				l.prefill[tokenload.PodKey(pod)] = load
			}
			s := newSel(t, l.source())
			for _, h := range tt.holders {
				s.Prefix.Add(h, s.Prefix.Prompt(history))
			}
			d, err := s.Select(Input{RequestID: "r", Pods: pods, Knobs: k, PromptText: followUp, PromptTokens: len(followUp),
				BodyTokens: len(followUp) / 4, RemainingWork: tt.rw, Explain: true})
			if err != nil {
				t.Fatal(err)
			}
			if d.Roleset != tt.want || d.DecodeOnly != tt.wantLocal {
				t.Fatalf("roleset %q decode-only %v, want %q %v; notes %q", d.Roleset, d.DecodeOnly, tt.want, tt.wantLocal, d.Notes)
			}
			if tt.wantLocal && (d.Cause != contract.CauseCached || d.Prefill != nil) {
				t.Fatalf("a local prefill must be decode-only with cause cached: %+v", d)
			}
			if tt.rw != nil && !tt.wantLocal {
				// Both the prefill pod and the decode pod hold the follow-up now.
				m := s.Prefix.Match(s.Prefix.Prompt(followUp))
				if m[d.Prefill.Key] != 100 || m[d.Decode.Key] != 100 {
					t.Fatalf("holders recorded: %v, want %s and %s at 100", m, d.Prefill.Key, d.Decode.Key)
				}
			}
		})
	}
}

func TestRemainingWorkParams(t *testing.T) {
	tests := []struct {
		name, raw, wantErr string
	}{
		{"on with token_load", `{"prefillScorePolicy":"token_load","remainingWork":{}}`, ""},
		{"a local bound", `{"prefillScorePolicy":"hybrid_cache_load","remainingWork":{"localPrefillMaxTokens":4096}}`, ""},
		{"negative bound", `{"prefillScorePolicy":"token_load","remainingWork":{"localPrefillMaxTokens":-1}}`, "remainingWork.localPrefillMaxTokens"},
		{"a policy whose scores are not tokens", `{"prefillScorePolicy":"least_request","remainingWork":{}}`, "needs prefillScorePolicy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParseParams(Type, "pair", []byte(tt.raw), pluginkit.MapEnv(nil), func(string) {})
			if err == nil {
				err = p.Validate()
			}
			if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}
