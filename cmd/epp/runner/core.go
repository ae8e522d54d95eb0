package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	configapi "sigs.k8s.io/gateway-api-inference-extension/apix/config/v1alpha1"
	backendmetrics "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/backend/metrics"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/config/loader"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datastore"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/flowcontrol"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/flowcontrol/contracts"
	fccontroller "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/flowcontrol/controller"
	fcregistry "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/flowcontrol/registry"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	extractormetrics "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/extractor/metrics"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/handlers"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metrics"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metrics/collectors"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/requestcontrol"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/version"

	"github.com/pdgate/pdgate/cmd/epp/extproc"
	"github.com/pdgate/pdgate/cmd/epp/pluginset"
	"github.com/pdgate/pdgate/cmd/epp/tracing"
)

// traceRegistryCapacity bounds traces recorded but not (yet) taken by a stream.
const traceRegistryCapacity = 4096

// phaseOne reads and decodes the config and picks the endpoint factory.
type phaseOne struct {
	raw        *configapi.EndpointPickerConfig
	gates      map[string]bool
	runtime    *datalayer.Runtime
	factory    datalayer.EndpointFactory
	newMetrics bool
}

func loadPhaseOne(o *Options, logger logr.Logger) (*phaseOne, error) {
	var b []byte
	switch {
	case o.ConfigText != "":
		b = []byte(o.ConfigText)
	case o.ConfigFile != "":
		var err error
		if b, err = os.ReadFile(o.ConfigFile); err != nil {
			return nil, fmt.Errorf("reading --config-file: %w", err)
		}
	}
	raw, gates, err := pluginset.LoadRaw(b, logger)
	if err != nil {
		return nil, err
	}
	p := &phaseOne{raw: raw, gates: gates, runtime: datalayer.NewRuntime(o.RefreshMetricsInterval)}
	p.newMetrics = !gates[datalayer.EnableLegacyMetricsFeatureGate]
	p.factory = p.runtime
	if !p.newMetrics {
		pmc, err := backendmetrics.NewPodMetricsClientImpl(logger, backendmetrics.Config{
			ModelServerMetricsScheme:        o.ModelServerMetricsScheme,
			ModelServerMetricsHTTPSInsecure: o.ModelServerMetricsHTTPSInsecure,
			ModelServerMetricsPath:          o.ModelServerMetricsPath,
			TotalQueuedRequestsMetric:       o.TotalQueuedRequestsMetric,
			TotalRunningRequestsMetric:      o.TotalRunningRequestsMetric,
			KVCacheUsagePercentageMetric:    o.KVCacheUsagePercentageMetric,
			LoRAInfoMetric:                  o.LoRAInfoMetric,
			CacheInfoMetric:                 o.CacheInfoMetric,
		})
		if err != nil {
			return nil, fmt.Errorf("legacy metrics client: %w", err)
		}
		p.factory = backendmetrics.NewPodMetricsFactory(pmc, o.RefreshMetricsInterval)
	}
	return p, nil
}

// core is the request path: plugins, scheduler, director and the wrapped ext_proc server.
type core struct {
	server  *extproc.Server
	handle  fwkplugin.Handle
	runtime *datalayer.Runtime
}

