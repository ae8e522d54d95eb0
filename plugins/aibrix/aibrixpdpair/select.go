package aibrixpdpair

import (
	"errors"
	"fmt"
	"math/rand"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/aibrix/internal/bucketplanner"
	"github.com/pdgate/pdgate/plugins/aibrix/internal/prefillpolicy"
	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/lib/pdknobs"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/lib/tokenload"
)

// Input is one request as the selector sees it.
type Input struct {
	RequestID     string
	Model         string
	Pods          []podmodel.Pod
	ProfileHeader string
	Hints         podmodel.AutoHints
	PromptText    string // prefix matching; when empty, built from body if a policy needs it
	PromptTokens  int    // bucketing length
	BodyTokens    int    // len(body)/4, the ledger's prompt_tokens
	SessionKey    string
	Knobs         pdknobs.Knobs
	// PrefillNeeded, when set, is asked about the chosen pair's decode pod before anything is
	// registered: a "no" turns the pick into a decode-only one (the decode pod prefills
	// locally), with the decider's cause and reason. It is prefillDeciderRef's Disaggregate.
	PrefillNeeded func(decode *podmodel.Pod) contract.Decision
	// CombinedOverflow applies the combined-pod overflow rule without bucketing as well.
	CombinedOverflow bool
	// DecodeFirst, when set, weighs the decode side of the pair score while prefill has room.
	DecodeFirst *DecodeFirst
	// RemainingWork, when set, scores each pair's prefill side by the work the request leaves
	// after the best reusable cache, remote or local (remaining.go).
	RemainingWork *RemainingWork
	// Explain records the intermediate steps in Decision.Notes (for a decision trace); without
	// it none are formatted.
	Explain bool

	body *fwksched.LLMRequestBody
}

// promptText is the prompt for prefix matching: PromptText, else the body's (built here, so
// that policies that only count characters never copy a long prompt).
func (in Input) promptText() string {
	if in.PromptText == "" && in.body != nil {
		return podmodel.PromptText(in.body)
	}
	return in.PromptText
}

// promptChars is the prompt's length under the character tokenizer. Counted part by part
// when the text was not built: parsed prompts are valid UTF-8, so the parts' counts add up to
// the whole text's.
func (in Input) promptChars() int {
	if in.PromptText != "" || in.body == nil {
		return prefillpolicy.Tokens(in.PromptText)
	}
	n := 0
	podmodel.PromptParts(in.body, func(part string) { n += prefillpolicy.Tokens(part) })
	return n
}

// Decision is the selector's answer: a decode target and, unless Combined, the prefill pod of
// the same roleset.
type Decision struct {
	Decode   podmodel.Pod
	Prefill  *podmodel.Pod
	Roleset  string
	Combined bool
	// Cause is why this shape was chosen (metrics label); Reason says it with its numbers.
	Cause  contract.Cause
	Reason string
	// Notes are the intermediate steps (fast paths, band, scores) for the decision trace.
	Notes                                 []string
	PrefillScore, DecodeScore, FinalScore float64
	MaxPrefillScore, MaxDecodeScore       float64
	PrefillPolicy, DecodePolicy           string
	FallbackPrefillPolicy, LedgerMissing  bool
	BandRoleset                           string
	BandMax                               int
	// PrefillFastPath and DecodeFastPath say which load-imbalance fast paths narrowed the
	// candidates (metrics).
	PrefillFastPath, DecodeFastPath bool
	// DecodeOnly says the prefill decider kept the pair's decode pod without its prefill leg.
	DecodeOnly bool
	// CacheAffinity says the decode candidates were narrowed to the pods the prefill decider
	// found holding the prompt.
	CacheAffinity bool

	// prefixHolder is the pod the prompt's blocks are recorded for once the selection lock is
	// released: the paired prefill pod.
	prefixHolder string
}

