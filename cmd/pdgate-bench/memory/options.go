// Package memory is `pdgate-bench memory`: the resident memory of pdgate's EPP with 512
// endpoints, a full session table and a warm prefix index next to stock GIE's EPP on the same
// endpoints and requests, and of the routing sidecar holding 1,000 concurrent SSE streams.
package memory

import (
	"errors"
	"fmt"
	"io"
	"time"
)

// The memory goals (docs/benchmarks.md).
const (
	GoalEPPBytes     = 256 << 20
	GoalSidecarBytes = 128 << 20
)

// Options configure one run.
type Options struct {
	// Out receives memory.json, memory.md and the plots.
	Out   string
	Quick bool
	// Endpoints is the pool size both EPPs serve.
	Endpoints int
	// Sessions is the number of requests sent to each EPP, each with a session key and a
	// prompt of its own (so it is also the number of session-table entries pdgate records).
	Sessions int
	// PrefixBlocks is how many distinct prefix blocks the requests must carry in total; the
	// prompt length is sized for it (default: 1.25 × the recommended config's table capacity).
	PrefixBlocks int
	// Concurrency and Conns shape the ext_proc load (streams in flight, HTTP/2 connections).
	Concurrency, Conns int
	// ConfigFiles are pdgate's EndpointPickerConfigs (relative to the repository root), each
	// measured over AIBrix rolesets.
	ConfigFiles []string
	// Streams is the number of concurrent SSE streams held open through the sidecar.
	Streams int
	// BinDir holds epp, gie-epp and sidecar ("" = <repo>/bin; missing ones are built).
	BinDir string
	// SkipEPP and SkipSidecar leave a part out.
	SkipEPP, SkipSidecar bool
	// ScrapeInterval is both EPPs' --refresh-metrics-interval. The binaries' 50 ms default means
	// 10,000 scrapes a second over 512 pods, which on a small machine starves the load itself;
	// memory hardly depends on it.
	ScrapeInterval time.Duration
	// MaxPhase bounds each load phase.
	MaxPhase time.Duration
	// Log receives progress lines (nil: discarded).
	Log io.Writer
}

// DefaultOptions are the full run's (quick: 1,000 sessions filling a quarter of the prefix
// table; same pool and streams).
func DefaultOptions(quick bool) Options {
	o := Options{Out: "bench-results/memory", Quick: quick, Endpoints: 512, Sessions: 100_000,
		Concurrency: 32, Conns: 4, ConfigFiles: DefaultConfigs, Streams: 1000, ScrapeInterval: time.Second,
		MaxPhase: 30 * time.Minute}
	if quick {
		o.Sessions = 1_000
		o.PrefixBlocks = prefixTableCapacity / 4
		o.MaxPhase = 60 * time.Second
	}
	return o
}

// DefaultConfigs are pdgate's recommended config and the config that keeps the most
// per-request state: token-load (pd-token-ledger's session table, hybrid_cache_load's prefix
// table in aibrix-pd-pair).
var DefaultConfigs = []string{"config/recommended.yaml", "config/aibrix/token-load.yaml"}

// prefixTableCapacity is aibrix-pd-pair's default prefixTableCapacity (blocks).
const prefixTableCapacity = 1 << 20

// prefixBlockRunes is the recommended config's prefixCacheBlockSize (AIBrix's default).
const prefixBlockRunes = 4

// Validate checks the options.
func (o *Options) Validate() error {
	var errs []error
	if o.Out == "" {
		errs = append(errs, errors.New("bench memory: --out is empty"))
	}
	if !o.SkipEPP {
		if o.Endpoints < 4 || o.Endpoints%4 != 0 {
			errs = append(errs, fmt.Errorf("bench memory: --endpoints=%d: want a multiple of 4, >= 4 (rolesets of 2 prefill + 2 decode pods)", o.Endpoints))
		}
		if o.Sessions < 1 || o.Sessions > 62*62*62*62 {
			errs = append(errs, fmt.Errorf("bench memory: --sessions=%d: want 1..14776336", o.Sessions))
		}
		if o.PrefixBlocks < 0 {
			errs = append(errs, fmt.Errorf("bench memory: --prefix-blocks=%d: want >= 0", o.PrefixBlocks))
		}
		if o.Concurrency < 1 || o.Conns < 1 {
			errs = append(errs, fmt.Errorf("bench memory: --concurrency=%d --conns=%d: want >= 1 each", o.Concurrency, o.Conns))
		}
		if len(o.ConfigFiles) == 0 {
			errs = append(errs, errors.New("bench memory: --configs is empty"))
		}
		seen := map[string]bool{}
		for _, f := range o.ConfigFiles {
			if n := configName(f); f == "" || seen[n] {
				errs = append(errs, fmt.Errorf("bench memory: --configs: %q is empty or named twice", f))
			} else {
				seen[n] = true
			}
		}
	}
	if !o.SkipSidecar && o.Streams < 1 {
		errs = append(errs, fmt.Errorf("bench memory: --streams=%d: want >= 1", o.Streams))
	}
	if !o.SkipEPP && o.ScrapeInterval <= 0 {
		errs = append(errs, fmt.Errorf("bench memory: --refresh-metrics-interval=%s: want > 0", o.ScrapeInterval))
	}
	if o.MaxPhase <= 0 {
		errs = append(errs, fmt.Errorf("bench memory: --max-phase=%s: want > 0", o.MaxPhase))
	}
	if o.SkipEPP && o.SkipSidecar {
		errs = append(errs, errors.New("bench memory: --skip-epp and --skip-sidecar leave nothing to measure"))
	}
	return errors.Join(errs...)
}

func (o *Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", args...)
	}
}

// promptRunes is the user-prompt length that gives each of sessions requests its share of
// blocks distinct prefix blocks (the shared system prompt adds none).
func promptRunes(blocks, sessions int) int {
	per := (blocks + sessions - 1) / sessions
	return max(16, per*prefixBlockRunes+prefixBlockRunes)
}

// prefixBlocks is the number of distinct prefix blocks the prompts must carry.
func (o *Options) prefixBlocks() int {
	if o.PrefixBlocks > 0 {
		return o.PrefixBlocks
	}
	return prefixTableCapacity * 5 / 4
}

// prefixFill is the share of aibrix-pd-pair's prefix table the sent blocks can fill.
func prefixFill(blocks int64) float64 {
	return min(1, float64(blocks)/prefixTableCapacity)
}
