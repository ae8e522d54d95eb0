package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/lab"
	"github.com/pdgate/pdgate/test/testsupport"
	"github.com/pdgate/pdgate/test/testsupport/labtest"
)

// cluster is a lab plan whose processes this suite starts, kills and restarts one by one
// (the lab's supervisor only stops them all).
type cluster struct {
	t         *testing.T
	plan      *lab.Plan
	endpoints string
	specs     map[string]lab.ProcSpec
	order     []string
	procs     map[string]*testsupport.Proc // filled by startCluster; a killed one starts again in place
}

// topology renders a lab topology; paths are resolved from config/lab.
func topology(t *testing.T, yaml string) *lab.Topology {
	t.Helper()
	topo, err := lab.ParseTopology([]byte(yaml), filepath.Join(repoRoot, "config", "lab"))
	if err != nil {
		t.Fatalf("topology: %v", err)
	}
	return topo
}

// pdTopology is the default lab's pods (two rolesets of AIBrix's pd strategy plus a combined
// pod) with the token ledger on: the smallest deployment where every fault has somewhere else
// to go.
func pdTopology(t *testing.T, sidecarArgs string) *lab.Topology {
	return topology(t, labtest.DefaultTopology(t, map[string]string{"name": "faults", "timeScale": "5", "sidecarArgs": "[" + sidecarArgs + "]"}))
}

// gatewayTimeout bounds every exchange at the gateway in this suite.
const gatewayTimeout = 20 * time.Second

// startCluster lays the topology out on subnet and starts every process; extra adds
// arguments per process name (e.g. "sim-prefill-a").
func startCluster(t *testing.T, topo *lab.Topology, subnet string, extra map[string][]string) *cluster {
	t.Helper()
	dir := t.TempDir()
	plan, err := lab.NewPlan(topo, lab.PlanOptions{Subnet: subnet, Dir: dir, BinDir: binDir})
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	if err := plan.CheckPorts(); err != nil {
		t.Fatalf("ports: %v", err)
	}
	endpoints, err := plan.WriteFiles()
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, plan: plan, endpoints: endpoints, specs: map[string]lab.ProcSpec{},
		procs: map[string]*testsupport.Proc{}}
	for _, s := range plan.Procs(endpoints) {
		s.Args = append(s.Args, extra[s.Name]...)
		if s.Name == "gateway" {
			s.Args = append(s.Args, "--request-timeout", gatewayTimeout.String(), "--epp-message-timeout", "5s")
		}
		c.specs[s.Name] = s
		c.order = append(c.order, s.Name)
	}
	for _, name := range c.order {
		c.start(name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for _, name := range c.order {
		c.waitHealthy(ctx, name)
	}
	c.warmUp(ctx)
	return c
}

// start runs the named process, again when the test killed it; every process dies with the
// test, the last started first, and logs its tail when the test failed.
func (c *cluster) start(name string) {
	c.t.Helper()
	if p := c.procs[name]; p != nil {
		p.Start()
		return
	}
	s := c.specs[name]
	c.procs[name] = testsupport.StartProc(c.t, s.Binary, s.Env, s.Args...)
}

// kill ends the named process at once (SIGKILL to its group) and waits until it is gone.
func (c *cluster) kill(name string) { c.procs[name].Kill() }

func (c *cluster) healthURL(name string) string {
	switch s := c.specs[name]; {
	case s.Health != "":
		return s.Health
	case name == "epp":
		return c.eppMetricsURL()
	}
	return ""
}

func (c *cluster) waitHealthy(ctx context.Context, name string) {
	c.t.Helper()
	url := c.healthURL(name)
	for {
		if code, _, err := testsupport.Get(ctx, url); err == nil && code/100 == 2 {
			return
		}
		select {
		case <-ctx.Done():
			c.t.Fatalf("%s not healthy at %s", name, url)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// warmUp waits until a request went through the gateway to a pod and back (the EPP
// schedules once it scraped): a 200, or a pod's own error answer when the case's fault sits
// on the pod the EPP picks first.
func (c *cluster) warmUp(ctx context.Context) {
	c.t.Helper()
	for {
		r := send(ctx, c.URL(), request{stream: false, maxTokens: 1})
		if r.Status == http.StatusOK || r.Header.Get("x-error-pd-decode") != "" || r.Header.Get("x-error-pd-prefill") != "" {
			return
		}
		select {
		case <-ctx.Done():
			c.t.Fatalf("no 200 through the gateway: last %d %v %s", r.Status, r.Err, r.Body)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// URL is the gateway's client-facing base URL.
func (c *cluster) URL() string { return "http://" + c.plan.GatewayAddr }

func (c *cluster) eppMetricsURL() string {
	return fmt.Sprintf("http://127.0.0.1:%d/metrics", c.plan.EPPMetricsPort)
}

// metricsURLs lists the /metrics of every pdgate process that exposes Go runtime metrics.
func (c *cluster) metricsURLs() map[string]string {
	out := map[string]string{"epp": c.eppMetricsURL(), "gateway": "http://" + c.plan.GatewayAdminAddr + "/metrics"}
	for _, p := range c.plan.Pods {
		if p.HasSidecar() {
			out["sidecar-"+p.Name] = "http://" + p.Endpoint() + "/sidecar/metrics"
		}
	}
	return out
}

// removeEndpoint rewrites the endpoints file without the named pod (the EPP hot-reloads it).
func (c *cluster) removeEndpoint(name string) {
	c.t.Helper()
	var keep []lab.Pod
	for _, p := range c.plan.Pods {
		if p.Name != name {
			keep = append(keep, p)
		}
	}
	reduced := *c.plan
	reduced.Pods = keep
	b, err := reduced.EndpointsYAML()
	if err != nil {
		c.t.Fatal(err)
	}
	tmp := c.endpoints + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		c.t.Fatal(err)
	}
	if err := os.Rename(tmp, c.endpoints); err != nil {
		c.t.Fatal(err)
	}
}

// waitEndpoints waits (60 s at most) until the EPP applied an endpoints file with n
// endpoints: it sets the gauge after the datastore took the file, so a pick made after this
// sees the new set whatever the watcher's latency on this machine.
func (c *cluster) waitEndpoints(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		m, err := labtest.Metrics(c.eppMetricsURL())
		if err == nil && m["pdgate_epp_standalone_endpoints"] == float64(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the EPP did not apply an endpoints file with %d endpoints within 60s (last %v, %v)",
				n, m["pdgate_epp_standalone_endpoints"], err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// endpointsServed is the EPP's count of endpoints from the file it last applied.
func (c *cluster) endpointsServed(t *testing.T) int {
	t.Helper()
	m, err := labtest.Metrics(c.eppMetricsURL())
	if err != nil {
		t.Fatalf("epp metrics: %v", err)
	}
	return int(m["pdgate_epp_standalone_endpoints"])
}

// jsonErrorType returns the OpenAI error body's type/code, or "".
func jsonErrorType(body []byte) string {
	var e struct {
		Error struct {
			Type    string `json:"type"`
			Code    any    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(bytes.TrimSpace(body), &e) != nil || e.Error.Message == "" && e.Error.Type == "" {
		return ""
	}
	if e.Error.Type != "" {
		return e.Error.Type
	}
	return "error"
}
