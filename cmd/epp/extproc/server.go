// Package extproc is pdgate's request path: the ext_proc server that drives GIE v1.5.0's
// scheduler, data-layer producers and request-control plugins for every request, in the order
// GIE's director and streaming server call them, without their costs and with pdgate's
// guarantees:
//
//   - the request body is read once into one buffer and parsed once; the original bytes go
//     upstream unchanged unless the model is rewritten, and then only the model value changes;
//   - client-supplied routing headers (protocol.RoutingHeaders) are dropped before any plugin
//     sees the request and removed upstream unless a plugin set them;
//   - a plugin answers a request itself only with a typed contract.Answer (returned as an
//     error or recorded on the request's context); the one conditional-decode gate runs here,
//     after scheduling and before any PreRequest plugin;
//   - request bodies over the configured limit are answered with 413;
//   - decision traces are returned in x-pdgate-decision when asked for and allowed.
//
// See README.md for the hook order and what differs from GIE's StreamingServer.
package extproc

import (
	"context"
	"io"
	"time"

	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/gateway-api-inference-extension/apix/v1alpha2"
	logutil "sigs.k8s.io/gateway-api-inference-extension/pkg/common/observability/logging"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/flowcontrol/contracts"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwkrh "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requesthandling"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/requestcontrol"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/decisiontrace"
)

// prepareDataTimeout bounds the PrepareData plugins of one request, as GIE's director does.
const prepareDataTimeout = 400 * time.Millisecond

// Datastore is what the request path reads from GIE's datastore.
type Datastore interface {
	PoolGet() (*datalayer.EndpointPool, error)
	ObjectiveGet(objectiveName string) *v1alpha2.InferenceObjective
	PodList(predicate func(fwkdl.Endpoint) bool) []fwkdl.Endpoint
	ModelRewriteGet(modelName string) (*v1alpha2.InferenceModelRewriteRule, string)
}

// Scheduler is GIE's scheduler (or a wrapper of it).
type Scheduler interface {
	Schedule(ctx context.Context, request *fwksched.LLMRequest, candidates []fwksched.Endpoint) (*fwksched.SchedulingResult, error)
}

// TraceSource starts the decision trace of one request on its context; the scheduler's
// tracing wrappers fill it (cmd/epp/tracing).
type TraceSource interface {
	// Begin returns ctx carrying a trace slot, and a function returning the trace (nil when
	// none was recorded).
	Begin(ctx context.Context, wanted bool) (context.Context, func() *decisiontrace.Trace)
}

// Options configure the request path.
type Options struct {
	// MaxRequestBodyBytes answers 413 when a request body grows beyond it; 0 disables the check.
	MaxRequestBodyBytes int64
	// AllowTrace lets clients ask for x-pdgate-decision with x-pdgate-trace: 1.
	AllowTrace bool
	// Traces records decision traces; nil disables them.
	Traces TraceSource
	// TraceLogLevel is the verbosity at which every decision trace is logged (GIE's DEBUG by
	// default); a trace a client asked for is logged one level lower.
	TraceLogLevel int
	// PrefillRelease, when set, gives the value of protocol.HeaderPrefillRelease (the EPP's
	// signed prefill-release callback) for a request id; the header is added to every request
	// leaving with a prefill target (cmd/epp/prefillrelease).
	PrefillRelease func(requestID string) string
	// InlinePrepareData runs the PrepareData plugins without GIE's wall-clock budget (bench
	// sim: its clock is virtual).
	InlinePrepareData bool
	// Tracer records each request's spans (gateway.request and its phases); nil is tracing
	// off, and then the request path makes no tracing call at all.
	Tracer trace.Tracer
}

