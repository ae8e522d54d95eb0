package lab_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/pdgate/pdgate/cmd/epp/extproc"
	gwproxy "github.com/pdgate/pdgate/cmd/gateway/proxy"
	"github.com/pdgate/pdgate/cmd/pdgate/lab"
	"github.com/pdgate/pdgate/cmd/pdgate/lab/otlpreceiver"
	scproxy "github.com/pdgate/pdgate/cmd/sidecar/proxy"
	simserver "github.com/pdgate/pdgate/cmd/sim/server"
)

// `pdgate lab --otlp`: the lab's own OTLP gRPC receiver gets the spans of every request the
// workload sent, from the gateway, the EPP, the sidecar and the engine, joined in one trace
// per request;
// they are in the run directory's span file once the lab has stopped, and `pdgate lab spans`
// prints their phase timelines.
func TestLabOTLPReceiver(t *testing.T) {
	bin := binDir(t)
	runDir := t.TempDir()
	const requests = 16
	s := runLab(t, bin, "--topology", filepath.Join(repoRoot, "config/lab/llmd-pd.yaml"), "--bin-dir", bin,
		"--subnet", "127.0.57", "--port", "0", "--run-dir", runDir, "--workload", "chat",
		"--max-requests", strconv.Itoa(requests), "--duration", "1m", "--otlp")
	if s.RequestsSent != requests || s.ResponsesByStatus["200"] != requests {
		t.Fatalf("sent %d, responses %v; want %d 200s", s.RequestsSent, s.ResponsesByStatus, requests)
	}
	path := filepath.Join(runDir, lab.SpansFile)
	if s.SpansFile != path {
		t.Errorf("summary names span file %q, want %q", s.SpansFile, path)
	}

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	traces := map[string]map[string]otlpreceiver.Span{} // trace -> span name -> span
	var engine []otlpreceiver.Span
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4<<20)
	for sc.Scan() {
		var sp otlpreceiver.Span
		if err := json.Unmarshal(sc.Bytes(), &sp); err != nil {
			t.Fatalf("span line %q: %v", sc.Text(), err)
		}
		if traces[sp.TraceID] == nil {
			traces[sp.TraceID] = map[string]otlpreceiver.Span{}
		}
		traces[sp.TraceID][sp.Name] = sp
		if sp.Name == simserver.SpanEngineRequest {
			engine = append(engine, sp)
		}
	}
	// Every request the gateway served (the workload's and the lab's warm-up) is one trace:
	// the gateway's root span, the EPP's request span under it, the sidecar's under the EPP's,
	// each from its own process.
	joined := 0
	for id, by := range traces {
		gw, ok := by[gwproxy.SpanRequest]
		if !ok || gw.Parent != "" {
			continue
		}
		epp, sc := by[extproc.SpanRequest], by[scproxy.SpanRequest]
		if gw.Service != "pdgate/gateway" || epp.Service != "pdgate/epp" || sc.Service != "pdgate/sidecar" ||
			epp.Parent != gw.SpanID || sc.Parent != epp.SpanID {
			t.Errorf("trace %s: gateway %+v\nepp %+v\nsidecar %+v", id, gw, epp, sc)
			continue
		}
		joined++
	}
	if joined < requests {
		t.Fatalf("%d traces joined gateway, EPP and sidecar, want at least %d (traces: %d)", joined, requests, len(traces))
	}
	// The vLLM simulators' own request spans hang under the sidecar's leg that sent them.
	underLeg := 0
	for _, e := range engine {
		by := traces[e.TraceID]
		for _, leg := range []string{scproxy.SpanPrefill, scproxy.SpanDecode} {
			if l, ok := by[leg]; ok && l.SpanID == e.Parent && e.Service == "pdgate/sim" && e.Attrs[simserver.AttrTimeInPrefill] != "" {
				underLeg++
			}
		}
	}
	if underLeg < requests {
		t.Errorf("%d engine spans under a sidecar leg, want at least one per request (%d); engine spans: %d", underLeg, requests, len(engine))
	}

	out, err := exec.Command(filepath.Join(bin, "pdgate"), "lab", "spans", "3", "--run-dir", runDir).CombinedOutput()
	if err != nil {
		t.Fatalf("pdgate lab spans: %v\n%s", err, out)
	}
	text := string(out)
	if n := strings.Count(text, "request "); n != 3 || !strings.Contains(text, gwproxy.LegRouting) || !strings.Contains(text, extproc.PhaseScheduling) {
		t.Fatalf("pdgate lab spans 3 printed %d requests:\n%s", n, text)
	}
	t.Logf("%d requests, %d traces in the span file; the last 3:\n%s", requests, len(traces), text)
}
