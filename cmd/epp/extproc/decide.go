package extproc

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"time"

	configPb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterPb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/gateway-api-inference-extension/apix/v1alpha2"
	envoy "sigs.k8s.io/gateway-api-inference-extension/pkg/common/envoy"
	errcommon "sigs.k8s.io/gateway-api-inference-extension/pkg/common/error"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metadata"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metrics"
	requtil "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/util/request"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/lib/bodyjson"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// decide runs the request's plugin hooks in GIE's director order (parse, objective,
// admission, candidates, PrepareData, admission plugins, scheduling, then the
// conditional-decode gate and PreRequest) and sends the routing decision with the body.
func (x *exchange) decide(ctx context.Context) error {
	ctx = log.IntoContext(ctx, x.logger)
	if x.s.opts.Traces != nil {
		ctx, x.takeTrace = x.s.opts.Traces.Begin(ctx, x.returnTrace() || x.logger.V(x.s.opts.TraceLogLevel).Enabled())
	}
	body, err := x.schedule(ctx)
	x.collectTrace()
	x.recordDecision(err == nil)
	if err != nil {
		if a, ok := contract.AnswerOf(err); ok {
			return x.answer(ctx, a)
		}
		return x.fail(err)
	}
	x.request.Headers = x.headers
	if f := x.s.opts.PrefillRelease; f != nil && protocol.HeaderValue(x.headers, protocol.HeaderPrefillerHostPort) != "" {
		x.headers[protocol.HeaderPrefillRelease] = f(x.requestID)
	}
	target := x.targetEndpoints()
	metrics.RecordRequestCounter(x.incomingModel, x.targetModel, x.priority)
	metrics.RecordRequestSizes(x.incomingModel, x.targetModel, len(body))
	common, dyn := x.routing(target, len(body), x.headerMutations())
	if err := x.sendDecision(common, dyn, body); err != nil {
		return err
	}
	metrics.IncRunningRequests(x.incomingModel)
	x.running = true
	return nil
}

// schedule parses the body, resolves the model and runs the director (director.go): it
// returns the upstream body, or an error that is either a contract.Answer or one of GIE's
// errcommon errors.
func (x *exchange) schedule(ctx context.Context) ([]byte, error) {
	var (
		parsed *fwksched.LLMRequestBody
		span   contract.ModelSpan
		err    error
	)
	if lp, ok := x.s.cfg.Parser.(contract.ModelLocatingParser); ok {
		parsed, span, err = lp.ParseRequestLocatingModel(ctx, x.body, x.headers)
	} else {
		parsed, err = x.s.cfg.Parser.ParseRequest(ctx, x.body, x.headers)
	}
	if err != nil {
		return nil, errcommon.Error{Code: errcommon.BadRequest, Msg: err.Error()}
	}
	body, err := x.resolveModel(parsed, span)
	if err != nil {
		return nil, err
	}
	x.request = &fwksched.LLMRequest{
		RequestId:        x.requestID,
		TargetModel:      x.targetModel,
		Body:             parsed,
		Headers:          x.headers,
		RequestSizeBytes: len(x.body),
	}
	dec, err := x.s.director.Decide(ctx, &Request{LLM: x.request, IncomingModel: x.incomingModel, FairnessID: x.fairnessID,
		ObjectiveKey: x.objectiveKey, Received: x.received, Metadata: x.metadata})
	x.tl.admitted, x.tl.decided, x.tl.admissionWait = dec.Admitted, time.Now(), dec.AdmissionWait
	x.priority, x.targetPod, x.result = dec.Priority, dec.Target, dec.Result
	if err != nil {
		return nil, err
	}
	return body, nil
}

// resolveModel finds the incoming and target models and returns the upstream body: the
// original bytes, or (only on a model rewrite) the original bytes with the model value
// replaced.
func (x *exchange) resolveModel(parsed *fwksched.LLMRequestBody, located contract.ModelSpan) ([]byte, error) {
	x.targetModel = x.rewriteModel
	var span [2]int
	haveSpan := false
	switch v := parsed.Payload.(type) {
	case fwksched.PayloadMap:
		model, ok := v["model"].(string)
		if !ok {
			return nil, errcommon.Error{Code: errcommon.BadRequest, Msg: "model not found in request body"}
		}
		x.incomingModel = model
	case fwksched.RawPayload:
		if located.Found() {
			x.incomingModel, span, haveSpan = located.Model, [2]int{located.Start, located.End}, true
		} else if model, start, end, err := bodyjson.ModelSpan(x.body); err == nil {
			x.incomingModel, span, haveSpan = model, [2]int{start, end}, true
		}
	case fwksched.PayloadProto:
		return x.body, nil // protos are not mutated, as in GIE
	default:
		return nil, errcommon.Error{Code: errcommon.BadRequest, Msg: "Unsupported llmRequest parsedBody"}
	}
	if x.incomingModel == "" {
		return x.body, nil
	}
	if x.targetModel == "" {
		x.targetModel = x.incomingModel
	}
	x.applyWeightedRewrite()
	if x.targetModel == x.incomingModel {
		return x.body, nil
	}
	if m, ok := parsed.Payload.(fwksched.PayloadMap); ok {
		m["model"] = x.targetModel
	}
	if !haveSpan {
		model, start, end, err := bodyjson.ModelSpan(x.body)
		if err != nil || model != x.incomingModel {
			return nil, errcommon.Error{Code: errcommon.BadRequest, Msg: "model not found in request body"}
		}
		span = [2]int{start, end}
	}
	quoted, err := json.Marshal(x.targetModel)
	if err != nil {
		return nil, errcommon.Error{Code: errcommon.Internal, Msg: "Error marshalling request body"}
	}
	out := make([]byte, 0, len(x.body)-(span[1]-span[0])+len(quoted))
	out = append(append(append(out, x.body[:span[0]]...), quoted...), x.body[span[1]:]...)
	x.bodyRewritten = true
	return out, nil
}

