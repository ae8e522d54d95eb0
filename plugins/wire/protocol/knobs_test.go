package protocol

import (
	"strings"
	"testing"
	"time"
)

func TestSidecarKnobsRoundTrip(t *testing.T) {
	k := SidecarKnobs{KnobDecodeStreamIdleTimeout: 7, KnobPrefillRequestTimeout: 5, KnobDecodeAbortTimeout: 0}
	s := k.String()
	if s != "prefillRequestTimeout=5,decodeAbortTimeout=0,decodeStreamIdleTimeout=7" {
		t.Fatalf("String() = %q", s)
	}
	got, err := ParseSidecarKnobs(s)
	if err != nil || got.String() != s {
		t.Fatalf("round trip %v %v", got, err)
	}
	if d, ok := got.Duration(KnobPrefillRequestTimeout); !ok || d != 5*time.Second {
		t.Fatalf("Duration %v %v", d, ok)
	}
	if _, ok := got.Duration(KnobDecodeResponseTimeout); ok {
		t.Fatal("unset knob reported set")
	}
	if (SidecarKnobs{}).String() != "" {
		t.Fatal("empty knobs must format as an empty header")
	}
}

func TestParseSidecarKnobs(t *testing.T) {
	tests := []struct {
		in, want, wantErr string
	}{
		{in: "", want: ""},
		{in: " decodeAbortRetryDelay = 0 ", want: "decodeAbortRetryDelay=0"},
		{in: "prefillRequestTimeout=0", wantErr: "prefillRequestTimeout=0: must be"},
		{in: "decodeAbortTimeout=-1", wantErr: "decodeAbortTimeout=-1"},
		{in: "decodeResponseTimeout=3601", wantErr: "[0,3600]"},
		{in: "decodeResponseTimeout=3600,bogus=1", want: "decodeResponseTimeout=3600", wantErr: `unknown sidecar knob "bogus"`},
		{in: "decodeResponseTimeout", wantErr: "want name=seconds"},
		{in: "decodeResponseTimeout=1.5", wantErr: "not an integer"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSidecarKnobs(tt.in)
			if got.String() != tt.want {
				t.Errorf("knobs %q, want %q", got.String(), tt.want)
			}
			if (err != nil) != (tt.wantErr != "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("err %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// The EPP clears and removes every RoutingHeaders entry a plugin did not set, so both new
// EPP→sidecar headers (and the prefill-release callback) must be on the list or a client could choose their values.
func TestNewRoutingHeadersListed(t *testing.T) {
	for _, h := range []string{HeaderSidecarKnobs, HeaderPrefillerAlternateHostPort, HeaderPrefillRelease} {
		found := false
		for _, r := range RoutingHeaders {
			found = found || r == h
		}
		if !found {
			t.Errorf("%s is not in RoutingHeaders", h)
		}
	}
}
