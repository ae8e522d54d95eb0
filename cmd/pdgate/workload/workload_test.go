package workload

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

func TestBuiltinsProduceValidRequests(t *testing.T) {
	for _, name := range []string{"chat", "rag", "sessions", "multimodal", "mixed", "conditional"} {
		t.Run(name, func(t *testing.T) {
			g, err := New(name, Options{Seed: 7, MaxTokensCap: 32})
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[string]bool{}
			for i := 0; i < 20; i++ {
				r, ok := g.Next()
				if !ok {
					t.Fatal("built-in workloads do not end")
				}
				var body map[string]any
				if err := json.Unmarshal(r.Body, &body); err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				if body["model"] == "" || !r.Stream || !strings.HasPrefix(r.Path, "/v1/") {
					t.Fatalf("request %d: %+v", i, r)
				}
				if mt, _ := body["max_tokens"].(float64); mt < 1 || mt > 32 {
					t.Fatalf("max_tokens %v outside the cap", body["max_tokens"])
				}
				kinds[r.Kind] = true
				if r.Kind == "conditional" && !r.Conditional {
					t.Fatal("conditional requests must ask for the coordinator")
				}
				if r.Kind == "sessions" && r.Headers["x-aibrix-session-key"] == "" {
					t.Fatal("session requests carry a session key")
				}
				if r.Kind == "multimodal" && !strings.Contains(string(r.Body), "image_url") {
					t.Fatal("multimodal requests carry an image")
				}
			}
			if name == "mixed" && len(kinds) < 5 {
				t.Fatalf("mixed produced only %v", kinds)
			}
		})
	}
}

func TestPromptLengthsFollowTheWorkload(t *testing.T) {
	size := func(name string) int {
		g, _ := New(name, Options{Seed: 1})
		r, _ := g.Next()
		return len(r.Body)
	}
	if chat, rag := size("chat"), size("rag"); rag < 5*chat {
		t.Fatalf("rag body %d bytes vs chat %d: rag prompts are long", rag, chat)
	}
}

func TestSessionsShareGrowingPrefixes(t *testing.T) {
	g, _ := New("sessions", Options{Seed: 3})
	first := map[string]string{}
	for i := 0; i < 24; i++ {
		r, _ := g.Next()
		key := r.Headers["x-aibrix-session-key"]
		var body struct {
			Messages []map[string]any `json:"messages"`
		}
		_ = json.Unmarshal(r.Body, &body)
		sys, _ := json.Marshal(body.Messages[0])
		if prev, ok := first[key]; ok && prev != string(sys) {
			t.Fatalf("session %s changed its prefix", key)
		}
		first[key] = string(sys)
	}
	if len(first) < 2 {
		t.Fatalf("want several sessions, got %d", len(first))
	}
}

func TestSeedsAreDeterministic(t *testing.T) {
	a, _ := New("mixed", Options{Seed: 5})
	b, _ := New("mixed", Options{Seed: 5})
	for i := 0; i < 10; i++ {
		ra, _ := a.Next()
		rb, _ := b.Next()
		if string(ra.Body) != string(rb.Body) {
			t.Fatalf("request %d differs with the same seed", i)
		}
	}
}

func TestUnknownWorkload(t *testing.T) {
	if _, err := New("nope", Options{}); err == nil || !strings.Contains(err.Error(), "chat") {
		t.Fatalf("got %v", err)
	}
}