// buildCore is phase two of the configuration plus the request-path assembly, the same
// sequence as GIE's runner setup() with the scheduler wrapped for decision traces.
func buildCore(ctx context.Context, o *Options, p *phaseOne, ds datastore.Datastore, mgr ctrl.Manager, logger logr.Logger) (*core, error) {
	handle := fwkplugin.NewEppHandle(ctx, func() []types.NamespacedName {
		eps := ds.PodList(datastore.AllPodsPredicate)
		names := make([]types.NamespacedName, 0, len(eps))
		for _, ep := range eps {
			names = append(names, ep.GetMetadata().NamespacedName)
		}
		return names
	})
	cfg, err := loader.InstantiateAndConfigure(p.raw, handle, logger)
	if err != nil {
		return nil, fmt.Errorf("failed to load the configuration: %w", err)
	}
	if err := pluginset.ResolveReferences(handle); err != nil {
		return nil, fmt.Errorf("failed to load the configuration: %w", err)
	}
	reqCfg := requestcontrol.NewConfig()
	reqCfg.AddPlugins(handle.GetAllPlugins()...)
	dag, err := datalayer.ValidateAndOrderDataDependencies(handle.GetAllPlugins())
	if err != nil {
		return nil, fmt.Errorf("failed to load the configuration: %w", err)
	}
	reqCfg.OrderPrepareDataPlugins(dag)
	parser := handlers.NewParser(cfg.ParserConfig)

	traces := tracing.NewRegistry(traceRegistryCapacity)
	schedCfg, err := tracing.WrapSchedulerConfig(p.raw, handle, &tracing.Recorder{Registry: traces, AllowHeader: o.DecisionTrace})
	if err != nil {
		return nil, fmt.Errorf("wrapping the scheduler for decision traces: %w", err)
	}
	logger.Info("Parsed config", "scheduler-config", schedCfg)
	scheduler := scheduling.NewSchedulerWithConfig(schedCfg)

	if p.newMetrics {
		disallowed := ""
		if err := p.runtime.Configure(cfg.DataConfig, true, disallowed, logger); err != nil {
			return nil, fmt.Errorf("data layer: %w", err)
		}
	} else if err := p.runtime.Configure(cfg.DataConfig, false, extractormetrics.MetricsExtractorType, logger); err != nil {
		return nil, fmt.Errorf("data layer: %w", err)
	}
	if mgr != nil {
		if err := p.runtime.Start(ctx, mgr); err != nil {
			return nil, fmt.Errorf("data layer: %w", err)
		}
	} else {
		for _, pl := range handle.GetAllPlugins() {
			if _, ok := pl.(fwkdl.NotificationSource); ok {
				return nil, fmt.Errorf("plugin %s is a Kubernetes notification source; it needs Kubernetes mode, not --endpoints-file", pl.TypedName())
			}
		}
	}

	var candidates contracts.EndpointCandidates = requestcontrol.NewDatastoreEndpointCandidates(ds,
		requestcontrol.WithDisableEndpointSubsetFilter(o.DisableEndpointSubsetFilter))
	var admission requestcontrol.AdmissionController
	if p.gates[flowcontrol.FeatureGate] {
		if cfg.FlowControlConfig == nil {
			return nil, errors.New("flowControl feature gate set but no flow control config was built")
		}
		candidates = requestcontrol.NewCachedEndpointCandidates(ctx, candidates, 50*time.Millisecond)
		registry, err := fcregistry.NewFlowRegistry(cfg.FlowControlConfig.Registry, logger)
		if err != nil {
			return nil, fmt.Errorf("flow registry: %w", err)
		}
		fc, err := fccontroller.NewFlowController(ctx, o.PoolName, cfg.FlowControlConfig.Controller, fccontroller.Deps{
			Registry:           registry,
			SaturationDetector: cfg.SaturationDetector,
			EndpointCandidates: candidates,
			UsageLimitPolicy:   cfg.FlowControlConfig.UsageLimitPolicy,
		})
		if err != nil {
			return nil, fmt.Errorf("flow controller: %w", err)
		}
		go registry.Run(ctx)
		admission = requestcontrol.NewFlowControlAdmissionController(fc, o.PoolName)
	} else {
		admission = requestcontrol.NewLegacyAdmissionController(cfg.SaturationDetector, candidates)
	}
	director := requestcontrol.NewDirectorWithConfig(ds, scheduler, admission, parser, candidates, reqCfg)

	metrics.Register(collectors.NewInferencePoolMetricsCollector(ds))
	metrics.RecordInferenceExtensionInfo(version.CommitSHA, version.BuildRef)

	srv := extproc.New(handlers.NewStreamingServer(ds, director, parser), extproc.Options{
		MaxRequestBodyBytes: o.MaxRequestBodyBytes,
		AllowTrace:          o.DecisionTrace,
		Traces:              traces,
	})
	return &core{server: srv, handle: handle, runtime: p.runtime}, nil
}
