package memory

import (
	"bufio"
	encbinary "encoding/binary"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/pdgate/pdgate/cmd/internal/validatetest"
	"github.com/pdgate/pdgate/cmd/pdgate-bench/eppharness"
)

func TestValidate(t *testing.T) {
	validatetest.Options(t, DefaultOptions(false), []validatetest.Case[Options]{
		{Name: "defaults", Change: func(*Options) {}},
		{Name: "quick", Change: func(o *Options) { *o = DefaultOptions(true) }},
		{Name: "endpoints not rolesets", Change: func(o *Options) { o.Endpoints = 510 }, Want: "--endpoints=510"},
		{Name: "no sessions", Change: func(o *Options) { o.Sessions = 0 }, Want: "--sessions=0"},
		{Name: "negative prefix blocks", Change: func(o *Options) { o.PrefixBlocks = -1 }, Want: "--prefix-blocks=-1"},
		{Name: "no streams", Change: func(o *Options) { o.Streams = 0 }, Want: "--streams=0"},
		{Name: "streams ignored without sidecar", Change: func(o *Options) { o.Streams = 0; o.SkipSidecar = true }},
		{Name: "nothing to do", Change: func(o *Options) { o.SkipEPP, o.SkipSidecar = true, true }, Want: "leave nothing"},
		{Name: "no config", Change: func(o *Options) { o.ConfigFiles = nil }, Want: "--configs is empty"},
		{Name: "config named twice", Change: func(o *Options) { o.ConfigFiles = []string{"a/x.yaml", "b/x.yaml"} }, Want: "named twice"},
		{Name: "no scrape interval", Change: func(o *Options) { o.ScrapeInterval = 0 }, Want: "--refresh-metrics-interval"},
	})
}

// blockChain is AIBrix's prefix block identity: block i's hash chains the hashes of blocks
// 0..i-1 (blocks of prefixBlockRunes runes, the incomplete tail left out), so two prompts
// share a hash exactly where they share every block up to it.
func blockChain(prompt string) []uint64 {
	runes := []rune(prompt)
	var out []uint64
	var prev uint64
	for i := 0; i+prefixBlockRunes <= len(runes); i += prefixBlockRunes {
		b := encbinary.LittleEndian.AppendUint64(nil, prev)
		prev = xxhash.Sum64(append(b, string(runes[i:i+prefixBlockRunes])...))
		out = append(out, prev)
	}
	return out
}

// TestPromptsFillThePrefixTable checks the request generator against aibrix-pd-pair's
// prefix blocks: the prompts of a run carry at least the blocks asked for, every block
// counted as distinct is, and the count the bench reports is exact.
func TestPromptsFillThePrefixTable(t *testing.T) {
	tests := []struct{ sessions, blocks int }{{50, 4000}, {200, 5000}, {7, 100}, {1000, 10}}
	for _, tt := range tests {
		o := DefaultOptions(false)
		o.Sessions, o.PrefixBlocks = tt.sessions, tt.blocks
		gen := newRequests(o)
		seen := map[uint64]int{}
		for i := 0; i < tt.sessions; i++ {
			x := gen.exchange(i)
			if x.Headers["x-aibrix-session-key"] == "" || x.Headers["content-length"] == "" {
				t.Fatalf("request %d lacks a session key or content-length: %v", i, x.Headers)
			}
			prompt := systemPrompt + " " + gen.prompt(i) + " "
			for _, h := range blockChain(prompt) {
				seen[h]++
			}
		}
		shared := (len(systemPrompt) + 1) / prefixBlockRunes
		distinct := 0
		for _, n := range seen {
			if n == 1 {
				distinct++
			}
		}
		if len(seen)-shared != distinct {
			t.Errorf("%+v: %d blocks shared by several prompts, want %d (the system prompt's)", tt, len(seen)-distinct, shared)
		}
		if got := gen.blocks.Load(); got != int64(distinct) {
			t.Errorf("%+v: generator counted %d distinct blocks, hashing finds %d", tt, got, distinct)
		}
		if distinct < tt.blocks {
			t.Errorf("%+v: %d distinct blocks, want >= %d", tt, distinct, tt.blocks)
		}
	}
}

