package ledger

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a real redis-server process on a loopback port, without persistence.
type redisServer struct {
	port int
	cmd  *exec.Cmd
	out  *bytes.Buffer
	done chan struct{}
}

func (r *redisServer) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port)) }

// startRedis starts redis-server on port and waits (bounded) until it answers PING.
func startRedis(t *testing.T, port int) *redisServer {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found (run hack/install-test-deps.sh): %v", err)
	}
	r := &redisServer{port: port, out: &bytes.Buffer{}, done: make(chan struct{})}
	r.cmd = exec.Command(path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--protected-mode", "yes", "--loglevel", "warning")
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	go func() { _ = r.cmd.Wait(); close(r.done) }()
	t.Cleanup(r.kill)
	c := redis.NewClient(&redis.Options{Addr: r.addr(), Protocol: 2, DisableIdentity: true, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return r
		}
		select {
		case <-r.done:
			t.Fatalf("redis-server exited: %s", r.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s not ready: %v\n%s", r.addr(), err, r.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var killMu sync.Mutex

// kill stops the server abruptly (SIGKILL) and waits for it to exit.
func (r *redisServer) kill() {
	killMu.Lock()
	defer killMu.Unlock()
	select {
	case <-r.done:
		return
	default:
	}
	_ = r.cmd.Process.Kill()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		panic(fmt.Sprintf("redis-server pid %d did not exit", r.cmd.Process.Pid))
	}
}
