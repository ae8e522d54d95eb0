package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

func (in *Instance) handlePull(w http.ResponseWriter, r *http.Request) {
	var req pullRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil || req.ID == "" {
		writeError(w, http.StatusBadRequest, "bad-request", "BadRequestError", "pull body must be {\"id\": …}")
		return
	}
	e, err := in.store.pull(r.Context(), req)
	if err != nil {
		var pe *pullError
		if errors.As(err, &pe) {
			writeError(w, pe.status, "kv-handoff", errType(pe.status), pe.msg)
			return
		}
		writeError(w, http.StatusInternalServerError, "kv-handoff", "InternalServerError", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, e)
}

// pullKV fetches the KV a decode leg names from the producing server.
func (in *Instance) pullKV(ctx context.Context, l leg) (kvEntry, error) {
	in.pullWaiting.Add(1)
	defer in.pullWaiting.Add(-1)
	body, _ := json.Marshal(l.pull)
	// the producer waits on the model clock; give the wall-clock transport enough room
	timeout := 10*time.Second + time.Duration(float64(time.Duration(l.pull.WaitMS)*time.Millisecond)/in.opts.TimeScale)
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, "http://"+l.endpoint+"/internal/kv/pull", bytes.NewReader(body))
	if err != nil {
		return kvEntry{}, &pullError{http.StatusBadRequest, fmt.Sprintf("KV source %q: %v", l.endpoint, err)}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := in.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return kvEntry{}, ctx.Err()
		}
		return kvEntry{}, &pullError{http.StatusBadGateway, fmt.Sprintf("KV source %s unreachable: %v", l.endpoint, err)}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		var eb struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(b, &eb)
		return kvEntry{}, &pullError{resp.StatusCode, fmt.Sprintf("KV pull from %s: %s", l.endpoint, eb.Message)}
	}
	var e kvEntry
	if err := json.Unmarshal(b, &e); err != nil {
		return kvEntry{}, &pullError{http.StatusBadGateway, fmt.Sprintf("KV pull from %s: bad answer", l.endpoint)}
	}
	return e, nil
}

func (in *Instance) handleModels(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{map[string]any{
		"id": in.opts.Model, "object": "model", "created": 0, "owned_by": in.opts.Dialect, "root": in.opts.Model,
		"max_model_len": in.prof.MaxModelLen}}})
}

// handleRender is vLLM's render API: the prompt's token ids without generating.
func (in *Instance) handleRender(api string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		raw, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad-request", "BadRequestError", "cannot read body")
			return
		}
		req, err := parseRequest(api, raw, in.prof.Encoder.TokensPerItem)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad-request", "BadRequestError", err.Error())
			return
		}
		one := map[string]any{"token_ids": req.tokens, "model": in.opts.Model}
		if api == apiCompletions {
			writeJSON(w, http.StatusOK, []any{one})
			return
		}
		writeJSON(w, http.StatusOK, one)
	}
}

// handleAbort is SGLang's /abort_request: aborts requests whose rid starts with the given rid.
func (in *Instance) handleAbort(w http.ResponseWriter, r *http.Request) {
	var body struct {
		RID      string `json:"rid"`
		AbortAll bool   `json:"abort_all"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "bad-request", "BadRequestError", "body must be {\"rid\": …}")
		return
	}
	n := 0
	in.ridMu.Lock()
	for _, e := range in.rids {
		if body.AbortAll || (body.RID != "" && strings.HasPrefix(e.rid, body.RID)) {
			e.cancel(errAborted)
			n++
		}
	}
	in.ridMu.Unlock()
	in.log.V(1).Info("abort_request", "rid", body.RID, "all", body.AbortAll, "aborted", n)
	w.WriteHeader(http.StatusOK)
}

var errAborted = errors.New("aborted by /abort_request")

func (in *Instance) trackRID(rid string, cancel context.CancelCauseFunc) func() {
	k := in.reqSeq.Add(1)
	in.ridMu.Lock()
	in.rids[k] = ridEntry{rid: rid, cancel: cancel}
	in.ridMu.Unlock()
	return func() {
		in.ridMu.Lock()
		delete(in.rids, k)
		in.ridMu.Unlock()
	}
}

// handleServerInfo is trtllm-serve's /server_info with the context server's disaggregated info.
func (in *Instance) handleServerInfo(w http.ResponseWriter, _ *http.Request) {
	info := map[string]any{"model": in.opts.Model, "role": in.opts.Role}
	if in.opts.Role != RoleDecode {
		info["disaggregated_params"] = map[string]any{"ctx_info_endpoint": "tcp://" + in.advertised(),
			"ctx_dp_rank": 0, "encoded_opaque_state": in.opaqueState()}
	}
	writeJSON(w, http.StatusOK, info)
}

// handleSGLangServerInfo is SGLang's /get_server_info, the part a launcher reads to find the
// bootstrap port (0 when this server has no bootstrap listener).
func (in *Instance) handleSGLangServerInfo(w http.ResponseWriter, _ *http.Request) {
	mode := "null"
	if in.opts.Role == RolePrefill || in.opts.Role == RoleDecode {
		mode = in.opts.Role
	}
	port := 0
	if in.bootLn != nil {
		port = in.opts.BootstrapPort
	}
	writeJSON(w, http.StatusOK, map[string]any{"model_path": in.opts.Model, "served_model_name": in.opts.Model,
		"disaggregation_mode": mode, "disaggregation_bootstrap_port": port, "page_size": in.prof.BlockSize,
		"max_running_requests": in.prof.MaxBatch})
}