// Error carries the HTTP status the request must be answered with and its typed cause.
type Error struct {
	Status int
	Cause  contract.Cause
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

func fail(status int, cause contract.Cause, format string, args ...any) error {
	return &Error{Status: status, Cause: cause, Msg: fmt.Sprintf(format, args...)}
}

// StatusOf returns the HTTP status and cause for a selection error (503, no pair, by default).
func StatusOf(err error) (int, contract.Cause) {
	var e *Error
	if errors.As(err, &e) {
		return e.Status, e.Cause
	}
	return http.StatusServiceUnavailable, contract.CauseNoPair
}

// LedgerSource returns the token ledger, or an error when none is configured.
type LedgerSource func() (tokenload.Ledger, tokenload.Defaults, error)

// Selector runs AIBrix's PD selection cascade. Everything that reads shared counters and
// registers the pick runs under one lock (and inside Ledger.Atomically when a token policy is
// in use), so concurrent requests see each other's picks (AIBrix issue #2677).
type Selector struct {
	mu      sync.Mutex
	rng     *rand.Rand
	Tracker *Tracker
	Prefix  *prefillpolicy.PrefixTable
	Ledger  LedgerSource
	Planner *bucketplanner.Planner
	Warn    func(string)
	Now     func() time.Time

	call    ledgerCall     // under mu
	scratch cascadeScratch // under mu
}

// NewSelector builds a selector; seed fixes the random tie-breaks (tests).
func NewSelector(tracker *Tracker, prefix *prefillpolicy.PrefixTable, ledger LedgerSource, planner *bucketplanner.Planner, seed int64) *Selector {
	return &Selector{rng: rand.New(rand.NewSource(seed)), Tracker: tracker, Prefix: prefix, Ledger: ledger, Planner: planner}
}

// group is one roleset's candidates ("" = pods without roleset-name, paired llm-d style).
type group struct {
	name            string
	prefill, decode []*podmodel.Pod // point into Input.Pods
}

// partitionScratch is one Select call's grouping storage, reused through scratchPool: a map,
// a group and the appends of each roleset's pods, on every request, were most of what the
// selection allocated. Select runs partly outside the selection lock, so the scratch is per
// call, not the selector's.
type partitionScratch struct {
	byName         map[string]*group
	store          []*group // groups handed out, reused in order
	groups         []*group
	whole          []*podmodel.Pod
	eligibleGroups []*group
}

var scratchPool = sync.Pool{New: func() any { return &partitionScratch{byName: map[string]*group{}} }}

// release returns the scratch to the pool, reset.
func (sc *partitionScratch) release() {
	sc.reset()
	scratchPool.Put(sc)
}

// reset forgets the request's pods, so that a pooled scratch keeps no fleet alive.
func (sc *partitionScratch) reset() {
	for _, g := range sc.store {
		clear(g.prefill)
		clear(g.decode)
		g.prefill, g.decode = g.prefill[:0], g.decode[:0]
	}
	clear(sc.byName)
	clear(sc.groups)
	clear(sc.whole)
	clear(sc.eligibleGroups)
	sc.groups, sc.whole, sc.eligibleGroups = sc.groups[:0], sc.whole[:0], sc.eligibleGroups[:0]
}

// group returns an empty group named name from the scratch's store.
func (sc *partitionScratch) group(name string, n int) *group {
	if n == len(sc.store) {
		sc.store = append(sc.store, &group{})
	}
	g := sc.store[n]
	g.name = name
	return g
}

// partition sorts the routable pods into rolesets (sorted by name, pods in input order) and
// the pods that serve a whole request. The result lives in sc until sc.release.
func partition(in Input, sc *partitionScratch) (groups []*group, whole []*podmodel.Pod) {
	groups, whole = sc.groups[:0], sc.whole[:0]
	for i := range in.Pods {
		p := &in.Pods[i]
		if !p.Routable {
			continue
		}
		if p.ServesWholeRequest(in.ProfileHeader, in.Hints) {
			whole = append(whole, p)
			continue
		}
		if !p.ServesPrefill() && !p.ServesDecode() {
			continue
		}
		// AIBrix pairs only inside rolesets; llm-d-labelled pods without one pair freely.
		if p.Roleset == "" && p.RoleSource != podmodel.SourceLLMD {
			continue
		}
		g := sc.byName[p.Roleset]
		if g == nil {
			g = sc.group(p.Roleset, len(groups))
			sc.byName[p.Roleset] = g
			groups = append(groups, g)
		}
		if p.ServesPrefill() {
			g.prefill = append(g.prefill, p)
		} else {
			g.decode = append(g.decode, p)
		}
	}
	slices.SortFunc(groups, func(a, b *group) int { return strings.Compare(a.name, b.name) })
	sc.groups, sc.whole = groups, whole
	return groups, whole
}

// Select picks the pair (or a combined pod) for one request.
func (s *Selector) Select(in Input) (Decision, error) {
	k := in.Knobs
	sc := scratchPool.Get().(*partitionScratch)
	defer sc.release()
	groups, whole := partition(in, sc)
	eligible := sc.eligibleGroups[:0]
	anyPrefill := false
	for _, g := range groups {
		anyPrefill = anyPrefill || len(g.prefill) > 0
		if len(g.prefill) > 0 && len(g.decode) > 0 {
			eligible = append(eligible, g)
		}
	}
	sc.eligibleGroups = eligible
	d := Decision{PrefillPolicy: k.PrefillScorePolicy, DecodePolicy: k.DecodeScorePolicy}
	var combined []*podmodel.Pod
	if k.PromptLengthBucketing {
		L := in.PromptTokens
		for _, p := range whole {
			if p.Suits(L, in.ProfileHeader, in.Hints) {
				combined = append(combined, p)
			}
		}
		var bucketed []*group
		for _, g := range eligible {
			bg := &group{name: g.name}
			for _, p := range g.prefill {
				if p.Suits(L, in.ProfileHeader, in.Hints) {
					bg.prefill = append(bg.prefill, p)
				}
			}
			for _, p := range g.decode {
				if p.Suits(L, in.ProfileHeader, in.Hints) {
					bg.decode = append(bg.decode, p)
				}
			}
			if len(bg.prefill) > 0 && len(bg.decode) > 0 {
				bucketed = append(bucketed, bg)
			}
		}
		if len(bucketed) == 0 {
			if len(combined) > 0 {
				return s.pickCombinedRandom(in, d, combined, contract.CauseNoBucket, fmt.Sprintf("prompt length %d fits no complete bucket pair", L))
			}
			return d, fail(http.StatusServiceUnavailable, contract.CauseNoBucket,
				"no prompt-length bucket matches prompt length %d and no combined pods available", L)
		}
		if k.BucketServe && L > 0 && s.Planner != nil {
			s.Planner.Observe(in.Model, L, s.now())
			if band, ok := s.Planner.Band(in.Model, k.BucketServeMode, planGroups(eligible, in), L, s.now()); ok {
				d.BandRoleset, d.BandMax = band.Roleset, band.Max
			}
		}
		names := make([]string, len(bucketed))
		for i, g := range bucketed {
			names[i] = g.name
		}
		if in.Explain {
			d.Notes = append(d.Notes, fmt.Sprintf("bucketing: prompt length %d fits rolesets %v (%d combined pods suit)", L, names, len(combined)))
		}
		eligible = bucketed
	} else if len(eligible) > 0 && in.CombinedOverflow {
		combined = whole
	} else if len(eligible) == 0 {
		if len(whole) > 0 {
			return s.pickCombinedRandom(in, d, whole, contract.CauseNoPair, "no complete prefill/decode pair")
		}
		if !anyPrefill {
			return d, fail(http.StatusServiceUnavailable, contract.CauseNoPair, "prefill pods are not ready")
		}
		return d, fail(http.StatusServiceUnavailable, contract.CauseNoPair, "decode pods are not ready")
	}
	return s.selectLocked(in, d, eligible, combined)
}

// planGroups describes the eligible rolesets for the bucket planner: range from the first
// prefill pod's profile, replicas = prefill pods.
func planGroups(eligible []*group, in Input) []bucketplanner.Group {
	out := make([]bucketplanner.Group, 0, len(eligible))
	for _, g := range eligible {
		lo, hi, scoped := g.prefill[0].Bucket(in.ProfileHeader, in.Hints)
		if !scoped {
			lo, hi = 0, 0
		}
		out = append(out, bucketplanner.Group{Name: g.name, Min: lo, Max: hi, Replicas: len(g.prefill)})
	}
	return out
}

func (s *Selector) pickCombinedRandom(in Input, d Decision, pods []*podmodel.Pod, cause contract.Cause, why string) (Decision, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := pods[s.rng.Intn(len(pods))]
	s.Tracker.Register(in.RequestID, "", p.Key)
	d.Decode, d.Combined, d.Cause = *p, true, cause
	d.Reason = why + fmt.Sprintf(": combined pod %s picked at random among %d", p.Key, len(pods))
	return d, nil
}

func (s *Selector) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}
