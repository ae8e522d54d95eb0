package kvevents

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-zeromq/zmq4"
)

// MaxSources bounds the event sources (endpoint, rank) one set of subscribers tracks.
const MaxSources = 8192

// SubscriberConfig says where events come from.
type SubscriberConfig struct {
	// TopicFilter is the SUB prefix filter (llm-d's default "kv@").
	TopicFilter string
	// ZMQEndpoint, when set, is the central mode: one SUB socket bound there, engines connect
	// to it, and each message's source is the endpoint named in its topic
	// ("kv@<address:port>@<model>") and the batch's data-parallel rank.
	ZMQEndpoint string
	// SocketPort is the port engines publish on in discovery mode: endpoint rank r is dialled
	// at tcp://<address>:<SocketPort+r>.
	SocketPort int
	// ReconnectDelay is the pause before a broken or refused socket is rebuilt.
	ReconnectDelay time.Duration
}

// Subscribers owns the SUB sockets feeding one index: one per endpoint in discovery mode
// (Ensure / Remove), or one bound socket in central mode (StartCentral).
type Subscribers struct {
	ctx    context.Context
	cfg    SubscriberConfig
	ix     *Index
	m      *Metrics
	log    logr.Logger
	mu     sync.Mutex
	subs   map[string]*sub // endpoint "address:port" → its subscriber
	seqMu  sync.Mutex
	seqs   map[SourceKey]uint64 // last applied sequence number + 1 (0 = none yet)
	closed bool
}

type sub struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// NewSubscribers returns subscribers feeding ix, living until ctx ends. m may be nil.
func NewSubscribers(ctx context.Context, cfg SubscriberConfig, ix *Index, m *Metrics, logger logr.Logger) *Subscribers {
	if cfg.ReconnectDelay <= 0 {
		cfg.ReconnectDelay = 2 * time.Second
	}
	s := &Subscribers{ctx: ctx, cfg: cfg, ix: ix, m: m, log: logger, subs: map[string]*sub{}, seqs: map[SourceKey]uint64{}}
	// AfterFunc, not a goroutine waiting on Done: building subscribers starts nothing.
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
	})
	return s
}

// Ensure starts a subscriber for endpoint ("address:port") dialling its publisher at
// tcp://address:(SocketPort+rank), unless one runs. It is cheap when one does.
func (s *Subscribers) Ensure(endpoint, address string, rank int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.subs[endpoint] != nil {
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	sb := &sub{cancel: cancel, done: make(chan struct{})}
	s.subs[endpoint] = sb
	dial := "tcp://" + joinHostPort(address, s.cfg.SocketPort+rank)
	go func() {
		defer close(sb.done)
		s.run(ctx, SourceKey{Endpoint: endpoint, Rank: rank}, dial)
	}()
}

// Has reports whether a subscriber runs for endpoint.
func (s *Subscribers) Has(endpoint string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.subs[endpoint] != nil
}

// Remove stops endpoint's subscriber and forgets what it held.
func (s *Subscribers) Remove(endpoint string, rank int) {
	s.mu.Lock()
	sb := s.subs[endpoint]
	delete(s.subs, endpoint)
	s.mu.Unlock()
	if sb != nil {
		sb.cancel()
	}
	src := SourceKey{Endpoint: endpoint, Rank: rank}
	s.forgetSeq(src)
	if s.ix.Holds(src) > 0 && s.m != nil {
		s.m.Resyncs.WithLabelValues(ResyncRemoved).Inc()
	}
	s.ix.Forget(src)
}

func joinHostPort(host string, port int) string {
	if len(host) > 0 && host[0] != '[' && containsColon(host) {
		return "[" + host + "]:" + strconv.Itoa(port)
	}
	return host + ":" + strconv.Itoa(port)
}

func containsColon(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == ':' {
			return true
		}
	}
	return false
}

func (s *Subscribers) state(state string, delta float64) {
	if s.m != nil {
		s.m.Subscribers.WithLabelValues(state).Add(delta)
	}
}

// run keeps one dialled SUB socket alive: dial, subscribe, read until an error, drop what the
// stream said (it can no longer be trusted), wait, again.
func (s *Subscribers) run(ctx context.Context, src SourceKey, dial string) {
	logger := s.log.WithValues("endpoint", src.Endpoint, "publisher", dial)
	first := true
	for ctx.Err() == nil {
		if !first {
			if s.m != nil {
				s.m.Reconnects.Inc()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(s.cfg.ReconnectDelay):
			}
		}
		first = false
		s.state("connecting", 1)
		sock := zmq4.NewSub(ctx, zmq4.WithDialerRetry(250*time.Millisecond), zmq4.WithDialerMaxRetries(4), zmq4.WithAutomaticReconnect(false))
		err := sock.Dial(dial)
		if err == nil {
			err = sock.SetOption(zmq4.OptionSubscribe, s.cfg.TopicFilter)
		}
		s.state("connecting", -1)
		if err != nil {
			logger.V(2).Info("KV-event publisher not reachable; retrying", "err", err.Error())
			_ = sock.Close()
			continue
		}
		logger.V(1).Info("KV-event subscriber connected")
		s.state("connected", 1)
		for {
			msg, err := sock.Recv()
			if err != nil {
				if ctx.Err() == nil {
					logger.Info("KV-event stream broken; the endpoint's blocks are dropped until it publishes again", "err", err.Error())
				}
				break
			}
			s.handle(src, false, msg.Frames)
		}
		s.state("connected", -1)
		_ = sock.Close()
		// Whatever happened while the stream was down is unknown: never score stale blocks.
		s.resync(src, ResyncDisconnect)
	}
}

