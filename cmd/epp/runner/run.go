package runner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log"
	runserver "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/server"

	"github.com/pdgate/pdgate/cmd/epp/llmdmetrics"
)

// Run starts the EPP and blocks until ctx ends or a server fails. Options must have been
// completed and validated.
func Run(ctx context.Context, o *Options) error {
	if o.LLMDMetricNames {
		llmdmetrics.Install()
	}
	if o.Standalone() {
		return runStandalone(ctx, o)
	}
	return runKubernetes(ctx, o)
}

func resolvePoolNamespace(ns string) string {
	if ns != "" {
		return ns
	}
	if env := os.Getenv("NAMESPACE"); env != "" {
		return env
	}
	return runserver.DefaultPoolNamespace
}

// group runs functions until the first one returns, then cancels the rest and waits.
type group struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	err    error
}

func newGroup(ctx context.Context) *group {
	ctx, cancel := context.WithCancel(ctx)
	return &group{ctx: ctx, cancel: cancel}
}

func (g *group) Go(name string, fn func(ctx context.Context) error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		err := fn(g.ctx)
		g.once.Do(func() {
			if err != nil && !errors.Is(err, context.Canceled) {
				g.err = fmt.Errorf("%s: %w", name, err)
			}
			g.cancel()
		})
	}()
}

func (g *group) Wait() error {
	g.wg.Wait()
	g.cancel()
	return g.err
}

func addrOf(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}

func loggerFrom(ctx context.Context) logr.Logger { return log.FromContext(ctx).WithName("epp") }
