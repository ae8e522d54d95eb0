// Package core is the one place pdgate's EPP is assembled: config load (both apiVersions),
// plugin registration, instantiation, reference resolution, profile checks, the data-layer
// runtime, the scheduler, admission and flow control, and the request path. bin/epp (both
// modes), `pdgate validate`, the in-process test EPP, the scheduler and parser benchmarks,
// `pdgate bench sim` and the chart test all call New, so what they exercise is what ships.
package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	configapi "sigs.k8s.io/gateway-api-inference-extension/apix/config/v1alpha1"
	backendmetrics "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/backend/metrics"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/config"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/config/loader"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	datalayerlogger "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer/logger"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datastore"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/flowcontrol"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/flowcontrol/contracts"
	fccontroller "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/flowcontrol/controller"
	fcregistry "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/flowcontrol/registry"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	extractormetrics "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/extractor/metrics"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/handlers"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/requestcontrol"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/scheduling"

	"github.com/pdgate/pdgate/cmd/epp/admission"
	"github.com/pdgate/pdgate/cmd/epp/extproc"
	"github.com/pdgate/pdgate/cmd/epp/pluginset"
	"github.com/pdgate/pdgate/cmd/epp/prefillrelease"
	"github.com/pdgate/pdgate/cmd/epp/tracing"
	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// Options configure New. Only Config is required.
type Options struct {
	// Config is the EndpointPickerConfig YAML (GIE's or llm-d's apiVersion); empty means GIE's
	// defaults.
	Config []byte
	Logger logr.Logger
	// RefreshMetricsInterval is the data layer's scrape interval (default 50 ms, GIE's).
	RefreshMetricsInterval time.Duration
	// LegacyMetrics configures the scraper of the enableLegacyMetrics feature gate.
	LegacyMetrics backendmetrics.Config
	// NewDatastore builds the datastore over the data layer's endpoint factory; nil builds
	// GIE's datastore with no pool (pdgate validate, harnesses that add pods themselves).
	NewDatastore func(ctx context.Context, factory datalayer.EndpointFactory) (datastore.Datastore, error)
	// PodNames overrides the pod list plugins read through the handle (bench sim, whose pods
	// never enter a datastore); nil reads the datastore.
	PodNames func() []types.NamespacedName
	// Candidates, when set, are the endpoints admission and the scheduler see in place of the
	// datastore's (bench sim's simulated pods, whose metrics it sets on its scrapes); the
	// dispatch ledger still wraps them.
	Candidates contracts.EndpointCandidates
	// Clock, when set, is the clock of the dispatch ledger (bench sim's virtual clock, the
	// clock of its pods' metrics); nil: the wall clock.
	Clock func() time.Time
	// Manager, in Kubernetes mode, starts the data layer's notification sources.
	Manager ctrl.Manager
	// Standalone refuses plugins that need the Kubernetes API.
	Standalone bool
	// Validate builds everything but starts nothing that outlives New (pdgate validate).
	Validate bool
	// Registerer receives the plugins' metrics (through the handle's context, see
	// plugins/framework/pluginkit); nil: controller-runtime's registry, which the EPP serves.
	Registerer prometheus.Registerer
	// Seed, when set, seeds every plugin's random source (through the handle's context, see
	// pluginkit.WithSeed), so the same inputs give the same decisions (`pdgate bench sim`);
	// nil: seeded from the time.
	Seed *int64
	// PoolName labels flow control's metrics.
	PoolName                    string
	DisableEndpointSubsetFilter bool
	// Request path options (body limit, decision traces).
	Path extproc.Options
	// PrefillRelease, when set (--prefill-release-address), releases the prefill charges of
	// the configured contract.PrefillReleasers and has admission's dispatch ledger forget the
	// leg when a sidecar reports the prefill leg returned; New installs both and has the
	// request path add the callback header.
	PrefillRelease *prefillrelease.Callback
}

// Core is an assembled EPP.
type Core struct {
	// Server is the ext_proc request path.
	Server    *extproc.Server
	Handle    fwkplugin.Handle
	Datastore datastore.Datastore
	Runtime   *datalayer.Runtime
	// Raw is the loaded config with GIE's defaults applied; Loaded is what GIE built from it.
	Raw    *configapi.EndpointPickerConfig
	Loaded *config.Config
	Gates  map[string]bool
	// Scheduler is GIE's scheduler with pdgate's decision-trace wrappers.
	Scheduler *scheduling.Scheduler
	// LegacyMetrics reports the enableLegacyMetrics feature gate.
	LegacyMetrics bool
	// Dispatches is where the request path records which pods it sent work to; admission and
	// the scheduler see the prefill pods through it (bench sim drives it on its clock).
	Dispatches *admission.Dispatches

	releasers []contract.PrefillReleaser
}

// PrefillReturned is what a returned prefill leg means to the EPP, whether the sidecar's
// prefill-release callback reports it or bench sim does: the prefill releasers end their
// charges, then admission's dispatch ledger stops counting the leg as queued on its pod.
func (c *Core) PrefillReturned(requestID string) {
	for _, r := range c.releasers {
		r.ReleasePrefillActive(requestID)
	}
	c.Dispatches.PrefillReturned(requestID)
}

