package aibrixpdpair

import (
	"math"
	"net/http"
	"strings"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
)

// ResolveStrategy applies AIBrix's precedence: lockedRoutingStrategy, then the routing-strategy
// header (when honoured), then the profile's routingStrategy, then the plugin default.
func ResolveStrategy(cfg *podmodel.ModelConfig, header string, honorHeader bool, prof *podmodel.Profile, def string) (string, string) {
	if cfg != nil && cfg.LockedRoutingStrategy != "" {
		return strings.ToLower(cfg.LockedRoutingStrategy), "lockedRoutingStrategy"
	}
	if honorHeader && strings.TrimSpace(header) != "" {
		return strings.ToLower(strings.TrimSpace(header)), "routing-strategy header"
	}
	if prof != nil && prof.RoutingStrategy != "" {
		return strings.ToLower(prof.RoutingStrategy), "profile routingStrategy"
	}
	return def, "plugin default"
}

// nonPDTargets are the pods a non-pd strategy may pick: pods that serve a whole request, else
// decode pods (their engine prefills locally when no prefill leg is named).
func nonPDTargets(in Input) []*podmodel.Pod {
	var whole, decode []*podmodel.Pod
	for i := range in.Pods {
		p := &in.Pods[i]
		switch {
		case !p.Routable:
		case p.ServesWholeRequest(in.ProfileHeader, in.Hints):
			whole = append(whole, p)
		case p.ServesDecode():
			decode = append(decode, p)
		}
	}
	if len(whole) > 0 {
		return whole
	}
	return decode
}

// SelectSingle implements the non-pd strategies: random, least-request (running + waiting +
// pending), least-kv-cache (lowest KV usage). No prefill leg is used.
func (s *Selector) SelectSingle(in Input, strategy string) (Decision, error) {
	pods := nonPDTargets(in)
	d := Decision{Combined: true, Cause: contract.CauseStrategy}
	if len(pods) == 0 {
		return d, fail(http.StatusServiceUnavailable, contract.CauseNoPair, "no pod can serve strategy %q without a prefill leg", strategy)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	pods = s.shufflePods(pods)
	best, bestScore := 0, math.Inf(1)
	for i, p := range pods {
		var sc float64
		m := metricsOf(p)
		switch strategy {
		case StrategyRandom:
			sc = 0
		case StrategyLeastRequest:
			sc = s.Tracker.PendingDecode(p.Key)
			if m != nil {
				sc += m.Running + m.Waiting
			}
		case StrategyLeastKVCache:
			sc = 0
			if m != nil && m.HasKVUsage {
				sc = m.KVUsage
			}
		}
		if sc < bestScore {
			best, bestScore = i, sc
		}
	}
	d.Decode = *pods[best]
	d.Reason = "routing strategy " + strategy + " picked " + pods[best].Key
	s.Tracker.Register(in.RequestID, "", pods[best].Key)
	return d, nil
}