func TestParseAzureTrace(t *testing.T) {
	in := "TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:15:46.6805900,374,44\r\n2023-11-16 18:15:50.9951690,396,109\r\n2023-11-16 18:15:51.2224670,879,55"
	rows, err := ParseAzureTrace(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || rows[0].Offset != 0 || rows[1].Offset != 4314579*time.Microsecond {
		t.Fatalf("rows %+v", rows)
	}
	if rows[2].ContextTokens != 879 || rows[2].GeneratedTokens != 55 {
		t.Fatalf("row 3 %+v", rows[2])
	}
	bad := []string{
		"a,b,c\r\n",
		"TIMESTAMP,ContextTokens,GeneratedTokens\r\nnot-a-time,1,1",
		"TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:15:46.6805900,0,1",
		"TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:15:46.6805900,1,1\r\n2023-11-16 18:15:40.6805900,1,1",
		"TIMESTAMP,ContextTokens,GeneratedTokens\r\n",
	}
	for _, b := range bad {
		if _, err := ParseAzureTrace(strings.NewReader(b)); err == nil {
			t.Errorf("ParseAzureTrace(%q): want an error", b)
		}
	}
}

// The real trace in the shared data directory replays: 19366 rows over ~3501.7 s.
func TestAzureTraceFile(t *testing.T) {
	path := "../../../" + DefaultAzureConvPath
	if _, err := os.Stat(path); err != nil {
		t.Skipf("trace not present: %v", err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := ParseAzureTrace(f)
	if err != nil {
		t.Fatal(err)
	}
	if last := rows[len(rows)-1].Offset; len(rows) != 19366 || last < 3501*time.Second || last > 3502*time.Second {
		t.Fatalf("parsed %d rows, last at %s (want 19366, ~3501.7s)", len(rows), last)
	}
	g, err := LoadAzureTrace(path, Options{Seed: 1, TimeScale: 10, MaxTokensCap: 64})
	if err != nil {
		t.Fatal(err)
	}
	g.Next()
	r, _ := g.Next()
	var body map[string]any
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatal(err)
	}
	// Row 2: 396 context tokens (4 bytes each in the simulator), 109 generated capped at 64,
	// sent 4.31 s into the trace, i.e. 0.431 s at 10x.
	if len(body["prompt"].(string)) != 396*4 || body["max_tokens"].(float64) != 64 || r.At != rows[1].Offset/10 {
		t.Fatalf("row 2 became %d prompt bytes, max_tokens %v, at %s", len(body["prompt"].(string)), body["max_tokens"], r.At)
	}
}

func TestParseJSONL(t *testing.T) {
	in := `# comment
{"body":{"model":"m","prompt":"p","stream":true},"at_ms":5}
{"body":{"model":"m","messages":[]},"headers":{"x":"y"},"conditional":true,"kind":"mine"}
`
	reqs, err := ParseJSONL(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 2 || reqs[0].Path != "/v1/completions" || !reqs[0].Stream || reqs[0].At != 5*time.Millisecond ||
		reqs[1].Path != "/v1/chat/completions" || !reqs[1].Conditional || reqs[1].Kind != "mine" || reqs[1].Headers["x"] != "y" {
		t.Fatalf("reqs %+v", reqs)
	}
	for _, bad := range []string{"{", `{"body":3}`, `{"body":{},"path":"v1"}`, `{"body":{},"at_ms":-1}`, ""} {
		if _, err := ParseJSONL(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseJSONL(%q): want an error", bad)
		}
	}
}

func FuzzParseJSONL(f *testing.F) {
	f.Add(`{"body":{"model":"m"}}`)
	f.Add(`{"body":{"messages":[]},"at_ms":1.5,"path":"/x"}` + "\n#c\n")
	f.Fuzz(func(t *testing.T, s string) {
		reqs, err := ParseJSONL(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, r := range reqs {
			if !strings.HasPrefix(r.Path, "/") || r.At < 0 || !json.Valid(r.Body) {
				t.Fatalf("accepted an invalid request %+v", r)
			}
		}
	})
}

func FuzzParseAzureTrace(f *testing.F) {
	f.Add("TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:15:46.6805900,374,44")
	f.Fuzz(func(t *testing.T, s string) {
		rows, err := ParseAzureTrace(strings.NewReader(s))
		if err != nil {
			return
		}
		for i, r := range rows {
			if r.ContextTokens < 1 || r.GeneratedTokens < 1 || (i > 0 && r.Offset < rows[i-1].Offset) {
				t.Fatalf("accepted an invalid row %+v", r)
			}
		}
	})
}
