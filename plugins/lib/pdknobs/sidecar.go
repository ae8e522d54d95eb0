package pdknobs

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// SidecarOverrides returns the sidecar knobs (protocol.SidecarKnobNames) that the request's
// resolved profile sets in routingConfig.pd, for the header writer to send to the sidecar in
// protocol.HeaderSidecarKnobs. The EPP cannot apply these itself (the sidecar runs the legs
// and the watchdog), and accepting them without forwarding them would be a knob that does
// nothing. An invalid value is left out (the sidecar keeps its flag) with the same
// once-per-value warning ForProfile gives. prof nil → no overrides.
func SidecarOverrides(prof *podmodel.Profile, warn func(string)) protocol.SidecarKnobs {
	if prof == nil || len(prof.RoutingConfig.PD) == 0 {
		return nil
	}
	var out protocol.SidecarKnobs
	for _, name := range protocol.SidecarKnobNames {
		raw, ok := prof.RoutingConfig.PD[name]
		if !ok {
			continue
		}
		n, err := parseSidecarSeconds(name, raw)
		if err != nil {
			warnOnce(warn, fmt.Sprintf("ignoring routingConfig.pd.%s=%s: %v", name, string(raw), err))
			continue
		}
		if out == nil {
			out = protocol.SidecarKnobs{}
		}
		out[name] = n
	}
	return out
}

func parseSidecarSeconds(name string, raw json.RawMessage) (int, error) {
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		return 0, fmt.Errorf("not a number")
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("not finite")
	}
	return sidecarSeconds(name, f)
}

// sidecarSeconds applies protocol.CheckSidecarKnob to a JSON number: whole seconds, as AIBrix
// reads these fields.
func sidecarSeconds(name string, f float64) (int, error) {
	if f != math.Trunc(f) {
		return 0, fmt.Errorf("must be an integer number of seconds")
	}
	if f < 0 || f > protocol.MaxSidecarKnobSeconds {
		// Range-checked before the int conversion, which is undefined for huge floats.
		return 0, fmt.Errorf("must be at most %d seconds and not negative", protocol.MaxSidecarKnobSeconds)
	}
	n := int(f)
	return n, protocol.CheckSidecarKnob(name, n)
}
