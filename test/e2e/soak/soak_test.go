package soak

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/lab"
	"github.com/pdgate/pdgate/test/testsupport/labtest"
)

// faults are injected per request through x-sim-fault (honoured by every simulator the
// request reaches) with these probabilities; the rest run clean.
var faults = []struct {
	header string
	p      float64
}{
	{"prefill-fail", 0.05}, {"http-500", 0.03}, {"drop-connection", 0.03}, {"stall-after=2", 0.02}, {"hang-first-token", 0.02},
}

// Sample is one RSS/goroutine reading per process.
type Sample struct {
	AtS        float64            `json:"atS"`
	RSSMiB     map[string]float64 `json:"rssMiB"`
	Goroutines map[string]float64 `json:"goroutines"`
}

// Report is what the soak writes to $PDGATE_SOAK_OUT.
type Report struct {
	DurationS       float64            `json:"durationS"`
	Seed            int64              `json:"seed"`
	CapacityRPS     float64            `json:"capacityRps"`
	TargetRPS       float64            `json:"targetRps"`
	Sent            int                `json:"sent"`
	Received        int                `json:"received"`
	Outcomes        map[string]int     `json:"outcomes"`
	FaultsInjected  map[string]int     `json:"faultsInjected"`
	MaxLatencyMS    float64            `json:"maxLatencyMs"`
	LedgerAfter     map[string]float64 `json:"ledgerAfter"`
	GoroutinesStart map[string]float64 `json:"goroutinesStart"`
	GoroutinesEnd   map[string]float64 `json:"goroutinesEnd"`
	FDsStart        map[string]float64 `json:"fdsStart"`
	FDsEnd          map[string]float64 `json:"fdsEnd"`
	Samples         []Sample           `json:"samples"`
}

func TestSoak(t *testing.T) {
	duration := 60 * time.Second
	if v := os.Getenv("PDGATE_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("PDGATE_SOAK=%q: %v", v, err)
		}
		duration = d
	}
	const seed = 11
	l := startLab(t)
	metrics := metricsURLs(l)

	// Capacity, measured in this run: closed loop, no faults.
	capacity := calibrate(l.URL, 8, 4*time.Second)
	rep := Report{DurationS: duration.Seconds(), Seed: seed, CapacityRPS: capacity, TargetRPS: 0.7 * capacity,
		Outcomes: map[string]int{}, FaultsInjected: map[string]int{}, LedgerAfter: map[string]float64{},
		GoroutinesStart: map[string]float64{}, GoroutinesEnd: map[string]float64{}, FDsStart: map[string]float64{}, FDsEnd: map[string]float64{}}
	for name, url := range metrics {
		m, err := labtest.Metrics(url)
		if err != nil {
			t.Fatalf("baseline %s: %v", name, err)
		}
		rep.GoroutinesStart[name], rep.FDsStart[name] = m["go_goroutines"], m["process_open_fds"]
	}

	begin := time.Now()
	stopSampling := make(chan struct{})
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		every := duration / 10
		if every < 5*time.Second {
			every = 5 * time.Second
		}
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			s := Sample{AtS: time.Since(begin).Seconds(), RSSMiB: map[string]float64{}, Goroutines: map[string]float64{}}
			for name, url := range metrics {
				if m, err := labtest.Metrics(url); err == nil {
					s.RSSMiB[name] = m["process_resident_memory_bytes"] / (1 << 20)
					s.Goroutines[name] = m["go_goroutines"]
				}
			}
			rep.Samples = append(rep.Samples, s)
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
		}
	}()

	rng := rand.New(rand.NewSource(seed))
	interval := time.Duration(float64(time.Second) / rep.TargetRPS)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; time.Since(begin) < duration; i++ {
		fault, x := "", rng.Float64()
		for _, f := range faults {
			if x < f.p {
				fault = f.header
				break
			}
			x -= f.p
		}
		stream, maxTokens := rng.Intn(2) == 0, 4+rng.Intn(28)
		rep.Sent++
		if fault != "" {
			rep.FaultsInjected[fault]++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := send(l.URL, stream, maxTokens, fault)
			mu.Lock()
			defer mu.Unlock()
			rep.Received++
			rep.Outcomes[outcome(res)]++
			if ms := float64(res.Elapsed.Milliseconds()); ms > rep.MaxLatencyMS {
				rep.MaxLatencyMS = ms
			}
		}()
		time.Sleep(interval)
	}
	wg.Wait()
	close(stopSampling)
	<-samplerDone

	settle(t, l, metrics, &rep)
	printReport(t, rep)
	if out := os.Getenv("PDGATE_SOAK_OUT"); out != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			t.Errorf("PDGATE_SOAK_OUT: encoding the report: %v", err)
		} else if err := os.WriteFile(out, b, 0o644); err != nil {
			t.Errorf("PDGATE_SOAK_OUT: %v", err)
		}
	}

	if rep.Sent != rep.Received {
		t.Errorf("sent %d, received %d", rep.Sent, rep.Received)
	}
	for o, n := range rep.Outcomes {
		if o == "lost" || strings.HasSuffix(o, "/undocumented") {
			t.Errorf("%d requests ended %s", n, o)
		}
	}
	if rep.MaxLatencyMS > float64(requestBound.Milliseconds()) {
		t.Errorf("max latency %.0f ms beyond the %v bound", rep.MaxLatencyMS, requestBound)
	}
	if rep.Outcomes["200"] < rep.Sent/2 {
		t.Errorf("fewer than half the requests succeeded: %v", rep.Outcomes)
	}
}

