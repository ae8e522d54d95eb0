package kvevents

import (
	"encoding/binary"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	kvwire "github.com/pdgate/pdgate/plugins/wire/kvevents"
)

// Resolution says how the endpoint a central-mode topic names was matched to the pool
// (SubscriberConfig.Resolve).
type Resolution string

const (
	// ResolvedExact: the topic names a pool endpoint's "address:port".
	ResolvedExact Resolution = "exact"
	// ResolvedByAddress: the topic names only an address (vLLM's and SGLang's topics are
	// free text; publishers often give the pod IP alone), or a port no endpoint has, and
	// exactly one pool endpoint of the batch's rank has that address.
	ResolvedByAddress Resolution = "by_address"
	// ResolvedUnchecked: no pool is known (a subscriber without a resolver): the topic's
	// endpoint is the source, as given.
	ResolvedUnchecked Resolution = "unchecked"
	// Unmatched: no pool endpoint has the address. The message is dropped and counted.
	Unmatched Resolution = "unmatched"
	// Ambiguous: several pool endpoints of the batch's rank share the address and the topic
	// names no port that tells them apart. pdgate refuses to guess: the message is dropped,
	// counted and logged.
	Ambiguous Resolution = "ambiguous"
)

// Resolved reports whether r names a source the index may hold.
func (r Resolution) Resolved() bool {
	return r == ResolvedExact || r == ResolvedByAddress || r == ResolvedUnchecked
}

// tsSlack is how far a batch's ts may go back before the stream counts as restarted: a
// publisher stamps batches with its wall clock, so within one process they only go back on a
// clock step.
const tsSlack = 0.5

// streamState is what the subscriber remembers of one source's stream: enough to tell a
// repeated message from a new publisher that reuses its sequence numbers.
type streamState struct {
	next   uint64  // last applied sequence number + 1
	digest uint64  // xxhash of the last applied payload (0: unknown)
	ts     float64 // the last applied batch's ts (0: none)
}

// handle applies one message [topic, seq (8 bytes big-endian), payload]. In central mode the
// source comes from the topic (resolved against the pool) and the batch's rank.
func (s *Subscribers) handle(src SourceKey, central bool, frames [][]byte) {
	if len(frames) != 3 || len(frames[1]) < 8 {
		s.count(ResultMalformed)
		return
	}
	seq := binary.BigEndian.Uint64(frames[1][len(frames[1])-8:])
	batch, err := kvwire.DecodeBatch(frames[2])
	if central {
		ep, _ := EndpointOf(string(frames[0]))
		var how Resolution
		src, how = s.resolve(ep, batch.DPRank)
		if !how.Resolved() {
			result := ResultUnmatched
			if how == Ambiguous {
				result = ResultAmbiguous
			}
			s.count(result)
			s.unres.note(s, ep, batch.DPRank, how)
			return
		}
	}
	s.deliver(src, seq, xxhash.Sum64(frames[2]), batch, err)
}

func (s *Subscribers) resolve(topicEndpoint string, rank int) (SourceKey, Resolution) {
	if s.cfg.Resolve == nil {
		return SourceKey{Endpoint: topicEndpoint, Rank: rank}, ResolvedUnchecked
	}
	return s.cfg.Resolve(topicEndpoint, rank)
}

// Deliver applies a decoded batch of src with sequence number seq (err: the decoding error).
// Without the payload's bytes a repeated sequence number counts as a duplicate; the sockets
// deliver through handle, which also tells a restarted publisher from a repeat.
func (s *Subscribers) Deliver(src SourceKey, seq uint64, batch kvwire.Batch, err error) {
	s.deliver(src, seq, 0, batch, err)
}

