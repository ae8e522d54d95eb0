package ttftpercentiles

import (
	"testing"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	attrconcurrency "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/attribute/concurrency"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
)

func TestReaders(t *testing.T) {
	m := &TTFTPercentiles{FloorTTFT: 0.1}
	tests := []struct {
		name     string
		attrs    plugintest.Attrs
		snapshot bool
		inflight int64
		readable bool
	}{
		{name: "both", attrs: plugintest.Attrs{DataKey("obs"): m, attrconcurrency.InFlightLoadKey: &attrconcurrency.InFlightLoad{Requests: 3}},
			snapshot: true, inflight: 3, readable: true},
		{name: "neither", attrs: plugintest.Attrs{}},
		{name: "wrong types", attrs: plugintest.Attrs{DataKey("obs"): plugintest.Other{}, attrconcurrency.InFlightLoadKey: plugintest.Other{}}},
		{name: "nil in-flight", attrs: plugintest.Attrs{attrconcurrency.InFlightLoadKey: (*attrconcurrency.InFlightLoad)(nil)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Read(tt.attrs, DataKey("obs")); (got != nil) != tt.snapshot {
				t.Errorf("Read = %v, want a snapshot: %v", got, tt.snapshot)
			}
			if n, ok := InFlight(tt.attrs); n != tt.inflight || ok != tt.readable {
				t.Errorf("InFlight = %d, %v; want %d, %v", n, ok, tt.inflight, tt.readable)
			}
		})
	}
	if c := m.Clone().(*TTFTPercentiles); c == m || *c != *m {
		t.Fatal("Clone must copy")
	}
	var nilM *TTFTPercentiles
	if nilM.Clone() != fwkdl.Cloneable(nil) {
		t.Fatal("nil clones to nil")
	}
}

func TestFloor(t *testing.T) {
	tests := []struct {
		name string
		m    *TTFTPercentiles
		want float64
	}{
		{name: "nil", want: 0},
		{name: "cold", m: &TTFTPercentiles{FloorTTFT: 0.2, Observations: 9, CalibrationThreshold: 10}, want: 0},
		{name: "history floor", m: &TTFTPercentiles{FloorTTFT: 0.2, WindowFloorTTFT: 0.3, Observations: 10, CalibrationThreshold: 10}, want: 0.2},
		{name: "window floor until the history fills", m: &TTFTPercentiles{WindowFloorTTFT: 0.3, Observations: 10, CalibrationThreshold: 10}, want: 0.3},
	}
	for _, tt := range tests {
		if got := tt.m.Floor(); got != tt.want {
			t.Errorf("%s: Floor() = %v, want %v", tt.name, got, tt.want)
		}
	}
}
