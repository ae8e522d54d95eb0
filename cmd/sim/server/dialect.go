package server

import (
	"encoding/base64"
	"encoding/json"
	"net"
	"strconv"
	"strings"
)

type legKind int

const (
	legPlain   legKind = iota // no disaggregation fields: prefill locally
	legProduce                // a prefill leg: keep the KV for a decode to pull
	legConsume                // a decode leg: pull the KV from the server named
)

// leg is what a request's dialect fields ask of this server.
type leg struct {
	kind     legKind
	id       string // handoff id (produce and consume)
	endpoint string // consume: host:port serving /internal/kv/pull
	pull     pullRequest
	firstGen []uint32 // TRT first_gen_tokens to check
	// TRT context leg echoes
	trtDisaggID json.RawMessage
	// rank is the producer's data-parallel rank the decode leg names (vLLM remote_dp_rank,
	// TensorRT-LLM ctx_dp_rank with opaque_state); nil when it names none.
	rank *int
	// shared-storage
	threshold    float64
	hasThreshold bool
	rid          string
}

func isNull(v json.RawMessage) bool { return len(v) == 0 || string(v) == "null" }

func (in *Instance) parseLeg(req *simRequest) (leg, error) {
	var l leg
	var err error
	switch in.opts.Dialect {
	case DialectVLLM:
		l, err = in.parseVLLM(req.body)
	case DialectSGLang:
		l, err = in.parseSGLang(req.body)
	case DialectTRTLLM:
		l, err = in.parseTRT(req.body)
	}
	if err != nil {
		return leg{}, err
	}
	switch {
	case l.kind == legProduce && in.opts.Role == RoleDecode:
		return leg{}, badf("this server runs role decode: it cannot serve a prefill leg")
	case l.kind == legConsume && in.opts.Role == RolePrefill:
		return leg{}, badf("this server runs role prefill: it cannot serve a decode leg")
	}
	return l, nil
}

func (in *Instance) parseVLLM(body map[string]json.RawMessage) (leg, error) {
	var l leg
	if v, ok := body["cache_hit_threshold"]; ok && !isNull(v) && in.opts.KVConnector == ConnectorSharedStorage {
		if err := json.Unmarshal(v, &l.threshold); err != nil || l.threshold < 0 || l.threshold > 1 {
			return leg{}, badf("cache_hit_threshold must be a number in [0, 1]")
		}
		l.hasThreshold = true
	}
	params, ok := body["kv_transfer_params"]
	if resp, has := body["disagg_prefill_resp"]; has && !isNull(resp) {
		var pr map[string]json.RawMessage
		if err := json.Unmarshal(resp, &pr); err != nil {
			return leg{}, badf("disagg_prefill_resp must be the prefill response object")
		}
		if params, ok = pr["kv_transfer_params"]; !ok || isNull(params) {
			return leg{}, badf("disagg_prefill_resp carries no kv_transfer_params: the prefill leg did not hand off KV")
		}
	}
	if !ok || isNull(params) {
		return l, nil
	}
	if in.opts.KVConnector != ConnectorNIXL {
		return leg{}, badf("kv_transfer_params: this server's KV connector is %s, not nixl", in.opts.KVConnector)
	}
	var p map[string]json.RawMessage
	if err := json.Unmarshal(params, &p); err != nil {
		return leg{}, badf("kv_transfer_params must be an object")
	}
	boolField := func(k string) (bool, error) {
		v, ok := p[k]
		if !ok || isNull(v) {
			return false, nil
		}
		var b bool
		if err := json.Unmarshal(v, &b); err != nil {
			return false, badf("kv_transfer_params.%s must be a boolean", k)
		}
		return b, nil
	}
	decode, err := boolField("do_remote_decode")
	if err != nil {
		return leg{}, err
	}
	prefill, err := boolField("do_remote_prefill")
	if err != nil {
		return leg{}, err
	}
	switch {
	case decode && prefill:
		return leg{}, badf("kv_transfer_params: do_remote_decode and do_remote_prefill cannot both be true")
	case decode:
		l.kind = legProduce
		return l, nil
	case !prefill:
		return leg{}, badf("kv_transfer_params: set do_remote_decode (prefill leg) or do_remote_prefill (decode leg)")
	}
	l.kind = legConsume
	var engine, host, reqID string
	var port int
	var blocks []int
	for _, f := range []struct {
		key string
		dst any
	}{{"remote_engine_id", &engine}, {"remote_host", &host}, {"remote_port", &port}, {"remote_block_ids", &blocks}, {"remote_request_id", &reqID}} {
		v, ok := p[f.key]
		if !ok || isNull(v) {
			return leg{}, badf("kv_transfer_params.%s is required for a decode leg", f.key)
		}
		if err := json.Unmarshal(v, f.dst); err != nil {
			return leg{}, badf("kv_transfer_params.%s has the wrong type", f.key)
		}
	}
	switch {
	case engine == "" || host == "" || reqID == "":
		return leg{}, badf("kv_transfer_params: remote_engine_id, remote_host and remote_request_id must be non-empty")
	case port < 1 || port > 65535:
		return leg{}, badf("kv_transfer_params.remote_port %d out of range", port)
	case len(blocks) == 0:
		return leg{}, badf("kv_transfer_params.remote_block_ids is empty")
	}
	l.id = reqID
	l.endpoint = net.JoinHostPort(host, strconv.Itoa(port))
	l.pull = pullRequest{ID: reqID, Dialect: DialectVLLM, EngineID: engine, BlockIDs: blocks}
	if l.rank, err = optionalRank(p, "remote_dp_rank", "kv_transfer_params"); err != nil {
		return leg{}, err
	}
	return l, nil
}

