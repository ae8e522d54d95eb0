package runner

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/common"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datastore"
	runserver "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/server"

	"github.com/pdgate/pdgate/cmd/epp/podmeta"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// runKubernetes serves the pool of an InferencePool (or an --endpoint-selector) watched through
// a controller-runtime manager, with GIE's reconcilers writing into an annotation-mirroring
// datastore and ext_proc served by pdgate's wrapper.
func runKubernetes(ctx context.Context, o *Options) error {
	logger := loggerFrom(ctx)
	ctx = log.IntoContext(ctx, logger)
	cfg := o.RestConfig
	if cfg == nil {
		var err error
		if cfg, err = ctrl.GetConfig(); err != nil {
			return fmt.Errorf("kubernetes mode needs a kubeconfig or in-cluster config (or use --endpoints-file): %w", err)
		}
	}
	gknn, err := extractGKNN(o)
	if err != nil {
		return err
	}
	startCRD := o.EndpointSelector == ""
	controllerCfg := runserver.NewControllerConfig(startCRD)
	if err := controllerCfg.PopulateControllerConfig(cfg); err != nil {
		return fmt.Errorf("controller config: %w", err)
	}

	release, err := prefillCallback(o)
	if err != nil {
		return err
	}
	metricsOpts := metricsserver.Options{BindAddress: fmt.Sprintf(":%d", o.MetricsPort), ExtraHandlers: map[string]http.Handler{}}
	if o.MetricsEndpointAuth {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
		if release != nil {
			metricsOpts.FilterProvider = func(c *rest.Config, hc *http.Client) (metricsserver.Filter, error) {
				inner, err := filters.WithAuthenticationAndAuthorization(c, hc)
				if err != nil {
					return nil, err
				}
				return exceptPrefillRelease(inner), nil
			}
		}
	}
	if release != nil {
		metricsOpts.ExtraHandlers[protocol.PrefillReleasePath] = release
	}
	if o.EnablePprof {
		addPprof(func(path string, h http.Handler) { metricsOpts.ExtraHandlers[path] = h })
	}
	mgr, err := runserver.NewDefaultManager(controllerCfg, *gknn, cfg, metricsOpts, o.EnableLeaderElection, o.ManagerOverrides...)
	if err != nil {
		return err
	}
	leader := &atomic.Bool{}
	if o.EnableLeaderElection {
		go func() {
			select {
			case <-mgr.Elected():
				leader.Store(true)
				logger.Info("This instance is now the leader")
			case <-ctx.Done():
			}
		}()
	} else {
		leader.Store(true)
	}

	c, err := buildCore(ctx, o, logger, mgr, release, func(ctx context.Context, factory datalayer.EndpointFactory) (datastore.Datastore, error) {
		inner := datastore.NewDatastore(ctx, factory, int32(o.ModelServerMetricsPort))
		if !startCRD {
			pool, err := newSelectorPool(o)
			if err != nil {
				return nil, err
			}
			inner = inner.WithEndpointPool(pool)
		}
		return podmeta.WrapDatastore(inner), nil
	})
	if err != nil {
		return err
	}
	ds := c.Datastore
	// The runner only registers GIE's reconcilers here; its ext_proc runnable is not used.
	reconcilers := &runserver.ExtProcServerRunner{GKNN: *gknn, Datastore: ds, ControllerCfg: controllerCfg}
	if err := reconcilers.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("reconcilers: %w", err)
	}
	grpcSrv, err := newExtProcServer(ctx, o, c.Server, logger)
	if err != nil {
		return err
	}
	grpcL, err := listen(o.GRPCPort)
	if err != nil {
		return err
	}
	healthL, err := listen(o.GRPCHealthPort)
	if err != nil {
		_ = grpcL.Close()
		return err
	}
	health := newHealthGRPC(&healthServer{synced: ds.PoolHasSynced, isLeader: leader,
		leaderElection: o.EnableLeaderElection, logger: logger.WithName("health")})
	for _, r := range []manager.Runnable{
		noLeaderElection(func(ctx context.Context) error { return serveGRPC(ctx, health, healthL) }),
		noLeaderElection(func(ctx context.Context) error {
			c.StartMetricsLogger(ctx, o.RefreshPrometheusMetricsInterval, o.MetricsStalenessThreshold)
			return serveGRPC(ctx, grpcSrv, grpcL)
		}),
	} {
		if err := mgr.Add(r); err != nil {
			return fmt.Errorf("adding runnable: %w", err)
		}
	}
	logger.Info("pdgate EPP starting (kubernetes)", "pool", gknn.String(), "extProc", addrOf(grpcL),
		"health", addrOf(healthL), "metricsPort", o.MetricsPort, "secureServing", o.SecureServing)
	if o.OnListening != nil {
		o.OnListening(Addresses{GRPC: addrOf(grpcL), Health: addrOf(healthL), Metrics: fmt.Sprintf(":%d", o.MetricsPort)})
	}
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("controller manager: %w", err)
	}
	return nil
}

// noLeaderElection marks a runnable to run on every replica (ext_proc and health must answer
// on followers too; readiness tells them apart).
type noLeaderElection func(ctx context.Context) error

func (f noLeaderElection) Start(ctx context.Context) error { return f(ctx) }
func (noLeaderElection) NeedLeaderElection() bool          { return false }

// extractGKNN names the pool (or, with --endpoint-selector, the EPP's Deployment) the way GIE's
// runner does.
func extractGKNN(o *Options) (*common.GKNN, error) {
	ns := resolvePoolNamespace(o.PoolNamespace)
	if o.PoolName != "" {
		return &common.GKNN{
			NamespacedName: types.NamespacedName{Name: o.PoolName, Namespace: ns},
			GroupKind:      schema.GroupKind{Group: o.PoolGroup, Kind: "InferencePool"},
		}, nil
	}
	if o.EndpointSelector == "" {
		return nil, errors.New("either --pool-name, --endpoint-selector or --endpoints-file must be set")
	}
	podName := os.Getenv("POD_NAME")
	if podName == "" {
		return nil, errors.New("--endpoint-selector needs the POD_NAME environment variable")
	}
	m := regexp.MustCompile(`^(.+)-[a-z0-9]+-[a-z0-9]+$`).FindStringSubmatch(podName)
	if len(m) != 2 {
		return nil, fmt.Errorf("cannot derive the deployment name from POD_NAME %q", podName)
	}
	return &common.GKNN{
		NamespacedName: types.NamespacedName{Namespace: ns, Name: m[1]},
		GroupKind:      schema.GroupKind{Kind: "Deployment", Group: "apps"},
	}, nil
}

func newSelectorPool(o *Options) (*datalayer.EndpointPool, error) {
	sel, err := labels.ConvertSelectorToLabelsMap(o.EndpointSelector)
	if err != nil {
		return nil, fmt.Errorf("--endpoint-selector %q: %w", o.EndpointSelector, err)
	}
	pool := datalayer.NewEndpointPool(resolvePoolNamespace(o.PoolNamespace), o.PoolName)
	pool.Selector = sel
	pool.TargetPorts = append(pool.TargetPorts, o.EndpointTargetPorts...)
	return pool, nil
}
