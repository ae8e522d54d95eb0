package prefixdecider

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
)

func counterValue(t *testing.T, d *Decider, model, outcome string) float64 {
	t.Helper()
	var m dto.Metric
	if err := d.outcomes.WithLabelValues(model, outcome).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
