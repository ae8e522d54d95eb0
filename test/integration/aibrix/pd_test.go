package aibrix

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	roleName    = "role-name"
	rolesetName = "roleset-name"
	engineLabel = "model.aibrix.ai/engine"
	configAnn   = "model.aibrix.ai/config"
)

func body(prompt string) string {
	b, _ := json.Marshal(map[string]any{"model": "m", "prompt": prompt, "max_tokens": 8})
	return string(b)
}

// promptOf returns a prompt of about n estimated tokens (4 characters each), unique per tag.
func promptOf(tag string, n int) string {
	s := tag + " " + strings.Repeat("abcd", n)
	return s[:4*n]
}

func aibrixPod(name, ip, role, roleset string, cfg string, waiting int) pod {
	labels := map[string]string{engineLabel: "vllm", "model.aibrix.ai/name": "m"}
	if role != "" {
		labels[roleName] = role
	}
	if roleset != "" {
		labels[rolesetName] = roleset
	}
	p := pod{name: name, ip: ip, labels: labels, waiting: waiting}
	if cfg != "" {
		p.annotations = map[string]string{configAnn: cfg}
	}
	return p
}

func bucket(lo, hi int, combined bool) string {
	return fmt.Sprintf(`{"profiles":{"default":{"routingStrategy":"pd","routingConfig":{"promptLenBucketMinLength":%d,"promptLenBucketMaxLength":%d,"combined":%v}}}}`, lo, hi, combined)
}

func rolesetOf(name string) string { return name[:strings.IndexByte(name, '-')] }

// Two complete rolesets, one with only a prefill pod and one with only a decode pod: every
// pair stays inside a complete roleset and the incomplete ones are never used.
func TestPairsNeverCrossRolesetsAndIncompleteRolesetsAreSkipped(t *testing.T) {
	e := startEPP(t, "../../../config/aibrix-pd.yaml", []pod{
		aibrixPod("a-prefill", "127.0.4.1", "prefill", "a", "", 0),
		aibrixPod("a-decode", "127.0.4.2", "decode", "a", "", 0),
		aibrixPod("b-prefill", "127.0.4.3", "prefill", "b", "", 0),
		aibrixPod("b-decode0", "127.0.4.4", "decode", "b", "", 0),
		aibrixPod("b-decode1", "127.0.4.5", "decode", "b", "", 0),
		aibrixPod("c-prefill", "127.0.4.6", "prefill", "c", "", 0),
		aibrixPod("d-decode", "127.0.4.7", "decode", "d", "", 0),
	})
	seen := map[string]int{}
	for i := 0; i < 24; i++ {
		a := e.send(t, nil, body(promptOf(fmt.Sprint("q", i), 40)))
		if a.immediate != 0 || a.prefill == "" || a.decode == "" {
			t.Fatalf("request %d: want a P/D pair, got %+v", i, a)
		}
		if rolesetOf(a.prefill) != rolesetOf(a.decode) {
			t.Fatalf("pair crossed rolesets: prefill %s, decode %s", a.prefill, a.decode)
		}
		if rs := rolesetOf(a.decode); rs == "c" || rs == "d" {
			t.Fatalf("incomplete roleset %s used: %+v", rs, a)
		}
		seen[rolesetOf(a.decode)]++
	}
	if seen["a"] == 0 || seen["b"] == 0 {
		t.Fatalf("both complete rolesets should be used: %v", seen)
	}
}

// Bucketing: short prompts go to the short roleset, long ones to the long roleset, prompts
// outside every bucket to the combined pod (no prefill leg); without a combined pod they are
// answered 503.
func TestBucketsAndCombinedPods(t *testing.T) {
	fleet := []pod{
		aibrixPod("short-prefill", "127.0.4.11", "prefill", "short", bucket(0, 100, false), 0),
		aibrixPod("short-decode", "127.0.4.12", "decode", "short", bucket(0, 100, false), 0),
		aibrixPod("long-prefill", "127.0.4.13", "prefill", "long", bucket(101, 1000, false), 0),
		aibrixPod("long-decode", "127.0.4.14", "decode", "long", bucket(101, 1000, false), 0),
	}
	withStd := append(append([]pod(nil), fleet...), aibrixPod("std-0", "127.0.4.15", "", "", bucket(0, 0, true), 0))
	e := startEPP(t, "../../../config/aibrix/bucketing.yaml", withStd)
	tests := []struct {
		tokens      int
		wantDecode  string
		wantPrefill string
	}{
		{50, "short-decode", "short-prefill"},
		{100, "short-decode", "short-prefill"},
		{400, "long-decode", "long-prefill"},
		{1000, "long-decode", "long-prefill"},
		{3000, "std-0", ""},
	}
	for _, tt := range tests {
		a := e.send(t, nil, body(promptOf("b", tt.tokens)))
		if a.immediate != 0 || a.decode != tt.wantDecode || a.prefill != tt.wantPrefill {
			t.Fatalf("%d tokens: got decode=%q prefill=%q (%+v), want %q/%q", tt.tokens, a.decode, a.prefill, a, tt.wantDecode, tt.wantPrefill)
		}
	}

	e2 := startEPP(t, "../../../config/aibrix/bucketing.yaml", []pod{
		aibrixPod("short-prefill", "127.0.4.16", "prefill", "short", bucket(0, 100, false), 0),
		aibrixPod("short-decode", "127.0.4.17", "decode", "short", bucket(0, 100, false), 0),
	})
	a := e2.send(t, nil, body(promptOf("x", 3000)))
	if a.immediate != 503 || !strings.Contains(a.body, "no prompt-length bucket matches prompt length") {
		t.Fatalf("want 503 for a prompt outside every bucket without combined pods, got %+v", a)
	}
}

