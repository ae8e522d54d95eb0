// Package runner assembles pdgate's EPP from GIE's exported parts, in Kubernetes mode
// (InferencePool + Pod reconcilers) or standalone mode (endpoints from a file), and serves
// ext_proc through pdgate's request path (cmd/epp/extproc, assembled by cmd/epp/core).
package runner

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	runserver "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/server"

	"github.com/pdgate/pdgate/cmd/epp/prefillrelease"
	"github.com/pdgate/pdgate/cmd/internal/gcpacing"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/pdknobs"
)

// DefaultMaxRequestBodyBytes bounds request bodies the EPP buffers (GIE buffers the whole
// body before scheduling).
const DefaultMaxRequestBodyBytes = 32 << 20

// StandalonePoolName names the pool in standalone mode when --pool-name is not given.
const StandalonePoolName = "pdgate-standalone"

// Options are GIE's EPP options plus pdgate's.
type Options struct {
	*runserver.Options

	// EndpointsFile switches to standalone mode: endpoints come from this YAML file, no
	// Kubernetes API is used.
	EndpointsFile string
	// EndpointsPollInterval is how often the endpoints file is checked for changes.
	EndpointsPollInterval time.Duration
	// MaxRequestBodyBytes answers 413 beyond this body size; 0 disables the limit.
	MaxRequestBodyBytes int64
	// DecisionTrace lets clients ask for x-pdgate-decision with x-pdgate-trace: 1.
	DecisionTrace bool
	// PrefillReleaseAddress is host:port at which sidecars reach this replica's metrics HTTP
	// server for the prefill-release callback ("" disables it).
	PrefillReleaseAddress string
	// AllowExperimentalPlugins is llm-d's flag (its runner refuses Alpha plugins without it);
	// pdgate accepts it so llm-d's command lines run unchanged and never refuses Alpha plugins.
	AllowExperimentalPlugins bool
	// LLMDMetricNames also serves every metric family that has an llm-d v0.11 twin under its
	// llm_d_epp_* name (cmd/epp/llmdmetrics).
	LLMDMetricNames bool
	// GCMinHeap is the heap the garbage collector lets grow before a collection
	// (cmd/internal/gcpacing); 0 keeps Go's default pacing. bin/epp applies it; a GOGC in the
	// environment wins.
	GCMinHeap resource.QuantityValue

	// Programmatic knobs (tests, the lab).

	// RestConfig overrides ctrl.GetConfig() in Kubernetes mode.
	RestConfig *rest.Config
	// ManagerOverrides are applied to the controller-runtime manager options.
	ManagerOverrides []func(*ctrl.Options)
	// OnListening, when set, receives the bound addresses once every listener is open.
	OnListening func(Addresses)
	// Tracer records the request path's spans (cmd/internal/telemetry); nil is tracing off.
	Tracer trace.Tracer

	envErr error // a malformed environment default, reported by Validate
}

// Addresses are the bound listener addresses.
type Addresses struct {
	GRPC, Health, Metrics string
}

// NewOptions returns GIE's defaults plus pdgate's. AIBRIX_POD_METRIC_REFRESH_INTERVAL_MS, when
// set, is the default of --refresh-metrics-interval (AIBrix's name for the same setting); an
// explicit flag wins, and a malformed value fails Validate naming the variable.
func NewOptions() *Options {
	o := &Options{
		Options:               runserver.NewOptions(),
		EndpointsPollInterval: time.Second,
		MaxRequestBodyBytes:   DefaultMaxRequestBodyBytes,
	}
	o.GCMinHeap.Quantity = *resource.NewQuantity(gcpacing.DefaultMinHeap, resource.BinarySI)
	if d, ok, err := pdknobs.RefreshMetricsIntervalFromEnv(pluginkit.OSEnv); err != nil {
		o.envErr = err
	} else if ok {
		o.RefreshMetricsInterval = d
	}
	return o
}

