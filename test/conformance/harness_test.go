package conformance

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corePb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/gateway-api-inference-extension/apix/v1alpha2"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/config/loader"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datastore"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/handlers"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metrics"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/requestcontrol"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/scheduling"

	"github.com/pdgate/pdgate/cmd/epp/core"
	"github.com/pdgate/pdgate/cmd/epp/extproc"
	"github.com/pdgate/pdgate/cmd/epp/pluginset"
	"github.com/pdgate/pdgate/test/giehermetic"
	"github.com/pdgate/pdgate/test/testsupport/eppclient"
)

// poolName and namespace are those of GIE's hermetic suite.
const (
	poolName  = "vllm-qwen3-32b-pool"
	namespace = "default"
	// streamTimeout bounds every ext_proc stream: a path that hangs fails the case.
	streamTimeout = 10 * time.Second
)

// logger discards: both paths log per request, and the comparison is what the test reports.
var logger = logr.Discard()

func TestMain(m *testing.M) {
	log.SetLogger(logger)
	// GIE's metrics live in controller-runtime's registry; GIE's suite registers them once.
	metrics.Register()
	pluginset.RegisterAll()
	fwkplugin.Register(probeType, probeFactory)
	os.Exit(m.Run())
}

// podState is one model-server pod: GIE's hermetic P(index, queue, kv, models...), plus
// labels for pdgate's role-aware configs.
type podState struct {
	index        int
	queueSize    int
	kvCacheUsage float64
	activeModels []string
	labels       map[string]string
}

// P mirrors GIE's hermetic P(): pod-<i> at 192.168.1.<i+1>:8000.
func P(idx, queue int, kv float64, models ...string) podState {
	return podState{index: idx, queueSize: queue, kvCacheUsage: kv, activeModels: models}
}

func (p podState) withLabels(l map[string]string) podState { p.labels = l; return p }

func (p podState) ip() string { return fmt.Sprintf("192.168.1.%d", p.index+1) }

// world is what both paths see: the pool, the pods and their metrics, and (in the mode with
// GIE's CRDs) the InferenceObjectives and InferenceModelRewrite of GIE's hermetic manifest
// (test/testdata/inferencepool-with-model-hermetic.yaml in the GIE module).
type world struct {
	pods []podState
	crds bool
}

// staticMetrics is an endpoint factory that gives each endpoint the metrics of its pod, once,
// with no refresh loop: the stand-in for GIE's FakePodMetricsClient, without its polling race.
type staticMetrics map[string]*fwkdl.Metrics // by pod IP

func (s staticMetrics) NewEndpoint(_ context.Context, md *fwkdl.EndpointMetadata, _ datalayer.PoolInfo) fwkdl.Endpoint {
	m := fwkdl.NewMetrics()
	if src, ok := s[md.GetIPAddress()]; ok {
		m = src.Clone()
	}
	m.UpdateTime = time.Now()
	return fwkdl.NewEndpoint(md, m)
}

func (staticMetrics) ReleaseEndpoint(fwkdl.Endpoint) {}

