package memory

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate-bench/eppharness"
)

// SidecarResult is the sidecar's memory while it proxies concurrent SSE streams.
type SidecarResult struct {
	Streams int `json:"streams"`
	// Idle is the memory after start-up, before any stream.
	Idle Memory `json:"idle"`
	// Held is the memory with every stream open, one chunk delivered, the rest held back.
	Held Memory `json:"held"`
	// Samples are RSS readings with X streams open.
	Samples []Sample `json:"samples"`
	// Opened counts streams whose first chunk reached the client; Completed those that then
	// ended with data: [DONE] once the engine released them.
	Opened    int    `json:"opened"`
	Completed int    `json:"completed"`
	Error     string `json:"error,omitempty"`
}

// Memory is VmRSS and VmHWM (peak) of a process, in bytes.
type Memory = eppharness.Memory

// holdEngine is a decode engine that answers every streaming request with one SSE chunk and
// then holds the stream open until released, so streams pile up in the sidecar.
type holdEngine struct {
	release chan struct{}
	open    atomic.Int64
	srv     *http.Server
	ln      net.Listener
}

func startHoldEngine() (*holdEngine, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e := &holdEngine{release: make(chan struct{}), ln: ln}
	e.srv = &http.Server{Handler: http.HandlerFunc(e.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = e.srv.Serve(ln) }()
	return e, nil
}

func (e *holdEngine) URL() string { return "http://" + e.ln.Addr().String() }

func (e *holdEngine) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	chunk := `{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"The"}}]}`
	_, _ = fmt.Fprintf(w, "data: %s\n\n", chunk)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	e.open.Add(1)
	defer e.open.Add(-1)
	select {
	case <-e.release:
	case <-r.Context().Done():
		return
	}
	_, _ = fmt.Fprintf(w, "data: %s\n\n", `{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":" end"},"finish_reason":"stop"}],"usage":{"prompt_tokens":300,"completion_tokens":2,"total_tokens":302}}`)
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
}

func (e *holdEngine) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = e.srv.Shutdown(ctx)
}

// sidecarRun starts bin/sidecar in front of the holding engine and opens o.Streams streaming
// chat requests through it in four steps, reading the sidecar's memory after each.
func sidecarRun(ctx context.Context, o Options, root, dir string) (res SidecarResult, err error) {
	res.Streams = o.Streams
	bin, err := binary(root, o.BinDir, "sidecar", "./cmd/sidecar")
	if err != nil {
		return res, err
	}
	eng, err := startHoldEngine()
	if err != nil {
		return res, err
	}
	defer eng.Close()
	released := false
	release := func() {
		if !released {
			released = true
			close(eng.release)
		}
	}
	defer release()
	port, err := eppharness.FreePort()
	if err != nil {
		return res, err
	}
	listen := "127.0.0.1:" + strconv.Itoa(port)
	logf, err := os.Create(filepath.Join(dir, "sidecar.log"))
	if err != nil {
		return res, err
	}
	defer logf.Close()
	// The allow-list names a prefill target nobody calls: these streams are decode-only.
	cmd := exec.Command(bin, "--listen", listen, "--engine-url", eng.URL(), "--allowlist", "127.0.0.1:1")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return res, fmt.Errorf("starting %s: %w", bin, err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	pid := cmd.Process.Pid
	base := "http://" + listen
	if err := waitHealthy(ctx, base+"/sidecar/healthz", 30*time.Second); err != nil {
		return res, err
	}
	if res.Idle, err = eppharness.ProcMemory(pid); err != nil {
		return res, err
	}
	res.Samples = append(res.Samples, Sample{X: 0, RSS: res.Idle.RSS})

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.Streams, DisableCompression: true}}
	defer client.CloseIdleConnections()
	sctx, cancel := context.WithTimeout(ctx, o.MaxPhase)
	defer cancel()
	var (
		opened, completed atomic.Int64
		wg                sync.WaitGroup
		firstErr          error
		errMu             sync.Mutex
	)
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
	}
	const steps = 4
	for s := 0; s < steps; s++ {
		from, to := o.Streams*s/steps, o.Streams*(s+1)/steps
		for i := from; i < to; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, err := stream(sctx, client, base, i, &opened)
				if err != nil {
					fail(err)
				}
				if ok {
					completed.Add(1)
				}
			}()
		}
		if err := waitFor(sctx, func() bool { return opened.Load()+errCount(&errMu, &firstErr) >= int64(to) }); err != nil {
			break
		}
		m, err := eppharness.ProcMemory(pid)
		if err != nil {
			return res, err
		}
		res.Samples = append(res.Samples, Sample{X: int(opened.Load()), RSS: m.RSS})
		o.logf("sidecar: %d streams open, RSS %.1f MiB", opened.Load(), mib(m.RSS))
	}
	time.Sleep(time.Second)
	res.Held, err = eppharness.ProcMemory(pid)
	res.Opened = int(opened.Load())
	release()
	wg.Wait()
	res.Completed = int(completed.Load())
	if err != nil {
		return res, err
	}
	if firstErr != nil {
		res.Error = firstErr.Error()
	}
	if res.Completed != o.Streams && res.Error == "" {
		res.Error = fmt.Sprintf("%d of %d streams completed", res.Completed, o.Streams)
	}
	return res, nil
}

func errCount(mu *sync.Mutex, err *error) int64 {
	mu.Lock()
	defer mu.Unlock()
	if *err != nil {
		return 1 << 40 // stop waiting: a stream failed
	}
	return 0
}

// stream sends one streaming chat request, counts it in opened at its first SSE event and
// reads it to the end; ok reports a [DONE] seen.
func stream(ctx context.Context, c *http.Client, base string, i int, opened *atomic.Int64) (ok bool, err error) {
	body := fmt.Sprintf(`{"model":"m","stream":true,"max_tokens":64,"messages":[{"role":"user","content":"stream %d: %s"}]}`,
		i, strings.Repeat("hold this stream open please ", 40))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", bytes.NewReader([]byte(body)))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return false, fmt.Errorf("stream %d: %w", i, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return false, fmt.Errorf("stream %d: status %d: %s", i, resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	first := true
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		if first {
			first = false
			opened.Add(1)
		}
		if line == "data: [DONE]" {
			return true, nil
		}
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("stream %d: %w", i, err)
	}
	return false, fmt.Errorf("stream %d ended without [DONE]", i)
}

func waitHealthy(ctx context.Context, url string, limit time.Duration) error {
	return waitFor(ctx, func() bool {
		resp, err := http.Get(url) //nolint:gosec,noctx // loopback health probe, bounded by waitFor
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, limit)
}

// waitFor polls cond every 20 ms until it holds, ctx ends or limit (default 2 min) passes.
func waitFor(ctx context.Context, cond func() bool, limit ...time.Duration) error {
	d := 2 * time.Minute
	if len(limit) > 0 {
		d = limit[0]
	}
	deadline := time.Now().Add(d)
	for !cond() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// binary returns <binDir>/<name>, building pkg there if it is missing.
func binary(root, binDir, name, pkg string) (string, error) {
	if binDir == "" {
		binDir = filepath.Join(root, "bin")
	}
	path := filepath.Join(binDir, name)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	cmd := exec.Command("go", "build", "-o", path, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %w\n%s", pkg, err, out)
	}
	return path, nil
}
