package epp

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/pdgate/pdgate/cmd/gateway/extprocclient"
	"github.com/pdgate/pdgate/cmd/internal/extproctest"
)

// fakeEPP is an in-process ext_proc server that behaves like GIE's streaming server: it
// buffers the request body, answers with a headers reply carrying the destination and the
// body streamed back in chunks, then answers the response headers and body.
type fakeEPP struct {
	extprocv3.UnimplementedExternalProcessorServer
	mode string // "", "immediate", "no-dest", "body-first", "silent", "header-only-dest"
	dest func(body []byte) string

	mu       sync.Mutex
	bodies   [][]byte
	frames   []int // body frames per request
	respSeen int
	served   []string
	open     int
	maxOpen  int
}

func (f *fakeEPP) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	f.mu.Lock()
	f.open++
	f.maxOpen = max(f.maxOpen, f.open)
	f.mu.Unlock()
	defer func() { f.mu.Lock(); f.open--; f.mu.Unlock() }()
	var body []byte
	frames := 0
	return extproctest.Receive(srv, func(req *extprocv3.ProcessingRequest) error {
		switch v := req.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestBody:
			body = append(body, v.RequestBody.GetBody()...)
			frames++
			if !v.RequestBody.GetEndOfStream() {
				return nil
			}
			f.mu.Lock()
			f.bodies, f.frames = append(f.bodies, body), append(f.frames, frames)
			f.mu.Unlock()
			return f.route(srv, body)
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			f.mu.Lock()
			f.served = append(f.served, req.GetMetadataContext().GetFilterMetadata()[extprocclient.LBNamespace].GetFields()[extprocclient.ServedKey].GetStringValue())
			f.mu.Unlock()
			return srv.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
				ResponseHeaders: &extprocv3.HeadersResponse{}}})
		case *extprocv3.ProcessingRequest_ResponseBody:
			f.mu.Lock()
			f.respSeen++
			f.mu.Unlock()
			for _, eos := range []bool{false, true} {
				if err := srv.Send(extproctest.StreamedResponseBody([]byte("x"), eos)); err != nil {
					return err
				}
			}
		}
		return nil // request headers: nothing until the body is complete
	})
}

func (f *fakeEPP) route(srv extprocv3.ExternalProcessor_ProcessServer, body []byte) error {
	switch f.mode {
	case "immediate":
		return srv.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
			ImmediateResponse: &extprocv3.ImmediateResponse{Status: &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable}}}})
	case "silent":
		<-srv.Context().Done()
		return nil
	case "body-first":
		return srv.Send(extproctest.StreamedRequestBody(body, true))
	}
	dest := f.dest(body)
	header := dest
	if f.mode == "" { // the metadata carries the pick; a stale header must lose
		header = "10.0.0.250:1"
	}
	hdrs := &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{HeaderMutation: extproctest.SetHeaders("x-prefiller-host-port", "10.0.0.9:8000")}}
	if f.mode != "no-dest" {
		hdrs.Response.HeaderMutation.SetHeaders = append(hdrs.Response.HeaderMutation.SetHeaders, extproctest.SetHeader(extprocclient.DestinationHeader, header))
	}
	m := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: hdrs}}
	if f.mode == "" {
		st, _ := structpb.NewStruct(map[string]any{extprocclient.LBNamespace: map[string]any{extprocclient.DestinationHeader: dest + ",10.9.9.9:1"}})
		m.DynamicMetadata = st
	}
	if err := srv.Send(m); err != nil {
		return err
	}
	for off := 0; off < len(body); off += 1000 {
		end := min(off+1000, len(body))
		if err := srv.Send(extproctest.StreamedRequestBody(body[off:end], end == len(body))); err != nil {
			return err
		}
	}
	return nil
}

// startFake serves f over an in-memory listener and returns a client on it that sends body
// frames of chunk bytes (0: the default).
func startFake(t *testing.T, f *fakeEPP, chunk int) *Client {
	t.Helper()
	if f.dest == nil {
		f.dest = func([]byte) string { return "10.0.0.1:8000" }
	}
	timeout := 20 * time.Second
	if f.mode == "silent" {
		timeout = 50 * time.Millisecond
	}
	return startServer(t, f, chunk, timeout)
}

