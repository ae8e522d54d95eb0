package extproc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"
	errcommon "sigs.k8s.io/gateway-api-inference-extension/pkg/common/error"
	logutil "sigs.k8s.io/gateway-api-inference-extension/pkg/common/observability/logging"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/handlers"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metadata"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Director is the request path after the body is parsed, in GIE's director order: the
// objective's priority, admission, the endpoint candidates and their per-request snapshot, the
// PrepareData plugins in data-dependency order, the admission plugins, scheduling, the one
// conditional-decode gate, the PreRequest plugins and the dispatch ledger, with the request's
// early-answer slot (contract.Record) opened first and read wherever GIE would act on an error;
// then the response hooks. The ext_proc server runs it for every request, and `pdgate bench
// sim` runs the same one (Server.Director) on its virtual clock: one implementation of the
// hook order, so the simulation decides what the EPP decides.
type Director struct {
	cfg    Config
	hooks  Hooks
	inline bool
	// prepareDataTimeout bounds the PrepareData plugins of one request (a field for tests).
	prepareDataTimeout time.Duration
	// attrRoom is the room for request values each snapshot endpoint gets (attrRoom).
	attrRoom atomic.Int32
	// preRequestLatency, responseHeaderLatency and responseBodyLatency record each hook
	// plugin's time, index for index with hooks' lists.
	preRequestLatency, responseHeaderLatency, responseBodyLatency []*pluginLatency
}

// Request is one parsed request as the director takes it.
type Request struct {
	// LLM is the scheduling request: id, target model, parsed body, the headers plugins read
	// and write, the received body's size. Decide sets its priority.
	LLM           *fwksched.LLMRequest
	IncomingModel string
	// FairnessID and ObjectiveKey are the flow's and the InferenceObjective's keys (GIE's
	// headers); an empty FairnessID is GIE's default flow.
	FairnessID   string
	ObjectiveKey string
	Received     time.Time
	// Metadata is the gateway's request metadata (endpoint subset filter).
	Metadata map[string]any
}

// NewRequest is the director's input for llm as a client sent it: the fairness id and the
// objective are read from its headers as the ext_proc server reads them.
func NewRequest(llm *fwksched.LLMRequest, incomingModel string, received time.Time) *Request {
	return &Request{LLM: llm, IncomingModel: incomingModel, Received: received,
		FairnessID: llm.Headers[metadata.FlowFairnessIDKey], ObjectiveKey: llm.Headers[metadata.ObjectiveKey]}
}

// Decision is what Decide found.
type Decision struct {
	// Priority is the request's objective priority.
	Priority int
	// Result is the scheduling result of a request that goes on (nil when answered).
	Result *fwksched.SchedulingResult
	// Target is the primary pick once scheduling made one, also when an early answer followed
	// (the conditional-decode gate, a PreRequest plugin): the caller ends such a request with
	// the end-of-stream response hooks (ResponseBody) so every charge is released.
	Target *fwkdl.EndpointMetadata
	// Admitted is when admission let the request through (zero when it did not): the end of
	// the EPP's queue phase.
	Admitted time.Time
	// AdmissionWait is how long the request spent in admission (flow control's queue, or the
	// legacy check), set with Admitted.
	AdmissionWait time.Duration
}

// Director returns the server's director.
func (s *Server) Director() *Director { return s.director }

func newDirector(cfg Config, hooks Hooks, opts Options) *Director {
	d := &Director{cfg: cfg, hooks: hooks, inline: opts.InlinePrepareData, prepareDataTimeout: prepareDataTimeout}
	d.attrRoom.Store(defaultAttrRoom)
	durations := &histogramSource{lookup: pluginDurations}
	for _, p := range hooks.PreRequest {
		d.preRequestLatency = append(d.preRequestLatency, newPluginLatency(durations, fwkrc.PreRequestExtensionPoint, p))
	}
	for _, p := range hooks.ResponseHeader {
		d.responseHeaderLatency = append(d.responseHeaderLatency, newPluginLatency(durations, fwkrc.ResponseReceivedExtensionPoint, p))
	}
	for _, p := range hooks.ResponseBody {
		d.responseBodyLatency = append(d.responseBodyLatency, newPluginLatency(durations, fwkrc.ResponseStreamingExtensionPoint, p))
	}
	return d
}

