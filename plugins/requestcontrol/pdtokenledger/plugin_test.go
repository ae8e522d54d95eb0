package pdtokenledger

import (
	"context"
	"strings"
	"testing"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/plugins/lib/tokenload"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

func TestPluginLifecycle(t *testing.T) {
	const p, d = tokenload.PodKey("ns/p"), tokenload.PodKey("ns/d")
	cases := []struct {
		name                   string
		headers                map[string]string
		wantActive, wantKV     float64
		wantDecodeAfterHeaders float64
	}{
		{"prefill ok", map[string]string{protocol.HeaderPrefillOutcome: "ok"}, 0, 100, 40},
		{"header missing: first headers are the upper bound", map[string]string{":status": "200"}, 0, 100, 40},
		{"nil headers", nil, 0, 100, 40},
		{"prefill failed", map[string]string{protocol.HeaderPrefillOutcome: "failed"}, 0, 0, 40},
		{"prefill skipped", map[string]string{protocol.HeaderPrefillOutcome: "skipped"}, 0, 0, 40},
		{"fallback to local prefill", map[string]string{protocol.HeaderPrefillOutcome: "fallback-local"}, 0, 0, 40},
		{"prefill ran on the alternate: the charged pod holds no KV", map[string]string{protocol.HeaderPrefillOutcome: "alternate"}, 0, 0, 40},
		{"mixed-case header name and value", map[string]string{"X-PDGate-Prefill-Outcome": " FAILED "}, 0, 0, 40},
		{"unknown outcome releases active only", map[string]string{protocol.HeaderPrefillOutcome: "weird"}, 0, 100, 40},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr, _, _ := newTestTracker(t, func(pp *Params) { pp.DecodeOutputGrowth = false })
			pl := New("ledger", tr)
			req := &fwksched.LLMRequest{RequestId: "r1"}
			chargeBoth(tr, "r1", p, d, 100, 40)
			pl.PreRequest(context.Background(), req, nil)
			pl.ResponseHeader(context.Background(), req, &fwkrc.Response{RequestId: "r1", Headers: tc.headers}, nil)
			got := prefillOf(tr, p)
			if got.ActiveTokens != tc.wantActive || got.KVTokens != tc.wantKV || decodeOf(tr, d, nil) != tc.wantDecodeAfterHeaders {
				t.Fatalf("after headers: %+v decode=%v", got, decodeOf(tr, d, nil))
			}
			// Streaming chunks do not release; the end of stream does, once.
			pl.ResponseBody(context.Background(), req, &fwkrc.Response{RequestId: "r1"}, nil)
			if decodeOf(tr, d, nil) != tc.wantDecodeAfterHeaders {
				t.Fatal("a non-final chunk released the decode charge")
			}
			for i := 0; i < 2; i++ {
				pl.ResponseBody(context.Background(), req, &fwkrc.Response{RequestId: "r1", EndOfStream: true}, nil)
			}
			if got := prefillOf(tr, p); got != (tokenload.PrefillLoad{}) || decodeOf(tr, d, nil) != 0 {
				t.Fatalf("after end of stream: %+v decode=%v", got, decodeOf(tr, d, nil))
			}
			if s := tr.Snapshot(); s.OpenRequests != 0 {
				t.Fatalf("open requests: %d", s.OpenRequests)
			}
		})
	}
}

func TestPluginDisconnectWithoutHeaders(t *testing.T) {
	tr, _, _ := newTestTracker(t, nil)
	pl := New("ledger", tr)
	chargeBoth(tr, "r1", "ns/p", "ns/d", 100, 40)
	// GIE's forced final call after a client disconnect: no headers were ever seen.
	pl.ResponseBody(context.Background(), nil, &fwkrc.Response{RequestId: "r1", EndOfStream: true}, nil)
	if s := tr.Snapshot(); s.OpenRequests != 0 || s.Pods["ns/p"].KVTokens != 0 || s.Pods["ns/d"].DecodeTokens != 0 {
		t.Fatalf("disconnect left charges: %+v", s)
	}
}

type fakeHandle struct {
	fwkplugin.Handle
	plugins map[string]fwkplugin.Plugin
}

func (h fakeHandle) Plugin(name string) fwkplugin.Plugin { return h.plugins[name] }

type otherPlugin struct{}

func (otherPlugin) TypedName() fwkplugin.TypedName {
	return fwkplugin.TypedName{Type: "other", Name: "x"}
}

