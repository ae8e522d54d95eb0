// Package floor is the ext_proc protocol's floor: a server that answers the exchange pdgate's
// EPP answers (request headers, the body in full-duplex streamed frames, the response phase),
// with the EPP's gRPC windows and buffers, and decides nothing. It keeps the body and sends it back in GIE's chunks with
// x-gateway-destination-endpoint set to one fixed pod, and echoes the response. Measured in the
// same run as the EPPs (pdgate-bench epp, config "floor"), its CPU per request is what the
// protocol alone costs with the same gRPC library and the same frames; an EPP's multiple of it
// is the distance left to close.
package floor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"time"

	configPb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthPb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/structpb"
	envoy "sigs.k8s.io/gateway-api-inference-extension/pkg/common/envoy"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metadata"

	"github.com/pdgate/pdgate/cmd/internal/grpcserver"
)

// Options configure the floor server.
type Options struct {
	GRPCPort, HealthPort, MetricsPort int
	// Endpoints are the pods it holds (host:port); every request goes to the first.
	Endpoints []string
}

// Server is the floor's ext_proc server.
type Server struct {
	extProcPb.UnimplementedExternalProcessorServer
	target string
}

// NewServer routes every request to target (host:port).
func NewServer(target string) *Server { return &Server{target: target} }

// Process implements the ext_proc exchange in Envoy's FULL_DUPLEX_STREAMED mode, as GIE's EPP
// answers it, without parsing anything.
func (s *Server) Process(stream extProcPb.ExternalProcessor_ProcessServer) error {
	var body []byte
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var out []*extProcPb.ProcessingResponse
		switch v := req.Request.(type) {
		case *extProcPb.ProcessingRequest_RequestHeaders:
			if v.RequestHeaders.GetEndOfStream() {
				out = append(out, s.route(0))
			} else if n := contentLength(v.RequestHeaders); n > 0 {
				body = make([]byte, 0, n) // one allocation, as an EPP that reads Content-Length makes
			}
		case *extProcPb.ProcessingRequest_RequestBody:
			body = append(body, v.RequestBody.GetBody()...)
			if v.RequestBody.GetEndOfStream() {
				out = append(out, s.route(len(body)))
				for _, c := range envoy.BuildChunkedBodyResponses(body, true) {
					out = append(out, &extProcPb.ProcessingResponse{Response: &extProcPb.ProcessingResponse_RequestBody{
						RequestBody: &extProcPb.BodyResponse{Response: c}}})
				}
				body = nil
			}
		case *extProcPb.ProcessingRequest_ResponseHeaders:
			out = append(out, &extProcPb.ProcessingResponse{Response: &extProcPb.ProcessingResponse_ResponseHeaders{
				ResponseHeaders: &extProcPb.HeadersResponse{}}})
		case *extProcPb.ProcessingRequest_ResponseBody:
			out = append(out, &extProcPb.ProcessingResponse{Response: &extProcPb.ProcessingResponse_ResponseBody{ResponseBody: &extProcPb.BodyResponse{
				Response: &extProcPb.CommonResponse{BodyMutation: &extProcPb.BodyMutation{Mutation: &extProcPb.BodyMutation_StreamedResponse{
					StreamedResponse: &extProcPb.StreamedBodyResponse{Body: v.ResponseBody.GetBody(), EndOfStream: v.ResponseBody.GetEndOfStream()}}}},
			}}})
		}
		for _, r := range out {
			if err := stream.Send(r); err != nil {
				return err
			}
		}
	}
}

// contentLength reads the request's Content-Length header (0 when absent or malformed).
func contentLength(h *extProcPb.HttpHeaders) int {
	for _, hv := range h.GetHeaders().GetHeaders() {
		if strings.EqualFold(hv.GetKey(), "content-length") {
			v := hv.GetValue()
			if v == "" {
				v = string(hv.GetRawValue())
			}
			if n, err := strconv.Atoi(v); err == nil && n > 0 && n <= 64<<20 {
				return n
			}
		}
	}
	return 0
}

