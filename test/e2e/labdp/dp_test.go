// Package labdp runs the lab's data-parallel topologies end to end: one simulator
// process per pod serving several vLLM DP ranks on consecutive ports, the routing sidecar
// with --data-parallel-size, the EPP and the dev gateway, all real processes from bin/.
package labdp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/lab"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/testsupport/labtest"
)

const repoRoot = "../../.."

func startLab(t *testing.T, topology, subnet string) *lab.Lab {
	t.Helper()
	return labtest.Start(t, lab.Options{Topology: filepath.Join(repoRoot, topology), Subnet: subnet, Out: io.Discard, Err: io.Discard})
}

// leg is one request's evidence: the endpoint the EPP named for a stage and the rank that
// answered (the decode engine's x-sim-dp-rank, forwarded by the sidecar and the gateway).
type leg struct {
	status      int
	decision    string
	decodeRank  string
	requestBody string
}

// drive sends n streamed chat requests through the gateway, 8 at a time (so the EPP spreads
// them over ranks), and returns what each got back.
func drive(t *testing.T, l *lab.Lab, n int) []leg {
	t.Helper()
	out := make([]leg, n)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	client := &http.Client{Timeout: time.Minute}
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			prompt := fmt.Sprintf("request %d: %s", i, strings.Repeat("explain data-parallel attention ranks and KV handoff. ", 40))
			body, _ := json.Marshal(map[string]any{"model": l.Plan.Topology.Model, "stream": true, "max_tokens": 8,
				"messages": []map[string]string{{"role": "user", "content": prompt}}})
			req, _ := http.NewRequest(http.MethodPost, l.URL+"/v1/chat/completions", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(protocol.HeaderTrace, "1")
			resp, err := client.Do(req)
			if err != nil {
				out[i] = leg{status: -1, decision: err.Error()}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			out[i] = leg{status: resp.StatusCode, decision: resp.Header.Get(protocol.HeaderDecision),
				decodeRank: resp.Header.Get("x-sim-dp-rank"), requestBody: string(b)}
		}(i)
	}
	wg.Wait()
	return out
}

// stagePick returns the endpoint the decision header names for the profile (decode, prefill).
func stagePick(decision, profile string) string {
	for _, part := range strings.Split(decision, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if ok && k == profile {
			return strings.TrimSpace(strings.Split(v, ",")[0])
		}
	}
	return ""
}

// rankOf is the rank of a "<pod>-rank-<r>" endpoint name, or -1.
func rankOf(endpoint string) int {
	i := strings.LastIndex(endpoint, "-rank-")
	if i < 0 {
		return -1
	}
	r, err := strconv.Atoi(endpoint[i+len("-rank-"):])
	if err != nil {
		return -1
	}
	return r
}

// config/lab/dp.yaml: the EPP picks a prefill rank endpoint; the prefill rank reports
// remote_dp_rank; the decode pod's sidecar pins the decode leg to that rank. Every request's
// decode ran on the rank its prefill reported, and the EPP used more than one rank (so a
// sidecar ignoring the rank, which always decodes on rank 0, fails).
func TestDecodeOnThePrefillsRank(t *testing.T) {
	servedOnPickedRank(t, startLab(t, "config/lab/dp.yaml", "127.0.72"), "prefill", "prefill-0-rank-")
}

// config/lab/dp-handler.yaml: llm-d's dp-epp-config.yaml unchanged; the EPP picks a rank
// endpoint of the combined pod, data-parallel-profile-handler sends the gateway to the
// sidecar's primary port and names the rank in x-data-parallel-host-port; the sidecar
// dispatches to that rank's engine.
func TestDataParallelProfileHandlerRank(t *testing.T) {
	servedOnPickedRank(t, startLab(t, "config/lab/dp-handler.yaml", "127.0.73"), "default", "combined-0-rank-")
}

// servedOnPickedRank drives requests through l and checks that every one was decoded on the
// rank of the endpoint (named endpointPrefix<rank>) the EPP picked for stage, and that the
// EPP picked more than one rank: on rank 0 alone a sidecar ignoring the rank would pass.
func servedOnPickedRank(t *testing.T, l *lab.Lab, stage, endpointPrefix string) {
	t.Helper()
	ranks := map[int]int{}
	for i, g := range drive(t, l, 48) {
		if g.status != http.StatusOK {
			t.Fatalf("request %d: status %d (%s) %s", i, g.status, g.decision, g.requestBody)
		}
		ep := stagePick(g.decision, stage)
		r := rankOf(ep)
		if r < 0 || !strings.HasPrefix(ep, endpointPrefix) {
			t.Fatalf("request %d: decision %q names no %s rank endpoint", i, g.decision, stage)
		}
		if g.decodeRank != strconv.Itoa(r) {
			t.Errorf("request %d: EPP picked %s rank %d (%s), decoded on rank %q", i, stage, r, ep, g.decodeRank)
		}
		ranks[r]++
	}
	t.Logf("%s ranks picked (= decoded on): %v", stage, ranks)
	if len(ranks) < 2 {
		t.Errorf("the EPP picked only %s ranks %v of 4: the test would not tell a pinned decode from rank 0", stage, ranks)
	}
}