// Decide runs one request through the hooks up to its dispatch. It returns the decision and
// nil, or an error that is a *contract.Answer (a plugin's or admission's early answer, the
// conditional-decode 412) or one of GIE's errcommon errors (StatusOf gives the status the EPP
// answers with).
func (d *Director) Decide(ctx context.Context, in *Request) (Decision, error) {
	ctx = contract.WithAnswerSlot(ctx)
	req := in.LLM
	if in.FairnessID == "" {
		in.FairnessID = metadata.DefaultFairnessID
	}
	dec := Decision{Priority: d.objectivePriority(in.ObjectiveKey)}
	req.Objectives.Priority = dec.Priority
	logger := log.FromContext(ctx)
	if dbg := logger.V(logutil.DEBUG); dbg.Enabled() {
		// GIE's request logger carries these; WithValues allocates, so only when debugging.
		logger = logger.WithValues("objectiveKey", in.ObjectiveKey, "incomingModelName", in.IncomingModel,
			"targetModelName", req.TargetModel, "priority", dec.Priority)
		ctx = log.IntoContext(ctx, logger)
	}
	admit := time.Now()
	if err := d.cfg.Admission.Admit(ctx, d.admissionContext(in, dec.Priority), dec.Priority); err != nil {
		d.refused(ctx, req, err)
		return dec, err
	}
	dec.Admitted = time.Now()
	dec.AdmissionWait = dec.Admitted.Sub(admit)
	if d.cfg.FlowControl && dec.AdmissionWait > 0 {
		// flow control held the request in its queue: that wait is already part of its TTFT,
		// which a plugin forecasting the TTFT from now on must count
		ctx = contract.WithQueueWait(ctx, dec.AdmissionWait)
	}
	if d.cfg.Settle != nil {
		defer d.cfg.Settle(req.RequestId)
	}
	candidates := d.cfg.Candidates.Locate(ctx, in.Metadata)
	if len(candidates) == 0 {
		return dec, errcommon.Error{Code: errcommon.ServiceUnavailable, Msg: "failed to find endpoint candidates for serving the request"}
	}
	snapshot, eps := newSnapshot(candidates, int(d.attrRoom.Load()))
	if err := d.runPrepareData(ctx, req, snapshot); err != nil {
		if a, ok := contract.AnswerOf(err); ok {
			return dec, a
		}
		logger.Error(err, "failed to prepare per request data")
	}
	if a := contract.Recorded(ctx); a != nil {
		return dec, a
	}
	for _, p := range d.hooks.Admission {
		if err := p.AdmitRequest(ctx, req, snapshot); err != nil {
			d.refused(ctx, req, err)
			if a, ok := contract.AnswerOf(err); ok {
				return dec, a
			}
			logger.V(logutil.DEBUG).Info("AdmitRequest plugin denied the request", "plugin", p.TypedName(), "reason", err.Error())
			return dec, errcommon.Error{Code: errcommon.Internal, Msg: "request cannot be admitted"}
		}
	}
	result, err := d.cfg.Scheduler.Schedule(ctx, req, snapshot)
	d.attrRoom.Store(int32(attrRoom(eps)))
	if a := contract.Recorded(ctx); a != nil {
		return dec, a // a filter or scorer answered: the scheduler's own outcome does not matter
	}
	if err != nil {
		if a, ok := contract.AnswerOf(err); ok {
			return dec, a
		}
		return dec, errcommon.Error{Code: errcommon.ResourceExhausted, Msg: fmt.Errorf("failed to find target endpoint: %w", err).Error()}
	}
	if result == nil || len(result.ProfileResults) == 0 || result.ProfileResults[result.PrimaryProfileName] == nil ||
		len(result.ProfileResults[result.PrimaryProfileName].TargetEndpoints) == 0 {
		return dec, errcommon.Error{Code: errcommon.Internal, Msg: "results must be greater than zero"}
	}
	primary := result.ProfileResults[result.PrimaryProfileName].TargetEndpoints
	dec.Target = primary[0].GetMetadata()
	if a := d.conditionalDecode(ctx, req, primary[0]); a != nil {
		return dec, a
	}
	timeEach(d.preRequestLatency, func(i int) { d.hooks.PreRequest[i].PreRequest(ctx, req, result) })
	if a := contract.Recorded(ctx); a != nil {
		return dec, a
	}
	if d.cfg.Dispatched != nil {
		d.cfg.Dispatched(req.RequestId, result)
	}
	dec.Result = result
	return dec, nil
}

// refused tells the demand observers of a request admission refused for want of capacity (429
// or 503); other refusals (an unknown model, a malformed request) are not demand for the pool.
func (d *Director) refused(ctx context.Context, req *fwksched.LLMRequest, err error) {
	if len(d.hooks.Demand) == 0 {
		return
	}
	if st := StatusOf(err); st != http.StatusTooManyRequests && st != http.StatusServiceUnavailable {
		return
	}
	for _, o := range d.hooks.Demand {
		o.RefusedForCapacity(ctx, req)
	}
}

