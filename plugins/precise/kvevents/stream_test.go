package kvevents

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"

	kvwire "github.com/pdgate/pdgate/plugins/wire/kvevents"
)

// frames builds one wire message as vLLM and SGLang publish it: [topic, seq (8 bytes
// big-endian), msgpack payload].
func frames(t *testing.T, topic string, seq uint64, b kvwire.Batch, format kvwire.EventFormat) [][]byte {
	t.Helper()
	payload, err := kvwire.EncodeBatch(b, format)
	if err != nil {
		t.Fatal(err)
	}
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], seq)
	return [][]byte{[]byte(topic), s[:], payload}
}

// message is one message of a scripted stream.
type message struct {
	topic string
	seq   uint64
	ts    float64
	base  uint64 // the stored block's engine hash (distinct per publisher process)
	first int    // the block's first token
	junk  bool   // an undecodable payload
}

func TestStreamRestartRules(t *testing.T) {
	const topic = "kv@10.0.0.1:8000@m"
	tests := []struct {
		name       string
		msgs       []message
		wantHeld   []uint64 // engine hashes held at the end, in any order
		wantResult map[string]float64
		wantResync map[string]float64
	}{
		{
			name:       "a repeated message is a duplicate",
			msgs:       []message{{topic: topic, seq: 0, ts: 10, base: 100, first: 1}, {topic: topic, seq: 0, ts: 10, base: 100, first: 1}},
			wantHeld:   []uint64{100},
			wantResult: map[string]float64{ResultApplied: 1, ResultDuplicate: 1},
		},
		{
			// vLLM counts from 0 per process: the old process sent one batch (seq 0), the
			// restarted one's first batch is seq 0 again, with other bytes.
			name:       "a restarted publisher reusing the last sequence number is not a duplicate",
			msgs:       []message{{topic: topic, seq: 0, ts: 10, base: 100, first: 1}, {topic: topic, seq: 0, ts: 20, base: 900, first: 1}},
			wantHeld:   []uint64{900},
			wantResult: map[string]float64{ResultApplied: 2},
			wantResync: map[string]float64{ResyncRestart: 1},
		},
		{
			name:       "a publisher counting from 1 restarting after one batch",
			msgs:       []message{{topic: topic, seq: 1, ts: 10, base: 100, first: 1}, {topic: topic, seq: 1, ts: 20, base: 900, first: 1}},
			wantHeld:   []uint64{900},
			wantResult: map[string]float64{ResultApplied: 2},
			wantResync: map[string]float64{ResyncRestart: 1},
		},
		{
			name:       "a sequence going back is a restart",
			msgs:       []message{{topic: topic, seq: 5, ts: 10, base: 100, first: 1}, {topic: topic, seq: 0, ts: 20, base: 900, first: 1}},
			wantHeld:   []uint64{900},
			wantResult: map[string]float64{ResultApplied: 2},
			wantResync: map[string]float64{ResyncReset: 1},
		},
		{
			name:       "a ts going back with the next sequence number is a new publisher",
			msgs:       []message{{topic: topic, seq: 0, ts: 100, base: 100, first: 1}, {topic: topic, seq: 1, ts: 50, base: 900, first: 1}},
			wantHeld:   []uint64{900},
			wantResult: map[string]float64{ResultApplied: 2},
			wantResync: map[string]float64{ResyncRestart: 1},
		},
		{
			name:       "a small clock step is not a restart",
			msgs:       []message{{topic: topic, seq: 0, ts: 100, base: 100, first: 1}, {topic: topic, seq: 1, ts: 99.8, base: 200, first: 17}},
			wantHeld:   []uint64{100, 200},
			wantResult: map[string]float64{ResultApplied: 2},
		},
		{
			name:       "an undecodable batch of a known source drops what it held",
			msgs:       []message{{topic: topic, seq: 0, ts: 10, base: 100, first: 1}, {topic: topic, seq: 1, junk: true}},
			wantResult: map[string]float64{ResultApplied: 1, ResultMalformed: 1},
			wantResync: map[string]float64{ResyncGap: 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMetrics()
			ix := NewIndex(IndexConfig{BlockSize: 16}, m)
			s := NewSubscribers(context.Background(), SubscriberConfig{}, ix, m, logr.Discard())
			for _, msg := range tc.msgs {
				f := frames(t, msg.topic, msg.seq, kvwire.Batch{TS: msg.ts, Events: []kvwire.Event{stored(seqTokens(msg.first, 16), 16, msg.base, 0, "GPU")}}, kvwire.FormatArray)
				if msg.junk {
					f[2] = []byte{0xc1}
				}
				s.handle(SourceKey{}, true, f)
			}
			src := SourceKey{Endpoint: "10.0.0.1:8000"}
			if got := ix.Holds(src); got != len(tc.wantHeld) {
				t.Fatalf("holds %d blocks, want %d", got, len(tc.wantHeld))
			}
			for _, h := range tc.wantHeld {
				if !holdsEngineBlock(ix, src, h) {
					t.Errorf("engine block %d not held", h)
				}
			}
			for result, want := range tc.wantResult {
				if got := testutil.ToFloat64(m.Messages.WithLabelValues(result)); got != want {
					t.Errorf("messages{%s} = %v, want %v", result, got, want)
				}
			}
			for _, reason := range []string{ResyncRestart, ResyncReset, ResyncGap} {
				if got := testutil.ToFloat64(m.Resyncs.WithLabelValues(reason)); got != tc.wantResync[reason] {
					t.Errorf("resyncs{%s} = %v, want %v", reason, got, tc.wantResync[reason])
				}
			}
		})
	}
}