func TestFindSample(t *testing.T) {
	page := "# HELP pdgate_token_load_sessions x\n# TYPE pdgate_token_load_sessions gauge\npdgate_token_load_sessions_other 3\npdgate_token_load_sessions 99871\n"
	got, err := findSample(bufio.NewScanner(strings.NewReader(page)), "pdgate_token_load_sessions")
	if err != nil || got != 99871 {
		t.Fatalf("got %v %v", got, err)
	}
	if _, err := findSample(bufio.NewScanner(strings.NewReader(page)), "absent"); err == nil {
		t.Fatal("absent metric found")
	}
}

func TestGoals(t *testing.T) {
	const mb = 1 << 20
	pd := func(hwm int64, sessions int, errText string) EPPResult {
		return EPPResult{Kind: eppharness.KindPdgate, After: Memory{RSS: hwm, HWM: hwm}, Sessions: sessions, Error: errText}
	}
	tests := []struct {
		name     string
		res      Results
		wantMet  []bool
		wantText []string
	}{
		{name: "both met", res: Results{Sessions: 10, EPP: []EPPResult{{Kind: eppharness.KindStockGIE}, pd(200*mb, 10, "")},
			Sidecar: &SidecarResult{Streams: 5, Opened: 5, Held: Memory{HWM: 100 * mb}}},
			wantMet: []bool{true, true}, wantText: []string{"200.0 MiB", "100.0 MiB"}},
		{name: "over budget", res: Results{Sessions: 10, EPP: []EPPResult{pd(300*mb, 10, "")},
			Sidecar: &SidecarResult{Streams: 5, Opened: 5, Held: Memory{HWM: 129 * mb}}},
			wantMet: []bool{false, false}, wantText: []string{"300.0 MiB", "129.0 MiB"}},
		{name: "streams not all open", res: Results{Sidecar: &SidecarResult{Streams: 5, Opened: 4, Held: Memory{HWM: mb}}},
			wantMet: []bool{false}, wantText: []string{"4 of 5"}},
		{name: "EPP failed", res: Results{EPP: []EPPResult{pd(0, -1, "boom")}},
			wantMet: []bool{false}, wantText: []string{"not measured: boom"}},
		{name: "no session table", res: Results{EPP: []EPPResult{pd(10*mb, -1, "")}},
			wantMet: []bool{true}, wantText: []string{"no sessions recorded"}},
		{name: "one goal per pdgate config", res: Results{EPP: []EPPResult{pd(10*mb, 0, ""), pd(300*mb, 5, "")}},
			wantMet: []bool{true, false}, wantText: []string{"10.0 MiB", "300.0 MiB (5 sessions"}},
		{name: "EPP part failed early", res: Results{EPPError: "no cluster"}, wantMet: []bool{false}, wantText: []string{"not measured: no cluster"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := goals(&tt.res)
			if len(got) != len(tt.wantMet) {
				t.Fatalf("%d goals, want %d", len(got), len(tt.wantMet))
			}
			for i, g := range got {
				if g.Met != tt.wantMet[i] || !strings.Contains(g.Measured, tt.wantText[i]) {
					t.Errorf("goal %d: %+v, want met=%v measured~%q", i, g, tt.wantMet[i], tt.wantText[i])
				}
			}
		})
	}
}

func TestConfigName(t *testing.T) {
	for in, want := range map[string]string{
		"config/bench/routing/recommended.yaml": "pdgate-recommended",
		"config/aibrix/token-load.yaml":         "pdgate-token-load",
		"/abs/My_Config.v2.yml":                 "pdgate-my-config-v2",
	} {
		if got := configName(in); got != want {
			t.Errorf("configName(%q) = %q, want %q", in, got, want)
		}
	}
}
