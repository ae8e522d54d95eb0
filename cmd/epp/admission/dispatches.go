package admission

import (
	"context"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/flowcontrol/contracts"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/lib/stagesat"
)

// Prefill dispatches since the last scrape. Admission and the scheduler read engine
// metrics that are up to one refresh interval old (GIE scrapes every 50 ms), and under overload
// many requests arrive inside one interval: each finds the prefill queues as last scraped, so
// admission lets the queue run several requests past its threshold before the next scrape
// shows it, and a queue scorer sends the whole interval's prefill legs to the one pod that
// looked emptiest. The EPP knows what it sent since. Every prefill pod is therefore seen, by
// the saturation detector and by the scorers alike, with the prefill legs dispatched to it
// after its metrics were taken counted as waiting: shedding starts when the queue will reach
// the threshold, and the legs of one interval spread over the prefill pods.
//
// Requests admitted at the same moment would all pass before any of them is dispatched, so
// the legacy check also holds a reservation for each request it admits that needs a prefill
// leg, from its admission until the request path dispatches it or gives up (Settle); a
// reservation counts as one more waiting request on the prefill pod that looks emptiest, where
// a queue scorer would send it. Admission decisions for such requests are serialised so that
// each sees the reservations of those before it (flow control queues requests itself and is
// not serialised).
//
// A leg that has returned is no longer queued on its pod. Where the sidecars report that
// (the prefill-release callback, --prefill-release-address), the ledger forgets each leg when
// it returns instead of at the next scrape: at a scrape interval longer than a prefill, a pod
// would otherwise look busy with legs it already served until the scrape shows it empty, and
// admission would refuse work the pod had room for (one EPP under flow control at a 2 s scrape
// admitted 14 requests where its decode pods held 40).
//
// Only prefill pods are corrected. Only prompts long enough to need a remote prefill reach one,
// and a prefill pod works through prompts nearly one at a time, so a dispatch there is queued
// work. A decode pod takes new requests into its running batch at once; counting them as
// waiting would shed decode work that had room.

const (
	// arrivalAllowance: a dispatch reaches its pod a little after the EPP sends it (through the
	// gateway and the decode pod's sidecar), so a scrape taken within this time after it may
	// not show it yet; such a dispatch is still counted (counting one twice sheds a little
	// early, missing one sheds late).
	arrivalAllowance = 50 * time.Millisecond
	// dispatchHorizon bounds the ledger: anything older is covered by any fresh scrape, and a
	// detector treats metrics older than its staleness threshold as saturated anyway.
	dispatchHorizon = 5 * time.Second
	// maxDispatchesPerPod bounds one pod's entries: a pod whose metrics went stale (or a pool
	// served faster than it is scraped) would otherwise hold a horizon's worth; any count near
	// it is saturated many times over.
	maxDispatchesPerPod = 1024
)

// Dispatches records where the EPP sent each request, per endpoint, for the last few seconds.
type Dispatches struct {
	mu    sync.Mutex
	byPod map[podKey][]time.Time // endpoint → dispatch times, oldest first
	// legs are the prefill legs not yet returned, by request id, kept only once TrackReturns
	// says that returns will be reported (PrefillReturned).
	legs map[string][]leg
	// predicted keeps the last predicted metrics of each prefill pod, reused while its scrape and
	// its count are the same: every request of a scrape interval would otherwise clone the
	// same metrics (three allocations a prefill pod, a request).
	predicted map[podKey]predictedMetrics
	reserved  map[string]struct{} // request ids admitted and not yet dispatched or settled
	open      atomic.Int64        // len(reserved), read without the lock
	lastSweep time.Time
	now       func() time.Time
}

// NewDispatches returns an empty ledger on the wall clock.
func NewDispatches() *Dispatches { return NewDispatchesAt(time.Now) }

// NewDispatchesAt returns an empty ledger on the clock now (bench sim's virtual clock; the
// metrics' UpdateTime must be on the same clock).
func NewDispatchesAt(now func() time.Time) *Dispatches {
	return &Dispatches{byPod: map[podKey][]time.Time{}, predicted: map[podKey]predictedMetrics{}, reserved: map[string]struct{}{}, now: now}
}

// leg is one dispatch of a request: to which pod, when.
type leg struct {
	pod podKey
	at  time.Time
}

// TrackReturns makes the ledger remember which request each prefill leg belongs to, so that
// PrefillReturned can forget it; the EPP calls it when the sidecars report returned legs.
func (d *Dispatches) TrackReturns() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.legs == nil {
		d.legs = map[string][]leg{}
	}
}