func holdsEngineBlock(ix *Index, src SourceKey, engineHash uint64) bool {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	s := ix.srcs[src]
	return s != nil && s.blocks[engineHash+1] != nil // stored() numbers a batch's blocks from base+1
}

// A pool of two pods on one IP (different ports) and one alone, as a resolver sees it.
func testResolver(topicEndpoint string, rank int) (SourceKey, Resolution) {
	switch topicEndpoint {
	case "10.0.0.1:8000", "10.0.0.1:8001", "10.0.0.2:8000":
		return SourceKey{Endpoint: topicEndpoint, Rank: rank}, ResolvedExact
	case "10.0.0.1":
		return SourceKey{}, Ambiguous
	case "10.0.0.2", "10.0.0.2:5557":
		return SourceKey{Endpoint: "10.0.0.2:8000", Rank: rank}, ResolvedByAddress
	}
	return SourceKey{}, Unmatched
}

func TestCentralSourcesAreResolvedAgainstThePool(t *testing.T) {
	tests := []struct {
		name       string
		topics     []string
		wantHeld   map[string]int // source endpoint → blocks
		wantResult map[string]float64
	}{
		{"a port-less topic maps to the one endpoint at the address", []string{"kv@10.0.0.2@m"},
			map[string]int{"10.0.0.2:8000": 1}, map[string]float64{ResultApplied: 1}},
		{"a topic naming another port maps by address", []string{"kv@10.0.0.2:5557@m"},
			map[string]int{"10.0.0.2:8000": 1}, map[string]float64{ResultApplied: 1}},
		{"two pods on one IP publishing without a port are refused, not merged", []string{"kv@10.0.0.1@m", "kv@10.0.0.1@m"},
			map[string]int{"10.0.0.1": 0, "10.0.0.1:8000": 0}, map[string]float64{ResultAmbiguous: 2, ResultApplied: 0, ResultDuplicate: 0}},
		{"two pods on one IP naming their ports are two streams", []string{"kv@10.0.0.1:8000@m", "kv@10.0.0.1:8001@m"},
			map[string]int{"10.0.0.1:8000": 1, "10.0.0.1:8001": 1}, map[string]float64{ResultApplied: 2}},
		{"a topic naming no endpoint is counted and kept nowhere", []string{"kv@10.9.9.9:8000@m"},
			map[string]int{"10.9.9.9:8000": 0}, map[string]float64{ResultUnmatched: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMetrics()
			ix := NewIndex(IndexConfig{BlockSize: 16}, m)
			s := NewSubscribers(context.Background(), SubscriberConfig{Resolve: testResolver}, ix, m, logr.Discard())
			for i, topic := range tc.topics {
				s.handle(SourceKey{}, true, frames(t, topic, 0, kvwire.Batch{TS: 1, Events: []kvwire.Event{stored(seqTokens(1, 16), 16, uint64(100+i), 0, "GPU")}}, kvwire.FormatMap))
			}
			for ep, want := range tc.wantHeld {
				if got := ix.Holds(SourceKey{Endpoint: ep}); got != want {
					t.Errorf("%s holds %d blocks, want %d", ep, got, want)
				}
			}
			for result, want := range tc.wantResult {
				if got := testutil.ToFloat64(m.Messages.WithLabelValues(result)); got != want {
					t.Errorf("messages{%s} = %v, want %v", result, got, want)
				}
			}
			if n := len(s.seqs); n != len(ix.Sources()) {
				t.Errorf("%d stream states for %d indexed sources: refused messages left state", n, len(ix.Sources()))
			}
		})
	}
}