func (x *exchange) applyWeightedRewrite() {
	rule, name := x.s.cfg.Datastore.ModelRewriteGet(x.incomingModel)
	if rule == nil || len(rule.Targets) == 0 {
		return
	}
	x.targetModel = pickWeighted(rule.Targets)
	metrics.RecordInferenceModelRewriteDecision(name, x.incomingModel, x.targetModel)
}

func pickWeighted(models []v1alpha2.TargetModel) string {
	var total int32
	for _, m := range models {
		total += m.Weight
	}
	if total == 0 {
		return models[rand.IntN(len(models))].ModelRewrite
	}
	n := rand.Int32N(total)
	for _, m := range models {
		if n < m.Weight {
			return m.ModelRewrite
		}
		n -= m.Weight
	}
	return models[len(models)-1].ModelRewrite
}

func (x *exchange) targetEndpoints() string {
	eps := x.result.ProfileResults[x.result.PrimaryProfileName].TargetEndpoints
	if len(eps) == 1 {
		md := eps[0].GetMetadata()
		return net.JoinHostPort(md.GetIPAddress(), md.GetPort())
	}
	parts := make([]string, len(eps))
	for i, ep := range eps {
		md := ep.GetMetadata()
		parts[i] = net.JoinHostPort(md.GetIPAddress(), md.GetPort())
	}
	return strings.Join(parts, ",")
}

// headerMutations are the request headers plugins added or changed (the gateway already has
// the rest), and the removal of every routing header no plugin set: a client's copy was
// dropped on the way in, and a gateway that merges mutations must not forward it either.
func (x *exchange) headerMutations() *extProcPb.HeaderMutation {
	mut := &extProcPb.HeaderMutation{}
	var set uint64 // bit i: protocol.RoutingHeaders[i] was set by a plugin
	for k, v := range x.headers {
		if requtil.IsSystemOwnedHeader(k) {
			continue
		}
		if old, ok := x.sent[k]; ok && old == v {
			continue
		}
		lower := strings.ToLower(k)
		if i := routingIndex(lower); i >= 0 {
			if v == "" {
				continue // an empty value means "clear": left to RemoveHeaders
			}
			set |= 1 << uint(i)
		}
		mut.SetHeaders = append(mut.SetHeaders, setHeader(k, v))
	}
	for i, name := range protocol.RoutingHeaders {
		if set&(1<<uint(i)) == 0 {
			mut.RemoveHeaders = append(mut.RemoveHeaders, name)
		}
	}
	return mut
}

// routing is the routing decision as GIE's protocol defines it: the destination header and
// metadata, the new Content-Length, and the plugins' header mutations.
func (x *exchange) routing(target string, size int, mut *extProcPb.HeaderMutation) (*extProcPb.CommonResponse, *structpb.Struct) {
	set := make([]*configPb.HeaderValueOption, 0, len(mut.SetHeaders)+2)
	set = append(set, setHeader(metadata.DestinationEndpointKey, target))
	if size > 0 {
		set = append(set, setHeader("Content-Length", strconv.Itoa(size)))
	}
	mut.SetHeaders = append(set, mut.SetHeaders...)
	dyn := &structpb.Struct{Fields: map[string]*structpb.Value{
		metadata.DestinationEndpointNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			metadata.DestinationEndpointKey: structpb.NewStringValue(target),
		}}),
	}}
	return &extProcPb.CommonResponse{ClearRouteCache: true, HeaderMutation: mut}, dyn
}

// sendDecision sends the routing decision and the upstream body. In full-duplex streaming
// (Envoy's mode for GIE) the headers response comes first, then the body in GIE's 62,000-byte
// chunks (sub-slices of the body, whatever frames it came in: a 220 KB prompt in 16 KiB frames
// goes back as 4 messages, not 14). In buffered mode the headers were answered already and
// everything rides on the one body response.
func (x *exchange) sendDecision(common *extProcPb.CommonResponse, dyn *structpb.Struct, body []byte) error {
	if x.bufferedRequest() {
		if x.bodyRewritten {
			common.BodyMutation = &extProcPb.BodyMutation{Mutation: &extProcPb.BodyMutation_Body{Body: body}}
		}
		return x.send(&extProcPb.ProcessingResponse{
			Response:        &extProcPb.ProcessingResponse_RequestBody{RequestBody: &extProcPb.BodyResponse{Response: common}},
			DynamicMetadata: dyn,
		})
	}
	if err := x.send(&extProcPb.ProcessingResponse{
		Response:        &extProcPb.ProcessingResponse_RequestHeaders{RequestHeaders: &extProcPb.HeadersResponse{Response: common}},
		DynamicMetadata: dyn,
	}); err != nil {
		return err
	}
	for _, c := range envoy.BuildChunkedBodyResponses(body, true) {
		if err := x.send(&extProcPb.ProcessingResponse{Response: &extProcPb.ProcessingResponse_RequestBody{
			RequestBody: &extProcPb.BodyResponse{Response: c}}}); err != nil {
			return err
		}
	}
	return nil
}

func (x *exchange) bufferedRequest() bool {
	return x.requestBodyMode == filterPb.ProcessingMode_BUFFERED || x.requestBodyMode == filterPb.ProcessingMode_BUFFERED_PARTIAL
}
