package aibrixpdpair

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/handoffcompat"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
)

// Compatibility-checked pairing. A pair is only useful if its prefill pod can hand its KV to
// its decode pod: same connector and transfer protocol, block size, TP and DP size, model
// revision, transfer group, as far as both pods declare them (plugins/lib/handoffcompat).
// The cascade pairs the best prefill and the best decode pod of one roleset, so the check
// cannot come after scoring: the two winners of a roleset may be the one incompatible
// combination in it. Instead every decode pod's roleset key gets the class of what it declares
// ("rs-0@handoff1"), and every prefill pod is placed in each class of its roleset it is
// compatible with (copied when there are several, which happens only when a prefill pod
// declares less than the decode pods). The cascade then runs unchanged and can only pair
// within a class. '@' cannot occur in a label value, so a class key never names a real roleset.

// handoffSep separates a roleset name from its handoff class in the cascade's roleset keys.
const handoffSep = "@handoff"

// handoffParams are aibrix-pd-pair's compatibility parameters.
type handoffParams struct {
	// NoCompatiblePrefill is what a request gets when pods declare handoff attributes and no
	// prefill pod is compatible with any decode pod it could be paired with: local-prefill
	// (default: served decode-only, the decode engine prefills) or error (503,
	// no_compatible_prefill).
	NoCompatiblePrefill string `json:"noCompatiblePrefill,omitempty"`
}

func (h handoffParams) validate() error {
	_, err := handoffcompat.ParseFallback("noCompatiblePrefill", h.NoCompatiblePrefill)
	return err
}

// handoffCheck is the plugin's compatibility state: what each pod declares, read once per
// metadata object, and the shared counter, registered at first use on the EPP's registerer.
type handoffCheck struct {
	specs   handoffcompat.Cache
	once    sync.Once
	counter *handoffcompat.Counter
}

// selectPair is Select with the pairs kept compatible. A fleet that declares nothing goes
// straight to Select, allocating nothing more.
func (p *Plugin) selectPair(in Input) (Decision, error) {
	split, ok := p.handoff.split(in)
	if !ok {
		return p.selector.Select(in)
	}
	orig := in.Pods
	in.Pods = split.pods
	d, err := p.selector.Select(in)
	d.unsplit()
	if err == nil || !split.pairedBefore || split.pairedAfter {
		return d, err
	}
	// Some roleset had a pair and incompatibility left none.
	fb, _ := handoffcompat.ParseFallback("noCompatiblePrefill", p.params.NoCompatiblePrefill) // validated
	p.handoff.once.Do(func() {
		if p.handle != nil {
			p.handoff.counter, _ = handoffcompat.NewCounter(pluginkit.Registerer(p.handle))
		}
	})
	reason := split.reason()
	p.handoff.counter.Inc(reason, fb)
	why := fmt.Sprintf("no prefill pod can hand KV to a decode pod: the candidate pairs differ in %s", reason)
	if fb == handoffcompat.Fail {
		return d, fail(http.StatusServiceUnavailable, handoffcompat.CauseNoCompatible, "%s", why)
	}
	in.Pods = orig
	in.PrefillNeeded = func(*podmodel.Pod) contract.Decision {
		return contract.Decision{Cause: handoffcompat.CauseNoCompatible, Reason: why + "; the decode pod prefills locally"}
	}
	return p.selector.Select(in)
}

// handoffSplit is the fleet with roleset keys per handoff class.
type handoffSplit struct {
	pods []podmodel.Pod
	// pairedBefore: some roleset has a prefill and a decode pod; pairedAfter: some class has.
	pairedBefore, pairedAfter bool
	// what each pod declares, its side (1 prefill, 2 decode), the distinct decode specs
	specs   []*handoffcompat.Spec
	sides   []int
	classes []*handoffcompat.Spec
}

// pairSide is a pod's side in the cascade's partition: 1 prefill, 2 decode, 0 neither.
func pairSide(p *podmodel.Pod) int {
	if !p.Routable || (p.Roleset == "" && p.RoleSource != podmodel.SourceLLMD) {
		return 0
	}
	switch {
	case p.ServesPrefill():
		return 1
	case p.ServesDecode():
		return 2
	}
	return 0
}

