package protocol

import "testing"

func TestParseHostPort(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr bool
	}{
		{in: "10.0.0.1:8000", want: "10.0.0.1:8000"},
		{in: " 10.0.0.1:8000 ", want: "10.0.0.1:8000"},
		{in: "[::1]:8000", want: "[::1]:8000"},
		{in: "[fe80::1]:80", want: "[fe80::1]:80"},
		{in: "pod-a.ns.svc:8000", want: "pod-a.ns.svc:8000"},
		{in: "::1:8000", wantErr: true},
		{in: "10.0.0.1", wantErr: true},
		{in: "10.0.0.1:0", wantErr: true},
		{in: "10.0.0.1:65536", wantErr: true},
		{in: "10.0.0.1:080", wantErr: true},
		{in: "10.0.0.1:+80", wantErr: true},
		{in: "http://10.0.0.1:80", wantErr: true},
		{in: "user@10.0.0.1:80", wantErr: true},
		{in: "10.0.0.1:80/path", wantErr: true},
		{in: "-bad-.x:80", wantErr: true},
		{in: ":80", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseHostPort(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseHostPort(%q) = %v, want error", tt.in, got)
				}
				return
			}
			if err != nil || got.String() != tt.want {
				t.Fatalf("ParseHostPort(%q) = %v, %v; want %s", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestParseHostPortList(t *testing.T) {
	got, err := ParseHostPortList(" 10.0.0.1:1 ,, [::1]:2,")
	if err != nil || FormatHostPortList(got) != "10.0.0.1:1,[::1]:2" {
		t.Fatalf("got %v, %v", got, err)
	}
	if _, err := ParseHostPortList("10.0.0.1:1,bad"); err == nil {
		t.Fatal("want error for a malformed item")
	}
}

func TestIsConditionalDecode(t *testing.T) {
	tests := map[string]bool{
		"":                             false,
		"return=minimal":               false,
		"if-available":                 true,
		"If-Available":                 true,
		"return=minimal, if-available": true,
		"if-available;param=v":         true,
		"  if-available  ":             true,
		"if-available-but-different":   false,
	}
	for in, want := range tests {
		if got := IsConditionalDecode(in); got != want {
			t.Errorf("IsConditionalDecode(%q) = %v, want %v", in, got, want)
		}
	}
}

func FuzzParseHostPortList(f *testing.F) {
	for _, s := range []string{"10.0.0.1:8000", "[::1]:80,a.b:1", " , ", "[::1", "a:b:c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		list, err := ParseHostPortList(s)
		if err != nil {
			return
		}
		again, err := ParseHostPortList(FormatHostPortList(list))
		if err != nil || FormatHostPortList(again) != FormatHostPortList(list) {
			t.Fatalf("round trip of %q failed: %v", s, err)
		}
	})
}

func FuzzIsConditionalDecode(f *testing.F) {
	f.Add("if-available;x=y, return=minimal")
	f.Fuzz(func(t *testing.T, s string) { _ = IsConditionalDecode(s) })
}

// Every header the EPP writes to steer a sidecar (pdgate's or llm-d's) must be a routing
// header: the EPP drops client copies and the sidecar strips it before the engine.
func TestRoutingHeadersCoverSteeringHeaders(t *testing.T) {
	for _, name := range []string{
		"x-prefiller-host-port",
		"x-encoder-hosts-ports",
		"x-pdgate-prefiller-bootstrap-port",
		"x-pdgate-prefiller-engine",
		"x-pdgate-prefiller-kv-connector",
		"x-data-parallel-host-port", // llm-d's sidecar routes on it (pd-profile-handler primaryPort)
		"x-pdgate-decoder-port",     // the sidecar's decode leg goes to this port of its engine host
	} {
		found := false
		for _, h := range RoutingHeaders {
			found = found || h == name
		}
		if !found {
			t.Errorf("%s is not in RoutingHeaders: a client could set it through the gateway", name)
		}
	}
}

// TestPrefillOutcome: the sidecar's outcome is read in any case and spacing.
func TestPrefillOutcome(t *testing.T) {
	for _, tc := range []struct {
		headers map[string]string
		outcome string
	}{
		{nil, ""},
		{map[string]string{HeaderPrefillOutcome: PrefillOK}, PrefillOK},
		{map[string]string{"X-Pdgate-Prefill-Outcome": " Alternate "}, PrefillAlternate},
		{map[string]string{HeaderPrefillOutcome: "FAILED"}, PrefillFailed},
	} {
		if got := PrefillOutcome(tc.headers); got != tc.outcome {
			t.Errorf("%v: outcome %q; want %q", tc.headers, got, tc.outcome)
		}
	}
}
