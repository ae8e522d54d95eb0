// Package inprocepp assembles an EPP in process for the integration suites that drive plugin
// sets through GIE's real machinery (test/integration/llmd, test/integration/aibrix): a user's
// config file loaded through pdgate's plugin set, GIE's data layer scraping one metrics server
// per pod on its own loopback address, all assembled by the EPP's one constructor
// (cmd/epp/core) and served by pdgate's request path on a real gRPC listener. RunBinary runs
// bin/epp's whole assembly instead (cmd/epp/runner: endpoints file or Kubernetes mode, its own
// servers), for the suites that test what the binary does.
package inprocepp

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/gateway-api-inference-extension/apix/v1alpha2"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"

	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datastore"

	"github.com/pdgate/pdgate/cmd/epp/core"
	"github.com/pdgate/pdgate/test/testsupport"
	"github.com/pdgate/pdgate/test/testsupport/eppclient"
)

// Pod is one model-server pod of the test pool.
type Pod struct {
	Name, IP            string
	Labels, Annotations map[string]string
	// Metrics serves the pod's /metrics (and anything else the data layer asks for).
	Metrics http.Handler
}

// Options are what differs between suites.
type Options struct {
	PoolName  string // the InferencePool's name, in namespace "default"
	Verbosity int    // testr verbosity of the EPP's logs
	// WrapDatastore, when set, wraps GIE's datastore (the EPP wraps it to mirror pod
	// annotations into endpoint labels).
	WrapDatastore func(datastore.Datastore) datastore.Datastore
}

// EPP is a running assembly.
type EPP struct {
	Client extProcPb.ExternalProcessorClient
	Handle fwkplugin.Handle
	DS     datastore.Datastore
	Port   int    // the pool's target port, shared by every pod's metrics server
	Pool   string // the InferencePool's name (Options.PoolName)
}

// Start loads configPath exactly as a user's file and serves it over ext_proc until the test
// ends.
func Start(t *testing.T, configPath string, pods []Pod, o Options) *EPP {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	logger := testr.NewWithOptions(t, testr.Options{Verbosity: o.Verbosity})
	ctx = log.IntoContext(ctx, logger)

	port := ServeMetrics(t, pods)
	raw, err := os.ReadFile(configPath)
	if err != nil {
		t.Fatal(err)
	}
	c, err := core.New(ctx, core.Options{
		Config: raw,
		Logger: logger,
		NewDatastore: func(ctx context.Context, factory datalayer.EndpointFactory) (datastore.Datastore, error) {
			pool := datalayer.NewEndpointPool("default", o.PoolName)
			pool.TargetPorts = []int{port}
			var ds datastore.Datastore = datastore.NewDatastore(ctx, factory, 0).WithEndpointPool(pool)
			if o.WrapDatastore != nil {
				ds = o.WrapDatastore(ds)
			}
			return ds, nil
		},
		Standalone: true,
	})
	if err != nil {
		t.Fatalf("load %s: %v", configPath, err)
	}
	ds := c.Datastore
	for _, p := range pods {
		ds.PodUpdateOrAddIfNotExist(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: "default", Labels: p.Labels, Annotations: p.Annotations},
			Status:     corev1.PodStatus{PodIP: p.IP},
		})
	}

	// pdgate's request path, built by the EPP's own constructor.
	client := eppclient.Serve(t, c.Server)
	return &EPP{Client: client, Handle: c.Handle, DS: ds, Port: port, Pool: o.PoolName}
}

// ServeMetrics runs one HTTP server per pod on its loopback IP, all on one port (GIE pools
// share target ports), and returns the port.
func ServeMetrics(t *testing.T, pods []Pod) int {
	t.Helper()
	for attempt := 0; attempt < 20; attempt++ {
		var listeners []net.Listener
		port := 0
		ok := true
		for _, p := range pods {
			l, err := net.Listen("tcp", net.JoinHostPort(p.IP, strconv.Itoa(port)))
			if err != nil {
				ok = false
				break
			}
			if port == 0 {
				port = l.Addr().(*net.TCPAddr).Port
			}
			listeners = append(listeners, l)
		}
		if !ok {
			for _, l := range listeners {
				_ = l.Close()
			}
			continue
		}
		for i, l := range listeners {
			s := &http.Server{Handler: pods[i].Metrics, ReadHeaderTimeout: 5 * time.Second}
			go func() { _ = s.Serve(l) }()
			t.Cleanup(func() { _ = s.Close() })
		}
		return port
	}
	t.Fatal("could not bind the pods' metrics servers")
	return 0
}

// IdleVLLM serves the /metrics page of a vLLM with nothing running or waiting (what a hung
// engine keeps reporting, too).
var IdleVLLM = testsupport.VLLMMetrics(0, 0)

// WaitScraped waits until the datastore holds exactly the pods of want, each with fresh
// metrics reporting its waiting queue, and returns their endpoints.
func (e *EPP) WaitScraped(t testing.TB, want map[string]int) []fwkdl.Endpoint {
	t.Helper()
	var eps []fwkdl.Endpoint
	testsupport.Eventually(t, 15*time.Second, fmt.Sprintf("scraped waiting queues %v", want), func() bool {
		eps = e.DS.PodList(datastore.AllPodsPredicate)
		if len(eps) != len(want) {
			return false
		}
		for _, ep := range eps {
			m := ep.GetMetrics()
			if m == nil || m.UpdateTime.IsZero() || m.WaitingQueueSize != want[ep.GetMetadata().PodName] {
				return false
			}
		}
		return true
	})
	return eps
}

// SetObjective puts InferenceObjective name of priority into the pool; a negative priority is
// the sheddable class GIE's admission sheds when its saturation detector reads >= 1.
func (e *EPP) SetObjective(name string, priority int) {
	e.DS.ObjectiveSet(&v1alpha2.InferenceObjective{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1alpha2.InferenceObjectiveSpec{Priority: &priority, PoolRef: v1alpha2.PoolObjectReference{Name: v1alpha2.ObjectName(e.Pool)}}})
}

// Saturation is what the config's saturation detector named detector reads over eps: the
// fleet-wide figure the admission suites compare the stage-aware one with.
func (e *EPP) Saturation(t testing.TB, detector string, eps []fwkdl.Endpoint) float64 {
	t.Helper()
	d, ok := e.Handle.Plugin(detector).(interface {
		Saturation(context.Context, []fwkdl.Endpoint) float64
	})
	if !ok {
		t.Fatalf("plugin %q is not a saturation detector", detector)
	}
	return d.Saturation(context.Background(), eps)
}