// StartCentral binds one SUB socket at the configured endpoint; engines connect to it. It
// returns once the socket is bound (or failed to).
func (s *Subscribers) StartCentral() error {
	sock := zmq4.NewSub(s.ctx, zmq4.WithAutomaticReconnect(false))
	if err := sock.Listen(s.cfg.ZMQEndpoint); err != nil {
		_ = sock.Close()
		return fmt.Errorf("kvEventsConfig.zmqEndpoint %s: %w", s.cfg.ZMQEndpoint, err)
	}
	if err := sock.SetOption(zmq4.OptionSubscribe, s.cfg.TopicFilter); err != nil {
		_ = sock.Close()
		return fmt.Errorf("kvEventsConfig.topicFilter %q: %w", s.cfg.TopicFilter, err)
	}
	s.state("connected", 1)
	go func() {
		defer s.state("connected", -1)
		defer sock.Close()
		for s.ctx.Err() == nil {
			msg, err := sock.Recv()
			if err != nil {
				// zmq4 reports a departed publisher as io.EOF; the socket stays bound. Which
				// publisher left is not said: its restart shows as a sequence reset.
				if s.ctx.Err() != nil {
					return
				}
				time.Sleep(10 * time.Millisecond)
				continue
			}
			s.handle(SourceKey{}, true, msg.Frames)
		}
	}()
	return nil
}

// handle applies one message [topic, seq (8 bytes big-endian), payload]. In central mode the
// source comes from the topic and the batch's rank.
func (s *Subscribers) handle(src SourceKey, central bool, frames [][]byte) {
	if len(frames) != 3 || len(frames[1]) < 8 {
		s.count(ResultMalformed)
		return
	}
	seq := binary.BigEndian.Uint64(frames[1][len(frames[1])-8:])
	batch, err := DecodeBatch(frames[2])
	if central {
		ep, _ := EndpointOf(string(frames[0]))
		src = SourceKey{Endpoint: ep, Rank: batch.DPRank}
	}
	s.Deliver(src, seq, batch, err)
}

// Deliver applies a decoded batch of src with sequence number seq (err: the decoding error),
// enforcing the stream rules: a repeated sequence number is dropped; a jump forward (messages
// lost) or backward (the publisher restarted) drops everything src held before the batch is
// applied; a batch that cannot be decoded drops everything src held (what it said is lost).
func (s *Subscribers) Deliver(src SourceKey, seq uint64, batch Batch, err error) {
	if err != nil {
		s.count(ResultMalformed)
		s.log.V(2).Info("malformed KV-event batch; the endpoint's blocks are dropped", "endpoint", src.Endpoint, "err", err.Error())
		s.resync(src, ResyncGap)
		s.setSeq(src, seq+1)
		return
	}
	s.seqMu.Lock()
	next, known := s.seqs[src]
	full := !known && len(s.seqs) >= MaxSources
	s.seqMu.Unlock()
	if full {
		// A central socket anyone can reach must not grow without bound with invented topics.
		s.count(ResultMalformed)
		return
	}
	switch {
	case known && next > 0 && seq == next-1:
		s.count(ResultDuplicate)
		return
	case known && next > 0 && seq < next-1:
		s.resync(src, ResyncReset)
	case known && next > 0 && seq > next:
		if s.m != nil {
			s.m.Gaps.Inc()
		}
		s.resync(src, ResyncGap)
	}
	s.setSeq(src, seq+1)
	s.ix.Apply(src, batch.Events)
	s.count(ResultApplied)
	if s.m != nil && batch.TS > 0 {
		if lag := time.Since(time.Unix(0, int64(batch.TS*1e9))).Seconds(); lag >= 0 && lag < 3600 {
			s.m.Lag.Observe(lag)
		}
	}
}

func (s *Subscribers) setSeq(src SourceKey, next uint64) {
	s.seqMu.Lock()
	s.seqs[src] = next
	s.seqMu.Unlock()
}

func (s *Subscribers) forgetSeq(src SourceKey) {
	s.seqMu.Lock()
	delete(s.seqs, src)
	s.seqMu.Unlock()
}

// resync drops what src held and its sequence state.
func (s *Subscribers) resync(src SourceKey, reason string) {
	s.forgetSeq(src)
	if s.ix.Holds(src) > 0 && s.m != nil {
		s.m.Resyncs.WithLabelValues(reason).Inc()
	}
	s.ix.Clear(src)
}

func (s *Subscribers) count(result string) {
	if s.m != nil {
		s.m.Messages.WithLabelValues(result).Inc()
	}
}
