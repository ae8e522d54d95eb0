// Package sidecar is the routing sidecar's end-to-end suite: the real sidecar binary in front
// of real simulator processes, one P/D pair per engine dialect, tokens streamed end to end
// over loopback HTTP/SSE.
package sidecar

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/test/testsupport"
)

var binDir, repoRoot string

func TestMain(m *testing.M) { testsupport.Main(m, "sidecar-e2e", &binDir, &repoRoot, "sidecar", "sim") }

// start runs a binary until the test ends and waits for its health URL.
func start(t *testing.T, name string, health string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, name), args...)
	logf, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("%s %v log:\n%s", name, args, tail(string(b), 3000))
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(health)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s did not become healthy at %s", name, health)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// streamResult is what a streamed completion delivered.
type streamResult struct {
	status  int
	header  http.Header
	chunks  int // data events with non-empty content
	done    bool
	content string
	raw     string
}

// stream posts a streaming chat completion through the sidecar and reads it event by event.
func stream(t *testing.T, url string, hdr map[string]string, body string) streamResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, err := testsupport.JSONRequest(ctx, url+"/v1/chat/completions", hdr, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	res := streamResult{status: resp.StatusCode, header: resp.Header}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		res.raw = string(b)
		return res
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var raw strings.Builder
	for sc.Scan() {
		line := sc.Text()
		raw.WriteString(line + "\n")
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			res.done = true
			continue
		}
		if i := strings.Index(data, `"content":"`); i >= 0 {
			rest := data[i+len(`"content":"`):]
			if j := strings.IndexByte(rest, '"'); j > 0 {
				res.chunks++
				res.content += rest[:j]
			}
		}
	}
	res.raw = raw.String()
	return res
}
