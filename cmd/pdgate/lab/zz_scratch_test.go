package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/loadgen"
	"github.com/pdgate/pdgate/cmd/pdgate/workload"
)

func TestScratchLab(t *testing.T) {
	topo := os.Getenv("SCRATCH_TOPO")
	if topo == "" {
		t.Skip()
	}
	ctx := context.Background()
	l, err := Start(ctx, Options{Topology: topo, BinDir: "/tmp/labbin", Dir: "/tmp/scratchlab", Subnet: "127.0.44", Port: 0, ReadyTimeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Stop()
	if os.Getenv("SCRATCH_ONE") != "" {
		g, _ := workload.New(os.Getenv("SCRATCH_ONE"), workload.Options{Model: l.Plan.Topology.Model, Seed: 1, MaxTokensCap: 16})
		for i := 0; i < 6; i++ {
			r, _ := g.Next()
			req, _ := http.NewRequest("POST", l.URL+r.Path, bytes.NewReader(r.Body))
			req.Header.Set("x-pdgate-trace", "1")
			req.Header.Set("content-type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if len(b) > 600 {
				b = b[:600]
			}
			t.Logf("%d %v\n%s", resp.StatusCode, resp.Header, b)
		}
		return
	}
	gen, _ := workload.New("mixed", workload.Options{Model: l.Plan.Topology.Model, Seed: 1, MaxTokensCap: 16})
	res, err := loadgen.Run(ctx, loadgen.Config{URL: l.URL, Gen: gen, Duration: 5 * time.Second, Concurrency: 4, Trace: true, Classify: l.Plan.Classify, KeepTraces: 5})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(Summary{Result: res, Pods: l.Plan.Status(ctx)}, "", " ")
	t.Log(string(b))
}
