package eptest

import (
	"context"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// Profiles are scheduler profiles under the given names, for a profile handler's Pick, which
// chooses among them by name and never runs them; run anyway, each returns an empty result.
func Profiles(names ...string) map[string]fwksched.SchedulerProfile {
	m := make(map[string]fwksched.SchedulerProfile, len(names))
	for _, n := range names {
		m[n] = idleProfile{}
	}
	return m
}

type idleProfile struct{}

func (idleProfile) Run(context.Context, *fwksched.LLMRequest, *fwksched.CycleState, []fwksched.Endpoint) (*fwksched.ProfileRunResult, error) {
	return &fwksched.ProfileRunResult{}, nil
}