// AddFlags registers GIE's flags and pdgate's on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.Options.AddFlags(fs)
	fs.StringVar(&o.EndpointsFile, "endpoints-file", o.EndpointsFile,
		"Standalone mode: YAML file listing the model-server endpoints (hot-reloaded); no Kubernetes API is used.")
	fs.DurationVar(&o.EndpointsPollInterval, "endpoints-poll-interval", o.EndpointsPollInterval,
		"How often the endpoints file is checked for changes.")
	fs.Int64Var(&o.MaxRequestBodyBytes, "max-request-body-bytes", o.MaxRequestBodyBytes,
		"Largest request body the EPP accepts; larger ones are answered 413. 0 disables the limit.")
	fs.BoolVar(&o.DecisionTrace, "decision-trace", o.DecisionTrace,
		"Return the scheduling decision in the x-pdgate-decision response header to requests carrying x-pdgate-trace: 1.")
	fs.BoolVar(&o.DecisionTrace, "allow-decision-trace", o.DecisionTrace, "Alias of --decision-trace.")
	fs.BoolVar(&o.AllowExperimentalPlugins, "allow-experimental-plugins", o.AllowExperimentalPlugins,
		"Accepted for llm-d compatibility (llm-d refuses its Alpha plugins without it); pdgate loads every registered plugin either way.")
	fs.BoolVar(&o.LLMDMetricNames, "llm-d-metric-names", o.LLMDMetricNames,
		"Also serve every metric that has an llm-d v0.11 twin under its llm_d_epp_* name (GIE's inference_objective_*, inference_pool_*, inference_extension_* and pdgate_disagg_decisions_total), beside its own name.")
	fs.Var(&o.GCMinHeap, "gc-min-heap",
		"Heap size the garbage collector lets the EPP grow to before it collects (a Kubernetes quantity, e.g. 64Mi): a small live heap "+
			"is otherwise collected every few hundred requests. Above half of it Go's default pacing applies; GOGC in the environment, "+
			"or 0 here, keeps Go's default throughout. GOMEMLIMIT still bounds the heap.")
	fs.StringVar(&o.PrefillReleaseAddress, "prefill-release-address", o.PrefillReleaseAddress,
		"host:port at which sidecars reach this EPP replica's metrics HTTP server (e.g. $(POD_IP):9090). When set, requests with a prefill target carry a signed "+
			"x-pdgate-prefill-release URL and the sidecar calls it when the prefill leg returns, releasing the prefill pod's active-token charge then. Empty disables it.")
}

// ParseArgs is what bin/epp does with its command line: it registers the flags on a fresh
// set named epp, parses args, then completes and validates the options. -h returns
// pflag.ErrHelp; a flag pflag refuses returns pflag's error, which it has already printed with
// the usage.
func ParseArgs(args []string) (*Options, error) {
	o := NewOptions()
	fs := pflag.NewFlagSet("epp", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := o.Complete(); err != nil {
		return nil, err
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return o, nil
}

// Standalone reports whether the endpoints come from a file.
func (o *Options) Standalone() bool { return o.EndpointsFile != "" }

// Complete fills derived values (after flag parsing).
func (o *Options) Complete() error {
	if o.Standalone() && o.PoolName == "" && o.EndpointSelector == "" {
		o.PoolName = StandalonePoolName
	}
	if o.PoolNamespace == "" {
		o.PoolNamespace = resolvePoolNamespace("")
	}
	return o.Options.Complete()
}

// Validate checks the options; GIE's checks first.
func (o *Options) Validate() error {
	if o.envErr != nil {
		return o.envErr
	}
	if err := o.Options.Validate(); err != nil {
		return err
	}
	if o.Standalone() && o.EndpointSelector != "" {
		return errors.New("--endpoints-file and --endpoint-selector exclude each other")
	}
	if o.Standalone() && o.EnableLeaderElection {
		return errors.New("--ha-enable-leader-election needs Kubernetes mode; it cannot be used with --endpoints-file")
	}
	if o.MaxRequestBodyBytes < 0 {
		return fmt.Errorf("--max-request-body-bytes %d: want >= 0", o.MaxRequestBodyBytes)
	}
	if o.PrefillReleaseAddress != "" {
		if err := prefillrelease.CheckAddress(o.PrefillReleaseAddress); err != nil {
			return err
		}
	}
	if o.EndpointsPollInterval <= 0 {
		return fmt.Errorf("--endpoints-poll-interval %s: want > 0", o.EndpointsPollInterval)
	}
	if o.GCMinHeap.Sign() < 0 {
		return fmt.Errorf("--gc-min-heap %s: want >= 0", o.GCMinHeap.String())
	}
	return nil
}
