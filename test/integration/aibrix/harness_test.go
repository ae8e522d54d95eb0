// Package aibrix drives the AIBrix PD plugin set (config/aibrix-pd.yaml and config/aibrix/*)
// through GIE's real scheduler, director and ext_proc StreamingServer (wrapped by pdgate's
// ext_proc server) over a real gRPC connection, with AIBrix-labelled pods backed by real HTTP
// servers on loopback addresses that expose vLLM metrics scraped by the real data layer.
package aibrix

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	configPb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr/testr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/config/loader"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datastore"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/handlers"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/requestcontrol"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/scheduling"

	"github.com/pdgate/pdgate/cmd/epp/extproc"
	"github.com/pdgate/pdgate/cmd/epp/pluginset"
	"github.com/pdgate/pdgate/cmd/epp/podmeta"
	"github.com/pdgate/pdgate/plugins/enginemetrics"
)

// pod is one model-server pod of the test pool with AIBrix labels and annotations.
type pod struct {
	name        string
	ip          string
	labels      map[string]string
	annotations map[string]string
	// waiting is the queue length the pod's metrics report; finished requests grow by one per
	// scrape, so the extractor's one-minute drain rate is positive.
	waiting int
}

type metricsServer struct {
	mu       sync.Mutex
	waiting  int
	finished int
}

func (m *metricsServer) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	m.mu.Lock()
	m.finished++
	waiting, finished := m.waiting, m.finished
	m.mu.Unlock()
	_, _ = fmt.Fprintf(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting %d\n"+
		"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"+
		"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.1\n"+
		"# TYPE vllm:avg_generation_throughput_toks_per_s gauge\nvllm:avg_generation_throughput_toks_per_s 100\n"+
		"# TYPE vllm:request_success_total counter\nvllm:request_success_total %d\n"+
		"# TYPE vllm:lora_requests_info gauge\nvllm:lora_requests_info{max_lora=\"0\",running_lora_adapters=\"\",waiting_lora_adapters=\"\"} 1\n"+
		"# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"1000\"} 1\n",
		waiting, finished)
}

// epp is a running EPP assembly plus its ext_proc client.
type epp struct {
	client extProcPb.ExternalProcessorClient
	ds     datastore.Datastore
	port   int
	byIP   map[string]string
	seq    int
	mu     sync.Mutex
}

// startEPP loads configPath as a user's file and serves it over ext_proc.
func startEPP(t *testing.T, configPath string, pods []pod) *epp {
	t.Helper()
	pluginset.RegisterAll()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	logger := testr.NewWithOptions(t, testr.Options{Verbosity: 0})
	ctx = log.IntoContext(ctx, logger)

	port := startMetricsServers(t, pods)
	raw, err := os.ReadFile(configPath)
	if err != nil {
		t.Fatal(err)
	}
	rawCfg, gates, err := pluginset.LoadRaw(raw, logger)
	if err != nil {
		t.Fatalf("load %s: %v", configPath, err)
	}
	rt := datalayer.NewRuntime(50 * time.Millisecond)
	pool := datalayer.NewEndpointPool("default", "aibrix-pool")
	pool.TargetPorts = []int{port}
	ds := podmeta.WrapDatastore(datastore.NewDatastore(ctx, rt, 0).WithEndpointPool(pool))
	handle := fwkplugin.NewEppHandle(ctx, func() []types.NamespacedName {
		var out []types.NamespacedName
		for _, ep := range ds.PodList(datastore.AllPodsPredicate) {
			out = append(out, ep.GetMetadata().NamespacedName)
		}
		return out
	})
	cfg, err := loader.InstantiateAndConfigure(rawCfg, handle, logger)
	if err != nil {
		t.Fatalf("instantiate %s: %v", configPath, err)
	}
	for _, p := range handle.GetAllPlugins() {
		if r, ok := p.(interface{ ResolveReferences(fwkplugin.Handle) error }); ok {
			if err := r.ResolveReferences(handle); err != nil {
				t.Fatalf("resolve %s: %v", p.TypedName(), err)
			}
		}
	}
	if err := rt.Configure(cfg.DataConfig, !gates[datalayer.EnableLegacyMetricsFeatureGate], "", logger); err != nil {
		t.Fatal(err)
	}
	byIP := map[string]string{}
	for _, p := range pods {
		byIP[p.ip] = p.name
		ds.PodUpdateOrAddIfNotExist(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: "default", Labels: p.labels, Annotations: p.annotations},
			Status:     corev1.PodStatus{PodIP: p.ip},
		})
	}
	reqCfg := requestcontrol.NewConfig()
	reqCfg.AddPlugins(handle.GetAllPlugins()...)
	dag, err := datalayer.ValidateAndOrderDataDependencies(handle.GetAllPlugins())
	if err != nil {
		t.Fatalf("data dependencies: %v", err)
	}
	reqCfg.OrderPrepareDataPlugins(dag)
	parser := handlers.NewParser(cfg.ParserConfig)
	sched := scheduling.NewSchedulerWithConfig(cfg.SchedulerConfig)
	cands := requestcontrol.NewDatastoreEndpointCandidates(ds)
	adm := requestcontrol.NewLegacyAdmissionController(cfg.SaturationDetector, cands)
	dir := requestcontrol.NewDirectorWithConfig(ds, sched, adm, parser, cands, reqCfg)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	extProcPb.RegisterExternalProcessorServer(srv, extproc.New(handlers.NewStreamingServer(ds, dir, parser), extproc.Options{}))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	e := &epp{client: extProcPb.NewExternalProcessorClient(conn), ds: ds, port: port, byIP: byIP}
	e.waitForMetrics(t, len(pods))
	return e
}