// startServer serves srv over an in-memory listener and returns a client on it that sends
// body frames of chunk bytes (0: the default) and waits timeout for each message.
func startServer(t *testing.T, srv extprocv3.ExternalProcessorServer, chunk int, timeout time.Duration) *Client {
	t.Helper()
	conn, err := grpc.NewClient(extproctest.InMemoryTarget, grpc.WithTransportCredentials(insecure.NewCredentials()),
		extproctest.InMemory(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	o := clientOptions(chunk)
	o.MessageTimeout = timeout
	return &Client{extprocclient.New(o, extprocv3.NewExternalProcessorClient(conn))}
}

func exchange(body []byte) *Exchange {
	resp := CompletionBody(1, 10)
	return &Exchange{Headers: RequestHeaders("r1", len(body)), Body: body,
		RespHeaders: ResponseHeaders(len(resp)), RespBody: resp}
}

func TestDoExchange(t *testing.T) {
	body := ChatBody(40<<10, 1)
	for _, tc := range []struct {
		name      string
		mode      string
		chunk     int
		wantDest  string
		wantImm   int
		wantErr   string
		wantFrame int
	}{
		{name: "metadata wins, first of list", chunk: 16 << 10, wantDest: "10.0.0.1:8000", wantFrame: 3},
		{name: "header only", mode: "header-only-dest", chunk: 64 << 10, wantDest: "10.0.0.1:8000", wantFrame: 1},
		{name: "immediate", mode: "immediate", chunk: 16 << 10, wantImm: 503, wantFrame: 3},
		{name: "no destination", mode: "no-dest", chunk: 16 << 10, wantErr: "without a destination", wantFrame: 3},
		{name: "body before headers", mode: "body-first", chunk: 16 << 10, wantErr: "before the request headers reply", wantFrame: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeEPP{mode: tc.mode}
			c := startFake(t, f, tc.chunk)
			o := c.Do(context.Background(), exchange(body), nil, nil)
			if tc.wantErr != "" {
				if o.Err == nil || !strings.Contains(o.Err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", o.Err, tc.wantErr)
				}
			} else if o.Err != nil {
				t.Fatal(o.Err)
			}
			if o.Immediate != tc.wantImm || (tc.wantErr == "" && o.Destination != tc.wantDest) {
				t.Fatalf("outcome %+v", o)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.bodies) != 1 || string(f.bodies[0]) != string(body) || f.frames[0] != tc.wantFrame {
				t.Fatalf("server saw %d bodies, frames %v", len(f.bodies), f.frames)
			}
			if o.OK() {
				if f.respSeen != 1 || len(f.served) != 1 || f.served[0] != tc.wantDest || o.Prefill != "10.0.0.9:8000" {
					t.Fatalf("response phase: seen %d, served %v, prefill %q", f.respSeen, f.served, o.Prefill)
				}
				if o.Routing <= 0 || o.RequestPhase < o.Routing {
					t.Fatalf("timings %v %v", o.Routing, o.RequestPhase)
				}
			} else if f.respSeen != 0 {
				t.Fatal("response phase ran after a failed request phase")
			}
		})
	}
}

func TestDoTimesOutOnSilentEPP(t *testing.T) {
	c := startFake(t, &fakeEPP{mode: "silent"}, 0)
	o := c.Do(context.Background(), exchange(BurstBody(1)), nil, nil)
	if o.Err == nil || !strings.Contains(o.Err.Error(), "no message within") {
		t.Fatalf("outcome %+v", o)
	}
}

func TestRunLoadCountsAndCPU(t *testing.T) {
	dests := []string{"10.0.0.1:8000", "10.0.0.2:8000"}
	var mu sync.Mutex
	n := 0
	f := &fakeEPP{dest: func([]byte) string { mu.Lock(); defer mu.Unlock(); n++; return dests[n%2] }}
	c := startFake(t, f, 0)
	cpuCalls := 0
	cpu := func() (time.Duration, error) {
		cpuCalls++
		return time.Duration(cpuCalls) * 300 * time.Millisecond, nil
	}
	bodies := [][]byte{ChatBody(1<<10, 1), ChatBody(1<<10, 2)}
	scrapeCalls := int64(0)
	scrapes := func() int64 { scrapeCalls++; return scrapeCalls * 17 }
	spec := LoadSpec{Requests: 60, Concurrency: 7, Make: func(i int) *Exchange { return exchange(bodies[i%2]) }, Scrapes: scrapes}
	res, err := RunLoad(context.Background(), c, spec, cpu)
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 60 || res.OK != 60 || res.Errors != 0 || len(res.RoutingMS) != 60 {
		t.Fatalf("result %+v", res)
	}
	if res.Dest[dests[0]] != 30 || res.Dest[dests[1]] != 30 {
		t.Fatalf("destinations %v", res.Dest)
	}
	if res.CPU != 300*time.Millisecond || math.Abs(res.CPUPerRequestMS()-5) > 1e-9 || res.Scrapes != 17 {
		t.Fatalf("CPU %v, per request %v, scrapes %d", res.CPU, res.CPUPerRequestMS(), res.Scrapes)
	}
	for i := 1; i < len(res.RoutingMS); i++ {
		if res.RoutingMS[i] < res.RoutingMS[i-1] {
			t.Fatal("routing latencies not sorted")
		}
	}
	if f.maxOpen < 2 {
		t.Fatalf("streams were not concurrent (max open %d)", f.maxOpen)
	}
	if _, err := RunLoad(context.Background(), c, LoadSpec{}, cpu); err == nil {
		t.Fatal("empty spec accepted")
	}
}

func TestRunLoadCountsFailures(t *testing.T) {
	c := startFake(t, &fakeEPP{mode: "immediate"}, 0)
	res, err := RunLoad(context.Background(), c, LoadSpec{Requests: 5, Concurrency: 2,
		Make: func(int) *Exchange { return exchange(BurstBody(1)) }}, func() (time.Duration, error) { return 0, nil })
	if err != nil {
		t.Fatal(err)
	}
	if res.OK != 0 || res.Immediate[503] != 5 || !strings.Contains(res.FirstErr, "503") {
		t.Fatalf("result %+v", res)
	}
}

// The burst keeps every request in flight until the last one is routed.
func TestRunBurstHoldsRequests(t *testing.T) {
	var mu sync.Mutex
	n := 0
	f := &fakeEPP{dest: func([]byte) string {
		mu.Lock()
		defer mu.Unlock()
		n++
		return []string{"a:1", "b:1", "c:1"}[n%3]
	}}
	c := startFake(t, f, 0)
	res := RunBurst(context.Background(), c, 30, func(i int) *Exchange { return exchange(BurstBody(i)) })
	if res.Requests != 30 || res.Errors != 0 || res.Dest["a:1"] != 10 || res.Dest["b:1"] != 10 || res.Dest["c:1"] != 10 {
		t.Fatalf("burst %+v", res)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.maxOpen != 30 || f.respSeen != 30 {
		t.Fatalf("max open streams %d (want all 30 in flight), responses %d", f.maxOpen, f.respSeen)
	}
}

func TestSpread(t *testing.T) {
	pods := []string{"a", "b", "c"}
	for _, tc := range []struct {
		dest map[string]int
		want float64
	}{
		{map[string]int{"a": 10, "b": 10, "c": 10}, 1},
		{map[string]int{"a": 15, "b": 10, "c": 12, "x": 99}, 1.5},
		{map[string]int{"a": 30}, math.Inf(1)},
	} {
		if got := Spread(tc.dest, pods); got != tc.want {
			t.Fatalf("Spread(%v) = %v, want %v", tc.dest, got, tc.want)
		}
	}
	if !math.IsNaN(Spread(nil, nil)) {
		t.Fatal("no pods should be NaN")
	}
}
