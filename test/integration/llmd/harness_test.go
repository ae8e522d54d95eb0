// Package llmd drives the llm-d disaggregation plugin set through GIE's real scheduler,
// director and ext_proc StreamingServer over a real gRPC connection, with pods backed by real
// HTTP servers exposing vLLM metrics on loopback addresses.
package llmd

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
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

	"github.com/pdgate/pdgate/cmd/epp/pluginset"
)

// pod is one model-server pod of the test pool.
type pod struct {
	name   string
	ip     string
	labels map[string]string
}

// epp is a running EPP assembly plus its ext_proc client.
type epp struct {
	client extProcPb.ExternalProcessorClient
	handle fwkplugin.Handle
	port   int
}

// startEPP loads configPath exactly as a user's file and serves it over ext_proc.
func startEPP(t *testing.T, configPath string, pods []pod) *epp {
	t.Helper()
	pluginset.RegisterAll()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	logger := testr.NewWithOptions(t, testr.Options{Verbosity: 1})
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
	pool := datalayer.NewEndpointPool("default", "llmd-pool")
	pool.TargetPorts = []int{port}
	ds := datastore.NewDatastore(ctx, rt, 0).WithEndpointPool(pool)
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
	for _, p := range pods {
		ds.PodUpdateOrAddIfNotExist(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: "default", Labels: p.labels},
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
	extProcPb.RegisterExternalProcessorServer(srv, wrapServer(handlers.NewStreamingServer(ds, dir, parser)))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &epp{client: extProcPb.NewExternalProcessorClient(conn), handle: handle, port: port}
}

// startMetricsServers runs one HTTP server per pod on its loopback IP, all on one port (GIE
// pools share target ports), serving vLLM metrics.
func startMetricsServers(t *testing.T, pods []pod) int {
	t.Helper()
	metrics := "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 0\n" +
		"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n" +
		"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.1\n" +
		"# TYPE vllm:lora_requests_info gauge\nvllm:lora_requests_info{max_lora=\"0\",running_lora_adapters=\"\",waiting_lora_adapters=\"\"} 1\n" +
		"# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"1000\"} 1\n"
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, metrics) })
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
		for _, l := range listeners {
			s := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
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
	immediate   int // HTTP status of an ImmediateResponse, 0 when forwarded
	body        string
	set         map[string]string
	removed     map[string]bool
	destination string
}

// send runs one request through a real ext_proc stream.
func (e *epp) send(t *testing.T, path string, headers map[string]string, body string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := e.client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hv := []*configPb.HeaderValue{
		{Key: ":path", RawValue: []byte(path)}, {Key: ":method", RawValue: []byte("POST")},
		{Key: "content-type", RawValue: []byte("application/json")},
	}
	for k, v := range headers {
		hv = append(hv, &configPb.HeaderValue{Key: k, RawValue: []byte(v)})
	}
	if err := stream.Send(&extProcPb.ProcessingRequest{Request: &extProcPb.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extProcPb.HttpHeaders{Headers: &configPb.HeaderMap{Headers: hv}}}}); err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&extProcPb.ProcessingRequest{Request: &extProcPb.ProcessingRequest_RequestBody{
		RequestBody: &extProcPb.HttpBody{Body: []byte(body), EndOfStream: true}}}); err != nil {
		t.Fatal(err)
	}
	a := answer{set: map[string]string{}, removed: map[string]bool{}}
	for i := 0; i < 8; i++ {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		if ir := resp.GetImmediateResponse(); ir != nil {
			a.immediate = int(ir.GetStatus().GetCode())
			a.body = string(ir.GetBody())
			break
		}
		if hr := resp.GetRequestHeaders(); hr != nil {
			mut := hr.GetResponse().GetHeaderMutation()
			for _, h := range mut.GetSetHeaders() {
				v := string(h.GetHeader().GetRawValue())
				if v == "" {
					v = h.GetHeader().GetValue()
				}
				a.set[strings.ToLower(h.GetHeader().GetKey())] = v
			}
			for _, k := range mut.GetRemoveHeaders() {
				a.removed[strings.ToLower(k)] = true
			}
			a.destination = a.set["x-gateway-destination-endpoint"]
			break
		}
	}
	_ = stream.CloseSend()
	return a
}

func (a answer) String() string {
	return fmt.Sprintf("immediate=%d body=%q destination=%s set=%v removed=%v", a.immediate, a.body, a.destination, a.set, a.removed)
}
