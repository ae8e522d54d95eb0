package disaggprofile

import (
	"reflect"
	"sync/atomic"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// singles hands out the one-profile maps Pick answers with to run one stage. GIE's scheduler
// only ranges over the answer, so the map for a profile is built once and shared instead of
// built for every stage of every request. An entry holds the profile it was built for and is
// used only while the configured map still holds that profile; a profile of a type that cannot
// be compared is never kept. Safe for concurrent use; the zero value is ready.
type singles struct {
	p atomic.Pointer[[]single] // copy-on-write
}

type single struct {
	name    string
	profile fwksched.SchedulerProfile
	m       map[string]fwksched.SchedulerProfile // {name: profile}, read-only
}

// maxSingles bounds the kept maps: a handler runs at most three stages, and a caller passing
// ever other profiles only starts the list over.
const maxSingles = 8

// of returns {name: profiles[name]}. The map must not be modified.
func (s *singles) of(name string, profiles map[string]fwksched.SchedulerProfile) map[string]fwksched.SchedulerProfile {
	profile := profiles[name]
	var kept []single
	if cur := s.p.Load(); cur != nil {
		kept = *cur
	}
	for _, e := range kept {
		// Only comparable profiles are kept, so == cannot panic: it compares a kept profile with
		// one of its own type or finds the types differ.
		if e.name == name && e.profile == profile {
			return e.m
		}
	}
	m := map[string]fwksched.SchedulerProfile{name: profile}
	if profile == nil || !reflect.TypeOf(profile).Comparable() {
		return m
	}
	next := make([]single, 0, len(kept)+1)
	if len(kept) < maxSingles {
		next = append(next, kept...)
	}
	next = append(next, single{name: name, profile: profile, m: m})
	s.p.Store(&next)
	return m
}