// deliver enforces the stream rules:
//   - a repeated message (same sequence number, same payload) is dropped;
//   - the same sequence number with another payload, or a ts going back, is a new publisher
//     (the engine restarted and counts again from its first value): everything src held is
//     dropped before the batch is applied;
//   - a jump forward (messages lost) or backward (restart) drops everything src held first;
//   - a batch that cannot be decoded drops everything src held (what it said is lost);
//   - a source the subscriber does not know yet is recorded only when its batch is applied,
//     and only while fewer than MaxSources are: junk costs no state.
func (s *Subscribers) deliver(src SourceKey, seq, digest uint64, batch kvwire.Batch, err error) {
	s.seqMu.Lock()
	st, known := s.seqs[src]
	full := !known && len(s.seqs) >= MaxSources
	s.seqMu.Unlock()
	if err != nil {
		s.count(ResultMalformed)
		s.log.V(2).Info("malformed KV-event batch; the endpoint's blocks are dropped", "endpoint", src.Endpoint, "err", err.Error())
		if known {
			s.resync(src, ResyncGap)
		}
		return
	}
	if full {
		// A central socket anyone can reach must not grow without bound with invented topics.
		s.count(ResultOverLimit)
		return
	}
	if known {
		last := st.next - 1
		switch {
		case seq == last && (digest == 0 || digest == st.digest):
			s.count(ResultDuplicate)
			return
		case seq == last:
			s.resync(src, ResyncRestart)
		case seq < last:
			s.resync(src, ResyncReset)
		case seq > st.next:
			if s.m != nil {
				s.m.Gaps.Inc()
			}
			s.resync(src, ResyncGap)
		case st.ts > 0 && batch.TS > 0 && batch.TS < st.ts-tsSlack:
			s.resync(src, ResyncRestart)
		}
	}
	s.seqMu.Lock()
	s.seqs[src] = streamState{next: seq + 1, digest: digest, ts: batch.TS}
	s.seqMu.Unlock()
	s.ix.Apply(src, batch.Events)
	s.count(ResultApplied)
	if s.m != nil && batch.TS > 0 {
		if lag := time.Since(time.Unix(0, int64(batch.TS*1e9))).Seconds(); lag >= 0 && lag < 3600 {
			s.m.Lag.Observe(lag)
		}
	}
}

// resync drops what src held and its sequence state; src stays known to the index.
func (s *Subscribers) resync(src SourceKey, reason string) {
	s.forgetSeq(src)
	if s.ix.Holds(src) > 0 && s.m != nil {
		s.m.Resyncs.WithLabelValues(reason).Inc()
	}
	s.ix.Clear(src)
}

// Forget drops src entirely, its blocks and its stream state, counting reason when it held
// blocks.
func (s *Subscribers) Forget(src SourceKey, reason string) {
	s.forgetSeq(src)
	if s.ix.Holds(src) > 0 && s.m != nil {
		s.m.Resyncs.WithLabelValues(reason).Inc()
	}
	s.ix.Forget(src)
}

// ForgetEndpoint drops every source (all ranks) of endpoint ("address:port"). It reports
// whether any of them held blocks.
func (s *Subscribers) ForgetEndpoint(endpoint, reason string) bool {
	held := false
	for _, src := range s.ix.Sources() {
		if src.Endpoint == endpoint {
			held = held || s.ix.Holds(src) > 0
			s.Forget(src, reason)
		}
	}
	s.seqMu.Lock()
	for src := range s.seqs {
		if src.Endpoint == endpoint {
			delete(s.seqs, src)
		}
	}
	s.seqMu.Unlock()
	return held
}

// Endpoints lists the endpoints the index holds sources of.
func (s *Subscribers) Endpoints() []string {
	seen := map[string]bool{}
	var out []string
	for _, src := range s.ix.Sources() {
		if !seen[src.Endpoint] {
			seen[src.Endpoint] = true
			out = append(out, src.Endpoint)
		}
	}
	return out
}

func (s *Subscribers) forgetSeq(src SourceKey) {
	s.seqMu.Lock()
	delete(s.seqs, src)
	s.seqMu.Unlock()
}

func (s *Subscribers) count(result string) {
	if s.m != nil {
		s.m.Messages.WithLabelValues(result).Inc()
	}
}

// unresolvedLog logs a source that matches no endpoint (or several) once a minute per
// address, in bounded memory, so a flood of invented topics costs a few log lines.
type unresolvedLog struct {
	mu   sync.Mutex
	last map[string]time.Time
}

const unresolvedLogEvery = time.Minute

func (u *unresolvedLog) note(s *Subscribers, topicEndpoint string, rank int, how Resolution) {
	u.mu.Lock()
	now := time.Now()
	if u.last == nil || len(u.last) >= 256 {
		u.last = map[string]time.Time{}
	}
	key := string(how) + "|" + topicEndpoint
	logIt := now.Sub(u.last[key]) >= unresolvedLogEvery
	if logIt {
		u.last[key] = now
	}
	u.mu.Unlock()
	if !logIt {
		return
	}
	switch how {
	case Ambiguous:
		s.log.Info("KV events dropped: several pool endpoints share the address the topic names and no port tells them apart; publish with topic kv@<address>:<port>@<model>",
			"topicEndpoint", topicEndpoint, "rank", rank)
	default:
		s.log.Info("KV events dropped: the topic names no pool endpoint", "topicEndpoint", topicEndpoint, "rank", rank)
	}
}
