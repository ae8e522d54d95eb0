package pdtokenledger

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/plugins/lib/tokenload"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
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

// scheduled is a scheduling result with decode-0 as the primary pick and the given encoders
// under the "encode" profile.
func scheduled(encoders ...string) *fwksched.SchedulingResult {
	res := &fwksched.SchedulingResult{PrimaryProfileName: "decode", ProfileResults: map[string]*fwksched.ProfileRunResult{
		"decode": {TargetEndpoints: []fwksched.Endpoint{eptest.Scheduling(eptest.Spec{Namespace: "ns", Name: "decode-0"})}},
	}}
	if len(encoders) > 0 {
		pr := &fwksched.ProfileRunResult{}
		for _, n := range encoders {
			pr.TargetEndpoints = append(pr.TargetEndpoints, eptest.Scheduling(eptest.Spec{Namespace: "ns", Name: n}))
		}
		res.ProfileResults["encode"] = pr
	}
	return res
}

// Encode work is a lease on each encoder the request was sent to, taken at PreRequest and
// released with the prefill leg, whichever hook reports its end first.
func TestEncodeLeases(t *testing.T) {
	ctx := context.Background()
	req := &fwksched.LLMRequest{RequestId: "r1"}
	header := func(outcome string) func(*Plugin) {
		return func(pl *Plugin) {
			pl.ResponseHeader(ctx, req, &fwkrc.Response{RequestId: "r1", Headers: map[string]string{protocol.HeaderPrefillOutcome: outcome}}, nil)
		}
	}
	cases := []struct {
		name          string
		encodeProfile string
		result        *fwksched.SchedulingResult
		wantLeased    []tokenload.PodKey
		end           func(*Plugin)
	}{
		{"prefill-release callback", "encode", scheduled("enc-0", "enc-1"), []tokenload.PodKey{"ns/enc-0", "ns/enc-1"},
			func(pl *Plugin) { pl.ReleasePrefillActive("r1") }},
		{"response headers, prefill ok", "encode", scheduled("enc-0"), []tokenload.PodKey{"ns/enc-0"}, header("ok")},
		{"response headers, prefill failed", "encode", scheduled("enc-0"), []tokenload.PodKey{"ns/enc-0"}, header("failed")},
		{"end of stream (disconnect before headers)", "encode", scheduled("enc-0"), []tokenload.PodKey{"ns/enc-0"},
			func(pl *Plugin) { pl.ResponseBody(ctx, req, &fwkrc.Response{RequestId: "r1", EndOfStream: true}, nil) }},
		{"no encode stage", "encode", scheduled(), nil, header("ok")},
		{"encode profile not configured", "", scheduled("enc-0"), nil, header("ok")},
		{"no scheduling result", "encode", nil, nil, header("ok")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr, c, m := newTestTracker(t, func(p *Params) { p.EncodeProfile = tc.encodeProfile; p.UnconfirmedTimeoutSeconds = 1 })
			pl := New("ledger", tr)
			pl.PreRequest(ctx, req, tc.result)
			// An encode-only request is confirmed: the unconfirmed sweep leaves it alone.
			c.Advance(2 * time.Second)
			tr.Sweep()
			s := tr.Snapshot()
			for _, k := range tc.wantLeased {
				if s.Pods[k].EncodeCharges != 1 || testutil.ToFloat64(m.encodeRequests.WithLabelValues(splitPod(k))) != 1 {
					t.Fatalf("%s: %d encode leases (gauge %v), want 1", k, s.Pods[k].EncodeCharges, testutil.ToFloat64(m.encodeRequests.WithLabelValues(splitPod(k))))
				}
			}
			if tc.wantLeased == nil && s.OpenRequests != 0 {
				t.Fatalf("leased encode work without an encoder: %+v", s)
			}
			tc.end(pl)
			s = tr.Snapshot()
			for k, ps := range s.Pods {
				if ps.EncodeCharges != 0 {
					t.Fatalf("%s still holds %d encode leases", k, ps.EncodeCharges)
				}
			}
			if s.OpenRequests != 0 {
				t.Fatalf("open requests: %d", s.OpenRequests)
			}
		})
	}
}

// An encode lease the EPP never hears the end of goes at its TTL, like the other parts, and a
// second charge of the same request replaces the first.
func TestEncodeLeaseTTLAndRecharge(t *testing.T) {
	tr, c, m := newTestTracker(t, nil)
	tr.ChargeEncode("r1", []tokenload.PodKey{"ns/enc-0"}, time.Minute)
	tr.ChargeEncode("r1", []tokenload.PodKey{"ns/enc-1"}, time.Minute)
	if s := tr.Snapshot(); s.Pods["ns/enc-0"].EncodeCharges != 0 || s.Pods["ns/enc-1"].EncodeCharges != 1 {
		t.Fatalf("recharge did not replace the first lease: %+v", s.Pods)
	}
	c.Advance(2 * time.Minute)
	if r := tr.Sweep(); r.ForceReleased != 1 {
		t.Fatalf("sweep: %+v", r)
	}
	if s := tr.Snapshot(); s.OpenRequests != 0 || s.Pods["ns/enc-1"].EncodeCharges != 0 {
		t.Fatalf("after the TTL: %+v", s)
	}
	if got := testutil.ToFloat64(m.forceReleased.WithLabelValues("encode", "ttl")); got != 1 {
		t.Fatalf("force_released{encode,ttl} = %v", got)
	}
}
