package proxy

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/pdgate/pdgate/cmd/sidecar/jsonbody"
)

// trtKeys are the fields the TensorRT-LLM dialect sets.
var trtKeys = []string{"disaggregated_params", "prompt", "prompt_token_ids"}

// snowflake makes TRT-LLM disagg_request_ids: (ms since 2023-01-01 << 22) | (machine << 12) |
// (counter & 0xFFF), folded into [2^42, 2^63-1) so it lands in TRT-LLM's "global" id range.
type snowflake struct {
	mu      sync.Mutex
	machine uint64
	counter uint64
	now     func() time.Time
}

var snowflakeEpoch = time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC)

func newSnowflake(machine int, now func() time.Time) *snowflake {
	return &snowflake{machine: uint64(machine) & 0x3FF, now: now}
}

func (s *snowflake) next() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	ms := s.now().Sub(snowflakeEpoch).Milliseconds()
	if ms < 0 {
		ms = 0
	}
	if ms > 1<<41-1 {
		ms = 1<<41 - 1
	}
	s.counter++
	id := uint64(ms)<<22 | s.machine<<12 | (s.counter & 0xFFF)
	const span = 1<<63 - 1 - 1<<42
	return id%span + 1<<42
}

func rawUint(v uint64) json.RawMessage { return json.RawMessage(strconv.FormatUint(v, 10)) }

// trtDialect is TensorRT-LLM's wire dialect, in either schedule style.
type trtDialect struct {
	schedule   ScheduleStyle
	snow       *snowflake
	serverInfo *serverInfoCache
}

func (d *trtDialect) plan(ctx context.Context, rq *request) (*legPlan, error) {
	if err := duplicateKey(rq, trtKeys...); err != nil {
		return nil, err
	}
	if d.schedule == GenerationFirst {
		return d.generationFirst(ctx, rq)
	}
	return d.contextFirst(rq), nil
}

func (*trtDialect) producerParams(obj *jsonbody.Object) (string, *jsonbody.Object) {
	return "disaggregated_params", trtProducerParams(obj)
}

// contextFirst: context_only prefill, then generation_only decode with the returned
// disaggregated_params (and prompt_token_ids so the decode engine skips tokenization).
func (d *trtDialect) contextFirst(rq *request) *legPlan {
	id := d.snow.next()
	pre := sanitized(rq.obj)
	applyPrefillControls(pre, rq.api, false)
	dp := jsonbody.New()
	_ = dp.Set("request_type", "context_only")
	dp.SetRaw("disagg_request_id", rawUint(id))
	pre.SetObject("disaggregated_params", dp)
	return &legPlan{prefill: pre.Bytes(), reader: contextReader{}}
}

// contextReader reads a context_only answer into the generation_only decode leg.
type contextReader struct{}

func (contextReader) decodeBody(rq *request, resp *jsonbody.Object) ([]byte, string, *int64) {
	dec := sanitized(rq.obj)
	params, found := resp.Object("disaggregated_params")
	var choice0 *jsonbody.Object
	if raw, ok := resp.Raw("choices"); ok {
		var choices []json.RawMessage
		if json.Unmarshal(raw, &choices) == nil && len(choices) > 0 {
			choice0, _ = jsonbody.Parse(choices[0])
		}
	}
	if !found && choice0 != nil {
		params, found = choice0.Object("disaggregated_params")
	}
	if !found {
		rq.log.Info("context response carries no disaggregated_params; decode prefills locally")
		return dec.Bytes(), reasonNoKVParams, nil
	}
	if raw, ok := params.Raw("ctx_dp_rank"); ok {
		// The context server's rank: its pool's size is not known here, only the form is.
		if why := rankProblem(raw, 0); why != "" {
			rq.log.Info("context response reports a wrong data-parallel rank; decode prefills locally", "problem", why)
			return dec.Bytes(), causeWrongRank, nil
		}
	}
	_ = params.Set("request_type", "generation_only")
	dec.SetObject("disaggregated_params", params)
	ids, ok := resp.Raw("prompt_token_ids")
	if !ok && choice0 != nil {
		ids, ok = choice0.Raw("prompt_token_ids")
	}
	if ok && isArray(ids) {
		if rq.api == APICompletions {
			dec.SetRaw("prompt", ids)
		} else {
			dec.SetRaw("prompt_token_ids", ids)
		}
	}
	return dec.Bytes(), "", nil
}

func isArray(raw json.RawMessage) bool {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '[':
			return true
		}
		return false
	}
	return false
}

// generationFirst: the context server's endpoint comes from its /server_info; context and
// generation legs go out together with the same id and schedule_style 1.
func (d *trtDialect) generationFirst(ctx context.Context, rq *request) (*legPlan, error) {
	info, err := d.serverInfo.get(ctx, *rq.prefill)
	if err != nil {
		return nil, cannotSetUp("%s", err.Error())
	}
	id := d.snow.next()
	ctxParams := jsonbody.New()
	_ = ctxParams.Set("request_type", "context_only")
	ctxParams.SetRaw("disagg_request_id", rawUint(id))
	ctxParams.SetInt("schedule_style", 1)
	pre := sanitized(rq.obj)
	applyPrefillControls(pre, rq.api, false)
	pre.SetObject("disaggregated_params", ctxParams)

	genParams := jsonbody.New()
	_ = genParams.Set("request_type", "generation_only")
	genParams.SetRaw("disagg_request_id", rawUint(id))
	genParams.SetRaw("ctx_request_id", rawUint(id))
	genParams.SetInt("schedule_style", 1)
	_ = genParams.Set("ctx_info_endpoint", info.endpoint)
	genParams.SetInt("ctx_dp_rank", info.dpRank)
	if info.opaque != nil {
		genParams.SetRaw("encoded_opaque_state", info.opaque)
	}
	dec := sanitized(rq.obj)
	dec.SetObject("disaggregated_params", genParams)
	// The decode cannot finish without the context phase: a prefill failure cuts it even
	// after its answer started.
	return &legPlan{prefill: pre.Bytes(), concurrent: true, decode: dec.Bytes(), resetAfterCommit: true}, nil
}

// trtProducerParams rebuilds a context_only disaggregated_params from its producer keys.
func trtProducerParams(obj *jsonbody.Object) *jsonbody.Object {
	dp, ok := obj.Object("disaggregated_params")
	if !ok {
		return nil
	}
	if typ, _ := dp.String("request_type"); typ != "context_only" {
		return nil
	}
	out := jsonbody.New()
	_ = out.Set("request_type", "context_only")
	for _, k := range []string{"disagg_request_id", "schedule_style"} {
		raw, ok := dp.Raw(k)
		if !ok || string(raw) == "null" {
			continue
		}
		if _, err := strconv.ParseUint(string(raw), 10, 64); err != nil {
			return nil // not a plain non-negative integer: not a leg pdgate's sidecar wrote
		}
		out.SetRaw(k, raw)
	}
	return out
}