// Config is everything the request path drives.
type Config struct {
	Datastore  Datastore
	Scheduler  Scheduler
	Admission  requestcontrol.AdmissionController
	Candidates contracts.EndpointCandidates
	Parser     fwkrh.Parser
	// Plugins are every configured plugin; each hook list is taken from them.
	Plugins []fwkplugin.Plugin
	// PrepareDataOrder is the data-dependency order of the PrepareData plugins (their
	// TypedName().String()), from datalayer.ValidateAndOrderDataDependencies.
	PrepareDataOrder []string
	// Dispatched, when set, is told the scheduling result of every request the path sends on
	// (after the PreRequest plugins, once no early answer was recorded): admission's ledger of
	// where the EPP sent work since the last scrape.
	Dispatched func(requestID string, result *fwksched.SchedulingResult)
	// Settle, when set, is told the id of every request Admission admitted once the request
	// was dispatched (after Dispatched) or will not be: it ends admission's reservation.
	Settle func(requestID string)
	// FlowControl says Admission is GIE's flow controller: a request it admitted gets llm-d's
	// HeaderFlowQueueDuration on its response, the time it spent in admission, and the plugin
	// hooks see that time as contract.QueueWait.
	FlowControl bool
}

// Hooks are the plugins per extension point, resolved once, in the order the request path
// calls them (PrepareData in data-dependency order).
type Hooks struct {
	PrepareData    []fwkrc.PrepareDataPlugin
	Admission      []fwkrc.AdmissionPlugin
	PreRequest     []fwkrc.PreRequest
	ResponseHeader []fwkrc.ResponseHeader
	ResponseBody   []fwkrc.ResponseBody
	Gate           contract.ConditionalDecodeGate
	// Demand are told of every request admission refuses for want of capacity.
	Demand []contract.DemandObserver
}

// NewHooks sorts plugins into their hook lists.
func NewHooks(plugins []fwkplugin.Plugin, prepareOrder []string) Hooks {
	var h Hooks
	prepare := map[string]fwkrc.PrepareDataPlugin{}
	for _, p := range plugins {
		if v, ok := p.(fwkrc.PrepareDataPlugin); ok {
			prepare[p.TypedName().String()] = v
		}
		if v, ok := p.(fwkrc.AdmissionPlugin); ok {
			h.Admission = append(h.Admission, v)
		}
		if v, ok := p.(fwkrc.PreRequest); ok {
			h.PreRequest = append(h.PreRequest, v)
		}
		if v, ok := p.(fwkrc.ResponseHeader); ok {
			h.ResponseHeader = append(h.ResponseHeader, v)
		}
		if v, ok := p.(fwkrc.ResponseBody); ok {
			h.ResponseBody = append(h.ResponseBody, v)
		}
	}
	for _, name := range prepareOrder {
		if v, ok := prepare[name]; ok {
			h.PrepareData = append(h.PrepareData, v)
		}
	}
	h.Gate = contract.FindConditionalDecodeGate(plugins)
	h.Demand = contract.DemandObservers(plugins)
	return h
}

// Server is pdgate's ext_proc server.
type Server struct {
	extProcPb.UnimplementedExternalProcessorServer
	cfg      Config
	opts     Options
	hooks    Hooks
	director *Director
}

// New builds the request path.
func New(cfg Config, opts Options) *Server {
	if opts.TraceLogLevel == 0 {
		opts.TraceLogLevel = logutil.DEBUG
	}
	hooks := NewHooks(cfg.Plugins, cfg.PrepareDataOrder)
	return &Server{cfg: cfg, opts: opts, hooks: hooks, director: newDirector(cfg, hooks, opts)}
}

// Hooks returns the plugins per extension point.
func (s *Server) Hooks() Hooks { return s.hooks }

// Process serves one ext_proc stream: one HTTP request and its response.
func (s *Server) Process(srv extProcPb.ExternalProcessor_ProcessServer) error {
	ctx := srv.Context()
	x := newExchange(s, srv, log.FromContext(ctx))
	defer x.finish()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		msg, err := srv.Recv()
		if err == io.EOF || status.Code(err) == codes.Canceled {
			return nil
		}
		if err != nil {
			return status.Errorf(codes.Unknown, "cannot receive stream request: %v", err)
		}
		if err := x.handle(ctx, msg); err != nil {
			return err
		}
		if x.answered {
			return nil
		}
	}
}
