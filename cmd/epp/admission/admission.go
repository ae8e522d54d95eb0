// Package admission is the EPP's stage-aware admission: the saturation detector
// GIE's admission controllers and flow control read is measured per P/D stage (the larger of
// the prefill and the decode tier's saturation, plugins/lib/stagesat), and their refusals become
// typed answers with llm-d's reason header: 429 when shedding (the pool is saturated, the
// request waited out its queue TTL), 503 when there is no capacity at all (no endpoint, the
// client left).
package admission

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/log"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	errcommon "sigs.k8s.io/gateway-api-inference-extension/pkg/common/error"
	logutil "sigs.k8s.io/gateway-api-inference-extension/pkg/common/observability/logging"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/flowcontrol/contracts"
	fctypes "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/flowcontrol/types"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkfc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/flowcontrol"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/handlers"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/requestcontrol"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/stagesat"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// DroppedReasonHeader is llm-d's drop-reason response header; the Reason* constants are its
// values.
const (
	DroppedReasonHeader       = "x-llm-d-request-dropped-reason"
	ReasonSaturated           = "rejected-saturated"
	ReasonNoEndpoints         = "rejected-no-endpoints"
	ReasonTTLExpired          = "rejected-ttl-expired"
	ReasonContextCancelled    = "rejected-context-cancelled"
	ReasonShuttingDown        = "rejected-shutting-down"
	ReasonInternal            = "rejected-internal"
	CauseSaturated            = contract.Cause("saturated")
	CauseNoCapacity           = contract.Cause("no_capacity")
	CauseQueueTTL             = contract.Cause("queue_ttl_expired")
	CauseClientGone           = contract.Cause("client_cancelled")
	CauseShuttingDown         = contract.Cause("shutting_down")
	CauseAdmissionInternal    = contract.Cause("admission_internal")
	stageLabel                = "stage"
	saturationMetricName      = "pdgate_pool_saturation"
	rejectionsMetricName      = "pdgate_admission_rejected_total"
	rejectionsMetricReasonKey = "reason"
)

var (
	saturation = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: saturationMetricName,
		Help: "Last saturation the EPP's admission measured, by P/D stage (prefill, decode) and the effective value admission used (the larger of the two, or the whole pool's when it has no P/D roles); 1.0 is saturated.",
	}, []string{stageLabel})
	rejections = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: rejectionsMetricName,
		Help: "Requests the EPP's admission (legacy saturation check or flow control) refused, by llm-d's drop reason.",
	}, []string{rejectionsMetricReasonKey})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() { crmetrics.Registry.MustRegister(saturation, rejections) })
}

// Detector is a stage-aware saturation detector: the wrapped detector measured over each P/D
// tier separately, the larger value returned.
type Detector struct {
	inner fwkfc.SaturationDetector
}

var _ fwkfc.SaturationDetector = (*Detector)(nil)

// StageAware wraps d. A nil d stays nil.
func StageAware(d fwkfc.SaturationDetector) fwkfc.SaturationDetector {
	if d == nil {
		return nil
	}
	registerMetrics()
	return &Detector{inner: d}
}

// TypedName is the wrapped detector's: configs and logs name the plugin the user configured.
func (d *Detector) TypedName() fwkplugin.TypedName { return d.inner.TypedName() }

// Inner returns the wrapped detector.
func (d *Detector) Inner() fwkfc.SaturationDetector { return d.inner }

// Saturation implements fwkfc.SaturationDetector. A request the controller classified
// decode-only (stages.go) is measured on the decode tier alone.
func (d *Detector) Saturation(ctx context.Context, eps []fwkdl.Endpoint) float64 {
	r := d.Measure(ctx, eps)
	if r.HasDecode && decodeOnly(ctx) {
		return r.Decode
	}
	return r.Effective
}

// Measure returns the per-stage evaluation and records it in pdgate_pool_saturation.
func (d *Detector) Measure(ctx context.Context, eps []fwkdl.Endpoint) stagesat.Result {
	r := stagesat.Saturation(eps, func(set []fwkdl.Endpoint) float64 { return d.inner.Saturation(ctx, set) })
	if logger := log.FromContext(ctx).V(logutil.TRACE); logger.Enabled() {
		logger.Info("stage saturation", "prefill", r.Prefill, "decode", r.Decode, "effective", r.Effective, "decodeOnly", decodeOnly(ctx), "endpoints", len(eps))
	}
	if r.HasPrefill {
		saturation.WithLabelValues(stagesat.StagePrefill).Set(r.Prefill)
	}
	if r.HasDecode {
		saturation.WithLabelValues(stagesat.StageDecode).Set(r.Decode)
	}
	saturation.WithLabelValues(stagesat.StageEffective).Set(r.Effective)
	return r
}

// Controller turns an admission controller's refusals into typed answers with llm-d's reason
// header.
type Controller struct {
	inner      requestcontrol.AdmissionController
	candidates contracts.EndpointCandidates
	stages     *Stages
	// reservations, when set, holds a prefill slot for each admitted request that needs a
	// prefill leg (dispatches.go); admitting is serialised by mu so each decision sees the
	// reservations of the ones before it.
	reservations *Dispatches
	mu           sync.Mutex
}

