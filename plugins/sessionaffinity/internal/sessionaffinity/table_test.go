package sessionaffinity

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"
)

func TestTableSettle(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type step struct {
		at      time.Duration // since t0
		session string
		pick    string
		move    bool
		want    Outcome
		bound   string // Get(session) afterwards, "" = unbound
	}
	tests := []struct {
		name  string
		max   int
		steps []step
	}{
		{name: "bind then touch", max: 10, steps: []step{
			{0, "s", "ns/a", false, Bound, "ns/a"},
			{time.Minute, "s", "ns/a", false, Touched, "ns/a"},
		}},
		{name: "present but outscored keeps the binding", max: 10, steps: []step{
			{0, "s", "ns/a", false, Bound, "ns/a"},
			{time.Second, "s", "ns/b", false, Kept, "ns/a"},
		}},
		{name: "absent or overloaded moves it", max: 10, steps: []step{
			{0, "s", "ns/a", false, Bound, "ns/a"},
			{time.Second, "s", "ns/b", true, Rebound, "ns/b"},
		}},
		{name: "expired binding is unbound and rebinds as new", max: 10, steps: []step{
			{0, "s", "ns/a", false, Bound, "ns/a"},
			{301 * time.Second, "s", "ns/b", false, Bound, "ns/b"},
		}},
		{name: "touch extends the TTL", max: 10, steps: []step{
			{0, "s", "ns/a", false, Bound, "ns/a"},
			{200 * time.Second, "s", "ns/a", false, Touched, "ns/a"},
			{450 * time.Second, "s", "ns/b", false, Kept, "ns/a"},
		}},
		{name: "full table refuses new sessions, not known ones", max: 1, steps: []step{
			{0, "s1", "ns/a", false, Bound, "ns/a"},
			{time.Second, "s2", "ns/a", false, Refused, ""},
			{2 * time.Second, "s1", "ns/b", true, Rebound, "ns/b"},
		}},
		{name: "an expired key is replaced even when full", max: 1, steps: []step{
			{0, "s1", "ns/a", false, Bound, "ns/a"},
			{400 * time.Second, "s1", "ns/b", false, Bound, "ns/b"},
		}},
		{name: "long session IDs work", max: 10, steps: []step{
			{0, strings.Repeat("k", 5000), "ns/a", false, Bound, "ns/a"},
			{time.Second, strings.Repeat("k", 5000), "ns/a", false, Touched, "ns/a"},
			{time.Second, strings.Repeat("k", 4999), "ns/a", false, Bound, "ns/a"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := NewTable(300*time.Second, tt.max)
			for i, s := range tt.steps {
				now := t0.Add(s.at)
				if got := tb.Settle(s.session, s.pick, s.move, now); got != s.want {
					t.Fatalf("step %d: outcome %v, want %v", i, got, s.want)
				}
				got, ok := tb.Get(s.session, now)
				if (s.bound != "") != ok || got != s.bound {
					t.Fatalf("step %d: bound %q (%v), want %q", i, got, ok, s.bound)
				}
			}
		})
	}
}

func TestTableSweep(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tb := NewTable(time.Minute, 10)
	tb.Settle("old", "ns/a", false, t0)
	tb.Settle("fresh", "ns/b", false, t0.Add(50*time.Second))
	tests := []struct {
		at       time.Duration
		evicted  int
		left     int
		oldBound bool
	}{
		{at: 60 * time.Second, evicted: 0, left: 2, oldBound: true}, // exactly the TTL: still live
		{at: 61 * time.Second, evicted: 1, left: 1},
		{at: 111 * time.Second, evicted: 1, left: 0},
	}
	for _, tt := range tests {
		now := t0.Add(tt.at)
		if n := tb.Sweep(now); n != tt.evicted {
			t.Fatalf("at %v: evicted %d, want %d", tt.at, n, tt.evicted)
		}
		if tb.Len() != tt.left {
			t.Fatalf("at %v: %d left, want %d", tt.at, tb.Len(), tt.left)
		}
		if _, ok := tb.Get("old", now); ok != tt.oldBound {
			t.Fatalf("at %v: old bound %v, want %v", tt.at, ok, tt.oldBound)
		}
	}
}

func TestEncoding(t *testing.T) {
	tests := []struct {
		name, in, want string
		err            bool
	}{
		{name: "standard", in: EncodeEndpoint("default/vllm-0-rank-0"), want: "default/vllm-0-rank-0"},
		{name: "unpadded", in: strings.TrimRight(EncodeEndpoint("ns/a"), "="), want: "ns/a"},
		{name: "url-safe", in: base64.URLEncoding.EncodeToString([]byte("ns/a>>?")), want: "ns/a>>?"},
		{name: "not an endpoint ID", in: EncodeEndpoint("\xff/\xfe"), err: true},
		{name: "not base64", in: "not base64!", err: true},
		{name: "no namespace separator", in: EncodeEndpoint("pod"), err: true},
		{name: "empty", in: "", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeEndpoint(tt.in)
			if (err != nil) != tt.err || got != tt.want {
				t.Fatalf("DecodeEndpoint(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.err)
			}
		})
	}
	if got := EncodeEndpoint("default/vllm-0-rank-0"); got != "ZGVmYXVsdC92bGxtLTAtcmFuay0w" {
		t.Fatalf("encoding %q is not standard base64 of namespace/name", got)
	}
}
