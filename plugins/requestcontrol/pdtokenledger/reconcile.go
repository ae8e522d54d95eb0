package pdtokenledger

import (
	"cmp"
	"context"
	"slices"
	"time"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/lib/tokenload"
)

// reconcileEvery bounds how often the candidates' scraped counts are compared with the leases:
// a scrape changes no faster, and each pass walks the open requests.
const reconcileEvery = time.Second

// metricsFreshness is the oldest scrape a reconciliation trusts: a pod whose scrape stopped
// still reports its last counts, which must not release leases the pod may well be serving.
const metricsFreshness = 5 * time.Second

// PodInFlight is what a pod's engine reports it holds: running plus waiting requests.
type PodInFlight struct {
	Pod      tokenload.PodKey
	InFlight int
}

// Reconcile releases the leases the pods' scraped counts cannot explain. A pod's leases in
// flight are its open prefill active parts, decode charges and encode leases (the KV part
// stays after the engine finished, so it is not counted); when they outnumber the pod's
// running + waiting requests, the oldest of those older than reconcileGraceSeconds are
// released, at most the excess. An encode lease goes as a whole, on all its encoders. The engine serves every EPP replica's requests, so this replica's leases can never
// rightly exceed its count. It returns how many leases it released; 0 when off.
func (t *Tracker) Reconcile(pods []PodInFlight) int {
	grace := time.Duration(t.p.ReconcileGraceSeconds) * time.Second
	if grace <= 0 || len(pods) == 0 {
		return 0
	}
	t.mu.Lock()
	now := t.clock.Now()
	excess := map[tokenload.PodKey]int{}
	for _, p := range pods {
		if ps := t.pods[p.Pod]; ps != nil {
			if n := ps.activeN + ps.decN + ps.encN - max(0, p.InFlight); n > 0 {
				excess[p.Pod] = n
			}
		}
	}
	if len(excess) == 0 {
		t.mu.Unlock()
		return 0
	}
	type lease struct {
		id   string
		part string // prefill (active), decode, encode
		pods []tokenload.PodKey
		at   time.Time
	}
	anyExcess := func(pods ...tokenload.PodKey) bool {
		return slices.ContainsFunc(pods, func(k tokenload.PodKey) bool { return excess[k] > 0 })
	}
	var old []lease
	for id, e := range t.reqs {
		if pp := e.prefill; pp != nil && pp.active && anyExcess(pp.pod) && now.Sub(pp.at) > grace {
			old = append(old, lease{id: id, part: "prefill", pods: []tokenload.PodKey{pp.pod}, at: pp.at})
		}
		if dp := e.decode; dp != nil && dp.open && anyExcess(dp.pod) && now.Sub(dp.at) > grace {
			old = append(old, lease{id: id, part: "decode", pods: []tokenload.PodKey{dp.pod}, at: dp.at})
		}
		if en := e.encode; en != nil && en.open && anyExcess(en.pods...) && now.Sub(en.at) > grace {
			old = append(old, lease{id: id, part: "encode", pods: en.pods, at: en.at})
		}
	}
	slices.SortFunc(old, func(a, b lease) int {
		return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.id, b.id), cmp.Compare(a.part, b.part))
	})
	released, decodeChanged := 0, false
	for _, l := range old {
		e := t.reqs[l.id]
		if e == nil || !anyExcess(l.pods...) {
			continue
		}
		for _, k := range l.pods {
			excess[k]--
		}
		t.log.Info("Releasing a lease the pod's scraped request counts cannot explain", "requestID", l.id, "pods", l.pods, "part", l.part, "age", now.Sub(l.at))
		t.metrics.forceReleased.WithLabelValues(l.part, "reconciled").Inc()
		switch l.part {
		case "prefill":
			t.releaseLocked(l.id, e, true, false, false, now)
		case "decode":
			decodeChanged = t.releaseLocked(l.id, e, false, false, true, now) || decodeChanged
		case "encode":
			t.releaseEncodeLocked(e.encode, now)
			if e.done() {
				delete(t.reqs, l.id)
			}
		}
		released++
	}
	t.mu.Unlock()
	if decodeChanged && t.notify != nil {
		t.notify()
	}
	return released
}

// AdmitRequest admits every request: the ledger only reads the candidates' scraped counts to
// reconcile its leases with them (reconcileGraceSeconds; at most once a second, fresh scrapes
// only).
func (p *Plugin) AdmitRequest(_ context.Context, _ *fwksched.LLMRequest, pods []fwksched.Endpoint) error {
	p.start()
	t := p.tracker
	if t.p.ReconcileGraceSeconds <= 0 {
		return nil
	}
	now := t.clock.Now()
	p.mu.Lock()
	due := p.reconciled.IsZero() || now.Sub(p.reconciled) >= reconcileEvery
	if due {
		p.reconciled = now
	}
	p.mu.Unlock()
	if !due {
		return nil
	}
	counts := make([]PodInFlight, 0, len(pods))
	for _, ep := range pods {
		m := ep.GetMetrics()
		if m == nil || m.UpdateTime.IsZero() || now.Sub(m.UpdateTime) > metricsFreshness {
			continue
		}
		if k, ok := endpointKey(ep); ok {
			counts = append(counts, PodInFlight{Pod: k, InFlight: m.RunningRequestsSize + m.WaitingQueueSize})
		}
	}
	t.Reconcile(counts)
	return nil
}

// endpointKey is an endpoint's ledger key, "namespace/pod", as podmodel builds it for the
// scorers that charge the ledger.
func endpointKey(ep fwksched.Endpoint) (tokenload.PodKey, bool) {
	if ep == nil {
		return "", false
	}
	md := ep.GetMetadata()
	if md == nil {
		return "", false
	}
	name := md.PodName
	if name == "" {
		name = md.NamespacedName.Name
	}
	return tokenload.PodKey(md.NamespacedName.Namespace + "/" + name), name != ""
}