// New assembles the EPP core.
func New(ctx context.Context, o Options) (*Core, error) {
	logger := o.Logger
	if logger.GetSink() == nil {
		logger = logr.Discard()
	}
	if o.RefreshMetricsInterval <= 0 {
		o.RefreshMetricsInterval = 50 * time.Millisecond
	}
	pluginset.RegisterAll()
	raw, gates, err := pluginset.LoadRaw(o.Config, logger)
	if err != nil {
		return nil, err
	}
	c := &Core{Raw: raw, Gates: gates, Runtime: datalayer.NewRuntime(o.RefreshMetricsInterval),
		LegacyMetrics: gates[datalayer.EnableLegacyMetricsFeatureGate]}
	var factory datalayer.EndpointFactory = c.Runtime
	if c.LegacyMetrics {
		pmc, err := backendmetrics.NewPodMetricsClientImpl(logger, o.LegacyMetrics)
		if err != nil {
			return nil, fmt.Errorf("legacy metrics client: %w", err)
		}
		factory = backendmetrics.NewPodMetricsFactory(pmc, o.RefreshMetricsInterval)
	}
	if o.NewDatastore != nil {
		if c.Datastore, err = o.NewDatastore(ctx, factory); err != nil {
			return nil, err
		}
	} else {
		c.Datastore = datastore.NewDatastore(ctx, factory, 0)
	}
	ds := c.Datastore
	podNames := o.PodNames
	if podNames == nil {
		podNames = func() []types.NamespacedName {
			eps := ds.PodList(datastore.AllPodsPredicate)
			names := make([]types.NamespacedName, 0, len(eps))
			for _, ep := range eps {
				names = append(names, ep.GetMetadata().NamespacedName)
			}
			return names
		}
	}
	reg := o.Registerer
	if reg == nil {
		reg = crmetrics.Registry
	}
	hctx := pluginkit.WithRegisterer(ctx, reg)
	if o.PodNames == nil {
		hctx = pluginkit.WithEndpoints(hctx, func() []fwkdl.Endpoint { return ds.PodList(datastore.AllPodsPredicate) })
	}
	if o.Seed != nil {
		hctx = pluginkit.WithSeed(hctx, *o.Seed)
	}
	c.Handle = fwkplugin.NewEppHandle(hctx, podNames)
	if err := pluginset.AddPrefixCacheScorerProducer(raw, c.Handle); err != nil {
		return nil, fmt.Errorf("failed to load the configuration: %w", err)
	}
	if c.Loaded, err = loader.InstantiateAndConfigure(raw, c.Handle, logger); err != nil {
		return nil, fmt.Errorf("failed to load the configuration: %w", err)
	}
	if err := pluginset.ResolveReferences(c.Handle); err != nil {
		return nil, fmt.Errorf("failed to load the configuration: %w", err)
	}
	if err := checkProfiles(raw, c.Handle); err != nil {
		return nil, fmt.Errorf("failed to load the configuration: %w", err)
	}
	order, err := orderDataDependencies(c.Handle.GetAllPlugins())
	if err != nil {
		return nil, fmt.Errorf("plugin data dependencies: %w", err)
	}
	schedCfg, err := tracing.WrapSchedulerConfig(raw, c.Handle)
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	c.Scheduler = scheduling.NewSchedulerWithConfig(schedCfg)
	if err := c.configureDataLayer(ctx, o, logger); err != nil {
		return nil, err
	}
	if o.Clock != nil {
		c.Dispatches = admission.NewDispatchesAt(o.Clock)
	} else {
		c.Dispatches = admission.NewDispatches()
	}
	candidates, admitter, err := c.admission(ctx, o, logger)
	if err != nil {
		return nil, err
	}
	c.releasers = contract.PrefillReleasers(c.Handle.GetAllPlugins())
	if o.PrefillRelease != nil && !o.Validate {
		// Admission's dispatch ledger always listens, so the callback is on whether or not a
		// plugin holds prefill charges.
		o.PrefillRelease.OnReturned(c.PrefillReturned)
		c.Dispatches.TrackReturns()
		o.Path.PrefillRelease = o.PrefillRelease.HeaderValue
		logger.Info("Prefill-release callback on: sidecars report when the prefill leg returns", "releasers", len(c.releasers))
	}
	if o.Path.Traces == nil {
		o.Path.Traces = tracing.Recorder{}
	}
	c.Server = extproc.New(extproc.Config{
		Datastore:        ds,
		Scheduler:        c.Scheduler,
		Admission:        admitter,
		Candidates:       candidates,
		Parser:           handlers.NewParser(c.Loaded.ParserConfig),
		Plugins:          c.Handle.GetAllPlugins(),
		PrepareDataOrder: order,
		Dispatched:       c.Dispatches.Dispatched,
		Settle:           c.Dispatches.Settle,
		FlowControl:      c.Gates[flowcontrol.FeatureGate],
	}, o.Path)
	return c, nil
}

