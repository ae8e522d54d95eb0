package sessionaffinity

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
	logutil "sigs.k8s.io/gateway-api-inference-extension/pkg/common/observability/logging"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

const (
	// maxPending bounds the per-request notes kept between scheduling and PreRequest (and, for
	// a profileName pick, between PreRequest and the response headers).
	maxPending = 1 << 16
	// pendingTTL drops the notes of requests that never reached the next hook (scheduling
	// failed, client gone before the response headers).
	pendingTTL = 10 * time.Minute
)

// EncodeEndpoint is the encoded_endpoint_header value for an endpoint ID ("namespace/name",
// GIE's NamespacedName.String()): standard base64, as llm-d.
func EncodeEndpoint(id string) string { return base64.StdEncoding.EncodeToString([]byte(id)) }

// DecodeEndpoint reverses EncodeEndpoint; it also accepts unpadded and URL-safe base64.
func DecodeEndpoint(v string) (string, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(v); err == nil {
			if len(b) == 0 || !utf8.Valid(b) || !strings.Contains(string(b), "/") {
				return "", fmt.Errorf("session token %q: decodes to %q, not a namespace/name endpoint ID", v, b)
			}
			return string(b), nil
		}
	}
	return "", fmt.Errorf("session token %q: %w", v, errors.New("not base64"))
}

// ID is an endpoint's ID: its NamespacedName as a string.
func ID(ep fwksched.Endpoint) string {
	if ep == nil || ep.GetMetadata() == nil {
		return ""
	}
	return ep.GetMetadata().NamespacedName.String()
}

// Load is an endpoint's scraped load, the fields GIE's queue-scorer reads plus the running
// requests: waiting queue + running requests; ok is false without metrics.
func Load(ep fwksched.Endpoint) (int, bool) {
	m := ep.GetMetrics()
	if m == nil {
		return 0, false
	}
	return m.WaitingQueueSize + m.RunningRequestsSize, true
}

type note struct {
	session string // the session ID, or the encoded token
	bound   string // the endpoint ID the session points to; "" when unbound or invalid
	reason  string // "" for a hit, else a miss reason
	at      time.Time
}

type pick struct {
	endpoint string
	at       time.Time
}

// Affinity is what session-affinity-scorer and session-affinity-filter run: the lookup at
// scheduling time, the binding in PreRequest and the response header.
type Affinity struct {
	plugin string
	cfg    Config
	now    func() time.Time
	table  *Table // session_id only
	m      *Metrics
	log    logr.Logger
	done   chan struct{}

	mu         sync.Mutex
	notes      map[string]note // request ID -> what the lookup saw, for PreRequest
	picks      map[string]pick // request ID -> the profileName pick, for the response header
	fullWarned bool
}

// New builds the engine of one plugin instance (plugin is the instance's TypedName, "<name>/<type>": the metric label).
// now is the clock (nil: time.Now).
func New(plugin string, cfg Config, m *Metrics, logger logr.Logger, now func() time.Time) *Affinity {
	if now == nil {
		now = time.Now
	}
	a := &Affinity{plugin: plugin, cfg: cfg, now: now, m: m, log: logger, done: make(chan struct{}),
		notes: map[string]note{}, picks: map[string]pick{}}
	if cfg.Strategy == StrategySessionID {
		a.table = NewTable(cfg.TTL, cfg.MaxSessions)
	}
	return a
}

// Config returns the validated configuration.
func (a *Affinity) Config() Config { return a.cfg }

// Table returns the session_id table (nil under encoded_endpoint_header).
func (a *Affinity) Table() *Table { return a.table }

// Start runs the sweeper every cfg.Sweep until ctx ends; Done is closed when it has stopped.
func (a *Affinity) Start(ctx context.Context) {
	go func() {
		defer close(a.done)
		pluginkit.Every(ctx, a.cfg.Sweep, func() { a.Sweep(a.now()) })
	}()
}

// Done is closed once the sweeper started by Start has returned.
func (a *Affinity) Done() <-chan struct{} { return a.done }