// waitForMetrics waits (bounded) until the data layer extracted engine metrics, with a drain
// rate, for every pod.
func (e *epp) waitForMetrics(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		ready := 0
		for _, ep := range e.ds.PodList(datastore.AllPodsPredicate) {
			if m := enginemetrics.Get(ep.GetAttributes()); m != nil && m.HasDrainRate1m {
				ready++
			}
		}
		if ready == n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("engine metrics not extracted for all %d pods within 15s", n)
}

// startMetricsServers runs one HTTP server per pod on its loopback IP, all on one port.
func startMetricsServers(t *testing.T, pods []pod) int {
	t.Helper()
	for attempt := 0; attempt < 20; attempt++ {
		var listeners []net.Listener
		port := 0
		ok := true
		for _, p := range pods {
			l, err := net.Listen("tcp", net.JoinHostPort(p.ip, strconv.Itoa(port)))
			if err != nil {
				ok = false
				break
			}
			if port == 0 {
				port = l.Addr().(*net.TCPAddr).Port
			}
			listeners = append(listeners, l)
		}
		if !ok {
			for _, l := range listeners {
				_ = l.Close()
			}
			continue
		}
		for i, l := range listeners {
			s := &http.Server{Handler: &metricsServer{waiting: pods[i].waiting}, ReadHeaderTimeout: 5 * time.Second}
			go func() { _ = s.Serve(l) }()
			t.Cleanup(func() { _ = s.Close() })
		}
		return port
	}
	t.Fatal("could not bind the pods' metrics servers")
	return 0
}

// answer is what the EPP told the gateway about one request.
type answer struct {
	immediate int
	body      string
	decode    string // pod name of x-gateway-destination-endpoint
	prefill   string // pod name of x-prefiller-host-port ("" when absent)
	set       map[string]string
}

func (e *epp) podAt(t *testing.T, hostport string) string {
	t.Helper()
	if hostport == "" {
		return ""
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || port != strconv.Itoa(e.port) {
		t.Fatalf("unexpected address %q", hostport)
	}
	name, ok := e.byIP[host]
	if !ok {
		t.Fatalf("address %q is no pod of the pool", hostport)
	}
	return name
}

// send runs one request through a real ext_proc stream and ends the stream (which runs the
// EPP's end-of-request hooks, as a finished response would).
func (e *epp) send(t *testing.T, headers map[string]string, body string) answer {
	t.Helper()
	a, done := e.open(t, headers, body)
	done()
	return a
}

// open runs one request through a real ext_proc stream and keeps the stream open (the
// response is still "streaming") until done is called.
func (e *epp) open(t *testing.T, headers map[string]string, body string) (answer, func()) {
	t.Helper()
	e.mu.Lock()
	e.seq++
	id := fmt.Sprintf("req-%d", e.seq)
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	stream, err := e.client.Process(ctx)
	if err != nil {
		cancel()
		t.Error(err)
		return answer{}, func() {}
	}
	done := func() {
		_ = stream.CloseSend()
		cancel()
	}
	hv := []*configPb.HeaderValue{
		{Key: ":path", RawValue: []byte("/v1/completions")}, {Key: ":method", RawValue: []byte("POST")},
		{Key: "content-type", RawValue: []byte("application/json")}, {Key: "x-request-id", RawValue: []byte(id)},
	}
	for k, v := range headers {
		hv = append(hv, &configPb.HeaderValue{Key: k, RawValue: []byte(v)})
	}
	if err := stream.Send(&extProcPb.ProcessingRequest{Request: &extProcPb.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extProcPb.HttpHeaders{Headers: &configPb.HeaderMap{Headers: hv}}}}); err != nil {
		t.Error(err)
		return answer{}, done
	}
	if err := stream.Send(&extProcPb.ProcessingRequest{Request: &extProcPb.ProcessingRequest_RequestBody{
		RequestBody: &extProcPb.HttpBody{Body: []byte(body), EndOfStream: true}}}); err != nil {
		t.Error(err)
		return answer{}, done
	}
	a := answer{set: map[string]string{}}
	for i := 0; i < 8; i++ {
		resp, err := stream.Recv()
		if err != nil {
			t.Errorf("recv: %v", err)
			return a, done
		}
		if ir := resp.GetImmediateResponse(); ir != nil {
			a.immediate = int(ir.GetStatus().GetCode())
			a.body = string(ir.GetBody())
			break
		}
		if hr := resp.GetRequestHeaders(); hr != nil {
			for _, h := range hr.GetResponse().GetHeaderMutation().GetSetHeaders() {
				v := string(h.GetHeader().GetRawValue())
				if v == "" {
					v = h.GetHeader().GetValue()
				}
				a.set[strings.ToLower(h.GetHeader().GetKey())] = v
			}
			a.decode = e.podAt(t, a.set["x-gateway-destination-endpoint"])
			a.prefill = e.podAt(t, a.set["x-prefiller-host-port"])
			break
		}
	}
	return a, done
}
