// Package lab_test runs `pdgate lab` end to end: real simulators, sidecars, EPP and dev
// gateway processes on loopback addresses, one lab per shipped topology.
package lab_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/lab"
	"github.com/pdgate/pdgate/test/testsupport"
)

// repoRoot is where config/ lives.
const repoRoot = "../../.."

// binDir is make build's bin/ (make e2e runs `make build` first) with what the lab starts.
func binDir(t *testing.T) string {
	t.Helper()
	return testsupport.BuiltBinaries(t, "pdgate", "sim", "sidecar", "epp", "gateway")
}

// runLab runs `pdgate lab` with args and --json, bounded by 4 minutes, and returns the
// summary it prints; it fails t when the lab fails or prints no summary.
func runLab(t *testing.T, bin string, args ...string) lab.Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "pdgate"), append(append([]string{"lab"}, args...), "--json")...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("pdgate lab %v: %v\nstderr:\n%s", args, err, stderr.String())
	}
	var s lab.Summary
	if err := json.Unmarshal(stdout.Bytes(), &s); err != nil || s.Result == nil {
		t.Fatalf("output is not one JSON summary (%v):\n%s", err, stdout.String())
	}
	return s
}

// Each shipped topology: a short mixed workload through the lab, then the decision counts,
// zero 5xx and zero hung requests.
func TestLabJSONPerTopology(t *testing.T) {
	bin := binDir(t)
	files, _ := filepath.Glob(filepath.Join(repoRoot, "config/lab/*.yaml"))
	if len(files) < 5 {
		t.Fatalf("want at least 5 topologies, found %v", files)
	}
	for i, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			if expectations[name] == nil {
				t.Fatalf("topology %s has no expectations in this suite: add them", name)
			}
			subnet := fmt.Sprintf("127.0.%d", 60+i)
			s := runLab(t, bin, "--topology", f, "--bin-dir", bin,
				"--subnet", subnet, "--port", "0", "--run-dir", t.TempDir(), "--workload", "mixed",
				"--duration", "6s", "--concurrency", "4", "--max-tokens-cap", "16")
			t.Logf("%s: sent %d, statuses %v, decisions %v, e2e p50 %.0f ms", name, s.RequestsSent, s.ResponsesByStatus, s.Decisions, s.LatencyMS.E2E.P50)
			if s.RequestsSent < 5 {
				t.Fatalf("only %d requests went out", s.RequestsSent)
			}
			for code, n := range s.ResponsesByStatus {
				if strings.HasPrefix(code, "5") {
					t.Errorf("%d responses with status %s", n, code)
				}
			}
			if s.Hung != 0 || s.TransportErrors != 0 || s.StreamErrors != 0 {
				t.Errorf("hung %d, transport errors %d, stream errors %d", s.Hung, s.TransportErrors, s.StreamErrors)
			}
			traced := 0
			for _, n := range s.Decisions {
				traced += n
			}
			if traced != s.ResponsesByStatus["200"] || s.Decisions["untraced"] != 0 || s.Decisions["unknown"] != 0 {
				t.Errorf("every 200 must carry a decision naming lab pods: %v vs %d ok", s.Decisions, s.ResponsesByStatus["200"])
			}
			if err := expectations[name](s); err != nil {
				t.Errorf("decisions %v, legs %v: %v", s.Decisions, s.PodLegs, err)
			}
		})
	}
}

// expectations per shipped topology, for the mixed workload (long RAG prompts, short chats,
// multi-turn sessions, multimodal and conditional requests).
var expectations = map[string]func(lab.Summary) error{
	// AIBrix pd: every request on a roleset is paired; nothing stays decode-only.
	"default": func(s lab.Summary) error {
		return all(atLeast(s, 1, "prefill-decode"), none(s, "decode-only"))
	},
	// AIBrix bucketing: short and long prompts land on their own rolesets.
	"aibrix-buckets": func(s lab.Summary) error {
		if s.PodLegs["prefill-short-0"]["prefill"] == 0 || s.PodLegs["prefill-long-0"]["prefill"] == 0 {
			return fmt.Errorf("both buckets must serve prefill legs")
		}
		return atLeast(s, 1, "prefill-decode")
	},
	// llm-d prefix decider: long prompts are prefilled remotely, short ones stay on one pod.
	"llmd-pd":                 llmdPD,
	"trtllm-context-first":    llmdPD,
	"trtllm-generation-first": llmdPD,
	// A decode-mode SGLang server cannot prefill locally: always disaggregated.
	"sglang": func(s lab.Summary) error {
		return all(atLeast(s, 1, "prefill-decode"), none(s, "decode-only"))
	},
	// Data-parallel ranks (test/e2e/labdp checks the rank of every leg): always
	// disaggregated onto the prefill pod's rank endpoints.
	"dp": func(s lab.Summary) error {
		return all(atLeast(s, 1, "prefill-decode"), none(s, "decode-only"))
	},
	// llm-d's dp-epp-config.yaml: one profile, the combined pod's rank endpoints.
	"dp-handler": func(s lab.Summary) error {
		return all(atLeast(s, 1, "combined"), none(s, "prefill-decode"))
	},
	// E/P/D: multimodal requests get encoders, long prompts a prefill pod.
	"epd": func(s lab.Summary) error {
		return all(atLeast(s, 1, "encode-decode", "encode-prefill-decode"), atLeast(s, 1, "prefill-decode", "encode-prefill-decode"))
	},
}

