package replicaledger

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/lab"
	"github.com/pdgate/pdgate/test/testsupport"
	"github.com/pdgate/pdgate/test/testsupport/labtest"
	"github.com/pdgate/pdgate/test/testsupport/redistest"
)

// With flow control on, flow control decides when a request is dispatched and forecast-admitter
// judges it after that. At the topology's 2 s scrape flow control holds most requests: the
// prefill legs dispatched since the last scrape count as the prefill pod's queue, which reaches
// its threshold after a few of them, and the detector's 200 ms staleness limit reads every pod
// saturated for most of each scrape interval. A request dispatched seconds after it arrived has
// spent that time of its TTFT; forecast-admitter counts it (contract.QueueWait), so one EPP still
// admits no more than the decode pods' KV caches hold (about 40 of the 80 offered). Forecasting
// from the dispatch alone, it admitted all 80, with time to first token up to 26 s against the 2 s
// objective.
func TestForecastAdmissionUnderFlowControl(t *testing.T) {
	srv := redistest.Start(t, 0)
	dir := t.TempDir()
	profile, err := filepath.Abs(filepath.Join(testsupport.RepoRoot(), "config/sim/llama3-8b-h100.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(fmt.Sprintf(eppConfig, srv.Addr, kvTokens), "plugins:\n", "featureGates: [flowControl]\nplugins:\n", 1)
	if err := os.WriteFile(filepath.Join(dir, "epp.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	topo := filepath.Join(dir, "topology.yaml")
	if err := os.WriteFile(topo, []byte(fmt.Sprintf(topology, kvTokens, profile, kvTokens)), 0o644); err != nil {
		t.Fatal(err)
	}
	l := labtest.Start(t, lab.Options{Topology: topo, Subnet: "127.0.62", Out: io.Discard, Err: io.Discard})
	client := &http.Client{Timeout: 3 * time.Minute}
	const offered, gap = 80, 50 * time.Millisecond
	seq := 0
	tl := offer(client, []string{l.URL}, l.Plan.Topology.Model, offered, gap, &seq, nil)
	t.Logf("one EPP with flow control: %s", tl)
	if len(tl.lost) > 0 {
		t.Errorf("lost requests: %v", tl.lost)
	}
	// the two decode pods hold about 40 sequences of ~760 tokens in their 16,000-token caches
	if holds := 2 * kvTokens / (maxTokens + 60); tl.admitted == 0 || 10*tl.admitted > 11*holds {
		t.Errorf("admitted %d of %d: want some, and no more than the decode pods hold (%d) + 10 %%", tl.admitted, offered, holds)
	}
}
