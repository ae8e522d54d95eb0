package protocol

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Sidecar knobs a model.aibrix.ai/config profile may set per request (routingConfig.pd.<name>).
// The EPP resolves the request's profile, validates each value with CheckSidecarKnob and
// writes the valid ones in HeaderSidecarKnobs; the sidecar parses the header with
// ParseSidecarKnobs (the same rule, so a value the EPP accepts is one the sidecar applies) and
// uses each value instead of its flag for that request only.
const (
	KnobPrefillRequestTimeout      = "prefillRequestTimeout"
	KnobDecodeAbortTimeout         = "decodeAbortTimeout"
	KnobDecodeAbortRetryDelay      = "decodeAbortRetryDelay"
	KnobDecodeFirstResponseTimeout = "decodeFirstResponseTimeout"
	KnobDecodeResponseTimeout      = "decodeResponseTimeout"
	KnobDecodeStreamIdleTimeout    = "decodeStreamIdleTimeout"
)

// SidecarKnobNames lists every per-profile sidecar knob, in header order.
var SidecarKnobNames = []string{
	KnobPrefillRequestTimeout, KnobDecodeAbortTimeout, KnobDecodeAbortRetryDelay,
	KnobDecodeFirstResponseTimeout, KnobDecodeResponseTimeout, KnobDecodeStreamIdleTimeout,
}

// MaxSidecarKnobSeconds bounds every per-request value: one hour. A profile typo (3600000
// meant as milliseconds) must not hold a prefill or a watchdog open for weeks.
const MaxSidecarKnobSeconds = 3600

// SidecarKnobs are per-request overrides, in whole seconds as AIBrix writes them.
type SidecarKnobs map[string]int

// IsSidecarKnob reports whether name is a per-profile sidecar knob.
func IsSidecarKnob(name string) bool {
	for _, n := range SidecarKnobNames {
		if n == name {
			return true
		}
	}
	return false
}

// CheckSidecarKnob validates one value with AIBrix's env-loader rule: prefillRequestTimeout
// must be > 0, the others >= 0 (0 disables the abort, the second abort or the watchdog phase);
// every value at most MaxSidecarKnobSeconds.
func CheckSidecarKnob(name string, seconds int) error {
	if !IsSidecarKnob(name) {
		return fmt.Errorf("unknown sidecar knob %q (known: %s)", name, strings.Join(SidecarKnobNames, ", "))
	}
	minimum := 0
	if name == KnobPrefillRequestTimeout {
		minimum = 1
	}
	if seconds < minimum || seconds > MaxSidecarKnobSeconds {
		return fmt.Errorf("%s=%d: must be an integer number of seconds in [%d,%d]", name, seconds, minimum, MaxSidecarKnobSeconds)
	}
	return nil
}

// Duration returns the knob as a duration and whether it is set.
func (k SidecarKnobs) Duration(name string) (time.Duration, bool) {
	v, ok := k[name]
	return time.Duration(v) * time.Second, ok
}

// String formats the header value: "name=seconds" pairs, comma-joined, in SidecarKnobNames
// order ("" when empty).
func (k SidecarKnobs) String() string {
	if len(k) == 0 {
		return ""
	}
	parts := make([]string, 0, len(k))
	for _, n := range SidecarKnobNames {
		if v, ok := k[n]; ok {
			parts = append(parts, n+"="+strconv.Itoa(v))
		}
	}
	return strings.Join(parts, ",")
}

// ParseSidecarKnobs parses a HeaderSidecarKnobs value. Every valid pair is returned; the error
// joins what was dropped (unknown names, malformed pairs, values outside CheckSidecarKnob).
func ParseSidecarKnobs(v string) (SidecarKnobs, error) {
	out := SidecarKnobs{}
	var bad []string
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, val, ok := strings.Cut(item, "=")
		if !ok {
			bad = append(bad, fmt.Sprintf("%q: want name=seconds", item))
			continue
		}
		name = strings.TrimSpace(name)
		n, err := strconv.Atoi(strings.TrimSpace(val))
		if err != nil {
			bad = append(bad, fmt.Sprintf("%q: not an integer", item))
			continue
		}
		if err := CheckSidecarKnob(name, n); err != nil {
			bad = append(bad, err.Error())
			continue
		}
		out[name] = n
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return out, fmt.Errorf("%s: ignored %s", HeaderSidecarKnobs, strings.Join(bad, "; "))
	}
	return out, nil
}
