package runner

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"

	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datastore"

	"github.com/pdgate/pdgate/cmd/epp/endpoints"
)

// runStandalone serves with endpoints from --endpoints-file and no Kubernetes API.
func runStandalone(ctx context.Context, o *Options) error {
	logger := loggerFrom(ctx)
	ctx = log.IntoContext(ctx, logger)
	if o.MetricsEndpointAuth {
		logger.V(1).Info("--metrics-endpoint-auth needs the Kubernetes API; /metrics is served without authentication in standalone mode")
	}
	pool := datalayer.NewEndpointPool(o.PoolNamespace, o.PoolName)
	release, err := prefillCallback(o)
	if err != nil {
		return err
	}
	var store *endpoints.Store
	c, err := buildCore(ctx, o, logger, nil, release, func(ctx context.Context, factory datalayer.EndpointFactory) (datastore.Datastore, error) {
		store = endpoints.NewStore(ctx, factory, pool)
		return store, nil
	})
	if err != nil {
		if store != nil {
			store.Clear()
		}
		return err
	}
	defer store.Clear()
	// The first load must succeed: there is no previous endpoint set to keep serving.
	ld := &endpoints.Loader{Path: o.EndpointsFile, Store: store, Interval: o.EndpointsPollInterval}
	if err := ld.Load(ctx); err != nil {
		return err
	}

	grpcSrv, err := newExtProcServer(ctx, o, c.Server, logger)
	if err != nil {
		return err
	}
	var listeners []net.Listener
	closeAll := func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}
	open := func(port int) (net.Listener, error) {
		l, err := listen(port)
		if err == nil {
			listeners = append(listeners, l)
		}
		return l, err
	}
	grpcL, err := open(o.GRPCPort)
	if err != nil {
		closeAll()
		return err
	}
	healthL, err := open(o.GRPCHealthPort)
	if err != nil {
		closeAll()
		return err
	}
	metricsL, err := open(o.MetricsPort)
	if err != nil {
		closeAll()
		return err
	}
	leader := &atomic.Bool{}
	leader.Store(true)
	health := newHealthGRPC(&healthServer{synced: store.PoolHasSynced, isLeader: leader, logger: logger.WithName("health")})

	g := newGroup(ctx)
	g.Go("endpoints-watch", func(ctx context.Context) error { ld.Watch(ctx); return nil })
	g.Go("ext-proc", func(ctx context.Context) error { return serveGRPC(ctx, grpcSrv, grpcL) })
	g.Go("health", func(ctx context.Context) error { return serveGRPC(ctx, health, healthL) })
	g.Go("metrics", func(ctx context.Context) error {
		return serveHTTP(ctx, metricsHandler(o.EnablePprof, release), metricsL)
	})
	c.StartMetricsLogger(g.ctx, o.RefreshPrometheusMetricsInterval, o.MetricsStalenessThreshold)
	addrs := Addresses{GRPC: addrOf(grpcL), Health: addrOf(healthL), Metrics: addrOf(metricsL)}
	logger.Info("pdgate EPP serving (standalone)", "endpointsFile", o.EndpointsFile, "endpoints", store.Len(),
		"extProc", addrs.GRPC, "health", addrs.Health, "metrics", addrs.Metrics, "secureServing", o.SecureServing)
	if o.OnListening != nil {
		o.OnListening(addrs)
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("standalone EPP: %w", err)
	}
	return nil
}
