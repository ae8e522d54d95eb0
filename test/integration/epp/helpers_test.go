// Package epp holds the EPP's integration suites: the standalone EPP with a hot-reloaded
// endpoints file, and the Kubernetes-mode EPP against a real kube-apiserver + etcd (envtest).
// Both run the EPP in-process and talk to it over real gRPC ext_proc streams through pdgate's
// ext_proc client (cmd/gateway/extprocclient, as the dev gateway does); the model
// servers are small HTTP fakes on loopback aliases exposing vLLM metrics.
package epp

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	configPb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	healthPb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/pdgate/pdgate/cmd/epp/runner"
	"github.com/pdgate/pdgate/cmd/gateway/extprocclient"
	"github.com/pdgate/pdgate/test/inprocepp"
	"github.com/pdgate/pdgate/test/testsupport"
	"github.com/pdgate/pdgate/test/testsupport/eppclient"
)

// fakeVLLM serves testsupport's vLLM /metrics page, with waiting requests and one running, on l.
func fakeVLLM(t *testing.T, l net.Listener, waiting int) {
	t.Helper()
	srv := &http.Server{Handler: testsupport.VLLMMetrics(int64(waiting), 1), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// listenPair opens listeners on 127.0.0.2 and 127.0.0.3 with the same port (an InferencePool
// has one target port list for all its pods).
func listenPair(t *testing.T) (a, b net.Listener, port int) {
	t.Helper()
	for i := 0; i < 20; i++ {
		la, err := net.Listen("tcp", "127.0.0.2:0")
		if err != nil {
			t.Fatalf("127.0.0.2 must be usable (loopback alias): %v", err)
		}
		p := la.Addr().(*net.TCPAddr).Port
		lb, err := net.Listen("tcp", net.JoinHostPort("127.0.0.3", strconv.Itoa(p)))
		if err == nil {
			return la, lb, p
		}
		_ = la.Close()
	}
	t.Fatal("no common free port on 127.0.0.2 and 127.0.0.3")
	return nil, nil, 0
}

// dialEPP opens pdgate's ext_proc client (the one the dev gateway uses) on the EPP's gRPC
// port; it is closed when the test ends.
func dialEPP(t *testing.T, addr string) *extprocclient.Client {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr)
	c, err := extprocclient.Dial("127.0.0.1:"+port, extprocclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// result is what one ext_proc exchange produced.
type result struct {
	immediate *extProcPb.ImmediateResponse
	set       map[string]string // request phase, lower-case names
	removed   []string
	respSet   map[string]string // response-headers phase
}

// exchange drives one request through ext_proc with pdgate's client: headers and body, then
// (unless the EPP answered immediately) the response headers, and finally the end of the
// stream, which must be clean.
func exchange(t *testing.T, c *extprocclient.Client, headers map[string]string, body string) result {
	t.Helper()
	rt, st, done, err := eppclient.Open(c, "/v1/completions", headers, []byte(body), 10*time.Second)
	defer done()
	if err != nil {
		t.Fatalf("ext_proc request phase: %v", err)
	}
	if rt.Immediate != nil {
		return result{immediate: rt.Immediate}
	}
	r := result{set: rt.SetHeaders(), removed: rt.RemovedHeaders()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hr, err := st.ResponseHeaders(ctx, extprocclient.HeaderMap(map[string]string{
		":status": "200", "content-type": "application/json"}), "", false)
	if err != nil {
		t.Fatalf("ext_proc response headers: %v", err)
	}
	if hr.Immediate != nil {
		t.Fatalf("ext_proc: immediate response %d to the response headers", extprocclient.ImmediateStatus(hr.Immediate))
	}
	r.respSet = toMap(hr.Mutation.GetSetHeaders())
	if err := st.Finish(ctx); err != nil {
		t.Fatalf("ext_proc end of stream: %v", err)
	}
	return r
}

func toMap(opts []*configPb.HeaderValueOption) map[string]string {
	m := map[string]string{}
	for _, o := range opts {
		m[strings.ToLower(o.GetHeader().GetKey())] = extprocclient.HeaderValue(o.GetHeader())
	}
	return m
}

const completion = `{"model":"m","prompt":"hello there","max_tokens":4}`

// waitDestination sends requests until the destination equals want (bounded in count and time).
func waitDestination(t *testing.T, c *extprocclient.Client, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	last := ""
	for i := 0; i < 300 && time.Now().Before(deadline); i++ {
		r := exchange(t, c, nil, completion)
		if r.immediate == nil {
			last = r.set["x-gateway-destination-endpoint"]
			if last == want {
				return
			}
		} else {
			last = fmt.Sprintf("immediate %d %s", r.immediate.GetStatus().GetCode(), r.immediate.GetBody())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("destination never became %q (last: %s)", want, last)
}

// waitOnlyDestination waits (30 s at most) until n consecutive requests go to want.
func waitOnlyDestination(t *testing.T, c *extprocclient.Client, want string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	run, last := 0, ""
	for time.Now().Before(deadline) {
		r := exchange(t, c, nil, completion)
		if r.immediate == nil {
			last = r.set["x-gateway-destination-endpoint"]
		} else {
			last = fmt.Sprintf("immediate %d %s", r.immediate.GetStatus().GetCode(), r.immediate.GetBody())
		}
		if last != want {
			run = 0
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if run++; run == n {
			return
		}
	}
	t.Fatalf("destination never %q %d times in a row (last: %s)", want, n, last)
}

func healthStatus(t *testing.T, addr, service string) healthPb.HealthCheckResponse_ServingStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := healthPb.NewHealthClient(inprocepp.Dial(t, addr)).Check(ctx, &healthPb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("health check: %v", err)
	}
	return r.Status
}

// runEPPExpectError runs the EPP and requires it to fail at startup.
func runEPPExpectError(t *testing.T, o *runner.Options) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := runner.Run(ctx, o)
	if err == nil {
		t.Fatal("EPP started; want a startup error")
	}
	return err
}
