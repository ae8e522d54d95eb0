package disaggprofile

import (
	"context"
	"encoding/json"
	"testing"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

// fakeDecider answers a fixed decision and counts calls.
type fakeDecider struct {
	name  string
	yes   bool
	calls int
}

func (f *fakeDecider) TypedName() fwkplugin.TypedName {
	return fwkplugin.TypedName{Type: "fake-decider", Name: f.name}
}

func (f *fakeDecider) Disaggregate(context.Context, *fwksched.CycleState, *fwksched.LLMRequest, fwksched.Endpoint) contract.Decision {
	f.calls++
	return contract.Decision{Run: f.yes, Cause: contract.CauseAlways, Reason: "fake"}
}

// notDecider is a plugin that is not a decider.
type notDecider struct{}

func (notDecider) TypedName() fwkplugin.TypedName { return fwkplugin.TypedName{Type: "x", Name: "x"} }

func ep(name, addr, port string, labels map[string]string) fwksched.Endpoint {
	return eptest.Scheduling(eptest.Spec{Namespace: "default", Name: name, PodName: name, Address: addr, Port: port, Labels: labels})
}

func res(eps ...fwksched.Endpoint) *fwksched.ProfileRunResult {
	return &fwksched.ProfileRunResult{TargetEndpoints: eps}
}

func keys(m map[string]fwksched.SchedulerProfile) []string {
	out := []string{}
	for k := range m {
		out = append(out, k)
	}
	return out
}

func newHandle(t *testing.T, plugins map[string]fwkplugin.Plugin) fwkplugin.Handle {
	t.Helper()
	h := plugintest.Handle(context.Background())
	for n, p := range plugins {
		h.AddPlugin(n, p)
	}
	return h
}

// configured is what both handlers' parameter tables check: the decoded parameters and the
// references resolved against the handle.
type configured[P comparable] interface {
	fwkplugin.Plugin
	Params() P
	ResolveReferences(fwkplugin.Handle) error
}

// checkParams builds instance name with factory from params on handle and checks one row of a
// handler's parameter table: the factory's error (wantErr, plugintest.WantErr), the decoded
// parameters, then ResolveReferences' error text (resolveErr, "" for none). It returns the
// handler, nil when the row wanted a factory error.
func checkParams[P comparable, H configured[P]](t *testing.T, factory fwkplugin.FactoryFunc, name, params string,
	handle fwkplugin.Handle, wantErr string, want P, resolveErr string) H {
	t.Helper()
	var none H
	p, err := factory(name, json.RawMessage(params), handle)
	if plugintest.WantErr(t, err, wantErr) {
		return none
	}
	h := p.(H)
	if h.Params() != want {
		t.Fatalf("params = %+v, want %+v", h.Params(), want)
	}
	err = h.ResolveReferences(handle)
	if (resolveErr == "") != (err == nil) || err != nil && err.Error() != resolveErr {
		t.Fatalf("ResolveReferences = %v, want %q", err, resolveErr)
	}
	return h
}
