package pdknobs

import (
	"testing"
	"time"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
)

func TestRefreshMetricsIntervalFromEnv(t *testing.T) {
	tests := []struct {
		name, value string
		set         bool
		want        time.Duration
		wantOK      bool
		wantErr     string
	}{
		{name: "unset"},
		{name: "empty", set: true, value: " "},
		{name: "milliseconds", set: true, value: "250", want: 250 * time.Millisecond, wantOK: true},
		{name: "not an integer", set: true, value: "50ms", wantErr: `AIBRIX_POD_METRIC_REFRESH_INTERVAL_MS="50ms"`},
		{name: "below the floor", set: true, value: "1", wantErr: ">= 10"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) (string, bool) {
				if k != EnvPodMetricRefreshInterval {
					return "", false
				}
				return tt.value, tt.set
			}
			d, ok, err := RefreshMetricsIntervalFromEnv(getenv)
			if plugintest.WantErr(t, err, tt.wantErr) {
				return
			}
			if d != tt.want || ok != tt.wantOK {
				t.Fatalf("got %v %v %v", d, ok, err)
			}
		})
	}
}
