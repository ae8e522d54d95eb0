// Package redistest runs a real redis-server for the suites that share the decode ledger
// through Redis (test/integration/ledger, test/integration/ha).
package redistest

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pdgate/pdgate/test/testsupport"
)

// Server is a redis-server on a loopback port, without persistence, that dies with the test
// (or earlier, by Kill: the outage a test may stage).
type Server struct {
	*testsupport.Proc
	// Addr is host:port.
	Addr string
}

// Start runs redis-server on port (0: a free one) until the test ends and waits (bounded)
// until it answers PING. A machine without redis-server fails the test: see
// hack/install-test-deps.sh.
func Start(t testing.TB, port int) *Server {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found (run hack/install-test-deps.sh): %v", err)
	}
	if port == 0 {
		port = testsupport.FreePort(t)
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	s.Proc = testsupport.StartProc(t, path, nil, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir(),
		"--daemonize", "no", "--protected-mode", "yes", "--loglevel", "warning")
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return s
		}
		select {
		case <-s.Exited():
			t.Fatalf("redis-server exited: %s", s.Output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s not ready: %v\n%s", s.Addr, err, s.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
