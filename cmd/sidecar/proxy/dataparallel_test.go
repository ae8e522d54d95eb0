package proxy

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// prefillRank answers like a vLLM NIXL prefiller of a data-parallel deployment that reports
// the rank it ran on.
func prefillRank(rank int) func(w http.ResponseWriter, r *http.Request, body map[string]any) {
	return func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
		jsonAnswer(w, 200, map[string]any{
			"choices": []any{map[string]any{"text": "x", "finish_reason": "length"}},
			"kv_transfer_params": map[string]any{"do_remote_prefill": true, "do_remote_decode": false, "remote_engine_id": "eng-1",
				"remote_block_ids": []any{1}, "remote_host": "10.9.9.9", "remote_port": 5600, "remote_dp_rank": rank},
		})
	}
}

// The local engine has 4 ranks; the fake is rank 1 (its port = --engine-url port + 1). Every
// decode leg of the table must reach rank 1.
func TestDataParallelRanks(t *testing.T) {
	tests := []struct {
		name         string
		prefillRank  int  // -1 = no prefill leg
		header       bool // x-data-parallel-host-port names rank 1
		stride       int
		wantSideChan float64
	}{
		{name: "decode pinned to the prefill's rank", prefillRank: 1, wantSideChan: 5600},
		{name: "side-channel port offset by rank", prefillRank: 1, stride: 10, wantSideChan: 5610},
		{name: "the prefill's rank wins over the header", prefillRank: 1, header: true, wantSideChan: 5600},
		{name: "decode-only: the rank x-data-parallel-host-port names", prefillRank: -1, header: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rank1 := newFake(t, decodeOK)
			var pre *fake
			if tt.prefillRank >= 0 {
				pre = newFake(t, prefillRank(tt.prefillRank))
			}
			var cfg Config
			if pre != nil {
				cfg = testConfig(rank1, pre.hp())
			} else {
				cfg = testConfig(rank1)
			}
			u, _ := url.Parse(rank1.srv.URL)
			port, _ := strconv.Atoi(u.Port())
			cfg.EngineURL = &url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", port-1)} // rank 0: nothing listens
			cfg.DataParallel = DataParallel{Size: 4, ListenPort: 8000, SideChannelStride: tt.stride}
			env := startProxy(t, cfg)
			hdr := map[string]string{}
			if pre != nil {
				hdr[protocol.HeaderPrefillerHostPort] = pre.hp().String()
			}
			if tt.header {
				hdr[protocol.HeaderDataParallelHostPort] = "10.0.0.5:8001"
				if pre != nil {
					hdr[protocol.HeaderDataParallelHostPort] = "10.0.0.5:8003" // rank 3, overridden by the prefill's rank
				}
			}
			resp, body := env.post(t, "/v1/completions", `{"model":"m","prompt":"p"}`, hdr)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			got := rank1.only(t)
			if pre != nil {
				kv, _ := got.Body["kv_transfer_params"].(map[string]any)
				if kv["remote_port"] != tt.wantSideChan {
					t.Fatalf("decode kv_transfer_params.remote_port %v, want %v", kv["remote_port"], tt.wantSideChan)
				}
			}
			if len(got.Header.Values(protocol.HeaderDataParallelHostPort)) > 0 {
				t.Fatal("x-data-parallel-host-port reached the engine")
			}
		})
	}
}

func TestDataParallelOffWithoutSize(t *testing.T) {
	k := ranks{engineURL: &url.URL{Host: "127.0.0.1:9000"}}
	if got := k.fromHeader("10.0.0.1:8001"); got != "" {
		t.Fatalf("ranks off: got port %q", got)
	}
	k.dp = DataParallel{Size: 2, ListenPort: 8000}
	for v, want := range map[string]string{"10.0.0.1:8001": "9001", "10.0.0.1:8002": "", "x": "", "10.0.0.1:7999": ""} {
		if got := k.fromHeader(v); got != want {
			t.Errorf("%s → %q, want %q", v, got, want)
		}
	}
}
