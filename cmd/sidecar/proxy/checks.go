package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/pdgate/pdgate/cmd/sidecar/jsonbody"
)

// The checked handoff: what the prefill said it produced and what the decode says it
// received must agree before the client sees a clean answer. An engine that recomputes KV
// it failed to receive (vLLM's default after a failed NIXL read) or decodes on missing KV
// still answers 200; only the token counts tell.

// headerErrorCause names the cause of a failure the sidecar reports (a failure class, a
// check below, watchdog_<phase>), next to x-error-pd-prefill / x-error-pd-decode which name
// the leg. pdgate extension.
const headerErrorCause = "x-error-pd-cause"

// Handoff check causes: the x-error-pd-cause value and the outcome label of
// pdgate_sidecar_legs_total{leg="decode"} (wrong_rank: the diverted-prefill reason).
const (
	// causePartialKV: the decode reports fewer cached prompt tokens than the prefill
	// produced, less one KV block.
	causePartialKV = "partial_kv"
	// causePromptMismatch: the decode reports another prompt length than the prefill's.
	causePromptMismatch = "prompt_mismatch"
	// causeWrongRank: the prefill reports a data-parallel rank that is not a rank of the
	// local engine (or not a rank at all).
	causeWrongRank = "wrong_rank"
	// causeDecodeStatus: the decode engine answered a 5xx of its own (passed on as it is).
	causeDecodeStatus = "decode_http_status"
)

// unknownBlockSlack is the tokens a decode may report fewer as cached when the prefill's
// answer does not say its KV block size: the engines transfer whole blocks, and the largest
// block size they use by default is 128 tokens (TensorRT-LLM); vLLM and SGLang use less.
const unknownBlockSlack = 128

// handoffExpect is what a prefill leg produced, as its answer reports it.
type handoffExpect struct {
	// prompt is the prefill's prompt tokens; 0 when its answer did not say (nothing to check).
	prompt int64
	// slack is how many tokens fewer the decode may report cached: the last, partly filled
	// KV block, which some engines recompute instead of transferring.
	slack int64
}

// usageCounts are the prompt counts of an OpenAI usage object (chat and completions:
// prompt_tokens; the Responses API: input_tokens).
type usageCounts struct {
	PromptTokens *int64        `json:"prompt_tokens"`
	Details      cachedDetails `json:"prompt_tokens_details"`
	InputTokens  *int64        `json:"input_tokens"`
	InputDetails cachedDetails `json:"input_tokens_details"`
}

type cachedDetails struct {
	CachedTokens *int64 `json:"cached_tokens"`
}

func (u *usageCounts) prompt() (int64, bool) {
	switch {
	case u == nil:
		return 0, false
	case u.PromptTokens != nil:
		return *u.PromptTokens, true
	case u.InputTokens != nil:
		return *u.InputTokens, true
	}
	return 0, false
}

func (u *usageCounts) cached() (int64, bool) {
	switch {
	case u == nil:
		return 0, false
	case u.Details.CachedTokens != nil:
		return *u.Details.CachedTokens, true
	case u.InputDetails.CachedTokens != nil:
		return *u.InputDetails.CachedTokens, true
	}
	return 0, false
}

// answerUsage is where an answer carries its usage: at the top level, or in a Responses API
// event's response object. Choices tells a stream's usage-only chunk (choices []).
type answerUsage struct {
	Choices  []json.RawMessage `json:"choices"`
	Usage    *usageCounts      `json:"usage"`
	Response *struct {
		Usage *usageCounts `json:"usage"`
	} `json:"response"`
}

func (a *answerUsage) usage() *usageCounts {
	if a.Usage == nil && a.Response != nil {
		return a.Response.Usage
	}
	return a.Usage
}

// expectFrom reads what a prefill answer says it produced: its prompt tokens and, when a
// vLLM NIXL answer lists the blocks it holds, one block's worth of slack (the prompt spread
// over n blocks needs blocks of at least ceil(prompt/n) tokens, and only the last one may
// be partly filled).
func expectFrom(resp *jsonbody.Object) handoffExpect {
	if resp == nil {
		return handoffExpect{}
	}
	raw, ok := resp.Raw("usage")
	var u usageCounts
	if !ok || json.Unmarshal(raw, &u) != nil {
		return handoffExpect{}
	}
	p, ok := u.prompt()
	if !ok || p <= 0 {
		return handoffExpect{}
	}
	e := handoffExpect{prompt: p, slack: unknownBlockSlack}
	if kv, ok := resp.Raw("kv_transfer_params"); ok {
		var params struct {
			BlockIDs json.RawMessage `json:"remote_block_ids"`
		}
		if json.Unmarshal(kv, &params) == nil {
			if n := int64(blockCount(params.BlockIDs)); n > 0 {
				e.slack = (p + n - 1) / n
			}
		}
	}
	return e
}

