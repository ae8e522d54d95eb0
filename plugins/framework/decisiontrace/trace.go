// Package decisiontrace records why one request was scheduled the way it was: which profiles
// ran, what each filter dropped, every score, the picks, and why a stage was skipped.
//
// Plugins reach the request's Trace through the scheduling CycleState (FromCycleState) and add
// stage decisions and notes; the EPP's scheduler wrappers add filters, scores and picks. The
// EPP returns a compact form in the x-pdgate-decision response header when the client asks
// (x-pdgate-trace: 1) and logs the full trace.
package decisiontrace

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// StateKey is the CycleState key under which the Trace lives.
const StateKey fwkplugin.StateKey = "pdgate-decision-trace"

// StageDecision says whether a stage (decode, prefill, encode, combined, ...) ran and why.
type StageDecision struct {
	Stage  string `json:"stage"`
	Ran    bool   `json:"ran"`
	Reason string `json:"reason"`
}

// FilterStep is one filter's effect inside a profile.
type FilterStep struct {
	Profile string `json:"profile"`
	Filter  string `json:"filter"`
	In      int    `json:"in"`
	Out     int    `json:"out"`
}

// Score is one scorer's raw score for one endpoint inside a profile.
type Score struct {
	Profile  string  `json:"profile"`
	Scorer   string  `json:"scorer"`
	Endpoint string  `json:"endpoint"`
	Value    float64 `json:"value"`
}

// Pick is a profile's chosen endpoints.
type Pick struct {
	Profile   string   `json:"profile"`
	Endpoints []string `json:"endpoints"`
}

// Trace is one request's scheduling story. It is safe for concurrent use.
type Trace struct {
	mu      sync.Mutex
	Stages  []StageDecision `json:"stages,omitempty"`
	Filters []FilterStep    `json:"filters,omitempty"`
	Scores  []Score         `json:"scores,omitempty"`
	Picks   []Pick          `json:"picks,omitempty"`
	Notes   []string        `json:"notes,omitempty"`
}

// Clone satisfies fwkplugin.StateData. The trace is shared, not copied: every plugin of one
// cycle must write into the same record.
func (t *Trace) Clone() fwkplugin.StateData { return t }

// FromCycleState returns the request's trace, or nil when the cycle is not traced. Every
// method of a nil *Trace does nothing, so plugins record unconditionally and an untraced
// request (the common case) pays no formatting or allocation for it.
func FromCycleState(cs *fwksched.CycleState) *Trace {
	if cs == nil {
		return nil
	}
	if v, err := cs.Read(StateKey); err == nil {
		if t, ok := v.(*Trace); ok {
			return t
		}
	}
	return nil
}

// Start traces the cycle: it returns the cycle's trace, creating it on first use. The EPP's
// tracing wrapper calls it for the requests it traces; a nil CycleState yields a detached
// trace.
func Start(cs *fwksched.CycleState) *Trace {
	if cs == nil {
		return &Trace{}
	}
	if t := FromCycleState(cs); t != nil {
		return t
	}
	t := &Trace{}
	cs.Write(StateKey, t)
	return t
}

// Stage records whether a stage ran and why (with the numbers that decided it).
func (t *Trace) Stage(stage string, ran bool, reason string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.Stages = append(t.Stages, StageDecision{Stage: stage, Ran: ran, Reason: reason})
}

// Note records a free-form line attributed to a plugin.
func (t *Trace) Note(plugin, format string, args ...any) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.Notes = append(t.Notes, plugin+": "+fmt.Sprintf(format, args...))
}

// Filter records a filter's effect.
func (t *Trace) Filter(profile, filter string, in, out int) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.Filters = append(t.Filters, FilterStep{Profile: profile, Filter: filter, In: in, Out: out})
}

// Score records one scorer's raw scores.
func (t *Trace) Score(profile, scorer string, scores map[fwksched.Endpoint]float64) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for ep, v := range scores {
		t.Scores = append(t.Scores, Score{Profile: profile, Scorer: scorer, Endpoint: pluginkit.EndpointName(ep), Value: v})
	}
}

// Picked records a profile's result.
func (t *Trace) Picked(profile string, endpoints []fwksched.Endpoint) {
	if t == nil {
		return
	}
	names := make([]string, 0, len(endpoints))
	for _, ep := range endpoints {
		names = append(names, pluginkit.EndpointName(ep))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.Picks = append(t.Picks, Pick{Profile: profile, Endpoints: names})
}

// Compact renders the header form: "decode=a;prefill=b;encode=c,d;prefill-skipped=<reason>".
// Reasons are sanitised to stay a valid header value.
func (t *Trace) Compact() string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var parts []string
	for _, p := range t.Picks {
		parts = append(parts, p.Profile+"="+strings.Join(p.Endpoints, ","))
	}
	sort.Strings(parts)
	for _, s := range t.Stages {
		if !s.Ran {
			parts = append(parts, s.Stage+"-skipped="+headerSafe(s.Reason))
		} else if s.Reason != "" {
			parts = append(parts, s.Stage+"-reason="+headerSafe(s.Reason))
		}
	}
	return strings.Join(parts, ";")
}

func headerSafe(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c == 0x7f || c == ';' {
			b[i] = ' '
		}
	}
	if len(b) > 200 {
		b = append(b[:197], "..."...)
	}
	return string(b)
}
