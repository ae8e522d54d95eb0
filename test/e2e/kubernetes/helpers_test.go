package kubernetes

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/test/testsupport"
)

// commonPort finds a port free on every given loopback address (pods share the pool's port
// number on distinct IPs, as in a cluster).
func commonPort(t *testing.T, hosts ...string) int {
	t.Helper()
	for attempt := 0; attempt < 50; attempt++ {
		l, err := net.Listen("tcp", hosts[0]+":0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		ok := true
		for _, h := range hosts[1:] {
			l2, err := net.Listen("tcp", fmt.Sprintf("%s:%d", h, port))
			if err != nil {
				ok = false
				break
			}
			_ = l2.Close()
		}
		_ = l.Close()
		if ok && testsupport.Claim(port) { // never the same port twice: three picks in a row must differ
			return port
		}
	}
	t.Fatal("no port free on every loopback address")
	return 0
}

// proc is one started binary.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

// start runs one of the suite's binaries until the test ends; health (a URL) is polled until
// 200 when given.
func start(t *testing.T, name, bin, health string, env []string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{name: name, cmd: exec.Command(suite.Bin(bin), args...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = p.cmd.Wait(); logf.Close(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 3000 {
				b = b[len(b)-3000:]
			}
			t.Logf("--- %s %v ---\n%s", name, args, b)
		}
	})
	if health != "" {
		waitHTTP(t, p, health, 2*time.Minute)
	}
	return p
}

func waitHTTP(t *testing.T, p *proc, url string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			t.Fatalf("%s exited before %s answered", p.name, url)
		default:
		}
		resp, err := http.Get(url)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: %s not healthy within %s", p.name, url, timeout)
}

// reply is what one completion through the gateway returned.
type reply struct {
	status   int
	decision string
	outcome  string
	body     string
}

// complete sends one chat completion to url with the given headers.
func complete(t *testing.T, url, prompt string, hdr map[string]string) reply {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":8}`, model, prompt)
	status, header, b := testsupport.PostJSON(t, url+"/v1/chat/completions", hdr, body)
	return reply{status: status, decision: header.Get("x-pdgate-decision"),
		outcome: header.Get("x-pdgate-prefill-outcome"), body: b}
}

// picked returns the endpoint a decision names for a profile ("decode", "prefill").
func picked(decision, profile string) string {
	for _, part := range strings.Split(decision, ";") {
		if v, ok := strings.CutPrefix(part, profile+"="); ok {
			return strings.TrimSuffix(v, "-rank-0")
		}
	}
	return ""
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
