package testsupport

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Run starts binDir/name with args until the test ends (see Start).
func Run(t testing.TB, binDir, name string, args ...string) {
	t.Helper()
	Start(t, filepath.Join(binDir, name), nil, args...)
}

// Start runs the binary at path with args, env added to the test's environment, until the
// test ends (see StartProc). The channel returned is closed when the process has exited.
func Start(t testing.TB, path string, env []string, args ...string) <-chan struct{} {
	t.Helper()
	return StartProc(t, path, env, args...).Exited()
}

// Proc is a binary started for a test, which the test may kill and start again (an engine
// that restarts). Every run's output goes to one log file, whose tail is logged when the
// test failed. A run's process (and its group) dies with the test, and with the test binary
// if that is killed first.
type Proc struct {
	t    testing.TB
	path string
	env  []string
	args []string
	log  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// StartProc runs the binary at path with args, env added to the test's environment, until the
// test ends.
func StartProc(t testing.TB, path string, env []string, args ...string) *Proc {
	t.Helper()
	name := filepath.Base(path)
	p := &Proc{t: t, path: path, env: env, args: args, log: filepath.Join(t.TempDir(), name+".log")}
	p.Start()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			out := p.Output()
			if len(out) > 4000 {
				out = out[len(out)-4000:]
			}
			t.Logf("%s %v log (tail):\n%s", name, args, out)
		}
	})
	return p
}

// Start runs the binary again (after Kill), appending to the same log.
func (p *Proc) Start() {
	p.t.Helper()
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		p.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
}

// Kill ends the current run at once (SIGKILL to its process group: no goodbye on the wire)
// and waits until it has exited.
func (p *Proc) Kill() { <-p.signal(syscall.SIGKILL) }

// Stop ends the current run gracefully: sig to its process group, then SIGKILL when it has
// not exited within grace. For a binary whose goodbye a test relies on, or that shares state
// with others (a lease, a heartbeat), unlike an engine crash.
func (p *Proc) Stop(sig syscall.Signal, grace time.Duration) {
	select {
	case <-p.signal(sig):
	case <-time.After(grace):
		p.Kill()
	}
}

// signal sends sig to the current run's process group and returns the channel closed when
// that run has exited.
func (p *Proc) signal(sig syscall.Signal) <-chan struct{} {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil { // the first Start failed
		closed := make(chan struct{})
		close(closed)
		return closed
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	return done
}

// Exited is closed when the current run has exited.
func (p *Proc) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Output is what every run has written so far.
func (p *Proc) Output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}
