package routing

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/workload"
)

func rows(offsets ...int) []workload.AzureRow {
	out := make([]workload.AzureRow, len(offsets))
	for i, o := range offsets {
		out[i] = workload.AzureRow{Offset: time.Duration(o) * time.Second, ContextTokens: 100 + i, GeneratedTokens: 10 + i}
	}
	return out
}

// The replay keeps the trace's inter-arrival shape and scales it to the target mean rate.
func TestAzurePhaseScalesToTheRate(t *testing.T) {
	// 5 rows over 8 s: natural mean rate 4/8 = 0.5 req/s; at 2 req/s the span is 2 s.
	tr := rows(10, 11, 12, 16, 18)
	p := AzurePhase(tr, 0.8, 2, "m", 1)
	if p.Name != "azure-conv@80%" || p.RateRPS != 2 || len(p.Requests) != 5 {
		t.Fatalf("phase %+v", p)
	}
	want := []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond, 1500 * time.Millisecond, 2 * time.Second}
	for i, r := range p.Requests {
		if r.At != want[i] {
			t.Errorf("request %d at %s, want %s", i, r.At, want[i])
		}
		var body struct {
			Prompt    string `json:"prompt"`
			MaxTokens int    `json:"max_tokens"`
			IgnoreEOS bool   `json:"ignore_eos"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatal(err)
		}
		j, _ := RequestJob(r.Body)
		if j.Prompt != tr[i].ContextTokens || body.MaxTokens != tr[i].GeneratedTokens || !body.IgnoreEOS || r.Kind != "azure-conv@80%/azure-conv" {
			t.Errorf("request %d: %d prompt tokens, %d max tokens, kind %q", i, j.Prompt, body.MaxTokens, r.Kind)
		}
	}
}

func TestAzureSlice(t *testing.T) {
	tr := rows(0, 1, 2, 3)
	tests := []struct {
		offset, n int
		ok        bool
	}{{0, 4, true}, {1, 2, true}, {3, 2, false}, {-1, 2, false}, {0, 1, false}}
	for _, tt := range tests {
		s, err := AzureSlice(tr, tt.offset, tt.n)
		if (err == nil) != tt.ok || (tt.ok && len(s) != tt.n) {
			t.Errorf("AzureSlice(%d, %d) = %d rows, %v", tt.offset, tt.n, len(s), err)
		}
	}
}

func TestMixedPhase(t *testing.T) {
	reqs, err := MixedRequests(300, "m", 1)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, r := range reqs {
		kinds[r.Kind]++
	}
	if kinds["chat"] != 100 || kinds["rag"] != 100 || kinds["sessions"] != 100 {
		t.Fatalf("kinds %v", kinds)
	}
	p := MixedPhase(reqs, 0.8, 10, 7)
	// Poisson arrivals at 10/s: 299 gaps of mean 0.1 s (the sample mean is within 20 %).
	span := p.Requests[len(p.Requests)-1].At.Seconds()
	if math.Abs(span/299-0.1) > 0.02 {
		t.Fatalf("mean inter-arrival %.3f s, want about 0.1 s", span/299)
	}
	for i := 1; i < len(p.Requests); i++ {
		if p.Requests[i].At < p.Requests[i-1].At || !strings.HasPrefix(p.Requests[i].Kind, "mixed@80%/") {
			t.Fatalf("request %d: at %s kind %q", i, p.Requests[i].At, p.Requests[i].Kind)
		}
	}
}

func TestRequestJob(t *testing.T) {
	tests := []struct {
		name string
		body string
		want Job
		bad  bool
	}{
		{"completion", `{"prompt":"abcdefgh","max_tokens":5}`, Job{Prompt: 2, Output: 5}, false},
		{"rounds up", `{"prompt":"abcdefghi","max_tokens":5}`, Job{Prompt: 3, Output: 5}, false},
		// "user\nhi" (7) + "\n" + "assistant\nthere" (15) = 23 bytes -> 6 tokens.
		{"chat", `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"there"}],"max_tokens":3}`, Job{Prompt: 6, Output: 3}, false},
		{"chat parts", `{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_tokens":3}`, Job{Prompt: 2, Output: 3}, false},
		{"no max_tokens", `{"prompt":"a"}`, Job{Prompt: 1, Output: 1}, false},
		{"not json", `{`, Job{}, true},
		{"bad content", `{"messages":[{"role":"user","content":5}]}`, Job{}, true},
	}
	for _, tt := range tests {
		got, err := RequestJob([]byte(tt.body))
		if (err != nil) != tt.bad || got != tt.want {
			t.Errorf("%s: got %+v, %v; want %+v (error %v)", tt.name, got, err, tt.want, tt.bad)
		}
	}
}