func llmdPD(s lab.Summary) error {
	return all(atLeast(s, 1, "prefill-decode"), atLeast(s, 1, "decode-only", "combined"))
}

func atLeast(s lab.Summary, n int, kinds ...string) error {
	got := 0
	for _, k := range kinds {
		got += s.Decisions[k]
	}
	if got < n {
		return fmt.Errorf("want at least %d of %v", n, kinds)
	}
	return nil
}

func none(s lab.Summary, kind string) error {
	if s.Decisions[kind] != 0 {
		return fmt.Errorf("want no %s decisions", kind)
	}
	return nil
}

func all(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

var gatewayLine = regexp.MustCompile(`Gateway: (http://127\.0\.0\.1:\d+)`)

// The new-user path: start the default lab, send the printed kind of curl request (a
// streamed completion with a long prompt), see it go through a prefill pod and a decode pod
// in the decision trace, then Ctrl-C and check that nothing is left running.
func TestLabCurlAndCleanShutdown(t *testing.T) {
	bin := binDir(t)
	runDir := t.TempDir()
	const subnet = "127.0.59"
	cmd := exec.Command(filepath.Join(bin, "pdgate"), "lab", "--bin-dir", bin, "--subnet", subnet, "--port", "0",
		"--run-dir", runDir, "--status-every", "1s", "--topology", filepath.Join(repoRoot, "config/lab/default.yaml"))
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	urlc := make(chan string, 1)
	var out bytes.Buffer
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			if m := gatewayLine.FindStringSubmatch(sc.Text()); m != nil {
				urlc <- m[1]
			}
		}
		exited <- cmd.Wait()
	}()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	}()
	var url string
	select {
	case url = <-urlc:
	case err := <-exited:
		t.Fatalf("lab exited before it was up: %v\n%s\n%s", err, out.String(), stderr.String())
	case <-time.After(3 * time.Minute):
		t.Fatalf("lab not up within 3 minutes\n%s", stderr.String())
	}

	// The default lab pairs every request with a prefill and a decode pod of one roleset;
	// the combined pod takes overflow only. Every attempt must succeed, and (allowing for an
	// overflow pick) one of the first few must go through a prefill pod and a decode pod.
	prompt := strings.Repeat("Explain disaggregated serving. ", 60) // ~450 tokens: above the 256 uncached threshold
	client := &http.Client{Timeout: time.Minute}
	pd := false
	var decisions []string
	for i := 0; i < 12 && !pd; i++ {
		body, _ := json.Marshal(map[string]any{"model": "meta-llama/Llama-3.1-8B-Instruct", "prompt": fmt.Sprintf("%d %s", i, prompt), "max_tokens": 12, "stream": true})
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/completions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("x-pdgate-trace", "1")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		sse, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("status %d type %q body %s", resp.StatusCode, resp.Header.Get("Content-Type"), sse)
		}
		if n := strings.Count(string(sse), "data: "); n < 3 || !strings.Contains(string(sse), "[DONE]") {
			t.Fatalf("want a streamed completion, got %d events:\n%s", n, sse)
		}
		decision := resp.Header.Get("x-pdgate-decision")
		decisions = append(decisions, decision)
		pd = regexp.MustCompile(`(^|;)decode=decode-[ab]-0`).MatchString(decision) &&
			regexp.MustCompile(`(^|;)prefill=prefill-[ab]-0`).MatchString(decision)
	}
	if !pd {
		t.Fatalf("no streamed completion went through a prefill pod and a decode pod; decisions:\n%s", strings.Join(decisions, "\n"))
	}

	// Ctrl-C.
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("lab exited with %v after Ctrl-C\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("lab did not stop within 30s of Ctrl-C")
	}
	if left := processesMentioning(subnet+".", runDir); len(left) > 0 {
		t.Fatalf("processes left behind after Ctrl-C: %v", left)
	}
	if !strings.Contains(out.String(), "PREFILL LEGS") {
		t.Errorf("no live status table in the output:\n%s", out.String())
	}
}

// processesMentioning lists live processes whose command line contains any needle.
func processesMentioning(needles ...string) []string {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var out []string
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		line := strings.ReplaceAll(string(b), "\x00", " ")
		for _, n := range needles {
			if strings.Contains(line, n) {
				pid, _ := strconv.Atoi(filepath.Base(d))
				if pid != os.Getpid() {
					out = append(out, fmt.Sprintf("%d: %s", pid, line))
				}
				break
			}
		}
	}
	return out
}
