package epp

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/pdgate/pdgate/cmd/pdgate-bench/floor"
)

// TestStreamedCompletion: a streamed answer is one token event per generated token, then one
// event with the usage, then [DONE], each a server-sent event whose data is what vLLM sends.
func TestStreamedCompletion(t *testing.T) {
	events := StreamedCompletion(3, 250, 5)
	if len(events) != 7 || string(events[6]) != "data: [DONE]\n\n" {
		t.Fatalf("%d events, last %q", len(events), events[len(events)-1])
	}
	for i, e := range events[:6] {
		data, ok := strings.CutPrefix(string(e), "data: ")
		if !ok || !strings.HasSuffix(data, "\n\n") {
			t.Fatalf("event %d is not one data line: %q", i, e)
		}
		var chunk struct {
			Object  string            `json:"object"`
			Choices []json.RawMessage `json:"choices"`
			Usage   *struct {
				Prompt     int `json:"prompt_tokens"`
				Completion int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil || chunk.Object != "chat.completion.chunk" {
			t.Fatalf("event %d: %v, %+v", i, err, chunk)
		}
		if last := i == 5; last != (chunk.Usage != nil) || last != (len(chunk.Choices) == 0) {
			t.Fatalf("event %d: usage %+v, %d choices", i, chunk.Usage, len(chunk.Choices))
		}
	}
	if !strings.Contains(string(ChatStreamBody(1<<10, 1)), `"stream":true`) || strings.Contains(string(ChatBody(1<<10, 1)), `"stream":true`) {
		t.Fatal("the stream flag of the request bodies")
	}
}

// TestEventsBodyFramesOneEventPerRead: each event is one read, io.EOF comes with the last, and
// an event larger than the reader's buffer continues in the next read.
func TestEventsBodyFramesOneEventPerRead(t *testing.T) {
	b := &eventsBody{events: [][]byte{[]byte("ab"), []byte("cdefg"), []byte("h")}}
	buf := make([]byte, 4)
	var got []string
	for {
		n, err := b.Read(buf)
		got = append(got, string(buf[:n]))
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if strings.Join(got, "|") != "ab|cdef|g|h" {
		t.Fatalf("reads %q", got)
	}
}

// countingFloor is the floor server counting the response body frames it answers.
type countingFloor struct {
	*floor.Server
	mu     sync.Mutex
	frames int
}

func (c *countingFloor) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	return c.Server.Process(&countingStream{ExternalProcessor_ProcessServer: srv, c: c})
}

type countingStream struct {
	extprocv3.ExternalProcessor_ProcessServer
	c *countingFloor
}

func (s *countingStream) Recv() (*extprocv3.ProcessingRequest, error) {
	r, err := s.ExternalProcessor_ProcessServer.Recv()
	if r.GetResponseBody() != nil {
		s.c.mu.Lock()
		s.c.frames++
		s.c.mu.Unlock()
	}
	return r, err
}

// TestDoStreamedAnswer: an exchange with a streamed answer relays every event to the EPP as a
// frame of its own and ends once the EPP has answered them all.
func TestDoStreamedAnswer(t *testing.T) {
	f := &countingFloor{Server: floor.NewServer("10.0.0.1:8000")}
	c := startServer(t, f, 0, 20*time.Second)
	body := ChatStreamBody(1<<10, 1)
	x := &Exchange{Headers: RequestHeaders("r1", len(body)), Body: body,
		RespHeaders: StreamResponseHeaders(), RespEvents: StreamedCompletion(1, 256, 40)}
	o := c.Do(context.Background(), x, nil, nil)
	if o.Err != nil || o.Destination != "10.0.0.1:8000" {
		t.Fatalf("outcome %+v", o)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.frames != 42 {
		t.Fatalf("the EPP saw %d response body frames; want 42 (40 tokens, usage, [DONE])", f.frames)
	}
}
