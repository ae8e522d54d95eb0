// Package sim runs the simulator binary as real processes and checks the KV handoff between
// them over real HTTP: the decode process pulls the KV from the prefill process it is told to.
package sim

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/test/testsupport"
)

var binDir, repoRoot string

func TestMain(m *testing.M) { testsupport.Main(m, "sim-e2e", &binDir, &repoRoot, "sim") }

var addrRE = regexp.MustCompile(`"addr":"([0-9.]+:[0-9]+)"`)

// startSim runs one simulator process on a free port and returns its address.
func startSim(t *testing.T, args ...string) (string, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "sim"), append([]string{"--port", "0", "--time-scale", "100"}, args...)...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := addrRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
	}()
	select {
	case a := <-found:
		return a, cmd
	case <-time.After(30 * time.Second):
		t.Fatal("simulator did not report its address")
	}
	return "", nil
}

var client = &http.Client{Timeout: 30 * time.Second}

func post(t *testing.T, url string, body map[string]any) (int, map[string]any, string) {
	t.Helper()
	status, _, raw := testsupport.PostJSON(t, url, nil, body)
	var m map[string]any
	_ = json.Unmarshal([]byte(raw), &m)
	return status, m, raw
}

func chat(extra map[string]any) map[string]any {
	b := map[string]any{"messages": []any{map[string]any{"role": "user", "content": "two processes share one KV handoff"}}, "max_tokens": 6}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

func TestVLLMHandoffAcrossProcesses(t *testing.T) {
	p, pcmd := startSim(t, "--role", "prefill")
	d, _ := startSim(t, "--role", "decode")
	prefill := map[string]any{"do_remote_decode": true, "do_remote_prefill": false}
	code, body, raw := post(t, "http://"+p+"/v1/chat/completions", chat(map[string]any{"kv_transfer_params": prefill, "max_tokens": 1}))
	if code != 200 || body["kv_transfer_params"] == nil {
		t.Fatalf("prefill leg: %d %s", code, raw)
	}
	kv := body["kv_transfer_params"]
	code, _, raw = post(t, "http://"+d+"/v1/chat/completions", chat(map[string]any{"kv_transfer_params": kv, "stream": true}))
	if code != 200 || !strings.Contains(raw, "data: [DONE]") || strings.Count(raw, `"content":`)-strings.Count(raw, `"content":""`) != 6 {
		t.Fatalf("decode leg: %d %s", code, raw)
	}
	if code, _, raw = post(t, "http://"+d+"/v1/chat/completions", chat(map[string]any{"kv_transfer_params": kv})); code != http.StatusGone {
		t.Fatalf("second pull of one KV: %d %s", code, raw)
	}
	// produce once more, then lose the prefill process: the decode must fail, not prefill locally
	_, body, _ = post(t, "http://"+p+"/v1/chat/completions", chat(map[string]any{"kv_transfer_params": prefill, "max_tokens": 1}))
	_ = pcmd.Process.Kill()
	_ = pcmd.Wait()
	if code, _, raw = post(t, "http://"+d+"/v1/chat/completions", chat(map[string]any{"kv_transfer_params": body["kv_transfer_params"]})); code != http.StatusBadGateway {
		t.Fatalf("decode after the prefill process died: %d %s", code, raw)
	}
}

func TestSGLangBootstrapAcrossProcesses(t *testing.T) {
	p, _ := startSim(t, "--dialect", "sglang", "--role", "prefill", "--bootstrap-port", "0")
	d, _ := startSim(t, "--dialect", "sglang", "--role", "decode", "--kv-wait-timeout", "3000s")
	resp, err := client.Get("http://" + p + "/get_server_info")
	if err != nil {
		t.Fatal(err)
	}
	var info map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	boot := map[string]any{"bootstrap_host": "127.0.0.1", "bootstrap_port": info["disaggregation_bootstrap_port"], "bootstrap_room": 12345}
	// both legs at once, as the sidecar sends them
	done := make(chan string, 1)
	go func() {
		code, _, raw := post(t, "http://"+d+"/v1/chat/completions", chat(boot))
		done <- fmt.Sprint(code, " ", raw)
	}()
	if code, _, raw := post(t, "http://"+p+"/v1/chat/completions", chat(mergeMaps(boot, map[string]any{"max_tokens": 1}))); code != 200 {
		t.Fatalf("prefill leg: %d %s", code, raw)
	}
	if got := <-done; !strings.HasPrefix(got, "200 ") {
		t.Fatalf("decode leg: %s", got)
	}
}

func mergeMaps(a, b map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}