// PrefillReturned forgets the prefill legs of a request whose prefill leg returned (the
// prefill-release callback): its pod no longer holds it. A request with no leg recorded (a
// second report, one older than the ledger's horizon) is a no-op.
func (d *Dispatches) PrefillReturned(requestID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, l := range d.legs[requestID] {
		times := d.byPod[l.pod]
		// times are in order; a leg's time may be shared with others, any one of them is it
		if i, ok := slices.BinarySearchFunc(times, l.at, time.Time.Compare); ok {
			d.byPod[l.pod] = slices.Delete(times, i, i+1)
		}
	}
	delete(d.legs, requestID)
}

// reserve holds a prefill slot for an admitted request until Settle.
func (d *Dispatches) reserve(requestID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reserved[requestID] = struct{}{}
	d.open.Store(int64(len(d.reserved)))
}

// Settle ends an admitted request's reservation: the request path calls it once the request
// was dispatched (after Dispatched) or will not be.
func (d *Dispatches) Settle(requestID string) {
	if d.open.Load() == 0 { // every request is settled; most never reserved
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.reserved, requestID)
	d.open.Store(int64(len(d.reserved)))
}

// Dispatched records the prefill-tier picks of a request the EPP sent on (its prefill leg's
// pod); the request path calls it (extproc.Config.Dispatched). A pool without prefill pods
// leaves the ledger empty and costs nothing more.
func (d *Dispatches) Dispatched(requestID string, result *fwksched.SchedulingResult) {
	if result == nil {
		return
	}
	for _, pr := range result.ProfileResults {
		if pr == nil || len(pr.TargetEndpoints) == 0 || pr.TargetEndpoints[0] == nil {
			continue
		}
		if md := pr.TargetEndpoints[0].GetMetadata(); md != nil && inPrefillTier(md.Labels) {
			d.record(requestID, keyOf(md))
		}
	}
}

// record appends a dispatch of requestID to key now. The time is taken under the lock, so
// each pod's times are in order and counting is a binary search.
func (d *Dispatches) record(requestID string, key podKey) {
	d.mu.Lock()
	defer d.mu.Unlock()
	at := d.now()
	times := d.byPod[key]
	drop := sort.Search(len(times), func(i int) bool { return at.Sub(times[i]) <= dispatchHorizon })
	drop = max(drop, len(times)+1-maxDispatchesPerPod)
	d.byPod[key] = append(times[drop:], at)
	if d.legs != nil {
		d.legs[requestID] = append(d.legs[requestID], leg{pod: key, at: at})
	}
	if at.Sub(d.lastSweep) > dispatchHorizon { // endpoints gone from the pool leave the ledger
		d.lastSweep = at
		for k, ts := range d.byPod {
			if len(ts) == 0 || at.Sub(ts[len(ts)-1]) > dispatchHorizon {
				delete(d.byPod, k)
			}
		}
		// legs past the horizon are no longer counted, returned or not (a request whose return
		// is never reported: a failed leg, a sidecar without the callback)
		for id, ls := range d.legs {
			if at.Sub(ls[len(ls)-1].at) > dispatchHorizon {
				delete(d.legs, id)
			}
		}
		clear(d.predicted) // rebuilt on the next prediction; drops endpoints gone from the pool
	}
}

// Candidates wraps candidates so that everything reading them (admission's detector, the
// scheduler) sees the prefill pods through the ledger.
func (d *Dispatches) Candidates(candidates contracts.EndpointCandidates) contracts.EndpointCandidates {
	return predictedCandidates{inner: candidates, dispatches: d}
}

type predictedCandidates struct {
	inner      contracts.EndpointCandidates
	dispatches *Dispatches
}

func (p predictedCandidates) Locate(ctx context.Context, md map[string]any) []fwkdl.Endpoint {
	return p.dispatches.predict(p.inner.Locate(ctx, md))
}

