package proxy

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/pdgate/pdgate/cmd/sidecar/jsonbody"
)

// nixlPrefillParams asks vLLM to prefill for a remote decoder (llm-d nixlv2, AIBrix shfs).
const nixlPrefillParams = `{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`

// vllmDialect is vLLM's wire dialect: a sequential prefill, then a decode that carries the
// prefiller's KV parameters in the form of the request's KV connector.
type vllmDialect struct {
	// connector is --kv-connector, used when the EPP names no connector for the prefill pod.
	connector Connector
	// ranks pins the decode to the data-parallel rank the prefill reports.
	ranks ranks
}

// connectorFor returns the request's connector: the prefill pod's declared one when the EPP
// sent it, else the flag.
func (d vllmDialect) connectorFor(rq *request) (Connector, bool) {
	if rq.prefillConnector == "" {
		return d.connector, true
	}
	c := Connector(strings.ToLower(rq.prefillConnector))
	return c, oneOf(c, Connectors)
}

func (d vllmDialect) plan(_ context.Context, rq *request) (*legPlan, error) {
	conn, ok := d.connectorFor(rq)
	if !ok {
		return nil, cannotSetUp("unsupported KV connector %s (supported: %s)", rq.prefillConnector, join(Connectors))
	}
	if conn == ConnectorSharedStorage {
		return sharedStoragePlan(rq)
	}
	if err := duplicateKey(rq); err != nil {
		return nil, err
	}
	pre := sanitized(rq.obj)
	applyPrefillControls(pre, rq.api, true)
	if conn != ConnectorNeuronNIXL {
		pre.SetRaw("kv_transfer_params", json.RawMessage(nixlPrefillParams))
	}
	return &legPlan{prefill: pre.Bytes(), reader: vllmReader{conn: conn, ranks: d.ranks}}, nil
}

func (vllmDialect) producerParams(obj *jsonbody.Object) (string, *jsonbody.Object) {
	return "kv_transfer_params", nixlProducerParams(obj)
}

// vllmReader hands the prefiller's KV parameters to the decode leg.
type vllmReader struct {
	conn  Connector
	ranks ranks
}

func (v vllmReader) decodeBody(rq *request, resp *jsonbody.Object) ([]byte, string, *int64) {
	dec := sanitized(rq.obj)
	fallback := ""
	switch v.conn {
	case ConnectorNeuronNIXL:
		dec.SetObject("disagg_prefill_resp", resp)
	default:
		params, found := resp.Object("kv_transfer_params")
		if !found {
			// Without parameters the decode engine prefills by itself.
			rq.log.Info("prefill response carries no kv_transfer_params; decode prefills locally")
			fallback = reasonNoKVParams
			break
		}
		if v.conn == ConnectorNIXLv2 {
			if why := nixlHandoffProblem(params); why != "" {
				// A decode handed these would pull from nowhere (or hang on the pull): it
				// prefills by itself instead, as without parameters.
				rq.log.Info("prefill response's kv_transfer_params are malformed; decode prefills locally", "problem", why)
				fallback = reasonNoKVParams
				break
			}
		}
		if raw, ok := params.Raw("remote_dp_rank"); ok {
			if why := rankProblem(raw, v.ranks.dp.Size); why != "" {
				// The decode would be pinned to, or pull from, a rank that does not exist.
				rq.log.Info("prefill response reports a wrong data-parallel rank; decode prefills locally", "problem", why)
				fallback = causeWrongRank
				break
			}
		}
		if v.conn == ConnectorSHFS {
			_ = params.Set("remote_host", rq.prefill.Host)
		}
		v.ranks.pin(rq, params)
		dec.SetObject("kv_transfer_params", params)
	}
	cached := cachedTokens(resp)
	return dec.Bytes(), fallback, &cached
}

// cachedTokens reads usage.prompt_tokens_details.cached_tokens (0 when absent).
func cachedTokens(resp *jsonbody.Object) int64 {
	usage, ok := resp.Object("usage")
	if !ok {
		return 0
	}
	details, ok := usage.Object("prompt_tokens_details")
	if !ok {
		return 0
	}
	raw, ok := details.Raw("cached_tokens")
	if !ok {
		return 0
	}
	var n json.Number
	if json.Unmarshal(raw, &n) != nil {
		return 0
	}
	v, err := n.Int64()
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// sharedStoragePlan: with cache_hit_threshold in the body, decode first and prefill only when
// the engine answers finish_reason cache_threshold; without it, prefill then decode. Every
// decode after a prefill, or instead of one that failed, disables the threshold, or the engine
// would answer cache_threshold again.
func sharedStoragePlan(rq *request) (*legPlan, error) {
	if err := duplicateKey(rq, "cache_hit_threshold"); err != nil {
		return nil, err
	}
	pre := sanitized(rq.obj)
	applyPrefillControls(pre, rq.api, true)
	pre.SetInt("cache_hit_threshold", 0)
	dec := noThreshold(rq)
	return &legPlan{prefill: pre.Bytes(), reader: sharedStorageReader{dec: dec}, probe: rq.obj.Has("cache_hit_threshold"), fallback: dec, unchecked: true}, nil
}

// noThreshold is the client's body, less the KV fields, with cache_hit_threshold 0.
func noThreshold(rq *request) []byte {
	dec := sanitized(rq.obj)
	dec.SetInt("cache_hit_threshold", 0)
	return dec.Bytes()
}

// sharedStorageReader: the KV is in the shared store; the prefill's answer carries nothing
// the decode needs.
type sharedStorageReader struct{ dec []byte }

func (s sharedStorageReader) decodeBody(*request, *jsonbody.Object) ([]byte, string, *int64) {
	return s.dec, "", nil
}

// nixlHandoffProblem says what makes a NIXL prefill's kv_transfer_params unusable for the
// decode's pull, or "": the decode engine needs the producer's engine id, its host and port,
// and the block ids it holds.
func nixlHandoffProblem(kv *jsonbody.Object) string {
	for _, k := range []string{"remote_engine_id", "remote_host"} {
		if v, ok := kv.String(k); !ok || strings.TrimSpace(v) == "" {
			return k + " missing or not a non-empty string"
		}
	}
	var port json.Number
	if raw, ok := kv.Raw("remote_port"); !ok || json.Unmarshal(raw, &port) != nil {
		return "remote_port missing or not a number"
	} else if p, err := port.Int64(); err != nil || p <= 0 || p > 65535 {
		return "remote_port out of range"
	}
	var ids []json.RawMessage
	if raw, ok := kv.Raw("remote_block_ids"); !ok || json.Unmarshal(raw, &ids) != nil {
		return "remote_block_ids missing or not an array"
	}
	return ""
}

// nixlProducerParams accepts the NIXL prefill-leg kv_transfer_params (do_remote_decode true,
// no remote peer named) and returns the canonical producer object.
func nixlProducerParams(obj *jsonbody.Object) *jsonbody.Object {
	kv, ok := obj.Object("kv_transfer_params")
	if !ok {
		return nil
	}
	if d, ok := kv.Bool("do_remote_decode"); !ok || !d {
		return nil
	}
	if pr, ok := kv.Bool("do_remote_prefill"); ok && pr {
		return nil
	}
	for _, k := range []string{"remote_host", "remote_port", "remote_engine_id", "remote_block_ids"} {
		if raw, ok := kv.Raw(k); ok && string(raw) != "null" {
			return nil
		}
	}
	out, err := jsonbody.Parse(json.RawMessage(nixlPrefillParams))
	if err != nil {
		return nil
	}
	return out
}