func (in *Instance) parseSGLang(body map[string]json.RawMessage) (leg, error) {
	var l leg
	if v, ok := body["rid"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &l.rid); err != nil || l.rid == "" {
			return leg{}, badf("rid must be a non-empty string")
		}
	}
	_, hasHost := body["bootstrap_host"]
	_, hasPort := body["bootstrap_port"]
	_, hasRoom := body["bootstrap_room"]
	if in.opts.Role == RoleCombined || in.opts.Role == RoleEncode {
		return l, nil // SGLang without disaggregation mode ignores the bootstrap fields
	}
	if !hasHost || !hasPort || !hasRoom {
		return leg{}, badf("a %s-mode SGLang server needs bootstrap_host, bootstrap_port and bootstrap_room", in.opts.Role)
	}
	var host string
	var port int
	var room uint64
	if err := json.Unmarshal(body["bootstrap_host"], &host); err != nil || host == "" {
		return leg{}, badf("bootstrap_host must be a non-empty string")
	}
	if err := json.Unmarshal(body["bootstrap_port"], &port); err != nil || port < 1 || port > 65535 {
		return leg{}, badf("bootstrap_port must be an integer in 1..65535")
	}
	if err := json.Unmarshal(body["bootstrap_room"], &room); err != nil || room > 1<<63-1 {
		return leg{}, badf("bootstrap_room must be an integer in 0..2^63-1")
	}
	l.id = strconv.FormatUint(room, 10)
	if in.opts.Role == RolePrefill {
		l.kind = legProduce
		return l, nil
	}
	l.kind = legConsume
	l.endpoint = net.JoinHostPort(host, strconv.Itoa(port))
	l.pull = pullRequest{ID: l.id, Dialect: DialectSGLang, WaitMS: in.opts.KVWaitTimeout.Milliseconds()}
	return l, nil
}

// trtOpaque is what the sim packs into TRT's opaque_state / encoded_opaque_state.
type trtOpaque struct {
	Endpoint string `json:"endpoint"`
	EngineID string `json:"engine_id"`
}

func (in *Instance) opaqueState() string {
	b, _ := json.Marshal(trtOpaque{Endpoint: in.advertised(), EngineID: in.engineID})
	return base64.StdEncoding.EncodeToString(b)
}

