package ha

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pdgate/pdgate/test/testsupport"
	"github.com/pdgate/pdgate/test/testsupport/redistest"
)

// startRedis runs a real redis-server on a free loopback port for the test. Outside CI a
// machine without one skips the test.
func startRedis(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI is set but redis-server is not installed (hack/install-test-deps.sh)")
		}
		t.Skip("redis-server not installed; run hack/install-test-deps.sh")
	}
	return redistest.Start(t, 0).Addr
}

// TestActiveActive: three EPP replicas as the active-active sample runs them (no leader
// election, AIBrix token-load config, REDIS_HOST/REDIS_PORT from the chart) against a real
// API server and a real Redis: every replica is ready, and each one joins the shared decode
// ledger (its heartbeat appears in Redis).
func TestActiveActive(t *testing.T) {
	suite.NeedControlPlane(t)
	addr := startRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns, release := "ha-active", "aa-pool"
	spec, kc := eppFromChart(ctx, t, ns, release, []string{"config/samples/ha-active-active.yaml"},
		map[string]any{"redis": map[string]any{"enabled": false, "address": addr}})

	var epps []*eppProcess
	for _, name := range []string{"epp-a", "epp-b", "epp-c"} {
		epps = append(epps, startEPP(t, name, ns, kc, spec))
	}
	testsupport.Eventually(t, 3*time.Minute, "every replica ready", func() bool {
		for _, e := range epps {
			if e.exited() {
				t.Fatalf("%s exited", e.name)
			}
			if !e.ready(ctx, "inference-extension") || !e.ready(ctx, "envoy.service.ext_proc.v3.ExternalProcessor") {
				return false
			}
		}
		return true
	})
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	testsupport.Eventually(t, time.Minute, "three replicas in the shared ledger", func() bool {
		n, err := rdb.ZCard(ctx, "pdgate:dtl:replicas").Result()
		return err == nil && n == int64(len(epps))
	})
}
