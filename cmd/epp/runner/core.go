package runner

import (
	"context"
	"fmt"
	"os"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	backendmetrics "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/backend/metrics"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datastore"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metrics"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metrics/collectors"
	"sigs.k8s.io/gateway-api-inference-extension/version"

	"github.com/pdgate/pdgate/cmd/epp/core"
	"github.com/pdgate/pdgate/cmd/epp/extproc"
	"github.com/pdgate/pdgate/cmd/epp/prefillrelease"
)

// prefillCallback builds the prefill-release callback of --prefill-release-address (nil when
// the flag is empty).
func prefillCallback(o *Options) (*prefillrelease.Callback, error) {
	if o.PrefillReleaseAddress == "" {
		return nil, nil
	}
	return prefillrelease.New(o.PrefillReleaseAddress)
}

// configBytes reads the config from --config-text or --config-file.
func configBytes(o *Options) ([]byte, error) {
	switch {
	case o.ConfigText != "":
		return []byte(o.ConfigText), nil
	case o.ConfigFile != "":
		b, err := os.ReadFile(o.ConfigFile)
		if err != nil {
			return nil, fmt.Errorf("reading --config-file: %w", err)
		}
		return b, nil
	}
	return nil, nil
}

// buildCore assembles the EPP core (cmd/epp/core, the one constructor) from the flags, and
// registers GIE's metrics as GIE's runner does.
func buildCore(ctx context.Context, o *Options, logger logr.Logger, mgr ctrl.Manager, release *prefillrelease.Callback,
	newDS func(context.Context, datalayer.EndpointFactory) (datastore.Datastore, error)) (*core.Core, error) {
	cfg, err := configBytes(o)
	if err != nil {
		return nil, err
	}
	c, err := core.New(ctx, core.Options{
		Config:                 cfg,
		Logger:                 logger,
		RefreshMetricsInterval: o.RefreshMetricsInterval,
		LegacyMetrics: backendmetrics.Config{
			ModelServerMetricsScheme:        o.ModelServerMetricsScheme,
			ModelServerMetricsHTTPSInsecure: o.ModelServerMetricsHTTPSInsecure,
			ModelServerMetricsPath:          o.ModelServerMetricsPath,
			TotalQueuedRequestsMetric:       o.TotalQueuedRequestsMetric,
			TotalRunningRequestsMetric:      o.TotalRunningRequestsMetric,
			KVCacheUsagePercentageMetric:    o.KVCacheUsagePercentageMetric,
			LoRAInfoMetric:                  o.LoRAInfoMetric,
			CacheInfoMetric:                 o.CacheInfoMetric,
		},
		NewDatastore:                newDS,
		Manager:                     mgr,
		Standalone:                  mgr == nil,
		PoolName:                    o.PoolName,
		DisableEndpointSubsetFilter: o.DisableEndpointSubsetFilter,
		PrefillRelease:              release,
		Path: extproc.Options{
			MaxRequestBodyBytes: o.MaxRequestBodyBytes,
			AllowTrace:          o.DecisionTrace,
			Tracer:              o.Tracer,
		},
	})
	if err != nil {
		return nil, err
	}
	logger.Info("Parsed config", "scheduler-config", c.Scheduler)
	metrics.Register(collectors.NewInferencePoolMetricsCollector(c.Datastore))
	metrics.RecordInferenceExtensionInfo(version.CommitSHA, version.BuildRef)
	return c, nil
}