// datastore builds GIE's datastore with w's contents, as GIE's standalone runner builds it
// (NewDatastore + WithEndpointPool) and as its pod reconciler fills it.
func (w world) datastore(ctx context.Context) datastore.Datastore {
	factory := staticMetrics{}
	for _, p := range w.pods {
		models := map[string]int{}
		for _, m := range p.activeModels {
			models[m] = 1
		}
		factory[p.ip()] = &fwkdl.Metrics{WaitingQueueSize: p.queueSize, KVCacheUsagePercent: p.kvCacheUsage,
			ActiveModels: models, WaitingModels: map[string]int{}}
	}
	pool := datalayer.NewEndpointPool(namespace, poolName)
	pool.Selector = map[string]string{"app": poolName}
	pool.TargetPorts = []int{8000}
	ds := datastore.NewDatastore(ctx, factory, 0).WithEndpointPool(pool)
	for _, p := range w.pods {
		labels := map[string]string{"app": poolName}
		for k, v := range p.labels {
			labels[k] = v
		}
		ds.PodUpdateOrAddIfNotExist(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", p.index), Namespace: namespace, Labels: labels},
			Status: corev1.PodStatus{PodIP: p.ip(), Conditions: []corev1.PodCondition{
				{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		})
	}
	if w.crds {
		for _, o := range hermeticObjectives() {
			ds.ObjectiveSet(o)
		}
		ds.ModelRewriteSet(hermeticRewrite())
	}
	return ds
}

func prio(p int) *int { return &p }

// hermeticObjectives are the InferenceObjectives of GIE's hermetic manifest.
func hermeticObjectives() []*v1alpha2.InferenceObjective { return giehermetic.Objectives(namespace) }

// hermeticRewrite is the manifest's InferenceModelRewrite "rewrite-test".
func hermeticRewrite() *v1alpha2.InferenceModelRewrite { return giehermetic.Rewrite(namespace) }

func podListFunc(ds datastore.Datastore) func() []types.NamespacedName {
	return func() []types.NamespacedName {
		var names []types.NamespacedName
		for _, ep := range ds.PodList(datastore.AllPodsPredicate) {
			names = append(names, ep.GetMetadata().NamespacedName)
		}
		return names
	}
}

// newStock assembles GIE v1.5.0's request path exactly as GIE's runner does (phase one and two
// of its config load, the request-control config, legacy admission, datastore candidates, the
// director and the streaming server). The flow-control gate is not used by any case.
func newStock(t *testing.T, ctx context.Context, configText string, ds datastore.Datastore) extProcPb.ExternalProcessorServer {
	t.Helper()
	raw, _, err := loader.LoadRawConfig([]byte(configText), logger)
	if err != nil {
		t.Fatalf("stock: load config: %v", err)
	}
	handle := fwkplugin.NewEppHandle(ctx, podListFunc(ds))
	cfg, err := loader.InstantiateAndConfigure(raw, handle, logger)
	if err != nil {
		t.Fatalf("stock: instantiate: %v", err)
	}
	rc := requestcontrol.NewConfig()
	rc.AddPlugins(handle.GetAllPlugins()...)
	dag, err := datalayer.ValidateAndOrderDataDependencies(handle.GetAllPlugins())
	if err != nil {
		t.Fatalf("stock: data dependencies: %v", err)
	}
	rc.OrderPrepareDataPlugins(dag)
	parser := handlers.NewParser(cfg.ParserConfig)
	candidates := requestcontrol.NewDatastoreEndpointCandidates(ds)
	admission := requestcontrol.NewLegacyAdmissionController(cfg.SaturationDetector, candidates)
	director := requestcontrol.NewDirectorWithConfig(ds, scheduling.NewSchedulerWithConfig(cfg.SchedulerConfig),
		admission, parser, candidates, rc)
	return handlers.NewStreamingServer(ds, director, parser)
}

// newPdgate assembles pdgate's request path with the EPP's one constructor over ds.
func newPdgate(t *testing.T, ctx context.Context, configText string, ds datastore.Datastore, path extproc.Options) *core.Core {
	t.Helper()
	c, err := core.New(ctx, core.Options{
		Config: []byte(configText),
		Logger: logger,
		NewDatastore: func(context.Context, datalayer.EndpointFactory) (datastore.Datastore, error) {
			return ds, nil
		},
		Standalone: true,
		Path:       path,
	})
	if err != nil {
		t.Fatalf("pdgate: core.New: %v", err)
	}
	return c
}

// tracked counts the Process calls in flight, so a case can assert that a stream's handler
// returned (no hang, no leaked goroutine) after the client went away.
type tracked struct {
	extProcPb.UnimplementedExternalProcessorServer
	inner  extProcPb.ExternalProcessorServer
	active atomic.Int32
}

func (s *tracked) Process(srv extProcPb.ExternalProcessor_ProcessServer) error {
	s.active.Add(1)
	defer s.active.Add(-1)
	return s.inner.Process(srv)
}

// waitIdle fails t unless every Process call of s has returned within d.
func (s *tracked) waitIdle(t *testing.T, who string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for s.active.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d ext_proc stream(s) still being processed %v after the client went away", who, s.active.Load(), d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// serve runs srv on a loopback gRPC listener for the rest of the test.
func serve(t *testing.T, srv extProcPb.ExternalProcessorServer) (extProcPb.ExternalProcessorClient, *tracked) {
	t.Helper()
	tr := &tracked{inner: srv}
	return eppclient.Serve(t, tr), tr
}

// exchange sends every message of reqs on one stream, as GIE's hermetic harness does, closes
// the sending side as Envoy does at the end of a request, and collects every response until
// the server ends the stream (streamTimeout at most).
func exchange(client extProcPb.ExternalProcessorClient, reqs []*extProcPb.ProcessingRequest) ([]*extProcPb.ProcessingResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), streamTimeout)
	defer cancel()
	return giehermetic.Exchange(ctx, client, reqs)
}

// outcome is what an ext_proc exchange means to the gateway, the client and the model server,
// after the documented differences are normalised away (shared with test/integration/hermetic).
type outcome = giehermetic.Outcome

type immediate = giehermetic.Immediate

// debugResponseHeader is GIE's debugging response header, which pdgate drops on purpose.
const debugResponseHeader = giehermetic.DebugResponseHeader

func headerValue(h *corePb.HeaderValue) string { return giehermetic.HeaderValue(h) }

// normalise turns one exchange into its outcome.
func normalise(reqs []*extProcPb.ProcessingRequest, resps []*extProcPb.ProcessingResponse, streamErr error) outcome {
	return giehermetic.Normalise(reqs, resps, streamErr)
}

// metricFamilies are the GIE families compared.
var metricFamilies = []string{"inference_objective_", "inference_extension_"}

// snapshotMetrics renders GIE's families in controller-runtime's registry. Callers reset GIE's
// metrics (extproc.ResetMetrics: GIE's metrics.Reset, and the director's cached series) before
// the exchange, so the snapshot is the exchange's own delta.
// periodic are the families both EPPs set from a background loop, not from an exchange (the
// prefix index's size, each second in GIE and in pdgate): whether a tick falls inside an
// exchange is timing, and a slow exchange (the PrepareData timeout's 400 ms, more on a loaded
// machine) saw pdgate's tick and not stock's.
var periodic = map[string]bool{"inference_extension_prefix_indexer_size": true}

func snapshotMetrics(t *testing.T) map[string]string {
	t.Helper()
	mfs, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	out := map[string]string{}
	for _, mf := range mfs {
		name := mf.GetName()
		if !slices.ContainsFunc(metricFamilies, func(p string) bool { return strings.HasPrefix(name, p) }) || periodic[name] {
			continue
		}
		for _, m := range mf.GetMetric() {
			key := name + "{" + labelString(m.GetLabel()) + "}"
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[key] = fmt.Sprintf("%g", m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				out[key] = fmt.Sprintf("%g", m.GetGauge().GetValue())
			case dto.MetricType_HISTOGRAM:
				out[key] = fmt.Sprintf("count=%d", m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

func labelString(ls []*dto.LabelPair) string {
	parts := make([]string, 0, len(ls))
	for _, l := range ls {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// run drives reqs through one server and returns the normalised outcome with the exchange's
// metrics.
func run(t *testing.T, client extProcPb.ExternalProcessorClient, reqs []*extProcPb.ProcessingRequest) outcome {
	t.Helper()
	extproc.ResetMetrics()
	resps, err := exchange(client, reqs)
	o := normalise(reqs, resps, err)
	o.Metrics = snapshotMetrics(t)
	return o
}
