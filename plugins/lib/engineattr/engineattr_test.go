package engineattr

import (
	"testing"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
)

func TestGet(t *testing.T) {
	m := &Metrics{Engine: "vllm", Waiting: 3, HasWaiting: true}
	cases := []struct {
		name string
		ep   Getter
		want *Metrics
	}{
		{name: "no endpoint", ep: nil, want: nil},
		{name: "not extracted yet", ep: plugintest.Attrs{}, want: nil},
		{name: "another type under the key", ep: plugintest.Attrs{AttributeKey: plugintest.Other{}}, want: nil},
		{name: "extracted", ep: plugintest.Attrs{AttributeKey: m}, want: m},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Get(tc.ep); got != tc.want {
				t.Fatalf("Get = %v, want %v", got, tc.want)
			}
		})
	}
}

// Clone copies: a snapshot's attribute must not change when the extractor updates its own.
func TestCloneCopies(t *testing.T) {
	m := &Metrics{Waiting: 1, HasWaiting: true}
	c := m.Clone().(*Metrics)
	m.Waiting = 9
	if c.Waiting != 1 || !c.HasWaiting {
		t.Fatalf("clone %+v follows the original", c)
	}
	if (*Metrics)(nil).Clone().(*Metrics) != nil {
		t.Fatal("a nil clone must stay nil")
	}
}
