// Package requestpath measures and checks pdgate's request path (cmd/epp/extproc, assembled by
// cmd/epp/core) against stock GIE v1.5.0's (handlers.StreamingServer around
// requestcontrol.Director), in process and on the same bodies, so the ratios printed come from
// one run.
package requestpath

import (
	"context"
	"io"
	"testing"
	"time"

	configPb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/metadata"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/config/loader"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datastore"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/handlers"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/requestcontrol"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/scheduling"

	"github.com/pdgate/pdgate/cmd/epp/core"
	"github.com/pdgate/pdgate/cmd/epp/pluginset"
	"github.com/pdgate/pdgate/plugins/framework/plugintest"
)

// processor is what both paths are: an ext_proc server.
type processor interface {
	Process(extProcPb.ExternalProcessor_ProcessServer) error
}

// newDatastore holds one ready pod on 127.0.0.1:8000.
func newDatastore(ctx context.Context, factory datalayer.EndpointFactory) datastore.Datastore {
	pool := datalayer.NewEndpointPool("default", "pool")
	pool.TargetPorts = []int{8000}
	ds := datastore.NewDatastore(ctx, factory, 0).WithEndpointPool(pool)
	ds.PodUpdateOrAddIfNotExist(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p0", Namespace: "default"},
		Status: corev1.PodStatus{PodIP: "127.0.0.1", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}})
	return ds
}

// newPdgate is pdgate's path, built by the EPP's one constructor.
func newPdgate(tb testing.TB, cfg string) processor {
	tb.Helper()
	c, err := core.New(tb.Context(), core.Options{Config: []byte(cfg), Standalone: true, RefreshMetricsInterval: time.Hour,
		NewDatastore: func(ctx context.Context, f datalayer.EndpointFactory) (datastore.Datastore, error) {
			return newDatastore(ctx, f), nil
		}})
	if err != nil {
		tb.Fatal(err)
	}
	return c.Server
}

// newStock is GIE v1.5.0's path assembled as GIE's runner does: director and streaming server.
func newStock(tb testing.TB, cfg string) processor {
	return newStockOn(tb, cfg, newDatastore)
}

func newStockOn(tb testing.TB, cfg string, newDS func(context.Context, datalayer.EndpointFactory) datastore.Datastore) processor {
	tb.Helper()
	pluginset.RegisterAll()
	ctx := tb.Context()
	raw, _, err := pluginset.LoadRaw([]byte(cfg), logr.Discard())
	if err != nil {
		tb.Fatal(err)
	}
	ds := newDS(ctx, datalayer.NewRuntime(time.Hour))
	handle := plugintest.Handle(ctx)
	loaded, err := loader.InstantiateAndConfigure(raw, handle, logr.Discard())
	if err != nil {
		tb.Fatal(err)
	}
	reqCfg := requestcontrol.NewConfig()
	reqCfg.AddPlugins(handle.GetAllPlugins()...)
	cands := requestcontrol.NewDatastoreEndpointCandidates(ds)
	parser := handlers.NewParser(loaded.ParserConfig)
	dir := requestcontrol.NewDirectorWithConfig(ds, scheduling.NewSchedulerWithConfig(loaded.SchedulerConfig),
		requestcontrol.NewLegacyAdmissionController(loaded.SaturationDetector, cands), parser, cands, reqCfg)
	return handlers.NewStreamingServer(ds, dir, parser)
}

// stream is an in-memory ext_proc stream: it hands the server a request's frames and keeps
// what the server sends back.
type stream struct {
	extProcPb.ExternalProcessor_ProcessServer
	ctx  context.Context
	in   []*extProcPb.ProcessingRequest
	out  []*extProcPb.ProcessingResponse
	keep bool // keep responses (tests); benchmarks only count them
	sent int
}

func (s *stream) Context() context.Context { return s.ctx }
func (s *stream) Recv() (*extProcPb.ProcessingRequest, error) {
	if len(s.in) == 0 {
		return nil, io.EOF
	}
	r := s.in[0]
	s.in = s.in[1:]
	return r, nil
}
func (s *stream) Send(r *extProcPb.ProcessingResponse) error {
	s.sent++
	if s.keep {
		s.out = append(s.out, r)
	}
	return nil
}
func (s *stream) SetHeader(metadata.MD) error  { return nil }
func (s *stream) SendHeader(metadata.MD) error { return nil }
func (s *stream) SetTrailer(metadata.MD)       {}

// frames is one request as Envoy sends it in FULL_DUPLEX_STREAMED mode: headers, then the body
// in chunks of at most chunk bytes.
func frames(headers map[string]string, body []byte, chunk int) []*extProcPb.ProcessingRequest {
	hv := make([]*configPb.HeaderValue, 0, len(headers))
	for k, v := range headers {
		hv = append(hv, &configPb.HeaderValue{Key: k, RawValue: []byte(v)})
	}
	out := []*extProcPb.ProcessingRequest{{Request: &extProcPb.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extProcPb.HttpHeaders{Headers: &configPb.HeaderMap{Headers: hv}}}}}
	for start := 0; start < len(body); start += chunk {
		end := min(start+chunk, len(body))
		out = append(out, &extProcPb.ProcessingRequest{Request: &extProcPb.ProcessingRequest_RequestBody{
			RequestBody: &extProcPb.HttpBody{Body: body[start:end], EndOfStream: end == len(body)}}})
	}
	return out
}