// blockCount is how many KV blocks a remote_block_ids value lists: a list of integer ids, or
// one such list per KV-cache group (the first group's count). 0 when it is neither.
func blockCount(raw json.RawMessage) int {
	raw = bytes.TrimSpace(raw)
	if len(raw) < 2 || raw[0] != '[' {
		return 0
	}
	inner := bytes.TrimSpace(raw[1:])
	switch {
	case len(inner) == 0 || inner[0] == ']':
		return 0
	case inner[0] == '[':
		end := bytes.IndexByte(inner, ']')
		if end < 0 {
			return 0
		}
		return blockCount(inner[:end+1])
	}
	return bytes.Count(raw, []byte(",")) + 1
}

// check compares a decode answer's usage with the prefill's: the cause and a message, or ""
// when they agree or the answer says nothing to compare (engines report cached tokens only
// when configured to: vLLM --enable-prompt-tokens-details, SGLang --enable-cache-report).
func (e handoffExpect) check(u *usageCounts) (cause, msg string) {
	if e.prompt <= 0 || u == nil {
		return "", ""
	}
	if p, ok := u.prompt(); ok && p != e.prompt {
		return causePromptMismatch, fmt.Sprintf("the decode engine reports %d prompt tokens, the prefill produced KV for %d", p, e.prompt)
	}
	if c, ok := u.cached(); ok && c+e.slack < e.prompt {
		return causePartialKV, fmt.Sprintf("the decode engine reports %d cached prompt tokens, the prefill produced %d: the KV transfer was partial", c, e.prompt)
	}
	return "", ""
}

// checkBody checks a whole (non-streaming) decode answer.
func (e handoffExpect) checkBody(body []byte) (cause, msg string) {
	var a answerUsage
	if e.prompt <= 0 || json.Unmarshal(body, &a) != nil {
		return "", ""
	}
	return e.check(a.usage())
}

// checkLine checks one SSE line of a decode stream: only data lines that carry usage (the
// last chunk, or every chunk with continuous usage) are read. usageOnly reports the chunk
// that carries the usage alone (choices []).
func (e handoffExpect) checkLine(line []byte) (cause, msg string, usageOnly bool) {
	if !bytes.Contains(line, []byte(`"usage"`)) {
		return "", "", false
	}
	payload, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data:"))
	if !ok {
		return "", "", false
	}
	var a answerUsage
	if json.Unmarshal(bytes.TrimSpace(payload), &a) != nil {
		return "", "", false
	}
	usageOnly = a.Choices != nil && len(a.Choices) == 0 && a.Usage != nil
	cause, msg = e.check(a.usage())
	return cause, msg, usageOnly
}

// askUsage returns the decode leg's body asking for the usage chunk (stream_options
// include_usage) when a streaming client did not ask for it, and true: the usage the checks
// read comes only in that chunk, which is then left out of what the client sees. The
// Responses API always ends its stream with the usage.
func askUsage(rq *request, body []byte) ([]byte, bool) {
	if !rq.stream || rq.api == APIResponses || rq.obj == nil {
		return body, false
	}
	if so, ok := rq.obj.Object("stream_options"); ok {
		if inc, ok := so.Bool("include_usage"); ok && inc {
			return body, false
		}
	}
	if !rq.obj.Has("stream_options") {
		// The body is one JSON object the sidecar built without the key: prepend it rather
		// than parse and write the whole body again.
		if t := bytes.TrimSpace(body); len(t) > 1 && t[0] == '{' {
			sep := ","
			if bytes.HasPrefix(bytes.TrimSpace(t[1:]), []byte("}")) {
				sep = ""
			}
			return append([]byte(`{"stream_options":{"include_usage":true}`+sep), t[1:]...), true
		}
	}
	obj, err := jsonbody.Parse(body)
	if err != nil {
		return body, false
	}
	so, ok := obj.Object("stream_options")
	if !ok {
		so = jsonbody.New()
	}
	so.SetBool("include_usage", true)
	obj.SetObject("stream_options", so)
	return obj.Bytes(), true
}

// rankProblem says why a data-parallel rank a prefill reports for its KV (vLLM
// remote_dp_rank, TensorRT-LLM ctx_dp_rank) is wrong, or "": not a non-negative integer, or,
// when size > 1 (the local engine's ranks, --data-parallel-size), not below size. Without
// data-parallel ranks here the sidecar does not know the pool's size and only the form is
// checked.
func rankProblem(raw json.RawMessage, size int) string {
	if string(raw) == "null" {
		return ""
	}
	r, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64)
	switch {
	case err != nil || r < 0:
		return fmt.Sprintf("rank %s is not a non-negative integer", truncate(string(raw), 32))
	case size > 1 && r >= int64(size):
		return fmt.Sprintf("rank %d is outside the %d data-parallel ranks", r, size)
	}
	return ""
}
