package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-zeromq/zmq4"

	"github.com/pdgate/pdgate/cmd/sim/kvcache"
	"github.com/pdgate/pdgate/plugins/wire/kvevents"
)

// KV-event formats (--kv-events-format).
const (
	KVEventsFormatMap   = "map"   // vLLM >= v0.24: events are maps with a "type" key
	KVEventsFormatArray = "array" // vLLM <= v0.23 and SGLang: tagged arrays
)

// kvEventsRedialInterval is how long a publisher waits between connection attempts, as
// zmq4's own retry of a refused dial.
const kvEventsRedialInterval = time.Second

// kvPublisher publishes the instance's KV-cache changes as vLLM does: a ZeroMQ PUB socket
// sending [topic, seq (8 bytes big-endian, from 0), msgpack batch], one batch per change of
// the prefix cache (a "scheduler step"), never an empty one. The socket binds when the
// endpoint contains "*" or "::" or is ipc:// (vLLM's rule) and connects otherwise.
type kvPublisher struct {
	sock   zmq4.Socket
	topic  []byte
	format kvevents.EventFormat
	// seqStart is the first sequence number.
	seqStart uint64
	ch       chan []kvevents.Event
	done     chan struct{}
	cancel   context.CancelFunc
	// connected is set once the socket has a subscriber (always when it binds).
	connected atomic.Bool
	log       logr.Logger
	m         *simMetrics
}

// bindsKVEvents is vLLM's rule (bind when the endpoint contains "*" or "::" or is ipc://,
// connect otherwise) plus one for simulators sharing a machine: an endpoint on the instance's
// own --host binds, as a pod's wildcard bind covers only the pod's own address.
func bindsKVEvents(ep, host string) bool {
	if strings.Contains(ep, "*") || strings.Contains(ep, "::") || strings.HasPrefix(ep, "ipc://") {
		return true
	}
	h, _, err := net.SplitHostPort(strings.TrimPrefix(ep, "tcp://"))
	return err == nil && h == host
}

// expandHost replaces "{host}" in a KV-events endpoint with the instance's own address (one
// topology file for several simulators on loopback aliases).
func expandHost(ep, host string) string { return strings.ReplaceAll(ep, "{host}", host) }

func validKVEventsOptions(o *Options) error {
	switch o.KVEventsFormat {
	case "", KVEventsFormatMap, KVEventsFormatArray:
	default:
		return fmt.Errorf("kvEventsFormat must be map or array, got %q", o.KVEventsFormat)
	}
	if e := o.KVEventsEndpoint; e != "" && !strings.HasPrefix(e, "tcp://") && !strings.HasPrefix(e, "ipc://") {
		return fmt.Errorf("kvEventsEndpoint must be tcp://host:port or ipc://path, got %q", e)
	}
	return nil
}

// newKVPublisher starts the publisher of in (nil when KV events are off).
func newKVPublisher(in *Instance) (*kvPublisher, error) {
	o := in.opts
	if o.KVEventsEndpoint == "" {
		return nil, nil
	}
	o.KVEventsEndpoint = expandHost(o.KVEventsEndpoint, o.Host)
	topic := o.KVEventsTopic
	if topic == "" {
		topic = "kv@" + in.advertised() + "@" + o.Model
	}
	format := kvevents.FormatMap
	if o.KVEventsFormat == KVEventsFormatArray {
		format = kvevents.FormatArray
	}
	ctx, cancel := context.WithCancel(context.Background())
	sock := zmq4.NewPub(ctx, zmq4.WithDialerMaxRetries(-1), zmq4.WithDialerRetry(time.Second))
	ep := o.KVEventsEndpoint
	p := &kvPublisher{sock: sock, topic: []byte(topic), format: format, seqStart: o.KVEventsSeqStart, ch: make(chan []kvevents.Event, 4096),
		done: make(chan struct{}), cancel: cancel, log: in.log.WithValues("kvEvents", ep, "topic", topic), m: in.m}
	if bindsKVEvents(ep, o.Host) {
		if err := sock.Listen(strings.Replace(ep, "*", "0.0.0.0", 1)); err != nil {
			cancel()
			_ = sock.Close()
			return nil, fmt.Errorf("kvEventsEndpoint %s: %w", ep, err)
		}
		p.connected.Store(true)
		go p.run()
	} else {
		// Connecting waits for the subscriber (zmq4 dials synchronously; libzmq connects in
		// the background): batches queue meanwhile, and the instance serves from the start.
		go p.dialUntilConnected(ctx, ep)
	}
	// A restarted engine starts from an empty cache: say so first (unless told to behave as
	// vLLM and SGLang, which publish nothing at start).
	if !o.KVEventsNoStartClear {
		p.publish([]kvevents.Event{{Kind: kvevents.KindCleared}})
	}
	p.log.Info("publishing KV-cache events")
	return p, nil
}

