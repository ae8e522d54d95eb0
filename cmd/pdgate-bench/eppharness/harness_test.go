package eppharness

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/epp/endpoints"
	"github.com/pdgate/pdgate/plugins/framework/plugintest"
)

// checkParse runs a /proc parser on in and wants want, or an error holding wantErr.
func checkParse[T comparable](t *testing.T, parse func([]byte) (T, error), in string, want T, wantErr string) {
	t.Helper()
	got, err := parse([]byte(in))
	if !plugintest.WantErr(t, err, wantErr) && got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestParseStatCPU(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       time.Duration
		err        string
	}{
		{name: "plain", line: "1234 (epp) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 130 0 0 20 0 12 0 100 0 0",
			want: 3800 * time.Millisecond},
		{name: "name with spaces and parens", line: "7 (my (odd) name) R 1 7 7 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 5 0 0",
			want: 30 * time.Millisecond},
		{name: "no paren", line: "7 epp R 1", err: "no ')'"},
		{name: "short", line: "7 (epp) R 1 2 3", err: "fields after"},
		{name: "bad tick", line: "7 (epp) S 1 1 1 0 -1 0 0 0 0 0 x 2 0 0", err: "not a tick count"},
		{name: "negative tick", line: "7 (epp) S 1 1 1 0 -1 0 0 0 0 0 -5 2 0 0", err: "not a tick count"},
	} {
		t.Run(tc.name, func(t *testing.T) { checkParse(t, parseStatCPU, tc.line, tc.want, tc.err) })
	}
}

func TestParseStatusMemory(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       Memory
		err        string
	}{
		{name: "both", text: "Name:\tepp\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nThreads: 9\n",
			want: Memory{RSS: 100 << 20, HWM: 200 << 20}},
		{name: "missing hwm", text: "Name:\tepp\nVmRSS:\t 1 kB\n", err: "not both present"},
		{name: "bad unit", text: "VmHWM:\t1 MB\nVmRSS:\t1 kB\n", err: "want '<n> kB'"},
		{name: "bad number", text: "VmHWM:\tx kB\nVmRSS:\t1 kB\n", err: "is not a size"},
	} {
		t.Run(tc.name, func(t *testing.T) { checkParse(t, parseStatusMemory, tc.text, tc.want, tc.err) })
	}
}

// The /proc readers work on this very process (the EPP path only differs by pid).
func TestProcReadersOnSelf(t *testing.T) {
	m, err := ProcMemory(os.Getpid())
	if err != nil || m.RSS <= 0 || m.HWM < m.RSS {
		t.Fatalf("memory %+v, %v", m, err)
	}
	// Burn CPU until the tick counter moves, bounded by work, not by time.
	before, err := procCPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for i := 0; i < 2e9; i++ {
		x += i ^ (x >> 3)
		if i%1e6 == 0 {
			if now, _ := procCPUTime(os.Getpid()); now > before {
				return
			}
		}
	}
	t.Fatalf("CPU time did not advance (x=%d)", x)
}

func TestCountPodSeries(t *testing.T) {
	text := `# HELP inference_pool_per_pod_queue_size x
# TYPE inference_pool_per_pod_queue_size gauge
inference_pool_per_pod_queue_size{model_server_pod="p-0-rank-0",name="pool"} 0
inference_pool_per_pod_queue_size{model_server_pod="p-1-rank-0",name="pool"} 3
inference_pool_per_pod_queue_size{name="pool",model_server_pod="p-1-rank-0"} 3
inference_pool_ready_pods{name="pool"} 2
`
	n, err := countPodSeries(strings.NewReader(text))
	if err != nil || n != 2 {
		t.Fatalf("got %d, %v; want 2", n, err)
	}
}

func TestValidate(t *testing.T) {
	ep := func(name, addr string, port int) Endpoint { return Endpoint{Name: name, Address: addr, Port: port} }
	good := []Endpoint{ep("a", "127.77.0.1", 8000), ep("b", "127.77.0.2", 8000)}
	for _, tc := range []struct {
		name string
		o    Options
		err  string
	}{
		{name: "ok gie", o: Options{Kind: KindStockGIE, Endpoints: good}},
		{name: "ok pdgate standalone, mixed ports", o: Options{Kind: KindPdgate, Standalone: true,
			Endpoints: []Endpoint{ep("a", "127.77.0.1", 8000), ep("b", "127.77.0.1", 8001)}}},
		{name: "bad kind", o: Options{Kind: "envoy", Endpoints: good}, err: `kind "envoy"`},
		{name: "gie standalone", o: Options{Kind: KindStockGIE, Standalone: true, Endpoints: good}, err: "standalone mode needs"},
		{name: "ok pdgate traced", o: Options{Kind: KindPdgate, Endpoints: good, OTLPEndpoint: "127.0.0.1:4317"}},
		{name: "gie traced", o: Options{Kind: KindStockGIE, Endpoints: good, OTLPEndpoint: "127.0.0.1:4317"}, err: "OTLPEndpoint needs kind"},
		{name: "no endpoints", o: Options{Kind: KindPdgate}, err: "no endpoints"},
		{name: "bad name", o: Options{Kind: KindPdgate, Endpoints: []Endpoint{ep("A_b", "127.77.0.1", 1)}}, err: "endpoints[0].name"},
		{name: "dup", o: Options{Kind: KindPdgate, Endpoints: []Endpoint{ep("a", "127.77.0.1", 1), ep("a", "127.77.0.2", 1)}}, err: "listed twice"},
		{name: "bad ip", o: Options{Kind: KindPdgate, Endpoints: []Endpoint{ep("a", "localhost", 1)}}, err: "not an IP"},
		{name: "bad port", o: Options{Kind: KindPdgate, Endpoints: []Endpoint{ep("a", "127.77.0.1", 0)}}, err: "port 0"},
		{name: "mixed ports in kube mode", o: Options{Kind: KindPdgate,
			Endpoints: []Endpoint{ep("a", "127.77.0.1", 8000), ep("b", "127.77.0.2", 8001)}}, err: "one target port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			plugintest.WantErr(t, err, tc.err)
		})
	}
}