// route is the routing answer GIE's EPP gives: the destination header and metadata, the
// body's Content-Length, the route cache cleared.
func (s *Server) route(size int) *extProcPb.ProcessingResponse {
	set := []*configPb.HeaderValueOption{{Header: &configPb.HeaderValue{Key: metadata.DestinationEndpointKey, RawValue: []byte(s.target)}}}
	if size > 0 {
		set = append(set, &configPb.HeaderValueOption{Header: &configPb.HeaderValue{Key: "Content-Length", RawValue: []byte(strconv.Itoa(size))}})
	}
	dyn := &structpb.Struct{Fields: map[string]*structpb.Value{
		metadata.DestinationEndpointNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			metadata.DestinationEndpointKey: structpb.NewStringValue(s.target),
		}}),
	}}
	return &extProcPb.ProcessingResponse{
		Response: &extProcPb.ProcessingResponse_RequestHeaders{RequestHeaders: &extProcPb.HeadersResponse{
			Response: &extProcPb.CommonResponse{ClearRouteCache: true, HeaderMutation: &extProcPb.HeaderMutation{SetHeaders: set}}}},
		DynamicMetadata: dyn,
	}
}

// Run serves ext_proc (plaintext), gRPC health (SERVING) and a /metrics page with GIE's
// per-pod series for each endpoint, so a harness waiting for an EPP to hold its pods sees the
// floor ready; until ctx ends.
func Run(ctx context.Context, o Options) error {
	if len(o.Endpoints) == 0 {
		return errors.New("floor: --endpoints: at least one host:port")
	}
	lc := net.ListenConfig{}
	listen := func(port int) (net.Listener, error) { return lc.Listen(ctx, "tcp", "127.0.0.1:"+strconv.Itoa(port)) }
	gl, err := listen(o.GRPCPort)
	if err != nil {
		return fmt.Errorf("floor: ext_proc listener: %w", err)
	}
	hl, err := listen(o.HealthPort)
	if err != nil {
		return fmt.Errorf("floor: health listener: %w", err)
	}
	ml, err := listen(o.MetricsPort)
	if err != nil {
		return fmt.Errorf("floor: metrics listener: %w", err)
	}
	gs := grpc.NewServer(grpcserver.ExtProcOptions()...) // the EPP's windows and buffers
	extProcPb.RegisterExternalProcessorServer(gs, NewServer(o.Endpoints[0]))
	hs := grpc.NewServer()
	h := health.NewServer()
	h.SetServingStatus("", healthPb.HealthCheckResponse_SERVING)
	healthPb.RegisterHealthServer(hs, h)
	ms := &http.Server{Handler: metricsMux(o.Endpoints), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 3)
	go func() { errc <- gs.Serve(gl) }()
	go func() { errc <- hs.Serve(hl) }()
	go func() { errc <- ms.Serve(ml) }()
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	gs.Stop()
	hs.Stop()
	_ = ms.Close()
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("floor: %w", err)
	}
	return nil
}

// metricsMux serves the metrics page and Go's heap profile: pdgate-bench epp asks every EPP
// it meters for a full collection before each metered window (/debug/pprof/heap?gc=1), the
// floor included.
func metricsMux(endpoints []string) http.Handler {
	page := metricsPage(endpoints)
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = io.WriteString(w, page)
	})
	mux.Handle("/debug/pprof/heap", pprof.Handler("heap"))
	return mux
}

// metricsPage lists GIE's per-pod queue gauge once per endpoint, at 0.
func metricsPage(endpoints []string) string {
	var b strings.Builder
	b.WriteString("# TYPE inference_pool_per_pod_queue_size gauge\n")
	for i, ep := range endpoints {
		fmt.Fprintf(&b, "inference_pool_per_pod_queue_size{model_server_pod=%q,name=\"floor\"} 0\n", fmt.Sprintf("pod-%d-%s", i, ep))
	}
	return b.String()
}
