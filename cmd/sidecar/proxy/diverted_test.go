package proxy

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Every path on which the prefill does not run where the EPP said leaves a response header
// (x-error-pd-prefill or x-pdgate-prefill-outcome) and a pdgate_sidecar_prefill_diverted_total
// count, so a broken prefill tier shows on a dashboard; the default retries once, on the EPP's
// alternate prefill pod when it names one.
func TestPrefillDivertedIsVisible(t *testing.T) {
	fail := func(w http.ResponseWriter, _ *http.Request, _ map[string]any) { jsonAnswer(w, 503, map[string]any{}) }
	noParams := func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
		jsonAnswer(w, 200, map[string]any{"choices": []any{}})
	}
	tests := []struct {
		name        string
		policy      FailurePolicy
		skipOnce    bool
		prefill     func(w http.ResponseWriter, r *http.Request, b map[string]any)
		alternate   func(w http.ResponseWriter, r *http.Request, b map[string]any) // nil: no alternate header
		altRefused  bool                                                           // alternate not on the allow-list
		badHeader   bool
		refused     bool // prefill target not on the allow-list
		wantStatus  int
		wantOutcome string
		wantErrHdr  bool
		wantPrefill int // attempts on the named pod
		wantAlt     int // attempts on the alternate
		wantCount   string
	}{
		{name: "ok is not diverted", policy: FallbackLocal, prefill: prefillOK, wantStatus: 200, wantOutcome: "ok", wantPrefill: 1},
		{name: "fallback-local after one retry on the same pod", policy: FallbackLocal, prefill: fail, wantStatus: 200,
			wantOutcome: "fallback-local", wantPrefill: 2, wantCount: "fallback-local/http_status"},
		{name: "retry-once off: one attempt", policy: FallbackLocal, skipOnce: true, prefill: fail, wantStatus: 200,
			wantOutcome: "fallback-local", wantPrefill: 1, wantCount: "fallback-local/http_status"},
		{name: "retry goes to the alternate", policy: FallbackLocal, prefill: fail, alternate: prefillOK, wantStatus: 200,
			wantOutcome: "alternate", wantPrefill: 1, wantAlt: 1, wantCount: "alternate/http_status"},
		{name: "alternate fails too: fail-fast", policy: FailFast, prefill: fail, alternate: fail, wantStatus: 503,
			wantOutcome: "failed", wantErrHdr: true, wantPrefill: 1, wantAlt: 1, wantCount: "failed/http_status"},
		{name: "alternate refused by the allow-list: same pod", policy: FailFast, prefill: fail, alternate: prefillOK, altRefused: true,
			wantStatus: 503, wantOutcome: "failed", wantErrHdr: true, wantPrefill: 2, wantCount: "failed/http_status"},
		{name: "no kv_transfer_params", policy: FailFast, prefill: noParams, wantStatus: 200, wantOutcome: "fallback-local",
			wantPrefill: 1, wantCount: "fallback-local/no_kv_params"},
		{name: "prefill target refused", policy: FallbackLocal, prefill: prefillOK, refused: true, wantStatus: 403,
			wantOutcome: "failed", wantErrHdr: true, wantCount: "failed/allowlist"},
		{name: "malformed prefill header", policy: FallbackLocal, prefill: prefillOK, badHeader: true, wantStatus: 400,
			wantOutcome: "failed", wantErrHdr: true, wantCount: "failed/bad_header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pre := newFake(t, tt.prefill)
			dec := newFake(t, decodeOK)
			allowed := []protocol.HostPort{}
			if !tt.refused {
				allowed = append(allowed, pre.hp())
			}
			hdr := map[string]string{protocol.HeaderPrefillerHostPort: pre.hp().String()}
			if tt.badHeader {
				hdr[protocol.HeaderPrefillerHostPort] = "no-port"
			}
			var alt *fake
			if tt.alternate != nil {
				alt = newFake(t, tt.alternate)
				hdr[protocol.HeaderPrefillerAlternateHostPort] = alt.hp().String()
				if !tt.altRefused {
					allowed = append(allowed, alt.hp())
				}
			}
			cfg := testConfig(dec, allowed...)
			cfg.FailurePolicy, cfg.SkipPrefillRetryOnce = tt.policy, tt.skipOnce
			env := startProxy(t, cfg)
			resp, body := env.post(t, "/v1/completions", `{"model":"m","prompt":"p"}`, hdr)
			checkPrefillAnswer(t, resp, body, tt.wantStatus, tt.wantOutcome, tt.wantErrHdr)
			if got := len(pre.requests()); got != tt.wantPrefill {
				t.Errorf("attempts on the named pod %d, want %d", got, tt.wantPrefill)
			}
			if alt != nil && len(alt.requests()) != tt.wantAlt {
				t.Errorf("attempts on the alternate %d, want %d", len(alt.requests()), tt.wantAlt)
			}
			if got := divertedCounts(env.metrics.PrefillDiverted); got != tt.wantCount {
				t.Errorf("diverted counts %q, want %q", got, tt.wantCount)
			}
		})
	}
}

// SHFS: a prefill that ran on the alternate hands KV over from there, so remote_host names it.
func TestAlternatePrefillSHFSRemoteHost(t *testing.T) {
	var n atomic.Int32
	pre := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
		n.Add(1)
		jsonAnswer(w, 502, map[string]any{})
	})
	alt := newFake(t, prefillOK)
	dec := newFake(t, decodeOK)
	cfg := testConfig(dec, pre.hp(), alt.hp())
	cfg.KVConnector = ConnectorSHFS
	env := startProxy(t, cfg)
	resp, _ := env.post(t, "/v1/completions", `{"model":"m","prompt":"p"}`, map[string]string{
		protocol.HeaderPrefillerHostPort: pre.hp().String(), protocol.HeaderPrefillerAlternateHostPort: alt.hp().String()})
	if resp.StatusCode != 200 || n.Load() != 1 {
		t.Fatalf("status %d, attempts on the failed pod %d", resp.StatusCode, n.Load())
	}
	kv, _ := dec.only(t).Body["kv_transfer_params"].(map[string]any)
	if kv["remote_host"] != alt.hp().Host {
		t.Fatalf("remote_host %v, want the alternate %s", kv["remote_host"], alt.hp().Host)
	}
}

// divertedCounts renders the counter's series as "outcome/reason" (sorted, comma-joined).
func divertedCounts(c *prometheus.CounterVec) string {
	ch := make(chan prometheus.Metric, 16)
	c.Collect(ch)
	close(ch)
	var out []string
	for m := range ch {
		var labels []string
		d := metricDTO(m)
		for _, l := range d.GetLabel() {
			if l.GetName() != "engine" {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
		}
		// outcome, reason (label order is sorted by name)
		o, r := strings.TrimPrefix(labels[0], "outcome="), strings.TrimPrefix(labels[1], "reason=")
		out = append(out, o+"/"+r)
	}
	return strings.Join(out, ",")
}

func metricDTO(m prometheus.Metric) *dto.Metric {
	var out dto.Metric
	_ = m.Write(&out)
	return &out
}