// conditionalDecode runs the one conditional-decode gate for a Prefer: if-available request,
// after scheduling and before any PreRequest plugin.
func (d *Director) conditionalDecode(ctx context.Context, req *fwksched.LLMRequest, decode fwksched.Endpoint) *contract.Answer {
	g := d.hooks.Gate
	if g == nil || !protocol.IsConditionalDecode(protocol.HeaderValue(req.Headers, protocol.HeaderPrefer)) {
		return nil
	}
	if !g.CheckConditionalDecode(ctx, req, decode) {
		return nil
	}
	return contract.ConditionalDecodeMiss()
}

func (d *Director) objectivePriority(key string) int {
	obj := d.cfg.Datastore.ObjectiveGet(key)
	if obj == nil || obj.Spec.Priority == nil {
		return 0
	}
	return *obj.Spec.Priority
}

// admissionContext is the GIE request context its admission controllers read.
func (d *Director) admissionContext(in *Request, priority int) *handlers.RequestContext {
	return &handlers.RequestContext{
		IncomingModelName:        in.IncomingModel,
		TargetModelName:          in.LLM.TargetModel,
		FairnessID:               in.FairnessID,
		ObjectiveKey:             in.ObjectiveKey,
		Priority:                 priority,
		RequestReceivedTimestamp: in.Received,
		RequestSize:              in.LLM.RequestSizeBytes,
		Request:                  &handlers.Request{Headers: in.LLM.Headers, Metadata: in.Metadata},
		SchedulingRequest:        in.LLM,
	}
}

// runPrepareData runs the PrepareData plugins in data-dependency order under GIE's 400 ms
// budget (none when Options.InlinePrepareData is set: bench sim's clock is virtual).
//
// They run on the caller's goroutine, with the budget as their context's deadline, where GIE
// runs them on a goroutine of their own and stops waiting at the deadline. Handing a request
// to another goroutine and back costs a spawn, a timer and two wake-ups (2 % of llm-d P/D's
// instructions at 1 KB through gRPC, 5-9 % of an in-process profile), and waiting for nothing
// else bought nothing: scheduling needs what the plugins write. What a request sees is GIE's: a plugin that returns an error, or the
// budget running out, leaves the later plugins' data absent, and Decide logs it and goes on.
// The one difference is for a plugin that ignores its context: the request waits for it
// rather than racing it (GIE's scorers could read a snapshot such a plugin was still writing).
func (d *Director) runPrepareData(ctx context.Context, req *fwksched.LLMRequest, snapshot []fwksched.Endpoint) error {
	plugins := d.hooks.PrepareData
	if len(plugins) == 0 {
		return nil
	}
	if !d.inline {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.prepareDataTimeout)
		defer cancel()
	}
	for _, p := range plugins {
		if err := p.PrepareRequestData(ctx, req, snapshot); err != nil {
			return fmt.Errorf("prepare data plugin %s failed: %w", p.TypedName(), err)
		}
		if err := ctx.Err(); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("prepare data plugins timed out after %s (at %s)", d.prepareDataTimeout, p.TypedName())
			}
			return err
		}
	}
	return nil
}

// ResponseHeader runs the ResponseHeader plugins for a response's first bytes.
func (d *Director) ResponseHeader(ctx context.Context, req *fwksched.LLMRequest, resp *fwkrc.Response, target *fwkdl.EndpointMetadata) {
	timeEach(d.responseHeaderLatency, func(i int) { d.hooks.ResponseHeader[i].ResponseHeader(ctx, req, resp, target) })
}

// ResponseBody runs the ResponseBody plugins for one response chunk (resp.EndOfStream: the
// last, with the usage), and for a request that was picked and then ended without a response.
func (d *Director) ResponseBody(ctx context.Context, req *fwksched.LLMRequest, resp *fwkrc.Response, target *fwkdl.EndpointMetadata) {
	timeEach(d.responseBodyLatency, func(i int) { d.hooks.ResponseBody[i].ResponseBody(ctx, req, resp, target) })
}

// StatusOf is the HTTP status the EPP answers a Decide error with: an answer's own status, or
// GIE's mapping of its error codes; 0 for an error GIE cannot map (the EPP ends the ext_proc
// stream and the gateway applies its failure mode).
func StatusOf(err error) int {
	if a, ok := contract.AnswerOf(err); ok {
		return a.Status
	}
	resp, gerr := errcommon.BuildErrResponse(err)
	if gerr != nil || resp.GetImmediateResponse() == nil {
		return 0
	}
	return int(resp.GetImmediateResponse().GetStatus().GetCode())
}
