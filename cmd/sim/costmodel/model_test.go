package costmodel

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestBuiltinMatchesConfigFile(t *testing.T) {
	onDisk, err := os.ReadFile(filepath.Join("..", "..", "..", "config", "sim", "llama3-8b-h100.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(onDisk, builtinH100) {
		t.Fatal("config/sim/llama3-8b-h100.yaml and the built-in copy differ; keep them identical")
	}
}

func TestProfilesInConfigLoad(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "..", "..", "config", "sim", "*.yaml"))
	n := 0
	for _, f := range files {
		if strings.Contains(filepath.Base(f), "instances") {
			continue
		}
		if _, err := Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		n++
	}
	if n < 2 {
		t.Fatalf("expected at least 2 cost profiles, found %d", n)
	}
}

func TestH100Figures(t *testing.T) {
	p := Default()
	tests := []struct {
		name string
		got  time.Duration
		want time.Duration
	}{
		// 5 + 0.032·4096 + 6.5e-7·4096² = 146.977190 ms
		{"4k prefill", p.PrefillTime(4096, 0), 146977190 * time.Nanosecond},
		// half the prompt cached: 5 + 0.032·2048 + 6.5e-7·(4096²−2048²) = 78.714893 ms
		{"4k prefill, 2k cached", p.PrefillTime(4096, 2048), 78714893 * time.Nanosecond},
		{"fully cached", p.PrefillTime(4096, 4096), 0},
		// 6.8 + 0.05·32 + 0.000056·32768 = 10.235008 ms
		{"decode step batch 32, 1k KV each", p.DecodeStep(32, 32*1024), 10235008 * time.Nanosecond},
		{"decode step batch 1, empty", p.DecodeStep(1, 0), 6850 * time.Microsecond},
		{"decode step batch 0", p.DecodeStep(0, 100), 0},
		// 2 + 4096·131072 B / 50 GB/s = 2 + 10.737 ms
		{"KV transfer 4k tokens", p.KVTransferTime(4096), 12737418 * time.Nanosecond},
		{"encode 2 items", p.Encode(2), 40 * time.Millisecond},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

func TestPrefillIsSuperlinearAndChunksAddUp(t *testing.T) {
	p := Default()
	if a, b := p.PrefillSpan(0, 32768), 8*p.PrefillSpan(0, 4096); a <= b {
		t.Fatalf("32k prefill %v should exceed 8 x 4k prefill %v", a, b)
	}
	whole := p.PrefillSpan(0, 8192)
	chunked := p.PrefillSpan(0, 2048) + p.PrefillSpan(2048, 4096) + p.PrefillSpan(4096, 6144) + p.PrefillSpan(6144, 8192)
	if d := whole - chunked; d < -2 || d > 2 { // rounding to the nanosecond per chunk
		t.Fatalf("chunks %v do not add up to the whole %v", chunked, whole)
	}
}

func TestValidateNamesFields(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(p *Profile)
		wantErr string
	}{
		{"block size", func(p *Profile) { p.BlockSize = 0 }, "blockSize"},
		{"capacity", func(p *Profile) { p.KVCapacityTokens = -1 }, "kvCapacityTokens"},
		{"bandwidth", func(p *Profile) { p.KVTransfer.BandwidthGBps = 0 }, "kvTransfer.bandwidthGBps"},
		{"sources", func(p *Profile) { p.Sources = nil }, "sources"},
		{"negative chunk", func(p *Profile) { p.ChunkedPrefillTokens = -5 }, "chunkedPrefillTokens"},
		{"negative CPU tier", func(p *Profile) { p.CPUOffload.CapacityTokens = -1 }, "cpuOffload.capacityTokens"},
		{"CPU tier without a link", func(p *Profile) { p.CPUOffload = CPUOffload{CapacityTokens: 800000} }, "cpuOffload.bandwidthGBps"},
	}
	for _, tc := range tests {
		p := Default()
		tc.mutate(p)
		err := p.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: got %v, want error naming %q", tc.name, err, tc.wantErr)
		}
	}
	if err := Default().Validate(); err != nil {
		t.Fatalf("default profile invalid: %v", err)
	}
	if _, err := Parse([]byte("name: x\nbogus: 1\n")); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("unknown field not rejected: %v", err)
	}
}

// TestCPULoadTime: loading offloaded KV costs the transfer model's bytes over the host link,
// far less than computing the same tokens, and nothing without a tier's link.
func TestCPULoadTime(t *testing.T) {
	p := Default()
	load := p.CPULoadTime(10000)
	if want := time.Duration(10000 * p.KVTransfer.BytesPerToken / (p.CPUOffload.BandwidthGBps * 1e9) * float64(time.Second)); load < want-time.Microsecond || load > want+time.Microsecond {
		t.Fatalf("10,000 tokens load in %v, want %v", load, want)
	}
	if compute := p.PrefillTime(10000, 0); load*4 > compute {
		t.Fatalf("loading 10,000 tokens (%v) is not well under computing them (%v)", load, compute)
	}
	if p.CPULoadTime(0) != 0 {
		t.Fatal("loading nothing takes time")
	}
	p.CPUOffload.BandwidthGBps = 0
	if p.CPULoadTime(10000) != 0 {
		t.Fatal("a profile without a host link loads")
	}
}

func FuzzParse(f *testing.F) {
	f.Add(builtinH100)
	f.Add([]byte("name: x\nblockSize: -1\n"))
	f.Add([]byte("{"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse(b)
		if err == nil && p.Validate() != nil {
			t.Fatal("Parse accepted a profile that does not validate")
		}
	})
}