// A flood of invented topics on the central socket, undecodable or not, must not fill the
// source table: a valid engine publishing afterwards is indexed.
func TestFloodOfJunkTopicsLocksNobodyOut(t *testing.T) {
	for _, resolver := range []struct {
		name    string
		resolve func(string, int) (SourceKey, Resolution)
	}{{"no pool known", nil}, {"pool known", testResolver}} {
		t.Run(resolver.name, func(t *testing.T) {
			m := newMetrics()
			ix := NewIndex(IndexConfig{BlockSize: 16}, m)
			s := NewSubscribers(context.Background(), SubscriberConfig{Resolve: resolver.resolve}, ix, m, logr.Discard())
			for i := 0; i < MaxSources+500; i++ {
				f := frames(t, fmt.Sprintf("kv@junk-%d@m", i), 0, kvwire.Batch{}, kvwire.FormatArray)
				f[2] = []byte{0xc1} // never decodes
				s.handle(SourceKey{}, true, f)
			}
			if n := len(s.seqs); n != 0 {
				t.Fatalf("junk left %d stream states", n)
			}
			s.handle(SourceKey{}, true, frames(t, "kv@10.0.0.2@m", 0, kvwire.Batch{TS: 1, Events: []kvwire.Event{stored(seqTokens(1, 16), 16, 7, 0, "GPU")}}, kvwire.FormatArray))
			want := SourceKey{Endpoint: "10.0.0.2:8000"}
			if resolver.resolve == nil {
				want = SourceKey{Endpoint: "10.0.0.2"}
			}
			if ix.Holds(want) != 1 {
				t.Fatalf("a valid engine was refused after the flood (over_limit %v)", testutil.ToFloat64(m.Messages.WithLabelValues(ResultOverLimit)))
			}
		})
	}
}

// FuzzSubscriberPath drives the central socket's whole message path (topic resolution, stream
// rules, decoding, index) with arbitrary frames over many topics: nothing panics, and only
// sources whose batches were applied keep state.
func FuzzSubscriberPath(f *testing.F) {
	ok, _ := kvwire.EncodeBatch(kvwire.Batch{TS: 1, Events: []kvwire.Event{stored(seqTokens(1, 32), 16, 100, 0, "GPU")}}, kvwire.FormatArray)
	okMap, _ := kvwire.EncodeBatch(kvwire.Batch{TS: 2, DPRank: 1, HasRank: true, Events: []kvwire.Event{stored(seqTokens(1, 16), 16, 300, 0, "CPU")}}, kvwire.FormatMap)
	f.Add("kv@10.0.0.2@m", uint64(0), ok, uint8(3))
	f.Add("kv@10.0.0.1:8000@m", uint64(1), okMap, uint8(40))
	f.Add("kv@10.0.0.1@m", uint64(7), []byte{0xc1}, uint8(200))
	f.Fuzz(func(t *testing.T, topic string, seq uint64, payload []byte, repeat uint8) {
		m := newMetrics()
		ix := NewIndex(IndexConfig{BlockSize: 16, MaxBlocksPerEndpoint: 64, MaxKeys: 256}, m)
		s := NewSubscribers(context.Background(), SubscriberConfig{Resolve: testResolver}, ix, m, logr.Discard())
		var sb [8]byte
		for i := 0; i < int(repeat)%64+1; i++ {
			binary.BigEndian.PutUint64(sb[:], seq+uint64(i%3))
			tp := topic
			if i%2 == 1 {
				tp = fmt.Sprintf("%s-%d", topic, i)
			}
			s.handle(SourceKey{}, true, [][]byte{[]byte(tp), sb[:], payload})
		}
		if len(s.seqs) > len(ix.Sources()) {
			t.Fatalf("%d stream states for %d indexed sources", len(s.seqs), len(ix.Sources()))
		}
		for src := range s.seqs {
			if _, how := testResolver(src.Endpoint, src.Rank); !how.Resolved() {
				t.Fatalf("state kept for a source no resolver accepts: %+v", src)
			}
		}
	})
}