func TestSchedule(t *testing.T) {
	a := Phase{Name: "a", Requests: []workload.Request{{At: 0}, {At: 2 * time.Second}}}
	b := Phase{Name: "b", Requests: []workload.Request{{At: 0}, {At: time.Second}}}
	reqs, starts := Schedule([]Phase{a, b}, 3*time.Second, 2)
	// b starts after a's last arrival (2 s) and the gap (3 s): model 5 s; wall = model / 2.
	if starts[0] != 0 || starts[1] != 5*time.Second {
		t.Fatalf("starts %v", starts)
	}
	want := []time.Duration{0, time.Second, 2500 * time.Millisecond, 3 * time.Second}
	for i, r := range reqs {
		if r.At != want[i] {
			t.Errorf("request %d at %s, want %s", i, r.At, want[i])
		}
	}
	if a.Requests[1].At != 2*time.Second {
		t.Fatal("Schedule must not modify the phases")
	}
}

// Each load phase replays the trace's shape with prompts of its own: no prompt of one phase
// appears in another (a replay would measure prefix-cache hits, not the trace).
func TestAzurePhasesHaveDistinctPrompts(t *testing.T) {
	tr := rows(10, 11, 12, 16, 18)
	phases := AzurePhases(tr, []float64{0.5, 0.8, 1.0}, 4, "m", 7)
	if len(phases) != 3 || phases[1].Name != "azure-conv@80%" || phases[2].RateRPS != 4 {
		t.Fatalf("phases %+v", phases)
	}
	seen := map[string]string{}
	for _, p := range phases {
		for i, r := range p.Requests {
			var body struct {
				Prompt string `json:"prompt"`
			}
			if err := json.Unmarshal(r.Body, &body); err != nil {
				t.Fatal(err)
			}
			if len(body.Prompt) != 4*tr[i].ContextTokens {
				t.Fatalf("%s request %d: %d prompt bytes", p.Name, i, len(body.Prompt))
			}
			if other, dup := seen[body.Prompt]; dup {
				t.Fatalf("%s request %d repeats a prompt of %s", p.Name, i, other)
			}
			seen[body.Prompt] = p.Name
		}
	}
	// Deterministic: the same seed gives the same phases.
	again := AzurePhases(tr, []float64{0.5, 0.8, 1.0}, 4, "m", 7)
	if string(again[2].Requests[4].Body) != string(phases[2].Requests[4].Body) {
		t.Fatal("same seed, different prompts")
	}
}

// The Mooncake phase: the slice's arrival shape scaled to the rate, prompts of the rows'
// lengths whose equal hash ids are equal text, follow-up turns marked.
func TestMooncakePhase(t *testing.T) {
	r := func(ms, in int, ids ...uint64) workload.MooncakeRow {
		return workload.MooncakeRow{Timestamp: time.Duration(ms) * time.Millisecond, InputLength: in, OutputLength: 7, HashIDs: ids}
	}
	// buckets at 0 and 3 s (two rows each, spread to 0, 1.5 s and 3, 4.5 s), then 6 s: 4 gaps
	// over 6 s, natural 2/3 req/s; at 2 req/s the span is 2 s
	tr := []workload.MooncakeRow{r(0, 600, 0, 1), r(0, 700, 0, 2), r(3000, 1100, 0, 1, 3), r(3000, 900, 0, 4), r(6000, 1030, 0, 2, 5)}
	p := MooncakePhase(tr, 0.5, 2, "m")
	if p.Name != "mooncake@50%" || p.Workload != WorkloadMooncake || len(p.Requests) != 5 {
		t.Fatalf("phase %+v", p)
	}
	wantAt := []time.Duration{0, 500 * time.Millisecond, time.Second, 1500 * time.Millisecond, 2 * time.Second}
	wantKind := []string{"mooncake", "mooncake", "mooncake-followup", "mooncake", "mooncake-followup"}
	prompts := make([]string, len(tr))
	for i, q := range p.Requests {
		var body struct {
			Prompt    string `json:"prompt"`
			MaxTokens int    `json:"max_tokens"`
		}
		if err := json.Unmarshal(q.Body, &body); err != nil {
			t.Fatal(err)
		}
		prompts[i] = body.Prompt
		j, _ := RequestJob(q.Body)
		if q.At != wantAt[i] || q.Kind != "mooncake@50%/"+wantKind[i] || j.Prompt != tr[i].InputLength || body.MaxTokens != 7 {
			t.Errorf("request %d: at %v, kind %q, %d prompt tokens", i, q.At, q.Kind, j.Prompt)
		}
	}
	// row 2 continues row 0 (ids 0, 1): its first 600 tokens are row 0's prompt
	if !strings.HasPrefix(prompts[2], prompts[0]) || strings.HasPrefix(prompts[3], prompts[0][:2048+8]) {
		t.Error("equal hash ids must give equal text, different ids different text")
	}
	jobs := MooncakeJobs(tr)
	if jobs[2] != (Job{Prompt: 1100, Output: 7}) {
		t.Errorf("jobs %v", jobs)
	}
	for _, tc := range []struct {
		offset, n int
		ok        bool
	}{{0, 5, true}, {3, 2, true}, {4, 2, false}, {-1, 2, false}, {0, 1, false}} {
		if s, err := MooncakeSlice(tr, tc.offset, tc.n); (err == nil) != tc.ok || (tc.ok && len(s) != tc.n) {
			t.Errorf("MooncakeSlice(%d, %d) = %d rows, %v", tc.offset, tc.n, len(s), err)
		}
	}
}