// startLab runs the default topology with short decode watchdogs (a hung decode must end
// well within requestBound).
func startLab(t *testing.T) *lab.Lab {
	t.Helper()
	topo := labtest.DefaultTopology(t, map[string]string{"name": "soak", "timeScale": "5",
		"sidecarArgs": `["--decode-first-response-timeout=3s", "--decode-stream-idle-timeout=3s", "--decode-response-timeout=8s", "--prefill-timeout=8s"]`})
	return labtest.Start(t, lab.Options{Topology: labtest.WriteTopology(t, topo), BinDir: binDir, Subnet: "127.0.96"})
}

func metricsURLs(l *lab.Lab) map[string]string {
	out := map[string]string{"epp": fmt.Sprintf("http://127.0.0.1:%d/metrics", l.Plan.EPPMetricsPort),
		"gateway": "http://" + l.Plan.GatewayAdminAddr + "/metrics"}
	for _, p := range l.Plan.Pods {
		if p.HasSidecar() {
			out["sidecar-"+p.Name] = "http://" + p.Endpoint() + "/sidecar/metrics"
		}
	}
	return out
}

// calibrate measures closed-loop throughput (requests/s) with the soak's request mix.
func calibrate(base string, workers int, d time.Duration) float64 {
	var n int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; time.Now().Before(end); i++ {
				if send(base, i%2 == 0, 4+(i*7+w)%28, "").Status == 200 {
					mu.Lock()
					n++
					mu.Unlock()
				}
			}
		}(w)
	}
	wg.Wait()
	return float64(n) / d.Seconds()
}

// goroutineSlack absorbs timers and background loops; idlePoolBound is how many idle
// keep-alive connections a process may keep after a burst.
const goroutineSlack, idlePoolBound = 10, 64

var ledgerGauges = []string{"pdgate_token_load_active_tokens", "pdgate_token_load_kv_tokens", "pdgate_token_load_decode_tokens"}

// settle waits (bounded) until the ledger is empty and every process is near its baseline.
func settle(t *testing.T, l *lab.Lab, metrics map[string]string, rep *Report) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var problems []string
		if m, err := labtest.Metrics(metrics["epp"]); err == nil {
			for _, g := range ledgerGauges {
				rep.LedgerAfter[g] = m[g]
				if m[g] != 0 {
					problems = append(problems, fmt.Sprintf("%s = %v", g, m[g]))
				}
			}
		} else {
			problems = append(problems, err.Error())
		}
		for name, url := range metrics {
			m, err := labtest.Metrics(url)
			if err != nil {
				problems = append(problems, err.Error())
				continue
			}
			rep.GoroutinesEnd[name], rep.FDsEnd[name] = m["go_goroutines"], m["process_open_fds"]
			// An idle keep-alive connection costs exactly two goroutines (read and write
			// loops) and one fd, and pools keep up to their idle bound after a burst: so
			// goroutines beyond two per extra fd are leaks, and fds beyond the pool bound.
			extraFDs := m["process_open_fds"] - rep.FDsStart[name]
			if m["go_goroutines"]-2*extraFDs > rep.GoroutinesStart[name]+goroutineSlack || extraFDs > idlePoolBound {
				problems = append(problems, fmt.Sprintf("%s goroutines %v (start %v), fds %v (start %v)", name,
					m["go_goroutines"], rep.GoroutinesStart[name], m["process_open_fds"], rep.FDsStart[name]))
			}
		}
		if len(problems) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, p := range problems {
				t.Errorf("not settled: %s", p)
			}
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func printReport(t *testing.T, r Report) {
	var b strings.Builder
	fmt.Fprintf(&b, "soak %.0fs seed %d: capacity %.1f req/s, target %.1f req/s (70%%)\n", r.DurationS, r.Seed, r.CapacityRPS, r.TargetRPS)
	fmt.Fprintf(&b, "sent %d, received %d, max latency %.0f ms\noutcomes: %v\nfaults injected: %v\nledger after: %v\n",
		r.Sent, r.Received, r.MaxLatencyMS, r.Outcomes, r.FaultsInjected, r.LedgerAfter)
	names := make([]string, 0, len(r.GoroutinesStart))
	for n := range r.GoroutinesStart {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(&b, "%-22s %10s %10s %8s %8s\n", "process", "goroutines", "(start)", "fds", "(start)")
	for _, n := range names {
		fmt.Fprintf(&b, "%-22s %10.0f %10.0f %8.0f %8.0f\n", n, r.GoroutinesEnd[n], r.GoroutinesStart[n], r.FDsEnd[n], r.FDsStart[n])
	}
	fmt.Fprintf(&b, "RSS MiB over time:\n%-8s", "t(s)")
	for _, n := range names {
		fmt.Fprintf(&b, " %18s", n)
	}
	b.WriteString("\n")
	for _, s := range r.Samples {
		fmt.Fprintf(&b, "%-8.0f", s.AtS)
		for _, n := range names {
			fmt.Fprintf(&b, " %18.1f", s.RSSMiB[n])
		}
		b.WriteString("\n")
	}
	t.Log("\n" + b.String())
}
