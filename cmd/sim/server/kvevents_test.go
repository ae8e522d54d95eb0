package server

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-zeromq/zmq4"

	"github.com/pdgate/pdgate/cmd/sim/kvcache"
	"github.com/pdgate/pdgate/plugins/precise/kvevents"
	kvwire "github.com/pdgate/pdgate/plugins/wire/kvevents"
	"github.com/pdgate/pdgate/test/testsupport"
)

func TestKVEventsOf(t *testing.T) {
	hashes := []uint64{11, 12, 13}
	tokens := []uint32{1, 2, 3, 4, 5, 6}
	tests := []struct {
		name string
		ops  []kvcache.Op
		want []kvwire.Event
	}{
		{name: "all new: one store, no parent", ops: []kvcache.Op{{Added: true, Index: 0}, {Added: true, Index: 1}, {Added: true, Index: 2}},
			want: []kvwire.Event{{Kind: kvwire.KindStored, Hashes: []uint64{11, 12, 13}, Tokens: tokens, BlockSize: 2, Medium: "GPU"}}},
		{name: "prefix cached: the store chains to it", ops: []kvcache.Op{{Added: true, Index: 2}},
			want: []kvwire.Event{{Kind: kvwire.KindStored, Hashes: []uint64{13}, Parent: 12, HasParent: true, Tokens: tokens[4:], BlockSize: 2, Medium: "GPU"}}},
		{name: "eviction between stores keeps the order", ops: []kvcache.Op{{Added: true, Index: 0}, {Evicted: 99}, {Added: true, Index: 1}},
			want: []kvwire.Event{
				{Kind: kvwire.KindStored, Hashes: []uint64{11}, Tokens: tokens[:2], BlockSize: 2, Medium: "GPU"},
				{Kind: kvwire.KindRemoved, Hashes: []uint64{99}, Medium: "GPU"},
				{Kind: kvwire.KindStored, Hashes: []uint64{12}, Parent: 11, HasParent: true, Tokens: tokens[2:4], BlockSize: 2, Medium: "GPU"},
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := kvEventsOf(tc.ops, hashes, tokens, 2); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestBindsKVEvents(t *testing.T) {
	tests := []struct {
		ep, host string
		want     bool
	}{
		{"tcp://*:5557", "127.0.0.1", true},
		{"tcp://[::]:5557", "127.0.0.1", true},
		{"ipc:///tmp/kv", "127.0.0.1", true},
		{"tcp://127.0.0.2:5557", "127.0.0.2", true},
		{"tcp://0.0.0.0:5557", "127.0.0.1", false}, // vLLM connects to 0.0.0.0
		{"tcp://epp:5557", "127.0.0.1", false},
		{"tcp://{host}:5557", "127.0.10.4", true},
	}
	for _, tc := range tests {
		if got := bindsKVEvents(expandHost(tc.ep, tc.host), tc.host); got != tc.want {
			t.Errorf("bindsKVEvents(%q, %q) = %v, want %v", tc.ep, tc.host, got, tc.want)
		}
	}
}

// A real simulator publishes its prefix cache over ZeroMQ: a subscriber's index learns the
// prompt's blocks after a request, and forgets them when the cache evicts them.
func TestSimPublishesKVEvents(t *testing.T) {
	clk := newPump(t)
	zport := testsupport.FreePort(t)
	// 8 blocks of 16 tokens of capacity: the second prompt of 5 blocks evicts two of the
	// first's blocks, its tail (the cache keeps a prefix's head longest, as vLLM does).
	in := startSim(t, clk, Options{Dialect: DialectVLLM, Role: RoleCombined, KVCapacityTokens: 128,
		KVEventsEndpoint: "tcp://*:" + strconv.Itoa(zport), Model: "m"})
	ix, src := subscribeKVEvents(t, zport, in.Addr())

	promptB := strings.Repeat("b", 4*16*5) // 80 tokens of 4 bytes: 5 blocks
	keys := func(p string) []uint64 {
		return ix.Keyer().RequestKeys(nil, "", bytesToTokens(nil, []byte(p)), "", 0)
	}
	matched := func(p string) int { return ix.Lookup(keys(p), []kvevents.SourceKey{src})[0].Blocks }
	deadline := time.Now().Add(15 * time.Second)
	// The subscriber may join after the first batches (ZeroMQ's slow joiner), and an engine
	// reports a block once: each try caches a fresh prompt.
	var promptA string
	for try := 0; ; try++ {
		promptA = fmt.Sprintf("%04d", try) + strings.Repeat("a", 4*16*5-4)
		if r := post(t, "http://"+in.Addr()+"/v1/completions", map[string]any{"model": "m", "prompt": promptA, "max_tokens": 1}, nil); r.status != 200 {
			t.Fatalf("completion: %d %s", r.status, r.raw)
		}
		time.Sleep(100 * time.Millisecond)
		if matched(promptA) == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("blocks of prompt A never arrived (index holds %d)", ix.Holds(src))
		}
	}
	if r := post(t, "http://"+in.Addr()+"/v1/completions", map[string]any{"model": "m", "prompt": promptB, "max_tokens": 1}, nil); r.status != 200 {
		t.Fatalf("completion: %d %s", r.status, r.raw)
	}
	for matched(promptB) != 5 || matched(promptA) != 3 {
		if time.Now().After(deadline) {
			t.Fatalf("after eviction: A %d blocks, B %d blocks (want 3, 5)", matched(promptA), matched(promptB))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Something other than a subscriber answering on the port (another process that took it
// first) ends the ZMTP handshake; the simulator keeps dialling, as libzmq does, and publishes
// to the subscriber that binds the port afterwards.
func TestSimRedialsAfterAFailedHandshake(t *testing.T) {
	holder := testsupport.NewDropper(t, "127.0.0.1:0")
	port := strconv.Itoa(holder.Port())
	// A host other than the endpoint's, so the simulator connects rather than binds.
	in := startSim(t, newPump(t), Options{Dialect: DialectVLLM, Role: RoleCombined, Model: "m",
		KVEventsEndpoint: "tcp://127.0.0.1:" + port, Host: "127.0.0.3"})
	testsupport.Eventually(t, 10*time.Second, "the simulator dialling the KV-event endpoint", func() bool { return holder.Hits() > 0 })
	_ = holder.Close()

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sub := zmq4.NewSub(ctx)
	t.Cleanup(func() { _ = sub.Close() })
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	if err := sub.Listen("tcp://127.0.0.1:" + port); err != nil {
		t.Fatal(err)
	}
	got := make(chan zmq4.Msg, 1)
	go func() {
		if msg, err := sub.Recv(); err == nil {
			got <- msg
		}
	}()
	// A subscription reaches the publisher after the connection (ZeroMQ's slow joiner), and
	// a publisher sends each batch once: each try caches a fresh prompt.
	deadline := time.Now().Add(15 * time.Second)
	for try := 0; ; try++ {
		prompt := fmt.Sprintf("%04d", try) + strings.Repeat("a", 4*16*2)
		if r := post(t, "http://"+in.Addr()+"/v1/completions", map[string]any{"model": "m", "prompt": prompt, "max_tokens": 1}, nil); r.status != 200 {
			t.Fatalf("completion: %d %s", r.status, r.raw)
		}
		select {
		case msg := <-got:
			if len(msg.Frames) != 3 || !strings.HasPrefix(string(msg.Frames[0]), "kv@127.0.0.3") {
				t.Fatalf("frames %q: want [topic, seq, batch] on the simulator's topic", msg.Frames)
			}
			return
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no KV-event batch reached the subscriber that bound after the failed handshake")
		}
	}
}

// A decode instance reports the blocks it holds after a KV handoff (the prefill leg ran on
// another instance): the EPP learns that the decode pod now caches the prompt.
func TestDecodeReportsBlocksAfterHandoff(t *testing.T) {
	clk := newPump(t)
	zport := testsupport.FreePort(t)
	p := startSim(t, clk, Options{Dialect: DialectVLLM, Role: RolePrefill})
	d := startSim(t, clk, Options{Dialect: DialectVLLM, Role: RoleDecode, KVEventsEndpoint: "tcp://127.0.0.1:" + strconv.Itoa(zport)})
	ix, src := subscribeKVEvents(t, zport, d.Addr())
	deadline := time.Now().Add(15 * time.Second)
	for try := 0; ix.Holds(src) == 0; try++ {
		if time.Now().After(deadline) {
			t.Fatal("the decode instance reported no blocks after handoffs")
		}
		prompt := fmt.Sprintf("try %d: %s", try, longPrompt)
		r := post(t, "http://"+p.Addr()+"/v1/chat/completions", chat(prompt, 1, map[string]any{"kv_transfer_params": prefillParams}), nil)
		if r.status != 200 {
			t.Fatalf("prefill leg: %d %s", r.status, r.raw)
		}
		kv := r.body["kv_transfer_params"].(map[string]any)
		if r := post(t, "http://"+d.Addr()+"/v1/chat/completions", chat(prompt, 2, map[string]any{"kv_transfer_params": kv}), nil); r.status != 200 {
			t.Fatalf("decode leg: %d %s", r.status, r.raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// subscribeKVEvents indexes, as the EPP's precise prefix-cache producer does, the KV events the
// simulator at addr publishes on zport, until the test ends.
func subscribeKVEvents(t *testing.T, zport int, addr string) (*kvevents.Index, kvevents.SourceKey) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ix := kvevents.NewIndex(kvevents.IndexConfig{BlockSize: 16}, nil)
	subs := kvevents.NewSubscribers(ctx, kvevents.SubscriberConfig{TopicFilter: "kv@", SocketPort: zport, ReconnectDelay: 100 * time.Millisecond}, ix, nil, logr.Discard())
	src := kvevents.SourceKey{Endpoint: addr}
	subs.Ensure(src.Endpoint, "127.0.0.1", 0)
	return ix, src
}
