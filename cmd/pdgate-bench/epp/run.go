package epp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate-bench/eppharness"
	"github.com/pdgate/pdgate/cmd/pdgate/bench/report"
)

// Options configure one `pdgate-bench epp` run.
type Options struct {
	Out   string
	Quick bool
	// Sizes are the request body sizes in bytes; Requests the measured exchanges per size.
	Sizes    []int
	Requests []int
	// Concurrency is the number of concurrent ext_proc streams; Conns the HTTP/2 connections.
	Concurrency, Conns int
	ChunkSize          int
	// Burst is the number of back-to-back requests of the burst-spreading run (0 = skip).
	Burst int
	// Configs are the names to run (nil = all of DefaultConfigs); the first is the baseline.
	Configs []string
	// Parser: "map" or "raw" adds pdgate-openai-parser to configs that name no parser, "none"
	// measures the files as they are.
	Parser string
	// MaxPhase caps one measured load phase (wall time).
	MaxPhase time.Duration
	// MemoryEndpoints, when > 0, starts every EPP once more with that many idle endpoints and
	// reports its resident memory.
	MemoryEndpoints int
	BinDir          string
	// CPUProfile, when > 0, writes a CPU profile of every EPP over the first CPUProfile of its
	// measured phase at the last size to <Out>/<config>-<size>.pprof (the EPP's
	// /debug/pprof/profile; the phase should last longer: raise Requests).
	CPUProfile time.Duration
	// Repeats runs each measured phase this many times (0 or 1: once) and reports the median
	// and the spread (repeats.go).
	Repeats int
	// Instructions meters every phase in instructions counted by callgrind instead of CPU
	// time (instructions.go).
	Instructions bool
	// Pods, when > 0, gives every config's pool this many pods: stock GIE's all plain, a P/D
	// pool half primary (decode) and half the other roles (configs.go, PoolPrimary); 0 keeps
	// the default setup (8 primary pods, so 8 for stock and 16 for the P/D pools).
	Pods int
	// StreamEvents, when > 0, makes every request ask for a streamed answer and plays it as
	// that many token events plus the usage event and [DONE], one response body frame each.
	StreamEvents int
	// TraceSampleRatio is the fraction of requests a Traced config samples (0 or 1: every one).
	TraceSampleRatio float64
	Progress         io.Writer
}

// DefaultOptions are the full run's settings, or the quick variant's (`make bench`).
func DefaultOptions(quick bool) Options {
	o := Options{Out: filepath.Join("bench-results", "epp"), Quick: quick,
		Sizes: []int{1 << 10, 16 << 10, 220 << 10, 1 << 20}, Requests: []int{3000, 1500, 300, 60},
		Concurrency: 32, Conns: 4, ChunkSize: 16 << 10, Burst: 800, Parser: "map",
		MaxPhase: 60 * time.Second, MemoryEndpoints: 512, Progress: os.Stderr}
	if quick {
		o.Requests, o.Burst, o.MaxPhase, o.MemoryEndpoints = []int{600, 300, 60, 15}, 400, 10*time.Second, 0
	}
	return o
}

// Validate checks the options.
func (o *Options) Validate() error {
	if len(o.Sizes) == 0 || len(o.Sizes) != len(o.Requests) {
		return fmt.Errorf("bench epp: %d sizes and %d request counts: want one count per size", len(o.Sizes), len(o.Requests))
	}
	for i, s := range o.Sizes {
		if s < 128 || s > 32<<20 {
			return fmt.Errorf("bench epp: size %d: want 128 B .. 32 MiB", s)
		}
		if o.Requests[i] < 1 {
			return fmt.Errorf("bench epp: requests %d for size %d: want >= 1", o.Requests[i], s)
		}
	}
	if o.Concurrency < 1 || o.Conns < 1 || o.ChunkSize < 1 {
		return fmt.Errorf("bench epp: concurrency %d, conns %d, chunk %d: want >= 1 each", o.Concurrency, o.Conns, o.ChunkSize)
	}
	if o.TraceSampleRatio < 0 || o.TraceSampleRatio > 1 {
		return fmt.Errorf("bench epp: trace sample ratio %v: want 0 < ratio <= 1", o.TraceSampleRatio)
	}
	if o.Pods != 0 && (o.Pods < 4 || o.Pods%4 != 0) {
		return fmt.Errorf("bench epp: pods %d: want a multiple of 4 (AIBrix rolesets are 2 prefill + 2 decode), or 0 for the default", o.Pods)
	}
	if o.Repeats < 0 {
		return fmt.Errorf("bench epp: repeats %d: want >= 1", o.Repeats)
	}
	if o.StreamEvents < 0 || o.StreamEvents > 8192 {
		return fmt.Errorf("bench epp: stream events %d: want 0 (a non-streamed answer) .. 8192", o.StreamEvents)
	}
	if o.Burst < 0 || o.MemoryEndpoints < 0 {
		return errors.New("bench epp: burst and memory endpoints must be >= 0")
	}
	if o.Instructions {
		if err := eppharness.CallgrindAvailable(); err != nil {
			return fmt.Errorf("bench epp: --instructions: %w", err)
		}
	}
	switch o.Parser {
	case "map", "raw", "none":
	default:
		return fmt.Errorf("bench epp: parser %q: want map, raw or none", o.Parser)
	}
	if _, err := o.selected(); err != nil {
		return err
	}
	return nil
}