// The endpoints file the harness writes is what pdgate's EPP parses.
func TestEndpointsFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "eps.yaml")
	in := []Endpoint{
		{Name: "p0", Address: "127.77.0.1", Port: 8000, Labels: map[string]string{"llm-d.ai/role": "decode"}},
		{Name: "p1", Address: "127.77.0.2", Port: 8000, Annotations: map[string]string{"model.aibrix.ai/config": `{"a":1}`}},
	}
	if err := writeEndpointsFile(path, in); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := endpoints.Parse(b)
	if err != nil {
		t.Fatalf("pdgate's parser rejects the harness's file: %v\n%s", err, b)
	}
	if len(got) != 2 || got[0].Labels["llm-d.ai/role"] != "decode" || got[1].Annotations["model.aibrix.ai/config"] != `{"a":1}` ||
		got[1].Address != "127.77.0.2" || got[0].Port != 8000 {
		t.Fatalf("parsed %+v", got)
	}
}

func TestPodFor(t *testing.T) {
	pod := podFor("ns", "pool", Endpoint{Name: "p0", Address: "127.77.0.9", Port: 8000,
		Labels: map[string]string{"role-name": "decode"}, Annotations: map[string]string{"k": "v"}})
	if pod.Labels[PoolLabel] != "pool" || pod.Labels["role-name"] != "decode" || pod.Annotations["k"] != "v" {
		t.Fatalf("meta %+v", pod.ObjectMeta)
	}
	if pod.Status.PodIP != "127.77.0.9" || pod.Status.Phase != "Running" || pod.Status.Conditions[0].Status != "True" {
		t.Fatalf("status %+v", pod.Status)
	}
	ip := inferencePool("ns", "pool", 8000, 9002)
	if got, _, _ := unstructuredInt(ip.Object, "spec", "targetPorts"); got != 8000 {
		t.Fatalf("target port %d", got)
	}
}

func unstructuredInt(obj map[string]any, path ...string) (int64, bool, error) {
	v := any(obj)
	for _, p := range path {
		v = v.(map[string]any)[p]
	}
	return v.([]any)[0].(map[string]any)["number"].(int64), true, nil
}

func TestLoopbackAddresses(t *testing.T) {
	a, err := LoopbackAddresses(300)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, s := range a {
		if seen[s] || !strings.HasPrefix(s, "127.77.") || strings.HasSuffix(s, ".0.0") {
			t.Fatalf("bad or duplicate address %s", s)
		}
		seen[s] = true
	}
	if a[0] != "127.77.0.1" || a[255] != "127.77.1.0" {
		t.Fatalf("layout: %s %s", a[0], a[255])
	}
	if _, err := LoopbackAddresses(0); err == nil {
		t.Fatal("n=0 accepted")
	}
}

func TestModelServers(t *testing.T) {
	hosts, _ := LoopbackAddresses(3)
	ms, err := StartModelServers(hosts, 0, EngineMetrics{Waiting: 2, KVCacheUsage: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	base := ms.Snapshot()
	get := func(h string) string {
		resp, err := http.Get("http://" + h + ":" + strconv.Itoa(ms.Port) + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	body := get(hosts[1])
	for _, want := range []string{`vllm:num_requests_waiting{model_name="m"} 2`, `vllm:kv_cache_usage_perc{model_name="m"} 0.25`, `block_size="16"`} {
		if !strings.Contains(body, want) {
			t.Fatalf("metrics lack %q:\n%s", want, body)
		}
	}
	if ms.Scrapes(hosts[1]) != 1 || ms.Scrapes(hosts[0]) != 0 || ms.TotalScrapes() != 1 {
		t.Fatalf("scrape counts %v", ms.Snapshot())
	}
	ms.SetMetrics(EngineMetrics{Running: 7})
	if body := get(hosts[0]); !strings.Contains(body, `vllm:num_requests_running{model_name="m"} 7`) {
		t.Fatalf("SetMetrics not applied:\n%s", body)
	}
	get(hosts[2])
	get(hosts[2])
	if ms.ScrapesOf(hosts[1], hosts[2]) != 3 || ms.ScrapesOf(hosts[0]) != 1 || ms.ScrapesOf() != 0 {
		t.Fatalf("scrapes of a subset: %v", ms.Snapshot())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ms.WaitScraped(ctx, base, 1); err != nil {
		t.Fatal(err)
	}
	// A second server on a host:port already taken fails cleanly.
	if _, err := StartModelServers(hosts[:1], ms.Port, EngineMetrics{}); err == nil {
		t.Fatal("second listener on a taken port succeeded")
	}
}

func TestTailBuffer(t *testing.T) {
	tb := &tailBuffer{max: 10}
	_, _ = tb.Write([]byte("line1\nline2\n"))
	_, _ = tb.Write([]byte("abc"))
	if got := tb.String(); got != "line2\nabc" {
		t.Fatalf("tail %q", got)
	}
	if len(tb.buf) != 10 {
		t.Fatalf("kept %d bytes", len(tb.buf))
	}
}

func TestFreePortsAreDistinct(t *testing.T) {
	for round := 0; round < 50; round++ {
		ports, err := FreePorts(3)
		if err != nil {
			t.Fatal(err)
		}
		if ports[0] == ports[1] || ports[1] == ports[2] || ports[0] == ports[2] {
			t.Fatalf("round %d: ports %v are not distinct", round, ports)
		}
	}
}
