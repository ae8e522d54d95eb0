package tokenload

import (
	"testing"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
)

func TestPriority(t *testing.T) {
	cases := []struct {
		load     PrefillLoad
		kvWeight float64
		want     float64
	}{
		{PrefillLoad{}, 0.3, 0},
		{PrefillLoad{ActiveTokens: 100, KVTokens: 1000}, 0.3, 400},
		{PrefillLoad{ActiveTokens: 100, KVTokens: 1000}, 0.001, 101},
	}
	for _, tc := range cases {
		if got := tc.load.Priority(tc.kvWeight); got != tc.want {
			t.Errorf("%+v.Priority(%v) = %v, want %v", tc.load, tc.kvWeight, got, tc.want)
		}
	}
}

type named struct{ name, typ string }

func (n named) TypedName() fwkplugin.TypedName { return fwkplugin.TypedName{Type: n.typ, Name: n.name} }

type owner struct{ named }

func (owner) TokenLedger() Ledger         { return nil }
func (owner) TokenLoadDefaults() Defaults { return Defaults{RequestCost: 1} }
func (h plugins) Plugin(n string) fwkplugin.Plugin {
	if p, ok := h[n]; ok {
		return p
	}
	return nil
}

type plugins map[string]fwkplugin.Plugin

func (h plugins) AddPlugin(string, fwkplugin.Plugin)                  {}
func (h plugins) GetAllPlugins() []fwkplugin.Plugin                   { return nil }
func (h plugins) GetAllPluginsWithNames() map[string]fwkplugin.Plugin { return h }

func TestLookup(t *testing.T) {
	h := plugins{"ledger": owner{named{"ledger", PluginType}}, "other": named{"other", "queue-scorer"}}
	cases := []struct {
		name    string
		h       fwkplugin.HandlePlugins
		lookup  string
		wantErr string
	}{
		{name: "found", h: h, lookup: "ledger"},
		{name: "no handle", h: nil, lookup: "ledger", wantErr: "no plugin handle"},
		{name: "no such plugin", h: h, lookup: "missing", wantErr: "declare a pd-token-ledger plugin"},
		{name: "not a ledger owner", h: h, lookup: "other", wantErr: "plugin is a queue-scorer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Lookup(tc.h, tc.lookup)
			if plugintest.WantErr(t, err, tc.wantErr) {
				return
			}
			if p == nil || p.TokenLoadDefaults().RequestCost != 1 {
				t.Fatalf("Lookup = %v", p)
			}
		})
	}
}
