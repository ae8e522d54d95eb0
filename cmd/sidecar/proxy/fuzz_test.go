package proxy

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdgate/pdgate/cmd/sidecar/allowlist"
	"github.com/pdgate/pdgate/cmd/sidecar/jsonbody"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func answer(status int, ctype, body string) *http.Response {
	return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {ctype}}, Body: io.NopCloser(strings.NewReader(body))}
}

// inMemory builds a proxy whose legs never leave the process: fuzzing every dialect needs
// thousands of requests per second.
func inMemory(engine Engine, conn Connector, style ScheduleStyle, sent *[]byte, mu *sync.Mutex) *Proxy {
	rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		var b []byte
		if r.Body != nil {
			b, _ = io.ReadAll(r.Body)
		}
		switch {
		case r.URL.Path == "/server_info":
			return answer(200, "application/json", `{"disaggregated_params":{"ctx_info_endpoint":"e","ctx_dp_rank":0}}`), nil
		case r.URL.Host == "10.0.0.1:8000":
			return answer(200, "application/json", `{"kv_transfer_params":{"remote_engine_id":"x"},"disaggregated_params":{"request_type":"context_only"},"prompt_token_ids":[1],"usage":{"prompt_tokens_details":{"cached_tokens":3}}}`), nil
		case r.URL.Path == "/abort_request":
			return answer(200, "application/json", `{}`), nil
		}
		mu.Lock()
		*sent = b
		mu.Unlock()
		return answer(200, "application/json", `{"choices":[{"text":"ok","finish_reason":"stop"}],"usage":{"prompt_tokens":1}}`), nil
	})
	u, _ := url.Parse("http://engine.test")
	c := &http.Client{Transport: rt}
	p, err := New(Config{Engine: engine, EngineURL: u, KVConnector: conn, TRTSchedule: style, SGLangBootstrapPort: 8998,
		PrefillTimeout: time.Second, FailurePolicy: FailFast, EncodeTimeout: time.Second, AbortTimeout: time.Second,
		MaxRequestBytes: 1 << 20, PrefillClient: c, DecodeClient: c, EncodeClient: c,
		Allow: allowlist.NewStatic([]protocol.HostPort{{Host: "10.0.0.1", Port: 8000}}), Metrics: NewMetrics(prometheus.NewRegistry()),
		Log: logr.Discard()})
	if err != nil {
		panic(err)
	}
	return p
}

// FuzzDialectBodies sends arbitrary bodies through every dialect: the sidecar must answer
// (never panic), and whatever reaches the decode engine is one JSON object that kept every
// top-level key of the client's body except the KV-steering ones.
func FuzzDialectBodies(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","prompt":"p","stream":true,"max_tokens":5}`,
		`{"model":"m","stream":false,"stream":true}`,
		`{"n":123456789012345678901234567890,"x":{"y":[1,2,{"z":null}]}}`,
		"{\"prompt\":\"\xff\xfe\",\"rid\":\"a\"}",
		`{"a":` + strings.Repeat(`[`, 200) + strings.Repeat(`]`, 200) + `}`,
		`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}}]}]}`,
		`{"kv_transfer_params":{"remote_host":"evil"},"bootstrap_host":"evil"}`,
		`[]`, `{"cache_hit_threshold":0.5}`,
	} {
		for d := uint8(0); d < 7; d++ {
			f.Add([]byte(s), d)
		}
	}
	type dialect struct {
		e Engine
		c Connector
		s ScheduleStyle
	}
	dialects := []dialect{{EngineVLLM, ConnectorNIXLv2, ContextFirst}, {EngineVLLM, ConnectorSHFS, ContextFirst},
		{EngineVLLM, ConnectorNeuronNIXL, ContextFirst}, {EngineVLLM, ConnectorSharedStorage, ContextFirst},
		{EngineSGLang, ConnectorNIXLv2, ContextFirst}, {EngineTRTLLM, ConnectorNIXLv2, ContextFirst},
		{EngineTRTLLM, ConnectorNIXLv2, GenerationFirst}}
	var mu sync.Mutex
	var sent []byte
	proxies := make([]*Proxy, len(dialects))
	for i, d := range dialects {
		proxies[i] = inMemory(d.e, d.c, d.s, &sent, &mu)
	}
	f.Fuzz(func(t *testing.T, body []byte, which uint8) {
		p := proxies[int(which)%len(proxies)]
		mu.Lock()
		sent = nil
		mu.Unlock()
		req := httptest.NewRequest(http.MethodPost, "/v1/completions", bytes.NewReader(body))
		req.Header.Set(protocol.HeaderPrefillerHostPort, "10.0.0.1:8000")
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, req)
		switch rec.Code {
		case 200, 400, 413, 503:
		default:
			t.Fatalf("unexpected status %d: %s", rec.Code, rec.Body.String())
		}
		mu.Lock()
		out := sent
		mu.Unlock()
		if rec.Code != 200 || out == nil {
			return
		}
		got, err := jsonbody.Parse(out)
		if err != nil {
			t.Fatalf("decode body does not parse: %v\n%q", err, out)
		}
		in, err := jsonbody.Parse(body)
		if err != nil {
			t.Fatalf("accepted a body that does not parse: %q", body)
		}
		for _, k := range in.Keys() {
			if !got.Has(k) && !isKVKey(k) {
				t.Fatalf("key %q lost: in %q out %q", k, body, out)
			}
		}
		// Keys the client itself repeated (and the sidecar does not control) pass through
		// untouched; the sidecar must never add a repetition.
		for _, k := range got.Keys() {
			if _, dup := got.Duplicated(k); dup {
				if _, inDup := in.Duplicated(k); !inDup {
					t.Fatalf("decode body repeats %q: %q", k, out)
				}
			}
		}
	})
}

func isKVKey(k string) bool {
	for _, kk := range kvKeys {
		if k == kk {
			return true
		}
	}
	return false
}
