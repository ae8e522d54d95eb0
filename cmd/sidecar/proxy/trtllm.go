package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
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

// runTRTContextFirst: context_only prefill, then generation_only decode with the returned
// disaggregated_params (and prompt_token_ids so the decode engine skips tokenization).
func (p *Proxy) runTRTContextFirst(w http.ResponseWriter, r *http.Request, rq *request) {
	if rejectDuplicates(w, rq, trtKeys...) {
		return
	}
	id := p.snow.next()
	pre := sanitized(rq.obj)
	applyPrefillControls(pre, rq.api, false)
	dp := jsonbody.New()
	_ = dp.Set("request_type", "context_only")
	dp.SetRaw("disagg_request_id", rawUint(id))
	pre.SetObject("disaggregated_params", dp)
	resp, dur, lerr := p.sequentialPrefill(r, rq, pre.Bytes())
	if lerr != nil {
		p.prefillFailed(w, r, rq, lerr)
		return
	}
	end := time.Now()
	dec := sanitized(rq.obj)
	outcome := outcomeOK
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
	if found {
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
	} else {
		rq.log.Info("context response carries no disaggregated_params; decode prefills locally")
		p.report.diverted(rq, outcomeFallback, reasonNoKVParams)
		outcome = outcomeFallback
	}
	p.decode(w, r, rq, dec.Bytes(), decodeOpts{outcome: outcome, prefillDur: dur, prefillEnd: end})
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

// runTRTGenerationFirst: the context server's endpoint comes from its /server_info; context
// and generation legs go out together with the same id and schedule_style 1.
func (p *Proxy) runTRTGenerationFirst(w http.ResponseWriter, r *http.Request, rq *request) {
	if rejectDuplicates(w, rq, trtKeys...) {
		return
	}
	info, err := p.serverInfo.get(r.Context(), *rq.prefill)
	if err != nil {
		p.setupFailure(w, r, rq, err.Error())
		return
	}
	id := p.snow.next()
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

	g := newGate(true)
	defer p.startConcurrentPrefill(r, rq, pre.Bytes(), g, nil)()
	p.decode(w, r, rq, dec.Bytes(), decodeOpts{gate: g})
}

// ctxInfo is what generation_first needs from a context server's /server_info.
type ctxInfo struct {
	endpoint string
	dpRank   int64
	opaque   json.RawMessage
}

// parseServerInfo validates disaggregated_params of a /server_info answer.
func parseServerInfo(b []byte) (ctxInfo, error) {
	obj, err := jsonbody.Parse(b)
	if err != nil {
		return ctxInfo{}, fmt.Errorf("server_info: %w", err)
	}
	dp, ok := obj.Object("disaggregated_params")
	if !ok {
		return ctxInfo{}, fmt.Errorf("server_info: disaggregated_params missing")
	}
	var info ctxInfo
	raw, _ := dp.Raw("ctx_info_endpoint")
	var s string
	var list []string
	switch {
	case json.Unmarshal(raw, &s) == nil && s != "":
		info.endpoint = s
	case json.Unmarshal(raw, &list) == nil && len(list) == 1 && list[0] != "":
		info.endpoint = list[0]
	default:
		return ctxInfo{}, fmt.Errorf("server_info: disaggregated_params.ctx_info_endpoint must be a non-empty string")
	}
	raw, ok = dp.Raw("ctx_dp_rank")
	var n json.Number
	if !ok || json.Unmarshal(raw, &n) != nil {
		return ctxInfo{}, fmt.Errorf("server_info: disaggregated_params.ctx_dp_rank missing")
	}
	rank, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil || rank < 0 {
		return ctxInfo{}, fmt.Errorf("server_info: disaggregated_params.ctx_dp_rank must be an integer >= 0")
	}
	info.dpRank = rank
	if raw, ok := dp.Raw("encoded_opaque_state"); ok && string(raw) != "null" {
		info.opaque = raw
	}
	return info, nil
}
