// Package costmodel holds the simulator's cost profile (the numbers and their public sources)
// and the pure functions that turn token counts into model time. Nothing here reads a clock.
package costmodel

import (
	_ "embed"
	"errors"
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

// Profile is one cost profile file (config/sim/*.yaml).
type Profile struct {
	Name                 string     `json:"name"`
	Model                string     `json:"model"`
	Hardware             string     `json:"hardware"`
	BlockSize            int        `json:"blockSize"`
	KVCapacityTokens     int        `json:"kvCapacityTokens"`
	MaxBatch             int        `json:"maxBatch"`
	MaxModelLen          int        `json:"maxModelLen"`
	ChunkedPrefillTokens int        `json:"chunkedPrefillTokens"`
	MeanOutputTokens     int        `json:"meanOutputTokens"`
	Prefill              Prefill    `json:"prefill"`
	Decode               Decode     `json:"decode"`
	KVTransfer           KVTransfer `json:"kvTransfer"`
	Encoder              Encoder    `json:"encoder"`
	CPUOffload           CPUOffload `json:"cpuOffload,omitempty"`
	Sources              []string   `json:"sources"`
}

// CPUOffload is a CPU memory tier under each engine's GPU KV cache (vLLM's offloading
// connector, --kv-offloading-size; LMCache's local CPU backend): every computed block is
// written there too, and a prompt whose prefix only the CPU still holds loads it back at
// BandwidthGBps instead of computing it. CapacityTokens 0 (the default) is no tier.
type CPUOffload struct {
	CapacityTokens int     `json:"capacityTokens,omitempty"`
	BandwidthGBps  float64 `json:"bandwidthGBps,omitempty"`
}

// Prefill: time of prompt tokens [s, e) = a·(e−s) + b·(e²−s²) ms, plus OverheadMs per step.
type Prefill struct {
	OverheadMs           float64 `json:"overheadMs"`
	LinearMsPerToken     float64 `json:"linearMsPerToken"`
	QuadraticMsPerToken2 float64 `json:"quadraticMsPerToken2"`
}

// Decode: one step at batch B with K resident KV tokens = BaseMs + PerSeqMs·B + PerKVTokenMs·K.
type Decode struct {
	BaseMs       float64 `json:"baseMs"`
	PerSeqMs     float64 `json:"perSeqMs"`
	PerKVTokenMs float64 `json:"perKVTokenMs"`
}

// KVTransfer: LatencyMs + tokens·BytesPerToken / BandwidthGBps.
type KVTransfer struct {
	LatencyMs     float64 `json:"latencyMs"`
	BytesPerToken float64 `json:"bytesPerToken"`
	BandwidthGBps float64 `json:"bandwidthGBps"`
}

// Encoder: the multimodal encoder's cost and the prompt tokens each item becomes.
type Encoder struct {
	MsPerItem     float64 `json:"msPerItem"`
	TokensPerItem int     `json:"tokensPerItem"`
}

//go:embed builtin/llama3-8b-h100.yaml
var builtinH100 []byte

// Default returns the built-in profile (a copy of config/sim/llama3-8b-h100.yaml).
func Default() *Profile {
	p, err := Parse(builtinH100)
	if err != nil {
		panic(fmt.Sprintf("built-in cost profile is invalid: %v", err))
	}
	return p
}

// Load reads and validates a profile file.
func Load(path string) (*Profile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read cost profile: %w", err)
	}
	p, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("cost profile %s: %w", path, err)
	}
	return p, nil
}

// Parse decodes a profile strictly (unknown fields are errors) and validates it.
func Parse(b []byte) (*Profile, error) {
	var p Profile
	if err := yaml.UnmarshalStrict(b, &p); err != nil {
		return nil, fmt.Errorf("parse cost profile: %w", err)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Validate checks every field; the error names the field.
func (p *Profile) Validate() error {
	var errs []error
	pos := func(name string, v float64) {
		if !(v > 0) {
			errs = append(errs, fmt.Errorf("%s must be > 0, got %v", name, v))
		}
	}
	nonneg := func(name string, v float64) {
		if v < 0 || v != v {
			errs = append(errs, fmt.Errorf("%s must be >= 0, got %v", name, v))
		}
	}
	if p.Name == "" {
		errs = append(errs, errors.New("name is required"))
	}
	pos("blockSize", float64(p.BlockSize))
	pos("kvCapacityTokens", float64(p.KVCapacityTokens))
	pos("maxBatch", float64(p.MaxBatch))
	pos("maxModelLen", float64(p.MaxModelLen))
	nonneg("chunkedPrefillTokens", float64(p.ChunkedPrefillTokens))
	pos("meanOutputTokens", float64(p.MeanOutputTokens))
	nonneg("prefill.overheadMs", p.Prefill.OverheadMs)
	pos("prefill.linearMsPerToken", p.Prefill.LinearMsPerToken)
	nonneg("prefill.quadraticMsPerToken2", p.Prefill.QuadraticMsPerToken2)
	pos("decode.baseMs", p.Decode.BaseMs)
	nonneg("decode.perSeqMs", p.Decode.PerSeqMs)
	nonneg("decode.perKVTokenMs", p.Decode.PerKVTokenMs)
	nonneg("kvTransfer.latencyMs", p.KVTransfer.LatencyMs)
	pos("kvTransfer.bytesPerToken", p.KVTransfer.BytesPerToken)
	pos("kvTransfer.bandwidthGBps", p.KVTransfer.BandwidthGBps)
	nonneg("encoder.msPerItem", p.Encoder.MsPerItem)
	nonneg("encoder.tokensPerItem", float64(p.Encoder.TokensPerItem))
	nonneg("cpuOffload.capacityTokens", float64(p.CPUOffload.CapacityTokens))
	if p.CPUOffload.CapacityTokens > 0 {
		pos("cpuOffload.bandwidthGBps", p.CPUOffload.BandwidthGBps)
	} else {
		nonneg("cpuOffload.bandwidthGBps", p.CPUOffload.BandwidthGBps)
	}
	if len(p.Sources) == 0 {
		errs = append(errs, errors.New("sources: a profile must cite where its numbers come from"))
	}
	return errors.Join(errs...)
}