// ref is the pod's interned spec (equal specs, equal pointers).
func (h *handoffCheck) ref(p *podmodel.Pod) *handoffcompat.Spec {
	if p.Endpoint == nil {
		return h.specs.Ref(nil)
	}
	return h.specs.Ref(p.Endpoint.GetMetadata())
}

// split returns false when every pod declares the same (nothing, or one model on an AIBrix
// fleet, which labels every pod with it): every pair is then compatible. That check allocates
// nothing.
func (h *handoffCheck) split(in Input) (handoffSplit, bool) {
	if h.uniform(in.Pods) {
		return handoffSplit{}, false
	}
	n := len(in.Pods)
	specs, sides, class := make([]*handoffcompat.Spec, n), make([]int, n), make([]int, n)
	var classes []*handoffcompat.Spec // distinct decode specs (interned: equal specs, equal pointers)
	sidesOf := map[string]int{}       // roleset → bit 1 prefill, bit 2 decode
	for i := range in.Pods {
		p := &in.Pods[i]
		specs[i], sides[i] = h.ref(p), pairSide(p)
		sidesOf[p.Roleset] |= sides[i]
		if sides[i] != 2 {
			continue
		}
		class[i] = slices.Index(classes, specs[i])
		if class[i] < 0 {
			class[i] = len(classes)
			classes = append(classes, specs[i])
		}
	}
	type groupKey struct {
		roleset string
		class   int
	}
	keys, groupSides := map[groupKey]string{}, map[groupKey]int{}
	key := func(roleset string, c int, side int) string {
		k := groupKey{roleset, c}
		groupSides[k] |= side
		if s, ok := keys[k]; ok {
			return s
		}
		s := roleset + handoffSep + strconv.Itoa(c)
		keys[k] = s
		return s
	}
	out := handoffSplit{pods: append(make([]podmodel.Pod, 0, n), in.Pods...), specs: specs, sides: sides, classes: classes}
	for i := range in.Pods {
		roleset := in.Pods[i].Roleset
		switch sides[i] {
		case 2:
			out.pods[i].Roleset = key(roleset, class[i], 2)
		case 1:
			placed := false
			for c, s := range classes {
				if !handoffcompat.Compatible(*specs[i], *s) {
					continue
				}
				if !placed {
					out.pods[i].Roleset, placed = key(roleset, c, 1), true
					continue
				}
				dup := in.Pods[i]
				dup.Roleset = key(roleset, c, 1)
				out.pods = append(out.pods, dup)
			}
			if !placed {
				out.pods[i].Roleset = roleset + handoffSep + "-none"
			}
		}
	}
	for _, s := range sidesOf {
		out.pairedBefore = out.pairedBefore || s == 3
	}
	for _, s := range groupSides {
		out.pairedAfter = out.pairedAfter || s == 3
	}
	return out, true
}

// reason is the first attribute on which a prefill pod and a decode class differ (the
// metrics label of a request that found no pair; computed only then).
func (sp handoffSplit) reason() handoffcompat.Attr {
	var prefill, classes []handoffcompat.Spec
	for i, s := range sp.specs {
		if sp.sides[i] == 1 {
			prefill = append(prefill, *s)
		}
	}
	for _, s := range sp.classes {
		classes = append(classes, *s)
	}
	a, _ := handoffcompat.FirstMismatch(prefill, classes)
	return a
}

func (h *handoffCheck) uniform(pods []podmodel.Pod) bool {
	if len(pods) == 0 {
		return true
	}
	first := h.ref(&pods[0])
	for i := 1; i < len(pods); i++ {
		if h.ref(&pods[i]) != first {
			return false
		}
	}
	return true
}

// rolesetOf strips the handoff class from a cascade roleset key.
func rolesetOf(key string) string {
	if i := strings.Index(key, handoffSep); i >= 0 {
		return key[:i]
	}
	return key
}

// unsplit gives the decision its rolesets' real names back (metrics, PairState).
func (d *Decision) unsplit() {
	d.Roleset, d.BandRoleset = rolesetOf(d.Roleset), rolesetOf(d.BandRoleset)
	d.Decode.Roleset = rolesetOf(d.Decode.Roleset)
	if d.Prefill != nil {
		d.Prefill.Roleset = rolesetOf(d.Prefill.Roleset)
	}
}
