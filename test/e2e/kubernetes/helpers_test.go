package kubernetes

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
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

// start runs one of the suite's binaries until the test ends, when it is stopped with SIGINT
// as a pod's container would be; health (a URL) is polled until 200 when given.
func start(t *testing.T, name, bin, health string, env []string, args ...string) {
	t.Helper()
	p := testsupport.StartProc(t, suite.Bin(bin), env, args...)
	t.Cleanup(func() { p.Stop(syscall.SIGINT, 10*time.Second) })
	if health == "" {
		return
	}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case <-p.Exited():
			t.Fatalf("%s exited before %s answered", name, health)
		default:
		}
		resp, err := http.Get(health)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: %s not healthy within 2m0s", name, health)
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