// Sweep evicts bindings idle longer than the TTL and forgets stale per-request notes.
func (a *Affinity) Sweep(now time.Time) {
	if a.table != nil {
		if n := a.table.Sweep(now); n > 0 {
			a.m.evictions.WithLabelValues(a.plugin).Add(float64(n))
			a.log.V(logutil.DEBUG).Info("Session bindings evicted", "evicted", n, "ttl", a.cfg.TTL)
		}
		a.m.bindings.WithLabelValues(a.plugin).Set(float64(a.table.Len()))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, n := range a.notes {
		if now.Sub(n.at) > pendingTTL {
			delete(a.notes, id)
		}
	}
	for id, p := range a.picks {
		if now.Sub(p.at) > pendingTTL {
			delete(a.picks, id)
		}
	}
	if a.table != nil && a.table.Len() < a.cfg.MaxSessions {
		a.fullWarned = false
	}
}

// Session returns the request's session: the encoded token, or the session ID from the first
// source with a non-empty value (attribute sources read the candidates' attributes).
func (a *Affinity) Session(req *fwksched.LLMRequest, eps []fwksched.Endpoint) string {
	if req == nil {
		return ""
	}
	if a.cfg.Strategy == StrategyEncodedEndpointHeader {
		return strings.TrimSpace(protocol.HeaderValue(req.Headers, a.cfg.Header))
	}
	for _, src := range a.cfg.Sources {
		if src.Header != "" {
			if v := strings.TrimSpace(protocol.HeaderValue(req.Headers, src.Header)); v != "" {
				return v
			}
			continue
		}
		for _, ep := range eps {
			if v, ok := ep.Get(src.Key()); ok {
				if s, ok := v.(fmt.Stringer); ok {
					if id := strings.TrimSpace(s.String()); id != "" {
						return id
					}
				}
			}
		}
	}
	return ""
}

// Lookup finds the candidate the request's session points to. It returns nil and the miss
// reason when there is none to prefer (no session: nil and ""). withLoad applies the load
// allowance. The outcome is remembered for PreRequest and counted.
func (a *Affinity) Lookup(req *fwksched.LLMRequest, eps []fwksched.Endpoint, withLoad bool) (fwksched.Endpoint, string) {
	session := a.Session(req, eps)
	if session == "" {
		return nil, ""
	}
	n := note{session: session, at: a.now()}
	if a.table != nil {
		if id, ok := a.table.Get(session, n.at); ok {
			n.bound = id
		} else {
			n.reason = ReasonUnbound
		}
	} else if id, err := DecodeEndpoint(session); err == nil {
		n.bound = id
	} else {
		n.reason = ReasonInvalid
	}
	var target fwksched.Endpoint
	if n.bound != "" {
		for _, ep := range eps {
			if ID(ep) == n.bound {
				target = ep
				break
			}
		}
		switch {
		case target == nil:
			n.reason = ReasonAbsent
		case withLoad && a.overloaded(target, eps):
			n.reason, target = ReasonOverloaded, nil
		}
	}
	a.mu.Lock()
	if len(a.notes) < maxPending {
		a.notes[req.RequestId] = n
	}
	a.mu.Unlock()
	if n.reason == "" {
		a.m.hits.WithLabelValues(a.plugin).Inc()
	} else {
		a.m.misses.WithLabelValues(a.plugin, n.reason).Inc()
	}
	return target, n.reason
}

// overloaded: the bound endpoint carries more than the allowance over the least-loaded
// candidate. Unknown loads never count as overloaded.
func (a *Affinity) overloaded(bound fwksched.Endpoint, eps []fwksched.Endpoint) bool {
	if a.cfg.LoadAllowance < 0 {
		return false
	}
	lb, ok := Load(bound)
	if !ok {
		return false
	}
	least := lb
	for _, ep := range eps {
		if l, ok := Load(ep); ok && l < least {
			least = l
		}
	}
	return lb-least > a.cfg.LoadAllowance
}

// pickOf returns the pick of cfg.ProfileName, or of the primary profile.
func (a *Affinity) pickOf(result *fwksched.SchedulingResult) fwksched.Endpoint {
	if result == nil {
		return nil
	}
	name := a.cfg.ProfileName
	if name == "" {
		name = result.PrimaryProfileName
	}
	pr := result.ProfileResults[name]
	if pr == nil || len(pr.TargetEndpoints) == 0 {
		return nil
	}
	return pr.TargetEndpoints[0]
}

// PreRequest settles the session on the picked endpoint (the primary profile's, i.e. decode
// in a P/D request, unless profileName says otherwise). See Table.Settle for the rule.
func (a *Affinity) PreRequest(ctx context.Context, req *fwksched.LLMRequest, result *fwksched.SchedulingResult) {
	if req == nil {
		return
	}
	a.mu.Lock()
	n, noted := a.notes[req.RequestId]
	delete(a.notes, req.RequestId)
	a.mu.Unlock()
	ep := a.pickOf(result)
	if ep == nil {
		return
	}
	picked := ID(ep)
	moved := noted && (n.reason == ReasonAbsent || n.reason == ReasonOverloaded)
	if a.table == nil { // encoded_endpoint_header: the response header carries the pick
		if a.cfg.ProfileName != "" {
			a.mu.Lock()
			if len(a.picks) < maxPending {
				a.picks[req.RequestId] = pick{endpoint: picked, at: a.now()}
			}
			a.mu.Unlock()
		}
		if moved && picked != n.bound {
			a.m.rebinds.WithLabelValues(a.plugin, n.reason).Inc()
		}
		return
	}
	session := n.session
	if !noted {
		session = a.Session(req, []fwksched.Endpoint{ep})
	}
	if session == "" {
		return
	}
	out := a.table.Settle(session, picked, moved, a.now())
	switch out {
	case Rebound:
		a.m.rebinds.WithLabelValues(a.plugin, n.reason).Inc()
	case Refused:
		a.m.refused.WithLabelValues(a.plugin).Inc()
		a.mu.Lock()
		warn := !a.fullWarned
		a.fullWarned = true
		a.mu.Unlock()
		if warn {
			a.log.Info("Session table full; new sessions are not bound until idle ones expire", "maxSessions", a.cfg.MaxSessions)
		}
	}
	a.m.bindings.WithLabelValues(a.plugin).Set(float64(a.table.Len()))
	if l := pluginkit.DebugLogger(ctx); l.Enabled() {
		l.Info("Session affinity settled", "plugin", a.plugin, "requestID", req.RequestId, "endpoint", picked,
			"outcome", out.String(), "lookup", n.reason, "wasBound", n.bound)
	}
}

// ResponseHeader writes the served endpoint (or the profileName pick), encoded, into the
// response header under encoded_endpoint_header; session_id writes nothing to the client. When
// the named profile did not run, the request's token is echoed so the client keeps it.
func (a *Affinity) ResponseHeader(_ context.Context, req *fwksched.LLMRequest, resp *fwkrc.Response, target *fwkdl.EndpointMetadata) {
	if a.table != nil || resp == nil {
		return
	}
	var id string
	if a.cfg.ProfileName == "" {
		if target != nil {
			id = target.NamespacedName.String()
		}
	} else if req != nil {
		a.mu.Lock()
		id = a.picks[req.RequestId].endpoint
		delete(a.picks, req.RequestId)
		a.mu.Unlock()
	}
	v := ""
	if id != "" {
		v = EncodeEndpoint(id)
	} else if req != nil {
		v = strings.TrimSpace(protocol.HeaderValue(req.Headers, a.cfg.Header))
	}
	if v == "" {
		return
	}
	if resp.Headers == nil {
		resp.Headers = map[string]string{}
	}
	resp.Headers[a.cfg.Header] = v
}

// String names an outcome for logs.
func (o Outcome) String() string {
	switch o {
	case Bound:
		return "bound"
	case Touched:
		return "touched"
	case Rebound:
		return "rebound"
	case Kept:
		return "kept"
	case Refused:
		return "refused"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}
