package report

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type inner struct {
	Shared string  `json:"shared"`
	Depth  float64 `json:"depth"`
}

type Promoted struct {
	Value float64 `json:"promotedValue"`
}

type sample struct {
	inner
	*Promoted
	Name     string             `json:"name"`
	Shared   string             `json:"shared"` // hides inner.Shared
	Skipped  float64            `json:"-"`
	Empty    string             `json:"empty,omitempty"`
	Zero     float64            `json:"zero,omitempty"`
	NoTag    int                `json:""`
	Untagged bool               //nolint:unused // written as "Untagged"
	When     time.Time          `json:"when"`
	Took     time.Duration      `json:"took"`
	Bytes    []byte             `json:"bytes"`
	Small    float32            `json:"small"`
	Values   []float64          `json:"values"`
	NilSlice []float64          `json:"nilSlice"`
	Pair     [2]float64         `json:"pair"`
	ByCode   map[int]float64    `json:"byCode"`
	ByName   map[string]float64 `json:"byName"`
	Ptr      *float64           `json:"ptr"`
	Any      any                `json:"any"`
	Series   Series             `json:"series"`
	private  float64
}

func fill(f float64) sample {
	p := f
	return sample{
		inner: inner{Shared: "hidden", Depth: f}, Promoted: &Promoted{Value: f},
		Name: "x", Shared: "outer", Skipped: f, NoTag: 3, Untagged: true,
		When: time.Date(2026, 12, 3, 1, 2, 3, 0, time.UTC), Took: 1500 * time.Millisecond,
		Bytes: []byte("ab"), Small: 0.5, Values: []float64{1, f}, Pair: [2]float64{f, 2},
		ByCode: map[int]float64{503: f, 200: 1}, ByName: map[string]float64{"b": f, "a": 2},
		Ptr: &p, Any: map[string]any{"k": f}, Series: Series{Name: "s", X: []float64{1}, Y: []float64{f}},
		private: f,
	}
}

// With finite values the encoding is encoding/json's, byte for byte.
func TestFiniteJSONMatchesEncodingJSON(t *testing.T) {
	for _, v := range []any{fill(1.25), &Report{Name: "r", Data: fill(2)}, []int{1, 2}, nil, 3.5, "s"} {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		enc, err := finiteJSON(v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := json.Marshal(enc)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("finiteJSON(%T)\n got %s\nwant %s", v, got, want)
		}
	}
}

func TestFiniteJSONWritesNonFiniteAsNull(t *testing.T) {
	for _, f := range []float64{math.Inf(1), math.Inf(-1), math.NaN()} {
		v := fill(f)
		if _, err := json.Marshal(v); err == nil {
			t.Fatalf("encoding/json accepted %v; the test no longer shows the problem", f)
		}
		enc, err := finiteJSON(v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := json.Marshal(enc)
		if err != nil {
			t.Fatalf("%v: %v", f, err)
		}
		var back map[string]any
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"depth", "promotedValue", "ptr"} {
			if v, ok := back[key]; !ok || v != nil {
				t.Errorf("%v: %s = %v (present %v), want null", f, key, v, ok)
			}
		}
		if back["shared"] != "outer" || back["values"].([]any)[1] != nil || back["byCode"].(map[string]any)["503"] != nil {
			t.Errorf("%v: %s", f, got)
		}
		if _, ok := back["Skipped"]; ok {
			t.Errorf(`json:"-" field written: %s`, got)
		}
	}
}

// A report whose data holds +Inf (a pod that got no request in a burst) is written, not lost.
func TestWriteKeepsReportWithNonFiniteData(t *testing.T) {
	r := New("inf", "Inf")
	r.Data = map[string]any{"spread": math.Inf(1), "p99": math.NaN(), "ok": 1.5}
	dir := t.TempDir()
	if _, err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "inf.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"spread": null`) || !strings.Contains(string(b), `"ok": 1.5`) {
		t.Errorf("inf.json:\n%s", b)
	}
}
