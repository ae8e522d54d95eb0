package epp

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/pdgate/pdgate/cmd/epp/pluginset"
	"github.com/pdgate/pdgate/cmd/pdgate-bench/eppharness"
	"github.com/pdgate/pdgate/cmd/pdgate/bench/report"
)

func TestLayout(t *testing.T) {
	hosts, _ := eppharness.LoopbackAddresses(64)
	for _, tc := range []struct {
		name    string
		primary int
		pods    int
		roles   map[string]int // label value counts over llm-d.ai/role or role-name
	}{
		{name: "plain", primary: 8, pods: 8},
		{name: "llmd-pd", primary: 8, pods: 16, roles: map[string]int{"decode": 8, "prefill": 8}},
		{name: "llmd-epd", primary: 8, pods: 16, roles: map[string]int{"decode": 8, "prefill": 4, "encode": 4}},
		{name: "aibrix", primary: 8, pods: 16, roles: map[string]int{"decode": 8, "prefill": 8}},
		{name: "aibrix", primary: 32, pods: 64, roles: map[string]int{"decode": 32, "prefill": 32}},
	} {
		eps, prim, err := Layout(tc.name, tc.primary, hosts, 8000)
		if err != nil {
			t.Fatal(err)
		}
		if len(eps) != tc.pods || len(prim) != tc.primary {
			t.Fatalf("%s: %d pods, %d primary", tc.name, len(eps), len(prim))
		}
		o := eppharness.Options{Kind: eppharness.KindPdgate, Endpoints: eps}
		if err := o.Validate(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		roles := map[string]int{}
		primSet := map[string]bool{}
		for _, p := range prim {
			primSet[p] = true
		}
		for _, ep := range eps {
			role := ep.Labels["llm-d.ai/role"] + ep.Labels["role-name"]
			if role != "" {
				roles[role]++
			}
			if primSet[ep.Address+":8000"] != (role == "decode" || role == "") {
				t.Fatalf("%s: pod %s (role %q) primary=%v", tc.name, ep.Name, role, primSet[ep.Address+":8000"])
			}
			if tc.name == "aibrix" && (ep.Labels["roleset-name"] == "" || ep.Labels["model.aibrix.ai/name"] != Model) {
				t.Fatalf("aibrix pod without roleset/model: %v", ep.Labels)
			}
		}
		if tc.roles != nil && !mapsEqual(roles, tc.roles) {
			t.Fatalf("%s: roles %v, want %v", tc.name, roles, tc.roles)
		}
	}
	// --pods: every pool has that many pods, half of a P/D pool primary.
	for _, tc := range []struct {
		layout         string
		pods, wantPrim int
	}{
		{"plain", 0, Primary}, {"llmd-pd", 0, Primary}, {"plain", 8, 8}, {"llmd-pd", 8, 4}, {"llmd-epd", 8, 4}, {"aibrix", 8, 4}, {"aibrix", 12, 6},
	} {
		prim := PoolPrimary(tc.layout, tc.pods)
		eps, _, err := Layout(tc.layout, prim, hosts, 1)
		if err != nil || prim != tc.wantPrim || (tc.pods > 0 && len(eps) != tc.pods) {
			t.Fatalf("%s with %d pods: %d primary of %d (%v), want %d primary", tc.layout, tc.pods, prim, len(eps), err, tc.wantPrim)
		}
	}
	if _, _, err := Layout("plain", 8, hosts[:4], 1); err == nil {
		t.Fatal("too few hosts accepted")
	}
	if _, _, err := Layout("mesh", 8, hosts, 1); err == nil {
		t.Fatal("unknown layout accepted")
	}
	if _, _, err := Layout("llmd-pd", 3, hosts, 1); err == nil {
		t.Fatal("odd primary count accepted")
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := eppharness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// Every default config, with the fast parser added, loads through pdgate's EPP load path.
func TestDefaultConfigsLoadWithFastParser(t *testing.T) {
	root := repoRoot(t)
	for _, c := range DefaultConfigs {
		if c.File == "" {
			continue
		}
		for _, mode := range []string{"map", "raw"} {
			path, note, err := prepareConfig(root, t.TempDir(), c, mode)
			if err != nil {
				t.Fatalf("%s: %v", c.Name, err)
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(raw), ParserType) {
				t.Fatalf("%s: no parser in\n%s", c.Name, raw)
			}
			if _, _, err := pluginset.LoadRaw(raw, logr.Discard()); err != nil {
				t.Fatalf("%s (%s): %v", c.Name, note, err)
			}
		}
	}
}

func TestWithFastParser(t *testing.T) {
	in := []byte("apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n")
	out, added, err := WithFastParser(in, "raw")
	if err != nil || !added {
		t.Fatalf("added=%v err=%v", added, err)
	}
	for _, want := range []string{"type: pdgate-openai-parser", "payload: raw", "pluginRef: pdgate-openai-parser", "type: queue-scorer"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("missing %q in\n%s", want, out)
		}
	}
	again, added, err := WithFastParser(out, "map")
	if err != nil || added || string(again) != string(out) {
		t.Fatalf("a config naming a parser must stay as it is (added=%v, err=%v)", added, err)
	}
	for _, bad := range []string{"", "plugins: [", "- a\n- b\n"} {
		if _, _, err := WithFastParser([]byte(bad), "map"); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
}

func TestParseSizes(t *testing.T) {
	got, err := ParseSizes([]string{"1k", "16KB", "220K", "512"})
	if err != nil || len(got) != 4 || got[0] != 1024 || got[1] != 16384 || got[2] != 220<<10 || got[3] != 512 {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []string{"", "k", "-1k", "1m", "x"} {
		if _, err := ParseSizes([]string{bad}); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
	if r := scaleRequests([]int{1 << 10, 220 << 10, 8 << 20}, false); r[0] != 3000 || r[1] != 307 || r[2] != 50 {
		t.Fatalf("scaled %v", r)
	}
}

func TestChatBody(t *testing.T) {
	for _, size := range []int{256, 1 << 10, 16 << 10, 220 << 10} {
		a, b := ChatBody(size, 1), ChatBody(size, 2)
		if len(a) > size || len(a) < size-8 {
			t.Fatalf("size %d: body of %d bytes", size, len(a))
		}
		var req chatRequest
		if err := json.Unmarshal(a, &req); err != nil || req.Model != Model || len(req.Messages) != 2 {
			t.Fatalf("size %d: %v %+v", size, err, req)
		}
		// Distinct seeds differ from the first prompt block on (no shared prefix): the prefix
		// indexes hash the messages' roles and contents in order, 64 bytes (16 tokens) a block.
		pa, pb := promptText(t, a), promptText(t, b)
		if pa[:firstBlock] == pb[:firstBlock] {
			t.Fatalf("size %d: prompts share their first block: %q", size, pa[:firstBlock])
		}
		// The user's document is led by a marker of its own too.
		if ua, ub := userContent(t, a), userContent(t, b); ua[:8] == ub[:8] {
			t.Fatalf("size %d: user messages share a prefix: %q %q", size, ua[:8], ub[:8])
		}
		if string(ChatBody(size, 1)) != string(a) {
			t.Fatal("bodies are not deterministic")
		}
	}
	var resp map[string]any
	if err := json.Unmarshal(CompletionBody(3, 100), &resp); err != nil || resp["usage"].(map[string]any)["total_tokens"].(float64) != 112 {
		t.Fatalf("completion %v %v", err, resp)
	}
	if err := json.Unmarshal(BurstBody(5), &resp); err != nil {
		t.Fatal(err)
	}
}

// firstBlock is the prefix indexes' first block in bytes: 16 tokens of 4 bytes.
const firstBlock = 16 * 4

// promptText is a chat body's messages, role and content, in order: the text the prefix
// indexes cut into blocks (pdgate's producer puts a separator byte between the pieces).
func promptText(t *testing.T, b []byte) string {
	var req chatRequest
	if err := json.Unmarshal(b, &req); err != nil {
		t.Fatal(err)
	}
	var s strings.Builder
	for _, m := range req.Messages {
		s.WriteString(m.Role + "\x00" + m.Content + "\x00")
	}
	return s.String()
}

func userContent(t *testing.T, b []byte) string {
	var req chatRequest
	if err := json.Unmarshal(b, &req); err != nil {
		t.Fatal(err)
	}
	return req.Messages[1].Content
}

func sized(bytes, requests int, cpu time.Duration, wall time.Duration) SizeResult {
	l := LoadResult{Requests: requests, OK: requests, CPU: cpu, Wall: wall}
	net, _ := Idle{}.Net(l)
	return SizeResult{Bytes: bytes, Load: l, NetCPUMS: net}
}

func TestGoalsAndReport(t *testing.T) {
	res := &Results{Sizes: []int{1 << 10, 220 << 10}, Concurrency: 4, Conns: 1, ChunkSize: 16 << 10, Parser: "map", Configs: []ConfigResult{
		{Config: DefaultConfigs[0], Pods: 8, Sizes: []SizeResult{sized(1<<10, 100, 50*time.Millisecond, time.Second), sized(220<<10, 100, time.Second, 4*time.Second)}},
		{Config: configByName(t, FloorConfig), Pods: 8, Sizes: []SizeResult{sized(1<<10, 100, 10*time.Millisecond, time.Second), sized(220<<10, 100, 50*time.Millisecond, time.Second)}},
		{Config: configByName(t, "llmd-pd"), Pods: 16, Sizes: []SizeResult{sized(1<<10, 100, 60*time.Millisecond, time.Second), sized(220<<10, 100, 100*time.Millisecond, time.Second)}},
		{Config: configByName(t, "recommended"), Pods: 16, Sizes: []SizeResult{sized(1<<10, 100, 100*time.Millisecond, 2*time.Second), sized(220<<10, 100, 500*time.Millisecond, 2*time.Second)},
			PrimaryPods: []string{"a", "b"}, Burst: &BurstResult{Requests: 30, Dest: map[string]int{"a": 20, "b": 10}}, Spread: 2},
	}}
	goals := Goals(res)
	want := []struct {
		cfg      string
		measured float64
		met      bool
	}{{"llmd-pd", 50.0 / 60, false}, {"llmd-pd", 10, true}, {"recommended", 0.5, false}, {"recommended", 2, false}, {"recommended", 2, false}}
	if len(goals) != len(want) {
		t.Fatalf("goals %+v", goals)
	}
	for i, w := range want {
		if goals[i].Config != w.cfg || math.Abs(goals[i].Measured-w.measured) > 1e-9 || goals[i].Met != w.met {
			t.Fatalf("goal %d: %+v, want %+v", i, goals[i], w)
		}
	}
	r := report.New("epp", "test")
	o := DefaultOptions(true)
	build(r, o, res)
	dir := t.TempDir()
	md, err := r.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	text, _ := os.ReadFile(md)
	// llmd-pd at 220 KB: 10× the base's CPU efficiency, 2× the floor's net CPU per request.
	for _, want := range []string{"| llmd-pd | 16 | 220 KB | 100 | 1.000 |", "| 10.00 | 2.00 |", "| recommended | 30 | 20, 10 | 0 | 0 | 2.00 |", "not met", "epp-cpu.png"} {
		if !strings.Contains(string(text), want) {
			t.Fatalf("report lacks %q:\n%s", want, text)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "epp-throughput.png")); err != nil {
		t.Fatal(err)
	}
	// One size only: the plots still render (log axes would panic on a single x value).
	one := *res
	one.Sizes = res.Sizes[:1]
	for i := range one.Configs {
		one.Configs[i].Sizes = one.Configs[i].Sizes[:1]
	}
	o.Sizes = one.Sizes
	r1 := report.New("epp", "one size")
	build(r1, o, &one)
	if _, err := r1.Write(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	// A burst in which a pod got nothing has an infinite spread (CI lost a whole run to it:
	// encoding/json refuses +Inf). The report is written with the spread as null.
	one.Configs[2].Burst = &BurstResult{Requests: 30, Dest: map[string]int{"a": 30}}
	one.Configs[2].Spread = math.Inf(1)
	rInf := report.New("epp", "a pod got none")
	build(rInf, o, &one)
	infDir := t.TempDir()
	if _, err := rInf.Write(infDir); err != nil {
		t.Fatal(err)
	}
	js, _ := os.ReadFile(filepath.Join(infDir, "epp.json"))
	if !strings.Contains(string(js), `"spread": null`) {
		t.Fatalf("epp.json lacks a null spread:\n%s", js)
	}
}

func configByName(t *testing.T, name string) Config {
	t.Helper()
	for _, c := range DefaultConfigs {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no default config %q", name)
	return Config{}
}

func TestValidatePods(t *testing.T) {
	for _, tc := range []struct {
		pods int
		ok   bool
	}{{0, true}, {4, true}, {8, true}, {16, true}, {2, false}, {6, false}, {-4, false}} {
		o := DefaultOptions(true)
		o.Pods = tc.pods
		if err := o.Validate(); (err == nil) != tc.ok {
			t.Fatalf("pods %d: %v, want ok=%v", tc.pods, err, tc.ok)
		}
	}
}
