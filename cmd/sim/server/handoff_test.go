package server

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/sim/batching"
)

func TestHandoffStore(t *testing.T) {
	entry := kvEntry{ID: "a", Dialect: DialectVLLM, EngineID: "e1", Tokens: 100, PromptHash: "h", BlockIDs: []int{1, 2}}
	tests := []struct {
		name    string
		setup   func(s *handoffStore, clk *batching.FakeClock)
		pull    pullRequest
		wantErr int
	}{
		{"valid", func(s *handoffStore, _ *batching.FakeClock) { _ = s.produce(entry) }, pullRequest{ID: "a", Dialect: DialectVLLM, EngineID: "e1", BlockIDs: []int{1, 2}}, 0},
		{"unknown", func(*handoffStore, *batching.FakeClock) {}, pullRequest{ID: "a"}, http.StatusNotFound},
		{"consumed", func(s *handoffStore, _ *batching.FakeClock) {
			_ = s.produce(entry)
			_, _ = s.pull(context.Background(), pullRequest{ID: "a"})
		}, pullRequest{ID: "a"}, http.StatusGone},
		{"expired", func(s *handoffStore, clk *batching.FakeClock) {
			_ = s.produce(entry)
			clk.Advance(61 * time.Second)
		}, pullRequest{ID: "a"}, http.StatusGone},
		{"just before expiry", func(s *handoffStore, clk *batching.FakeClock) {
			_ = s.produce(entry)
			clk.Advance(60 * time.Second)
		}, pullRequest{ID: "a"}, 0},
		{"wrong dialect", func(s *handoffStore, _ *batching.FakeClock) { _ = s.produce(entry) }, pullRequest{ID: "a", Dialect: DialectSGLang}, http.StatusConflict},
		{"wrong engine", func(s *handoffStore, _ *batching.FakeClock) { _ = s.produce(entry) }, pullRequest{ID: "a", EngineID: "e2"}, http.StatusConflict},
		{"wrong blocks", func(s *handoffStore, _ *batching.FakeClock) { _ = s.produce(entry) }, pullRequest{ID: "a", BlockIDs: []int{1}}, http.StatusConflict},
		{"failed prefill", func(s *handoffStore, _ *batching.FakeClock) { s.fail("a", "boom") }, pullRequest{ID: "a"}, http.StatusBadGateway},
	}
	for _, tc := range tests {
		clk := batching.NewFakeClock()
		s := newHandoffStore(clk, time.Minute)
		tc.setup(s, clk)
		e, err := s.pull(context.Background(), tc.pull)
		var pe *pullError
		switch {
		case tc.wantErr == 0 && (err != nil || e.Tokens != 100):
			t.Errorf("%s: %v %+v", tc.name, err, e)
		case tc.wantErr != 0 && (!errors.As(err, &pe) || pe.status != tc.wantErr):
			t.Errorf("%s: got %v, want status %d", tc.name, err, tc.wantErr)
		}
	}
}

func TestHandoffStoreWaitsForProducer(t *testing.T) {
	clk := batching.NewFakeClock()
	s := newHandoffStore(clk, time.Minute)
	got := make(chan error, 2)
	go func() {
		_, err := s.pull(context.Background(), pullRequest{ID: "room", WaitMS: 5000})
		got <- err
	}()
	go func() {
		_, err := s.pull(context.Background(), pullRequest{ID: "late", WaitMS: 5000})
		got <- err
	}()
	for clk.Pending() < 2 { // both pulls are waiting on their timers
		time.Sleep(50 * time.Microsecond)
	}
	if err := s.produce(kvEntry{ID: "room", Tokens: 1}); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiting pull: %v", err)
	}
	clk.Advance(5 * time.Second)
	var pe *pullError
	if err := <-got; !errors.As(err, &pe) || pe.status != http.StatusNotFound {
		t.Fatalf("pull past its wait: %v", err)
	}
	if err := s.produce(kvEntry{ID: "room"}); err == nil {
		t.Fatal("a room produced twice must conflict")
	}
}