func TestLookup(t *testing.T) {
	if Type != tokenload.PluginType {
		t.Fatalf("tokenload.PluginType %q must name this plugin's type %q", tokenload.PluginType, Type)
	}
	tr, _, _ := newTestTracker(t, nil)
	h := fakeHandle{plugins: map[string]fwkplugin.Plugin{"ledger": New("ledger", tr), "x": otherPlugin{}}}
	cases := []struct {
		name, lookup, wantErr string
	}{
		{"found", "ledger", ""},
		{"missing", "nope", "no plugin with that name"},
		{"wrong type", "x", "not a pd-token-ledger"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prov, err := tokenload.Lookup(h, tc.lookup)
			if plugintest.WantErr(t, err, tc.wantErr) {
				return
			}
			if prov.TokenLedger() != tokenload.Ledger(tr) || prov.TokenLoadDefaults().RequestCost != 3500 {
				t.Fatalf("lookup: %v %v", prov, err)
			}
		})
	}
	if _, err := tokenload.Lookup(nil, "ledger"); err == nil {
		t.Fatal("nil handle accepted")
	}
}

func TestFactory(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := fwkplugin.NewEppHandle(ctx, nil)
	pl, err := Factory("ledger", []byte(`{"requestCost": 100, "kvWeight": 0.5}`), h)
	if err != nil {
		t.Fatal(err)
	}
	if pl.TypedName() != (fwkplugin.TypedName{Type: Type, Name: "ledger"}) {
		t.Fatalf("typed name %v", pl.TypedName())
	}
	if d := pl.(tokenload.Provider).TokenLoadDefaults(); d.RequestCost != 100 || d.KVWeight != 0.5 {
		t.Fatalf("defaults %+v", d)
	}
	if _, err := Factory("bad", []byte(`{"kvWeight": -1}`), h); err == nil || !strings.Contains(err.Error(), `pd-token-ledger "bad": invalid parameters: parameter kvWeight`) {
		t.Fatalf("err = %v", err)
	}
}

// The prefill-release callback (contract.PrefillReleaser) ends the prefill charge's active part
// while the request is still in flight; repeating it, the response headers' release that
// follows and a callback for an unknown request change nothing else, and another request's
// charge on the same pod is untouched.
func TestPluginPrefillReleaseCallback(t *testing.T) {
	const p, d = tokenload.PodKey("ns/p"), tokenload.PodKey("ns/d")
	for _, outcome := range []string{"ok", "failed"} {
		t.Run(outcome, func(t *testing.T) {
			tr, _, _ := newTestTracker(t, func(pp *Params) { pp.DecodeOutputGrowth = false })
			pl := New("ledger", tr)
			req := &fwksched.LLMRequest{RequestId: "r1"}
			chargeBoth(tr, "r1", p, d, 100, 40)
			chargeBoth(tr, "r2", p, d, 30, 10)
			pl.PreRequest(context.Background(), req, nil)
			for i := 0; i < 3; i++ {
				pl.ReleasePrefillActive("r1")
			}
			pl.ReleasePrefillActive("unknown")
			pl.ReleasePrefillActive("")
			if got := prefillOf(tr, p); got.ActiveTokens != 30 || got.KVTokens != 130 || decodeOf(tr, d, nil) != 50 {
				t.Fatalf("after the callback: %+v decode=%v", got, decodeOf(tr, d, nil))
			}
			pl.ResponseHeader(context.Background(), req, &fwkrc.Response{RequestId: "r1",
				Headers: map[string]string{protocol.HeaderPrefillOutcome: outcome}}, nil)
			wantKV := 130.0
			if outcome == "failed" {
				wantKV = 30
			}
			if got := prefillOf(tr, p); got.ActiveTokens != 30 || got.KVTokens != wantKV {
				t.Fatalf("after headers: %+v", got)
			}
			pl.ResponseBody(context.Background(), req, &fwkrc.Response{RequestId: "r1", EndOfStream: true}, nil)
			pl.ReleasePrefillActive("r1") // a late callback after the end
			if got := prefillOf(tr, p); got.ActiveTokens != 30 || got.KVTokens != 30 || decodeOf(tr, d, nil) != 10 {
				t.Fatalf("after end of stream: %+v decode=%v", got, decodeOf(tr, d, nil))
			}
		})
	}
}
