package pdknobs

import (
	"strings"
	"testing"

	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Every per-profile sidecar knob is accepted by ForProfile (no "unknown field" warning, which
// the three watchdog knobs used to get) and reaches SidecarOverrides, which the header writer
// sends to the sidecar; an invalid value warns once and is left out.
func TestSidecarOverrides(t *testing.T) {
	tests := []struct {
		name, pd, want, warn string
	}{
		{name: "none", pd: `{}`, want: ""},
		{name: "every knob", pd: `{"prefillRequestTimeout":5,"decodeAbortTimeout":0,"decodeAbortRetryDelay":1,
			"decodeFirstResponseTimeout":7,"decodeResponseTimeout":8,"decodeStreamIdleTimeout":9}`,
			want: "prefillRequestTimeout=5,decodeAbortTimeout=0,decodeAbortRetryDelay=1,decodeFirstResponseTimeout=7,decodeResponseTimeout=8,decodeStreamIdleTimeout=9"},
		{name: "prefill timeout must be positive", pd: `{"prefillRequestTimeout":0,"decodeStreamIdleTimeout":3}`,
			want: "decodeStreamIdleTimeout=3", warn: "routingConfig.pd.prefillRequestTimeout=0"},
		{name: "fractional seconds", pd: `{"decodeAbortTimeout":1.5}`, want: "", warn: "integer number of seconds"},
		{name: "not a number", pd: `{"decodeResponseTimeout":"10s"}`, want: "", warn: "not a number"},
		{name: "beyond the bound", pd: `{"decodeResponseTimeout":1e30}`, want: "", warn: "at most 3600"},
		{name: "negative", pd: `{"decodeAbortRetryDelay":-2}`, want: "", warn: "not negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			warned.Clear()
			cfg, err := podmodel.ParseConfig(`{"profiles":{"default":{"routingConfig":{"pd":` + tt.pd + `}}}}`)
			if err != nil {
				t.Fatal(err)
			}
			_, prof := cfg.Resolve("", podmodel.AutoHints{MaxTokens: -1})
			var warns []string
			w := func(s string) { warns = append(warns, s) }
			if got := SidecarOverrides(prof, w).String(); got != tt.want {
				t.Errorf("SidecarOverrides = %q, want %q", got, tt.want)
			}
			if _, err := Defaults().ForProfile(prof, w); err != nil {
				t.Fatal(err)
			}
			joined := strings.Join(warns, "\n")
			if tt.warn == "" && joined != "" || tt.warn != "" && !strings.Contains(joined, tt.warn) {
				t.Errorf("warnings %q, want %q", joined, tt.warn)
			}
			if strings.Contains(joined, "unknown field") {
				t.Errorf("a sidecar knob was refused as unknown: %s", joined)
			}
			// ForProfile and SidecarOverrides report the same value once between them.
			if tt.warn != "" && len(warns) != 1 {
				t.Errorf("warned %d times: %q", len(warns), warns)
			}
		})
	}
	if SidecarOverrides(nil, nil) != nil {
		t.Fatal("no profile, no overrides")
	}
	for _, n := range protocol.SidecarKnobNames {
		if _, ok := EnvVar[n]; ok {
			t.Errorf("%s is a sidecar knob, not an EPP plugin parameter", n)
		}
	}
}