// checkProfiles runs every plugin's profile check against the configured profiles (the
// handlers resolve their decode profile here), and refuses a config whose profile handler
// names no profile that exists.
func checkProfiles(raw *configapi.EndpointPickerConfig, handle fwkplugin.Handle) error {
	names := make([]string, 0, len(raw.SchedulingProfiles))
	for _, p := range raw.SchedulingProfiles {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	for _, p := range handle.GetAllPlugins() {
		if pc, ok := p.(contract.ProfileChecker); ok {
			if err := pc.CheckProfiles(names); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *Core) configureDataLayer(ctx context.Context, o Options, logger logr.Logger) error {
	disallowed := ""
	if c.LegacyMetrics {
		disallowed = extractormetrics.MetricsExtractorType
	}
	if err := c.Runtime.Configure(c.Loaded.DataConfig, !c.LegacyMetrics, disallowed, logger); err != nil {
		return fmt.Errorf("data layer: %w", err)
	}
	if o.Manager != nil && !o.Validate {
		if err := c.Runtime.Start(ctx, o.Manager); err != nil {
			return fmt.Errorf("data layer: %w", err)
		}
		return nil
	}
	if o.Standalone {
		for _, pl := range c.Handle.GetAllPlugins() {
			if _, ok := pl.(fwkdl.NotificationSource); ok {
				return fmt.Errorf("plugin %s is a Kubernetes notification source; it needs Kubernetes mode, not --endpoints-file", pl.TypedName())
			}
		}
	}
	return nil
}

// admission is GIE's runner choice: flow control when its feature gate is on, the legacy
// saturation check otherwise.
func (c *Core) admission(ctx context.Context, o Options, logger logr.Logger) (contracts.EndpointCandidates, requestcontrol.AdmissionController, error) {
	var base contracts.EndpointCandidates = requestcontrol.NewDatastoreEndpointCandidates(c.Datastore,
		requestcontrol.WithDisableEndpointSubsetFilter(o.DisableEndpointSubsetFilter))
	cached := func() contracts.EndpointCandidates {
		return requestcontrol.NewCachedEndpointCandidates(ctx, base, 50*time.Millisecond)
	}
	if o.Candidates != nil {
		base = o.Candidates
		cached = func() contracts.EndpointCandidates { return base } // a caller's pool, on its own clock
	}
	// Admission and the scheduler see each prefill pod with the prefill legs sent to it since
	// its last scrape counted as waiting (admission/dispatches.go).
	candidates := c.Dispatches.Candidates(base)
	// Saturation is measured per P/D stage (max of prefill and decode), and refusals carry
	// llm-d's reason header: 429 when shedding, 503 when there is no capacity.
	detector := admission.StageAware(c.Loaded.SaturationDetector)
	if !c.Gates[flowcontrol.FeatureGate] {
		if contract.ReplacesSaturationGate(c.Handle.GetAllPlugins()) {
			// forecast-admitter decides per request; the pool-level gate would shed the same
			// overload a second time on a coarser rule
			detector = admission.GateReplaced(detector)
		}
		return candidates, admission.WithReasons(requestcontrol.NewLegacyAdmissionController(detector, candidates), candidates).
			WithRequestStages(admission.StagesFromPlugins(c.Handle.GetAllPlugins())).
			WithReservations(c.Dispatches), nil
	}
	if c.Loaded.FlowControlConfig == nil {
		return nil, nil, errors.New("flowControl feature gate set but no flow control config was built")
	}
	candidates = c.Dispatches.Candidates(cached())
	registry, err := fcregistry.NewFlowRegistry(c.Loaded.FlowControlConfig.Registry, logger)
	if err != nil {
		return nil, nil, fmt.Errorf("flow registry: %w", err)
	}
	fc, err := fccontroller.NewFlowController(ctx, o.PoolName, c.Loaded.FlowControlConfig.Controller, fccontroller.Deps{
		Registry:           registry,
		SaturationDetector: detector,
		EndpointCandidates: candidates,
		UsageLimitPolicy:   c.Loaded.FlowControlConfig.UsageLimitPolicy,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("flow controller: %w", err)
	}
	if !o.Validate {
		go registry.Run(ctx)
	}
	return candidates, admission.WithReasons(requestcontrol.NewFlowControlAdmissionController(fc, o.PoolName), candidates), nil
}

// StartMetricsLogger starts GIE's pool-metrics refresher (inference_pool_* gauges) and debug
// logger for the metrics mode in use; GIE's runner does the same.
func (c *Core) StartMetricsLogger(ctx context.Context, refresh, staleness time.Duration) {
	if c.LegacyMetrics {
		backendmetrics.StartMetricsLogger(ctx, c.Datastore, refresh, staleness)
		return
	}
	datalayerlogger.StartMetricsLogger(ctx, c.Datastore, refresh, staleness)
}
