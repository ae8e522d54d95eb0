package server

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
)

// startRanks starts the N rank instances of o on consecutive free ports.
func startRanks(t *testing.T, o Options) []*Instance {
	t.Helper()
	for try := 0; try < 20; try++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		o.Port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if o.Port+o.DataParallelSize > 65535 {
			continue
		}
		var out []*Instance
		ok := true
		for _, ro := range ExpandDataParallel(o) {
			ro.Clock = o.Clock
			in, err := Start(context.Background(), ro)
			if err != nil {
				ok = false
				break
			}
			out = append(out, in)
		}
		if ok {
			for _, in := range out {
				t.Cleanup(in.Close)
			}
			return out
		}
		for _, in := range out {
			in.Close()
		}
	}
	t.Fatal("no run of consecutive free ports")
	return nil
}

func TestDataParallelRanks(t *testing.T) {
	clk := newPump(t)
	prefill := startRanks(t, Options{Host: "127.0.0.1", Dialect: DialectVLLM, Role: RolePrefill, DataParallelSize: 3, Clock: clk, Name: "p"})
	decode := startRanks(t, Options{Host: "127.0.0.1", Dialect: DialectVLLM, Role: RoleDecode, DataParallelSize: 3, Clock: clk})
	base := prefill[0].opts.Port
	engines := map[string]bool{}
	for r, in := range prefill {
		if in.opts.Port != base+r || in.opts.DataParallelRank != r || in.opts.Name != "p-rank-"+strconv.Itoa(r) {
			t.Fatalf("rank %d: port %d rank %d name %q", r, in.opts.Port, in.opts.DataParallelRank, in.opts.Name)
		}
		engines[in.engineID] = true
		pr := post(t, "http://"+in.Addr()+"/v1/chat/completions", chat(longPrompt, 1, map[string]any{"kv_transfer_params": prefillParams}), nil)
		if pr.status != 200 || pr.header.Get(HeaderDPRank) != strconv.Itoa(r) {
			t.Fatalf("prefill rank %d: %d, %s=%q: %s", r, pr.status, HeaderDPRank, pr.header.Get(HeaderDPRank), pr.raw)
		}
		kv := pr.body["kv_transfer_params"].(map[string]any)
		if kv["remote_dp_rank"] != float64(r) || kv["remote_port"] != float64(base+r) {
			t.Fatalf("prefill rank %d reported %v", r, kv)
		}
		// The decode rank of the same index pulls the KV from the prefill rank's own port.
		d := decode[r]
		dr := post(t, "http://"+d.Addr()+"/v1/chat/completions", chat(longPrompt, 4, map[string]any{"kv_transfer_params": kv}), nil)
		if dr.status != 200 || dr.header.Get(HeaderDPRank) != strconv.Itoa(r) {
			t.Fatalf("decode rank %d: %d %q %s", r, dr.status, dr.header.Get(HeaderDPRank), dr.raw)
		}
	}
	if len(engines) != 3 {
		t.Fatalf("ranks share engine ids: %v", engines)
	}
	// Each rank has its own KV cache and metrics: only rank 1 served the extra request.
	post(t, "http://"+prefill[1].Addr()+"/v1/chat/completions", chat("another prompt entirely", 2, nil), nil)
	for r, in := range prefill {
		want := 1
		if r == 1 {
			want = 2
		}
		var got float64
		if mf := scrape(t, in)["vllm:request_success_total"]; mf != nil {
			for _, m := range mf.GetMetric() {
				got += m.GetCounter().GetValue()
			}
		}
		if got != float64(want) {
			t.Fatalf("rank %d served %v requests, want %d", r, got, want)
		}
	}
}

func TestDataParallelOptions(t *testing.T) {
	if got := ExpandDataParallel(Options{Port: 8000}); len(got) != 1 || got[0].Port != 8000 {
		t.Fatalf("no ranks: %+v", got)
	}
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Dialect: DialectSGLang, DataParallelSize: 2, Port: 8000}, "vllm dialect only"},
		{Options{DataParallelSize: 2}, "fixed port"},
		{Options{DataParallelSize: 2, DataParallelRank: 2, Port: 8000}, "dataParallelRank must be in 0..1"},
		{Options{DataParallelRank: 1, Port: 8000}, "needs dataParallelSize > 1"},
		{Options{DataParallelSize: 65, Port: 8000}, "0..64"},
	} {
		o := c.o
		if _, err := o.complete(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want %q", c.o, err, c.want)
		}
	}
}
