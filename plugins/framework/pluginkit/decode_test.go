package pluginkit

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
)

type params struct {
	Size int `json:"size"`
}

func (p params) Validate() error {
	if p.Size <= 0 {
		return errors.New("parameter size: must be > 0")
	}
	return nil
}

func TestDecode(t *testing.T) {
	tests := []struct {
		raw      string
		wantSize int
		wantErr  string
	}{
		{raw: "", wantSize: 7},
		{raw: "null", wantSize: 7},
		{raw: "{}", wantSize: 7},
		{raw: " { }\n", wantSize: 7},
		{raw: `{"size": 3}`, wantSize: 3},
		{raw: `{"size": 0}`, wantErr: `t "n": invalid parameters: parameter size: must be > 0`},
		{raw: `{"sise": 3}`, wantErr: `t "n": invalid parameters: json: unknown field "sise"`},
		{raw: `{"size": 3} {}`, wantErr: "trailing data"},
		{raw: `[1]`, wantErr: `t "n": invalid parameters`},
		{raw: `{`, wantErr: `t "n": invalid parameters`},
	}
	for _, tt := range tests {
		p := params{Size: 7}
		err := Decode("t", "n", json.RawMessage(tt.raw), &p)
		if plugintest.WantErr(t, err, tt.wantErr) {
			continue
		}
		if err != nil || p.Size != tt.wantSize {
			t.Errorf("%q: size %d err %v, want %d", tt.raw, p.Size, err, tt.wantSize)
		}
	}
}

func TestNoParameters(t *testing.T) {
	for _, raw := range []string{"", "null", "{}"} {
		if err := NoParameters("t", "n", json.RawMessage(raw)); err != nil {
			t.Errorf("%q: %v", raw, err)
		}
	}
	if err := NoParameters("t", "n", json.RawMessage(`{"x":1}`)); err == nil || !strings.Contains(err.Error(), `t "n": takes no parameters, got field "x"`) {
		t.Errorf("field: %v", err)
	}
}

func TestMapEnv(t *testing.T) {
	e := MapEnv(map[string]string{"A": "1"})
	if v, ok := e("A"); !ok || v != "1" {
		t.Fatal("A")
	}
	if _, ok := e.OrOS()("B"); ok {
		t.Fatal("B must be unset")
	}
	if Env(nil).OrOS() == nil {
		t.Fatal("nil env must fall back to the process environment")
	}
}

// TestRegisterReusesExisting: a second instance registering the same metric gets the first
// one's collector, so both update one series set.
func TestRegisterReusesExisting(t *testing.T) {
	reg := prometheus.NewRegistry()
	newC := func() *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"l"})
	}
	a, err := Register(reg, newC())
	if err != nil {
		t.Fatal(err)
	}
	b, err := Register(reg, newC())
	if err != nil || a != b {
		t.Fatalf("second registration: %v, same=%v", err, a == b)
	}
	if _, err := Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "x_total", Help: "other"})); err == nil {
		t.Fatal("a conflicting collector must be an error")
	}
	if RegistererOf(WithRegisterer(t.Context(), reg)) != reg {
		t.Fatal("registerer from context")
	}
}
