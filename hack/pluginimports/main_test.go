package main

import (
	"reflect"
	"testing"
)

// Each case is a fake import graph as go list reports it; want is what the check says.
func TestCheck(t *testing.T) {
	const (
		protocol = root + "/wire/protocol"
		codec    = root + "/wire/kvevents"
		index    = root + "/lib/kvevents"
		pluginA  = root + "/scorers/a"
		pluginB  = root + "/filters/b"
		sidecar  = module + "/cmd/sidecar"
		simSrv   = module + "/cmd/sim/server"
		epp      = module + "/cmd/epp/runner"
		gieFwk   = gie + "/pkg/epp/framework/interface/plugin"
	)
	tests := []struct {
		name string
		pkgs []pkg
		want []string
	}{
		{name: "the house as it should be", pkgs: []pkg{
			{ImportPath: root, Imports: []string{pluginA, pluginB}},
			{ImportPath: pluginA, Imports: []string{index, protocol, gieFwk}, TestImports: []string{pluginB}},
			{ImportPath: index, Imports: []string{codec, gieFwk}},
			{ImportPath: codec, Imports: []string{"bytes", "github.com/vmihailenco/msgpack/v5"}, Deps: []string{"bytes", "github.com/vmihailenco/msgpack/v5"}},
			{ImportPath: protocol, Imports: []string{"net"}, XTestImports: []string{protocol}},
			{ImportPath: sidecar, Imports: []string{protocol, module + "/cmd/sidecar/app"}, Deps: []string{protocol, "net"}},
			{ImportPath: simSrv, Imports: []string{codec}, TestImports: []string{index}, Deps: []string{codec}},
			{ImportPath: epp, Imports: []string{root, index, gieFwk}, Deps: []string{gieFwk}},
		}},
		{name: "the EPP's plugin set adds a producer; the EPP's other packages use interfaces", pkgs: []pkg{
			{ImportPath: module + "/cmd/epp/pluginset", Imports: []string{pluginA}},
			{ImportPath: module + "/cmd/epp/admission", Imports: []string{root + "/framework/contract"}, TestImports: []string{pluginB}},
		}},
		{name: "the simulation casts to a concrete plugin", pkgs: []pkg{
			{ImportPath: module + "/cmd/pdgate/bench/sim", Imports: []string{pluginA}},
		}, want: []string{"binary cmd/pdgate/bench/sim imports plugin plugins/scorers/a (reach it through a plugins/framework interface)"}},
		{name: "a plugin imports a plugin", pkgs: []pkg{
			{ImportPath: pluginA, Imports: []string{pluginB}},
		}, want: []string{"plugin plugins/scorers/a imports plugin plugins/filters/b (move what they share into plugins/lib)"}},
		{name: "a library imports a plugin", pkgs: []pkg{
			{ImportPath: index, Imports: []string{pluginA}},
		}, want: []string{"library plugins/lib/kvevents imports plugin plugins/scorers/a (move what they share into plugins/lib)"}},
		{name: "the plugin SDK imports a plugin", pkgs: []pkg{
			{ImportPath: root + "/framework/pickerkit", Imports: []string{root + "/framework/pluginkit", pluginA}},
		}, want: []string{"library plugins/framework/pickerkit imports plugin plugins/scorers/a (move what they share into plugins/lib)"}},
		{name: "the wire imports a library", pkgs: []pkg{
			{ImportPath: codec, Imports: []string{index}},
		}, want: []string{"wire plugins/wire/kvevents imports plugins/lib/kvevents (plugins/wire imports nothing of ours outside plugins/wire and no GIE)"}},
		{name: "the wire imports a binary's package", pkgs: []pkg{
			{ImportPath: protocol, Imports: []string{module + "/cmd/sidecar/proxy"}},
		}, want: []string{"wire plugins/wire/protocol imports cmd/sidecar/proxy (plugins/wire imports nothing of ours outside plugins/wire and no GIE)"}},
		{name: "the wire's test imports GIE", pkgs: []pkg{
			{ImportPath: protocol, XTestImports: []string{gieFwk}},
		}, want: []string{"wire plugins/wire/protocol imports " + gieFwk + " (plugins/wire imports nothing of ours outside plugins/wire and no GIE)"}},
		{name: "the wire links GIE through a third party", pkgs: []pkg{
			{ImportPath: codec, Imports: []string{"example.com/x"}, Deps: []string{"example.com/x", gieFwk}},
		}, want: []string{"wire plugins/wire/kvevents links " + gieFwk}},
		{name: "the wire imports another wire package", pkgs: []pkg{
			{ImportPath: codec, Imports: []string{protocol}, Deps: []string{protocol}},
		}},
		{name: "the sidecar imports a library", pkgs: []pkg{
			{ImportPath: sidecar, Imports: []string{root + "/lib/pdknobs"}},
		}, want: []string{"binary cmd/sidecar imports plugins/lib/pdknobs (only plugins/wire may cross into a binary that is not the EPP)"}},
		{name: "the simulator imports a plugin and links GIE through it", pkgs: []pkg{
			{ImportPath: simSrv, Imports: []string{pluginA}, Deps: []string{pluginA, gieFwk, gie + "/pkg/common"}},
		}, want: []string{
			"binary cmd/sim/server imports plugins/scorers/a (only plugins/wire may cross into a binary that is not the EPP)",
			"binary cmd/sim/server links " + gieFwk,
		}},
		{name: "the dev gateway imports the registry", pkgs: []pkg{
			{ImportPath: module + "/cmd/gateway", Imports: []string{root}},
		}, want: []string{"binary cmd/gateway imports plugins (only plugins/wire may cross into a binary that is not the EPP)"}},
		{name: "a binary named like a checked one is not checked", pkgs: []pkg{
			{ImportPath: module + "/cmd/simulator", Imports: []string{index}, Deps: []string{gieFwk}},
		}},
		{name: "a plugin imports a binary's package", pkgs: []pkg{
			{ImportPath: pluginA, Imports: []string{epp}, TestImports: []string{module + "/test/testsupport"}},
		}, want: []string{"plugin plugins/scorers/a imports cmd/epp/runner (the plugins know no binary and no test suite)"}},
		{name: "the registry and a library import test suites", pkgs: []pkg{
			{ImportPath: root, Imports: []string{module + "/test/testsupport"}},
			{ImportPath: index, Imports: []string{module + "/test"}},
		}, want: []string{
			"library plugins/lib/kvevents imports test (the plugins know no binary and no test suite)",
			"registry plugins imports test/testsupport (the plugins know no binary and no test suite)",
		}},
		{name: "repeats are reported once", pkgs: []pkg{
			{ImportPath: pluginA, Imports: []string{pluginB}},
			{ImportPath: pluginA, Imports: []string{pluginB}},
		}, want: []string{"plugin plugins/scorers/a imports plugin plugins/filters/b (move what they share into plugins/lib)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := check(tc.pkgs); !reflect.DeepEqual(got, tc.want) && (len(got) != 0 || len(tc.want) != 0) {
				t.Errorf("got\n  %q\nwant\n  %q", got, tc.want)
			}
		})
	}
}

func TestKind(t *testing.T) {
	for path, want := range map[string]string{
		root:                          "registry",
		root + "/wire":                "wire",
		root + "/wire/protocol":       "wire",
		root + "/wirex":               "plugin",
		root + "/lib/kvevents":        "library",
		root + "/internal/x":          "library",
		root + "/framework/contract":  "library",
		root + "/scorers/a":           "plugin",
		root + "/aibrix/aibrixpdpair": "plugin",
		root + "/aibrix/internal/x":   "library",
		root + "/precise/kvevents":    "library",
		module + "/cmd/sim":           "binary",
		module + "/cmd/sim/server":    "binary",
		module + "/cmd/simulator":     "epp-side",
		module + "/cmd/epp/runner":    "epp-side",
		gie + "/pkg/epp/framework":    "",
		"github.com/vmihailenco/x":    "",
		module + "/cmd/gateway/a/b":   "binary",
	} {
		if got := kind(path); got != want {
			t.Errorf("kind(%s) = %q, want %q", path, got, want)
		}
	}
}