func (in *Instance) parseTRT(body map[string]json.RawMessage) (leg, error) {
	var l leg
	v, ok := body["disaggregated_params"]
	if !ok || isNull(v) {
		return l, nil
	}
	var p map[string]json.RawMessage
	if err := json.Unmarshal(v, &p); err != nil {
		return leg{}, badf("disaggregated_params must be an object")
	}
	var typ string
	if err := json.Unmarshal(p["request_type"], &typ); err != nil {
		return leg{}, badf("disaggregated_params.request_type must be a string")
	}
	switch typ {
	case "context_and_generation":
		return l, nil
	case "context_only":
		l.kind = legProduce
		if id, ok := p["disagg_request_id"]; ok && !isNull(id) {
			var n uint64
			if err := json.Unmarshal(id, &n); err != nil {
				return leg{}, badf("disaggregated_params.disagg_request_id must be a non-negative integer")
			}
			l.id, l.trtDisaggID = strconv.FormatUint(n, 10), id
		}
		return l, nil
	case "generation_only":
	default:
		return leg{}, badf("disaggregated_params.request_type must be context_only, generation_only or context_and_generation, got %q", typ)
	}
	l.kind = legConsume
	var ctxID uint64
	if err := json.Unmarshal(p["ctx_request_id"], &ctxID); err != nil {
		return leg{}, badf("disaggregated_params.ctx_request_id is required for generation_only and must be an integer")
	}
	l.id = strconv.FormatUint(ctxID, 10)
	l.pull = pullRequest{ID: l.id, Dialect: DialectTRTLLM}
	if raw, ok := p["first_gen_tokens"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &l.firstGen); err != nil {
			return leg{}, badf("disaggregated_params.first_gen_tokens must be an array of token ids")
		}
	}
	if raw, ok := p["opaque_state"]; ok && !isNull(raw) {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return leg{}, badf("disaggregated_params.opaque_state must be a base64 string")
		}
		dec, err := base64.StdEncoding.DecodeString(s)
		var o trtOpaque
		if err != nil || json.Unmarshal(dec, &o) != nil || o.Endpoint == "" {
			return leg{}, badf("disaggregated_params.opaque_state is not a context server's state")
		}
		l.endpoint, l.pull.EngineID = o.Endpoint, o.EngineID
		if l.rank, err = optionalRank(p, "ctx_dp_rank", "disaggregated_params"); err != nil {
			return leg{}, err
		}
		return l, nil
	}
	raw, ok := p["ctx_info_endpoint"]
	if !ok || isNull(raw) {
		return leg{}, badf("generation_only needs disaggregated_params.opaque_state or ctx_info_endpoint")
	}
	var ep string
	if err := json.Unmarshal(raw, &ep); err != nil {
		var arr []string
		if json.Unmarshal(raw, &arr) != nil || len(arr) != 1 {
			return leg{}, badf("disaggregated_params.ctx_info_endpoint must be a string or a one-element array")
		}
		ep = arr[0]
	}
	hostport := strings.TrimPrefix(ep, "tcp://")
	if _, _, err := net.SplitHostPort(hostport); err != nil {
		return leg{}, badf("disaggregated_params.ctx_info_endpoint %q is not tcp://host:port", ep)
	}
	if rank, ok := p["ctx_dp_rank"]; ok && !isNull(rank) {
		var r int
		if err := json.Unmarshal(rank, &r); err != nil || r != 0 {
			return leg{}, badf("disaggregated_params.ctx_dp_rank must be 0 (the simulator has one DP rank)")
		}
	}
	l.endpoint = hostport
	l.pull.WaitMS = in.opts.KVWaitTimeout.Milliseconds()
	return l, nil
}

// optionalRank reads an optional data-parallel rank field of a handoff object.
func optionalRank(p map[string]json.RawMessage, key, object string) (*int, error) {
	v, ok := p[key]
	if !ok || isNull(v) {
		return nil, nil
	}
	var r int
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, badf("%s.%s must be an integer", object, key)
	}
	return &r, nil
}

// produceFields are the dialect's handoff fields in a prefill leg's answer; wrongRank names
// a rank one past the instance's ranks.
func (in *Instance) produceFields(l leg, req *simRequest, out output, blockIDs []int, wrongRank bool) (extra, choice map[string]any) {
	switch in.opts.Dialect {
	case DialectVLLM:
		host, port, _ := net.SplitHostPort(in.advertised())
		p, _ := strconv.Atoi(port)
		params := in.dpFields(map[string]any{
			"do_remote_prefill": true, "do_remote_decode": false, "remote_engine_id": in.engineID,
			"remote_block_ids": blockIDs, "remote_host": host, "remote_port": p, "remote_request_id": l.id, "tp_size": 1})
		if wrongRank {
			params["remote_dp_rank"] = max(in.opts.DataParallelSize, 1)
		}
		return map[string]any{"kv_transfer_params": params}, nil
	case DialectTRTLLM:
		id, _ := strconv.ParseUint(l.id, 10, 64)
		var disagg any
		if l.trtDisaggID != nil {
			disagg = l.trtDisaggID
		}
		var first []uint32
		if len(out.ids) > 0 {
			first = out.ids[:1]
		}
		params := map[string]any{"request_type": "context_only", "first_gen_tokens": first, "ctx_request_id": id,
			"opaque_state": in.opaqueState(), "draft_tokens": nil, "disagg_request_id": disagg}
		if wrongRank {
			params["ctx_dp_rank"] = 1 // a context server of one rank
		}
		return map[string]any{"prompt_token_ids": req.tokens}, map[string]any{"disaggregated_params": params}
	}
	return nil, nil
}