// A hot PD tier (prefill queues far above their drain rate) overflows to an idle combined pod.
func TestHotPDTierOverflowsToIdleCombinedPod(t *testing.T) {
	anyLen := bucket(0, 0, false)
	e := startEPP(t, "../../../config/aibrix/bucketing.yaml", []pod{
		aibrixPod("a-prefill", "127.0.4.21", "prefill", "a", anyLen, 5000),
		aibrixPod("a-decode", "127.0.4.22", "decode", "a", anyLen, 0),
		aibrixPod("std-idle", "127.0.4.23", "all", "std", bucket(0, 0, true), 0),
	})
	a := e.send(t, nil, body(promptOf("hot", 50)))
	if a.immediate != 0 || a.decode != "std-idle" || a.prefill != "" {
		t.Fatalf("hot PD tier must overflow to the idle combined pod, got %+v", a)
	}

	cool := startEPP(t, "../../../config/aibrix/bucketing.yaml", []pod{
		aibrixPod("a-prefill", "127.0.4.24", "prefill", "a", anyLen, 0),
		aibrixPod("a-decode", "127.0.4.25", "decode", "a", anyLen, 0),
		aibrixPod("std-idle", "127.0.4.26", "all", "std", bucket(0, 0, true), 0),
	})
	a = cool.send(t, nil, body(promptOf("cool", 50)))
	if a.decode != "a-decode" || a.prefill != "a-prefill" {
		t.Fatalf("a cool PD tier keeps the request on the pair, got %+v", a)
	}
}

// A burst of concurrent requests (streams held open, as while responses stream) spreads over
// the pairs because every pick is registered atomically with its selection.
func TestConcurrentBurstSpreads(t *testing.T) {
	var pods []pod
	for i, rs := range []string{"a", "b", "c", "d"} {
		pods = append(pods,
			aibrixPod(rs+"-prefill", fmt.Sprintf("127.0.4.%d", 31+2*i), "prefill", rs, "", 0),
			aibrixPod(rs+"-decode", fmt.Sprintf("127.0.4.%d", 32+2*i), "decode", rs, "", 0))
	}
	e := startEPP(t, "../../../config/aibrix-pd.yaml", pods)
	const n = 32
	var mu sync.Mutex
	count := map[string]int{}
	var dones []func()
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			a, done := e.open(t, nil, body(promptOf(fmt.Sprint("burst", i), 60)))
			mu.Lock()
			defer mu.Unlock()
			dones = append(dones, done)
			if a.immediate != 0 || rolesetOf(a.prefill) != rolesetOf(a.decode) {
				t.Errorf("request %d: %+v", i, a)
				return
			}
			count[a.decode]++
		}(i)
	}
	wg.Wait()
	for _, d := range dones {
		d()
	}
	for _, p := range []string{"a-decode", "b-decode", "c-decode", "d-decode"} {
		if count[p] < n/8 || count[p] > n/2 {
			t.Fatalf("burst did not spread: %v", count)
		}
	}
	t.Logf("burst of %d over 4 pairs: %v", n, count)
}

// routing-strategy and lockedRoutingStrategy: an unknown strategy is a 400 unless the model's
// config locks the strategy.
func TestRoutingStrategyHeader(t *testing.T) {
	e := startEPP(t, "../../../config/aibrix-pd.yaml", []pod{
		aibrixPod("a-prefill", "127.0.4.51", "prefill", "a", "", 0),
		aibrixPod("a-decode", "127.0.4.52", "decode", "a", "", 0),
	})
	a := e.send(t, map[string]string{"routing-strategy": "no-such-strategy"}, body("hello there"))
	if a.immediate != 400 || !strings.Contains(a.body, "unknown routing strategy") {
		t.Fatalf("want 400, got %+v", a)
	}
	locked := `{"lockedRoutingStrategy":"pd","profiles":{"default":{"routingStrategy":"pd"}}}`
	e2 := startEPP(t, "../../../config/aibrix-pd.yaml", []pod{
		aibrixPod("a-prefill", "127.0.4.53", "prefill", "a", locked, 0),
		aibrixPod("a-decode", "127.0.4.54", "decode", "a", locked, 0),
	})
	a = e2.send(t, map[string]string{"routing-strategy": "no-such-strategy"}, body("hello there"))
	if a.immediate != 0 || a.prefill != "a-prefill" {
		t.Fatalf("locked pd must win over the header, got %+v", a)
	}
}

// A profile's requestsPerSecond answers the excess with 429.
func TestRateCap(t *testing.T) {
	capped := `{"profiles":{"default":{"routingStrategy":"pd","requestsPerSecond":1}}}`
	e := startEPP(t, "../../../config/aibrix-pd.yaml", []pod{
		aibrixPod("a-prefill", "127.0.4.61", "prefill", "a", capped, 0),
		aibrixPod("a-decode", "127.0.4.62", "decode", "a", capped, 0),
	})
	const n = 12
	start := time.Now()
	var mu sync.Mutex
	admitted, limited := 0, 0
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := e.send(t, nil, body("hi"))
			mu.Lock()
			defer mu.Unlock()
			switch a.immediate {
			case 0:
				admitted++
			case 429:
				limited++
				if !strings.Contains(a.body, "rate limit") {
					t.Errorf("429 body %q", a.body)
				}
			default:
				t.Errorf("unexpected answer %+v", a)
			}
		}()
	}
	wg.Wait()
	// At most one admission per started second of the burst (sliding one-second window).
	if bound := int(time.Since(start).Seconds()) + 1; admitted < 1 || admitted > bound || limited != n-admitted {
		t.Fatalf("admitted %d, limited %d of %d within %d s", admitted, limited, n, bound)
	}
}