// predict returns eps with each prefill pod seen through the ledger: the legs dispatched to it
// since its metrics were taken, and the open reservations spread one at a time onto the prefill
// pod with the fewest waiting, counted in its waiting queue (eps itself when none changed).
func (d *Dispatches) predict(eps []fwkdl.Endpoint) []fwkdl.Endpoint {
	var prefillBuf, addedBuf [32]int // on the stack for pools of up to 32 prefill pods
	prefill := prefillBuf[:0]        // positions of the prefill pods with metrics
	for i, ep := range eps {
		if md, m := ep.GetMetadata(), ep.GetMetrics(); m != nil && md != nil && inPrefillTier(md.Labels) {
			prefill = append(prefill, i)
		}
	}
	if len(prefill) == 0 {
		return eps
	}
	added := addedBuf[:0]
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, i := range prefill {
		added = append(added, d.sinceLocked(eps[i].GetMetadata(), eps[i].GetMetrics()))
	}
	for range len(d.reserved) {
		least := 0
		for k, i := range prefill {
			if eps[i].GetMetrics().WaitingQueueSize+added[k] < eps[prefill[least]].GetMetrics().WaitingQueueSize+added[least] {
				least = k
			}
		}
		added[least]++
	}
	changed := 0
	for _, n := range added {
		if n > 0 {
			changed++
		}
	}
	if changed == 0 {
		return eps
	}
	out := slices.Clone(eps)
	// The changed pods' views in one allocation: boxing each view into the Endpoint interface
	// allocated it on its own.
	views := make([]withMetrics, 0, changed)
	for k, i := range prefill {
		if added[k] > 0 {
			views = append(views, withMetrics{Endpoint: eps[i], metrics: d.predictedLocked(eps[i].GetMetadata(), eps[i].GetMetrics(), added[k])})
			out[i] = &views[len(views)-1]
		}
	}
	return out
}

// predictedMetrics is one prefill pod's metrics as last predicted: from which scrape, with how
// many more waiting.
type predictedMetrics struct {
	from  *fwkdl.Metrics
	added int
	m     *fwkdl.Metrics
}

// predictedLocked is m with n more waiting, the copy made for the last request when it was
// made from the same scrape with the same count (metrics are shared and never changed, so a
// copy is as good as new).
func (d *Dispatches) predictedLocked(md *fwkdl.EndpointMetadata, m *fwkdl.Metrics, n int) *fwkdl.Metrics {
	key := keyOf(md)
	if p, ok := d.predicted[key]; ok && p.from == m && p.added == n {
		return p.m
	}
	p := predictedMetrics{from: m, added: n, m: plusWaiting(m, n)}
	d.predicted[key] = p
	return p.m
}

// Seen returns the metrics the scheduler sees for one endpoint without admission's
// reservations (bench sim, which runs no admission check): for a prefill pod with prefill legs
// dispatched to it since m was taken, a copy with those legs counted as waiting; m itself
// otherwise.
func (d *Dispatches) Seen(md *fwkdl.EndpointMetadata, m *fwkdl.Metrics) *fwkdl.Metrics {
	if m == nil || md == nil || !inPrefillTier(md.Labels) {
		return m
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.predictedLocked(md, m, d.sinceLocked(md, m))
}

// plusWaiting is m with n more waiting requests (m itself for n == 0). The datastore's metrics
// are shared and never changed, so the copy shares m's model maps too: Clone copied both maps,
// three allocations per predicted pod where one will do.
func plusWaiting(m *fwkdl.Metrics, n int) *fwkdl.Metrics {
	if n == 0 {
		return m
	}
	c := *m
	c.WaitingQueueSize += n
	return &c
}

// sinceLocked counts the legs dispatched to md since m was taken (less the arrival allowance).
func (d *Dispatches) sinceLocked(md *fwkdl.EndpointMetadata, m *fwkdl.Metrics) int {
	times, since := d.byPod[keyOf(md)], m.UpdateTime.Add(-arrivalAllowance)
	return len(times) - sort.Search(len(times), func(i int) bool { return !times[i].Before(since) })
}

// inPrefillTier reports whether a pod with these labels is in stagesat's prefill tier.
func inPrefillTier(labels map[string]string) bool {
	return stagesat.TierOf(labels) == stagesat.TierPrefill
}

// podKey names an endpoint: its namespaced name and port (data-parallel ranks of one pod are
// separate endpoints on separate ports). A struct, not a joined string, so that looking a pod
// up allocates nothing.
type podKey struct {
	name types.NamespacedName
	port string
}

func keyOf(md *fwkdl.EndpointMetadata) podKey { return podKey{name: md.NamespacedName, port: md.Port} }

// withMetrics is an endpoint seen with other metrics (the predicted ones).
type withMetrics struct {
	fwkdl.Endpoint
	metrics *fwkdl.Metrics
}

func (w withMetrics) GetMetrics() *fwkdl.Metrics { return w.metrics }
