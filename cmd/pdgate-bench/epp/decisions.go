package epp

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/pdgate/pdgate/cmd/pdgate-bench/eppharness"
)

// Decision mix. A P/D config's cost per request depends on how many of its requests take a
// prefill leg: such a request runs two scheduling profiles and its prefix blocks are recorded
// on two servers. Two EPP processes that decided differently for the same bodies measure
// different things, so the bench reads the EPP's decision counters around every measured
// phase and reports the phase's mix next to its cost.

// decisionMetrics are the counters of the disaggregating profile handlers, by decision_type.
var decisionMetrics = []string{"pdgate_disagg_decisions_total", "pdgate_pd_decisions_total"}

// Decisions counts a phase's routing decisions by type (decode-only, prefill-decode, ...).
type Decisions map[string]float64

// String renders the mix in a fixed order, e.g. "decode-only 1990, prefill-decode 10".
func (d Decisions) String() string {
	if len(d) == 0 {
		return "none counted"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(d)) {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, d[k]))
	}
	return strings.Join(parts, ", ")
}

// sub is d less before, type by type, leaving out types that did not move.
func (d Decisions) sub(before Decisions) Decisions {
	out := Decisions{}
	for k, v := range d {
		if n := v - before[k]; n != 0 {
			out[k] = n
		}
	}
	return out
}

// readDecisions reads the decision counters from the /metrics of the EPP at metricsAddr.
func readDecisions(ctx context.Context, client *http.Client, metricsAddr string) (Decisions, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+metricsAddr+"/metrics", nil)
	if err != nil {
		return nil, fmt.Errorf("reading decisions at %s: %w", metricsAddr, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading decisions at %s: %w", metricsAddr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("reading decisions at %s: %s: %s", metricsAddr, resp.Status, msg)
	}
	return parseDecisions(resp.Body)
}

// parseDecisions sums the decision counters of a Prometheus text exposition by decision_type.
func parseDecisions(r io.Reader) (Decisions, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing metrics: %w", err)
	}
	d := Decisions{}
	for _, name := range decisionMetrics {
		mf := families[name]
		if mf == nil {
			continue
		}
		for _, m := range mf.GetMetric() {
			kind := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "decision_type" {
					kind = l.GetValue()
				}
			}
			d[kind] += m.GetCounter().GetValue()
		}
	}
	return d, nil
}

// decisionsText is the decision mix of each repeat for the phase's log line ("" when none was
// read).
func decisionsText(runs []LoadResult) string {
	var parts []string
	for _, r := range runs {
		if r.Decisions != nil {
			parts = append(parts, r.Decisions.String())
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return ", decisions: " + strings.Join(parts, " / ")
}

// decisionReader returns what reads the decision counters of c's EPP e: nil for the kinds
// without them (stock GIE, the floor), and nil, logged, when the read fails.
func (o *Options) decisionReader(ctx context.Context, c Config, e *eppharness.EPP) func() Decisions {
	return func() Decisions {
		if c.Kind != eppharness.KindPdgate {
			return nil
		}
		d, err := readDecisions(ctx, http.DefaultClient, e.MetricsAddr)
		if err != nil {
			o.logf("%s: %v", c.Name, err)
			return nil
		}
		return d
	}
}