// WithReasons wraps inner; candidates tells "no capacity" (an empty pool) from shedding.
func WithReasons(inner requestcontrol.AdmissionController, candidates contracts.EndpointCandidates) *Controller {
	registerMetrics()
	return &Controller{inner: inner, candidates: candidates}
}

// WithRequestStages makes the wrapped check measure each request on the P/D stages it needs
// (stages.go; nil keeps the pool-level rule). Only the legacy check sees it: flow control
// measures the pool once per dispatch cycle, not per request.
func (c *Controller) WithRequestStages(s *Stages) *Controller {
	c.stages = s
	return c
}

// WithReservations makes each admitted request that needs a prefill leg hold a reservation in
// d until the request path settles it (legacy check only: flow control blocks in Admit while it
// queues a request, so its decisions cannot be serialised here).
func (c *Controller) WithReservations(d *Dispatches) *Controller {
	c.reservations = d
	return c
}

// Admit implements requestcontrol.AdmissionController.
// A model no endpoint serves is answered 404 first (models.go).
func (c *Controller) Admit(ctx context.Context, reqCtx *handlers.RequestContext, priority int) error {
	if a := c.checkModel(ctx, reqCtx); a != nil {
		return a
	}
	ctx, stage := c.stages.withRequest(ctx, reqCtx)
	var reserveFor string
	if c.reservations != nil && reqCtx != nil && reqCtx.SchedulingRequest != nil && (stage == nil || !stage.DecodeOnly()) {
		reserveFor = reqCtx.SchedulingRequest.RequestId
		c.mu.Lock()
		defer c.mu.Unlock()
	}
	queueCtx, cancel := queueDeadline(ctx, reqCtx, log.FromContext(ctx))
	err := c.inner.Admit(queueCtx, reqCtx, priority)
	cancel()
	if err == nil {
		if reserveFor != "" {
			c.reservations.reserve(reserveFor)
		}
		return nil
	}
	if logger := pluginkit.DebugLogger(ctx); logger.Enabled() {
		logger.Info("admission refused", "decodeOnly", decodeOnly(ctx), "error", err.Error())
	}
	if a := c.Translate(ctx, reqCtx, err); a != nil {
		return a
	}
	return err
}

// Translate maps GIE's admission errors (legacy and flow control) to answers with llm-d v0.11's
// drop reasons; nil leaves an error that is not GIE's as it is.
func (c *Controller) Translate(ctx context.Context, reqCtx *handlers.RequestContext, err error) *contract.Answer {
	var e errcommon.Error
	if !errors.As(err, &e) {
		return nil
	}
	switch e.Code {
	case errcommon.ResourceExhausted:
		if c.poolEmpty(ctx, reqCtx) {
			return answer(http.StatusServiceUnavailable, ReasonNoEndpoints, CauseNoCapacity, "no endpoints to serve the request: "+e.Msg)
		}
		return answer(http.StatusTooManyRequests, ReasonSaturated, CauseSaturated, e.Msg)
	case errcommon.ServiceUnavailable:
		switch {
		case strings.HasPrefix(e.Msg, "client disconnected"):
			return answer(http.StatusServiceUnavailable, ReasonContextCancelled, CauseClientGone, e.Msg)
		case strings.HasPrefix(e.Msg, "request timed out in queue"):
			if c.poolEmpty(ctx, reqCtx) {
				return answer(http.StatusServiceUnavailable, ReasonNoEndpoints, CauseNoCapacity, e.Msg)
			}
			return answer(http.StatusTooManyRequests, ReasonTTLExpired, CauseQueueTTL, e.Msg)
		}
		return answer(http.StatusServiceUnavailable, ReasonNoEndpoints, CauseNoCapacity, e.Msg)
	case errcommon.Internal:
		// llm-d v0.11 names these too: a flow controller that has stopped is shutting down
		// (503), anything else flow control could not place is rejected-internal (500).
		if strings.Contains(e.Msg, fctypes.ErrFlowControllerNotRunning.Error()) {
			return answer(http.StatusServiceUnavailable, ReasonShuttingDown, CauseShuttingDown, e.Msg)
		}
		return answer(http.StatusInternalServerError, ReasonInternal, CauseAdmissionInternal, e.Msg)
	}
	return nil
}

func (c *Controller) poolEmpty(ctx context.Context, reqCtx *handlers.RequestContext) bool {
	if c.candidates == nil {
		return false
	}
	var md map[string]any
	if reqCtx != nil && reqCtx.Request != nil {
		md = reqCtx.Request.Metadata
	}
	return len(c.candidates.Locate(ctx, md)) == 0
}

// answer is GIE's refusal as an OpenAI JSON error body (GIE's message, the type llm-d's EPP
// gives the code since v0.11: rate_limit_error for 429, server_error for 503) with llm-d's
// reason header.
func answer(status int, reason string, cause contract.Cause, msg string) *contract.Answer {
	rejections.WithLabelValues(reason).Inc()
	return &contract.Answer{
		Status: status,
		Body:   protocol.ErrorBody(status, "", msg),
		Headers: []contract.Header{{Name: "content-type", Value: protocol.ContentTypeJSON},
			{Name: DroppedReasonHeader, Value: reason}},
		Cause:   cause,
		Message: fmt.Sprintf("%s (%s)", msg, reason),
	}
}
