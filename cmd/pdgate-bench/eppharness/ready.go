package eppharness

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthPb "google.golang.org/grpc/health/grpc_health_v1"
)

// podSeries is GIE's per-pod gauge: its collector emits one series per endpoint in the
// datastore (both EPPs register it), so counting series tells how many endpoints the EPP holds.
const podSeries = "inference_pool_per_pod_queue_size"

// waitReady polls until gRPC health says SERVING (the pool has synced) and the EPP's /metrics
// lists n endpoints, or the process exits, or ctx ends.
func (e *EPP) waitReady(ctx context.Context, n int) error {
	conn, err := grpc.NewClient(e.HealthAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("health client: %w", err)
	}
	defer conn.Close()
	health := healthPb.NewHealthClient(conn)
	client := &http.Client{Timeout: 5 * time.Second}
	last := "no answer yet"
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-e.done:
			return fmt.Errorf("process exited (%v) while waiting (%s)", e.waitErr, last)
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %s)", ctx.Err(), last)
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := health.Check(cctx, &healthPb.HealthCheckRequest{})
		cancel()
		if err != nil {
			last = "gRPC health: " + err.Error()
			continue
		}
		if resp.GetStatus() != healthPb.HealthCheckResponse_SERVING {
			last = "gRPC health: " + resp.GetStatus().String()
			continue
		}
		got, err := scrapePodSeries(ctx, client, "http://"+e.MetricsAddr+"/metrics")
		if err != nil {
			last = err.Error()
			continue
		}
		if got >= n {
			return nil
		}
		last = fmt.Sprintf("%d of %d endpoints in the datastore", got, n)
	}
}

func scrapePodSeries(ctx context.Context, c *http.Client, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("metrics: HTTP %d", resp.StatusCode)
	}
	return countPodSeries(resp.Body)
}

// countPodSeries counts the distinct model_server_pod values of podSeries in a Prometheus text
// exposition.
func countPodSeries(r io.Reader) (int, error) {
	pods := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, podSeries+"{")
		if !ok {
			continue
		}
		labels, _, ok := strings.Cut(rest, "}")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(labels, ",") {
			if v, ok := strings.CutPrefix(kv, `model_server_pod="`); ok {
				pods[strings.TrimSuffix(v, `"`)] = true
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("reading metrics: %w", err)
	}
	return len(pods), nil
}