// dialUntilConnected connects to the subscriber and then publishes. zmq4 retries a refused
// connection itself but gives up on one whose ZMTP greeting fails (something other than a
// subscriber answered on the port, or it closed mid-handshake); libzmq, which the real
// engines use, reconnects forever, so the simulator keeps dialling too until it is closed.
func (p *kvPublisher) dialUntilConnected(ctx context.Context, ep string) {
	for attempt := 0; ; attempt++ {
		err := p.sock.Dial(ep)
		if err == nil {
			p.connected.Store(true)
			p.run()
			return
		}
		if ctx.Err() != nil {
			for range p.ch {
			}
			close(p.done)
			return
		}
		if attempt == 0 {
			p.log.Error(err, "KV-event subscriber not reachable; retrying every second")
		} else {
			p.log.V(1).Info("KV-event subscriber still not reachable", "attempt", attempt+1, "err", err.Error())
		}
		select {
		case <-ctx.Done():
		case <-time.After(kvEventsRedialInterval):
		}
	}
}

func (p *kvPublisher) run() {
	defer close(p.done)
	seq := p.seqStart
	for events := range p.ch {
		payload, err := kvevents.EncodeBatch(kvevents.Batch{TS: float64(time.Now().UnixNano()) / 1e9, Events: events}, p.format)
		if err != nil {
			p.log.Error(err, "encoding a KV-event batch")
			continue
		}
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], seq)
		seq++
		if err := p.sock.Send(zmq4.NewMsgFrom(p.topic, b[:], payload)); err != nil {
			p.log.V(1).Info("KV-event batch not sent", "err", err.Error())
		}
	}
}

// publish queues one batch; when the queue is full the batch is dropped and the sequence
// number it would have had is never used, so subscribers see no gap they could not see
// anyway (as a libzmq PUB past its high-water mark).
func (p *kvPublisher) publish(events []kvevents.Event) {
	if p == nil || len(events) == 0 {
		return
	}
	select {
	case p.ch <- events:
	default:
		p.log.V(1).Info("KV-event queue full; batch dropped")
	}
}

func (p *kvPublisher) close() {
	if p == nil {
		return
	}
	close(p.ch)
	if !p.connected.Load() {
		p.cancel() // a publisher still dialling has no one to flush its queue to
	}
	<-p.done
	p.cancel()
	_ = p.sock.Close()
}

// kvEventsOf turns the cache changes of one insert of a prompt into vLLM's events
// (kvcache.Events, which the fleet simulator of pdgate bench sim uses too).
func kvEventsOf(ops []kvcache.Op, hashes []uint64, tokens []uint32, blockSize int) []kvevents.Event {
	return kvcache.Events(ops, hashes, tokens, blockSize)
}

// cacheInsert records a prompt's blocks in the prefix cache and publishes what changed.
func (in *Instance) cacheInsert(hashes []uint64, tokens []uint32) {
	if in.kv == nil {
		in.cache.Insert(hashes)
		return
	}
	ops := in.cache.InsertObserved(hashes)
	in.kv.publish(kvEventsOf(ops, hashes, tokens, in.prof.BlockSize))
}