func (o *Options) selected() ([]Config, error) {
	if len(o.Configs) == 0 {
		return DefaultConfigs, nil
	}
	var out []Config
	for _, name := range o.Configs {
		c, err := lookupConfig(name)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func configNames() string {
	s := ""
	for i, c := range DefaultConfigs {
		if i > 0 {
			s += ", "
		}
		s += c.Name
	}
	return s
}

// Results are one run's measurements.
type Results struct {
	Sizes       []int  `json:"sizes"`
	Concurrency int    `json:"concurrency"`
	Conns       int    `json:"connections"`
	ChunkSize   int    `json:"chunkSize"`
	Parser      string `json:"parser"`
	// Pods is Options.Pods: pods per pool, 0 for the default setup.
	Pods int `json:"podsPerPool,omitempty"`
	// StreamEvents is Options.StreamEvents: token events per streamed answer, 0 for a
	// non-streamed one.
	StreamEvents int `json:"streamEvents,omitempty"`
	// Meter is what the CPU figures measure: "cpu" (ms) or "instructions" (millions).
	Meter   string         `json:"meter"`
	Configs []ConfigResult `json:"configs"`
	Memory  []MemoryResult `json:"memory,omitempty"`
}

// ConfigResult is one EPP configuration's figures.
type ConfigResult struct {
	Config
	Loaded string       `json:"loaded"` // the file and what was added to it
	Pods   int          `json:"pods"`
	Sizes  []SizeResult `json:"sizes,omitempty"`
	// IdleCPUMSPerS is the EPP's CPU use before the load (metric scraping), ms per second;
	// Idle the measurement it comes from, which the net figures use per scrape (idle.go).
	IdleCPUMSPerS float64           `json:"idleCpuMsPerS"`
	Idle          Idle              `json:"idle"`
	Burst         *BurstResult      `json:"burst,omitempty"`
	PrimaryPods   []string          `json:"primaryPods"`
	Spread        float64           `json:"spread"`
	Memory        eppharness.Memory `json:"memoryAfterRun"`
	// SpansPerRequest is what the OTLP receiver got per request sent (Traced configs): the
	// check that tracing was really on.
	SpansPerRequest float64 `json:"spansPerRequest,omitempty"`
	Error           string  `json:"error,omitempty"`
}

// SizeResult is one body size's load phase.
type SizeResult struct {
	Bytes        int        `json:"bytes"`
	Load         LoadResult `json:"load"`
	RoutingP50MS float64    `json:"routingP50Ms"`
	RoutingP99MS float64    `json:"routingP99Ms"`
	// NetCPUMS is the EPP CPU per request less the idle cost (metric scraping) of the
	// scrapes the phase served: what the requests themselves cost, comparable across pools of
	// different sizes. NetCPUErrMS is the error the idle estimate carries into it (one
	// standard error); NetCPUPerSecondMS the figure with idle removed per wall second instead.
	NetCPUMS          float64 `json:"netCpuMsPerRequest"`
	NetCPUErrMS       float64 `json:"netCpuErrMsPerRequest"`
	NetCPUPerSecondMS float64 `json:"netCpuPerSecondMsPerRequest"`
	// NetCPURepeatsMS are the net figures of every repeat of the phase (--repeats > 1), in run
	// order; NetCPUMS and Load are the median repeat's.
	NetCPURepeatsMS []float64 `json:"netCpuMsPerRequestRepeats,omitempty"`
}

// MemoryResult is an EPP's resident memory with many idle endpoints.
type MemoryResult struct {
	Config    string            `json:"config"`
	Endpoints int               `json:"endpoints"`
	Memory    eppharness.Memory `json:"memory"`
	Error     string            `json:"error,omitempty"`
}

// Run measures every selected config, writes the report into o.Out and returns the results.
func Run(ctx context.Context, o Options) (*Results, string, error) {
	if err := o.Validate(); err != nil {
		return nil, "", err
	}
	configs, _ := o.selected()
	r := report.New("epp", "EPP request path: stock GIE v1.5.0 vs pdgate")
	res, err := measure(ctx, o, configs)
	if err != nil {
		return res, "", err
	}
	build(r, o, res)
	md, err := r.Write(o.Out)
	return res, md, err
}

func (o *Options) logf(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "bench epp: "+format+"\n", args...)
	}
}
