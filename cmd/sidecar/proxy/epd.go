package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"github.com/pdgate/pdgate/cmd/sidecar/jsonbody"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// multimodalTypes are the content item types that an encoder computes embeddings for.
var multimodalTypes = map[string]string{
	"image_url":   "image_url",
	"video_url":   "video_url",
	"audio_url":   "audio_url",
	"input_audio": "",
}

// multimodalItems returns the distinct multimodal content items of a chat request, in order.
// URL items are deduplicated by type and URL; inline audio is never deduplicated.
func multimodalItems(obj *jsonbody.Object) ([]json.RawMessage, error) {
	raw, ok := obj.Raw("messages")
	if !ok {
		return nil, nil
	}
	var messages []struct {
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &messages); err != nil {
		return nil, fmt.Errorf("messages: %w", err)
	}
	seen := map[string]bool{}
	var out []json.RawMessage
	for _, m := range messages {
		if !isArray(m.Content) {
			continue
		}
		var items []json.RawMessage
		if err := json.Unmarshal(m.Content, &items); err != nil {
			return nil, fmt.Errorf("messages[].content: %w", err)
		}
		for _, it := range items {
			var head map[string]json.RawMessage
			if json.Unmarshal(it, &head) != nil {
				continue
			}
			var typ string
			_ = json.Unmarshal(head["type"], &typ)
			field, mm := multimodalTypes[typ]
			if !mm {
				continue
			}
			if field != "" {
				var u struct {
					URL string `json:"url"`
				}
				_ = json.Unmarshal(head[field], &u)
				key := typ + "\x00" + u.URL
				if u.URL != "" && seen[key] {
					continue
				}
				seen[key] = true
			}
			out = append(out, it)
		}
	}
	return out, nil
}

// encode is the encode stage: it fans the request's multimodal items out to the allowed
// encoders (round-robin, in parallel) before prefill/decode. handled reports whether any
// encode leg ran; ok=false means the client has been answered with an error.
func (pl *pipeline) encode() (handled, ok bool) {
	w, r, rq := pl.w, pl.r, pl.rq
	if rq.api != APIChat {
		return false, true
	}
	if k, dup := rq.obj.Duplicated("messages"); dup {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("request body repeats the top-level key %q", k))
		return false, false
	}
	items, err := multimodalItems(rq.obj)
	if err != nil {
		writeError(w, http.StatusBadRequest, "request body: "+err.Error())
		return false, false
	}
	if len(items) == 0 {
		return false, true
	}
	ctx, cancel := context.WithTimeout(r.Context(), pl.cfg.EncodeTimeout)
	defer cancel()
	errs := make([]*legError, len(items))
	var wg sync.WaitGroup
	for i, item := range items {
		target := rq.encoders[int((pl.encoderRR.Add(1)-1)%uint64(len(rq.encoders)))]
		body := sanitized(rq.obj)
		body.SetRaw("messages", json.RawMessage(`[{"role":"user","content":[`+string(item)+`]}]`))
		applyPrefillControls(body, APIChat, false)
		hdr := http.Header{}
		hdr.Set("Content-Type", "application/json")
		hdr.Set("X-Request-Id", fmt.Sprintf("%s-enc-%d", rq.id, i))
		url := pl.cfg.EncodeScheme + "://" + target.String() + "/v1/chat/completions"
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, lerr := postJSON(ctx, pl.cfg.EncodeClient, url, hdr, body.Bytes())
			outcome := outcomeOK
			if lerr != nil {
				outcome = lerr.class
				errs[i] = lerr
			}
			pl.cfg.Metrics.Legs.WithLabelValues("encode", string(pl.cfg.Engine), outcome).Inc()
		}()
	}
	wg.Wait()
	for i, lerr := range errs {
		if lerr != nil {
			if r.Context().Err() != nil {
				return true, false
			}
			rq.log.Info("encode leg failed", "item", i, "err", lerr.Error())
			w.Header().Set(headerErrorCause, lerr.class)
			writeError(w, http.StatusBadGateway, "encode request failed ("+lerr.class+"): "+truncate(lerr.Error(), 256),
				protocol.HeaderErrorEncode)
			return true, false
		}
	}
	return true, true
}
