package kvevents

import (
	"context"
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
	// Resolve, in central mode, maps the endpoint a topic names to the pool endpoint whose
	// source it is (see Resolution). Nil takes the topic's endpoint as the source, unchecked.
	Resolve func(topicEndpoint string, rank int) (SourceKey, Resolution)
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
	seqs   map[SourceKey]streamState
	unres  unresolvedLog
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
	s := &Subscribers{ctx: ctx, cfg: cfg, ix: ix, m: m, log: logger, subs: map[string]*sub{}, seqs: map[SourceKey]streamState{}}
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
	s.Forget(SourceKey{Endpoint: endpoint, Rank: rank}, ResyncRemoved)
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
