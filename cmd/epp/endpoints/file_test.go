package endpoints

import (
	"context"
	"sync"
	"testing"

	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    int
		wantErr string // substring
	}{
		{name: "full", in: `
endpoints:
- name: decode-0
  namespace: lab
  address: 127.0.0.3
  port: 8000
  metricsPort: 9000
  labels: {llm-d.ai/role: decode}
  annotations: {model.aibrix.ai/config: '{"a":1}'}
- name: prefill-0
  address: "::1"
  port: 8001
`, want: 2},
		{name: "empty list", in: "endpoints: []", want: 0},
		{name: "null list", in: "endpoints:", want: 0},
		{name: "empty file", in: "", wantErr: "empty"},
		{name: "unknown top field", in: "endpoint: []", wantErr: `line 1: unknown field "endpoint"`},
		{name: "unknown endpoint field", in: "endpoints:\n- name: a\n  address: 127.0.0.1\n  port: 1\n  prot: 2\n", wantErr: `line 5: unknown field "prot"`},
		{name: "missing name", in: "endpoints:\n- address: 127.0.0.1\n  port: 1\n", wantErr: "endpoints[0] (line 2): field 'name' is required"},
		{name: "bad name", in: "endpoints:\n- {name: A_b, address: 127.0.0.1, port: 1}\n", wantErr: "field 'name'"},
		{name: "hostname address", in: "endpoints:\n- {name: a, address: example.com, port: 1}\n", wantErr: "field 'address'"},
		{name: "missing port", in: "endpoints:\n- {name: a, address: 127.0.0.1}\n", wantErr: "field 'port' 0"},
		{name: "port range", in: "endpoints:\n- {name: a, address: 127.0.0.1, port: 70000}\n", wantErr: "field 'port' 70000"},
		{name: "port type", in: "endpoints:\n- {name: a, address: 127.0.0.1, port: eighty}\n", wantErr: "line 2"},
		{name: "metrics port", in: "endpoints:\n- {name: a, address: 127.0.0.1, port: 1, metricsPort: -1}\n", wantErr: "field 'metricsPort'"},
		{name: "dup name", in: "endpoints:\n- {name: a, address: 127.0.0.1, port: 1}\n- {name: a, address: 127.0.0.2, port: 1}\n", wantErr: "endpoints[1] (line 3): field 'name'"},
		{name: "dup address", in: "endpoints:\n- {name: a, address: 127.0.0.1, port: 1}\n- {name: b, address: 127.0.0.1, port: 1}\n", wantErr: "duplicates endpoints[0]"},
		{name: "bad label key", in: "endpoints:\n- {name: a, address: 127.0.0.1, port: 1, labels: {'bad key': x}}\n", wantErr: "field 'labels'"},
		{name: "not a list", in: "endpoints: {a: 1}", wantErr: "must be a list"},
		{name: "two documents", in: "endpoints: []\n---\nendpoints: []\n", wantErr: "only one YAML document"},
		{name: "syntax", in: "endpoints: [\n", wantErr: "endpoints file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.in))
			if plugintest.WantErr(t, err, tt.wantErr) {
				return
			}
			if len(got) != tt.want {
				t.Fatalf("got %d endpoints, want %d", len(got), tt.want)
			}
		})
	}
	got, _ := Parse([]byte("endpoints:\n- {name: a, address: '::1', port: 8000}\n"))
	if got[0].Namespace != DefaultNamespace || got[0].MetricsPort != 8000 || got[0].HostPort() != "[::1]:8000" {
		t.Fatalf("defaults not applied: %+v", got[0])
	}
}

func FuzzParse(f *testing.F) {
	f.Add("endpoints:\n- {name: a, address: 127.0.0.1, port: 1, labels: {x: y}}\n")
	f.Add("endpoints: []")
	f.Add("endpoints:\n- name: a\n  address: '::1'\n  port: 65535\n  metricsPort: 1\n")
	f.Add(": : :")
	f.Fuzz(func(t *testing.T, s string) {
		list, err := Parse([]byte(s))
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, ep := range list {
			if ep.Name == "" || ep.Port < 1 || ep.Port > 65535 || ep.MetricsPort < 1 || ep.Namespace == "" {
				t.Fatalf("invalid endpoint accepted: %+v", ep)
			}
			if seen[ep.Namespace+"/"+ep.Name] {
				t.Fatalf("duplicate accepted: %+v", ep)
			}
			seen[ep.Namespace+"/"+ep.Name] = true
		}
	})
}

// fakeFactory records endpoint lifecycles instead of starting collectors.
type fakeFactory struct {
	mu       sync.Mutex
	live     map[fwkdl.Endpoint]bool
	released int
}

func (f *fakeFactory) NewEndpoint(_ context.Context, meta *fwkdl.EndpointMetadata, _ datalayer.PoolInfo) fwkdl.Endpoint {
	f.mu.Lock()
	defer f.mu.Unlock()
	ep := fwkdl.NewEndpoint(meta, fwkdl.NewMetrics())
	f.live[ep] = true
	return ep
}

func (f *fakeFactory) ReleaseEndpoint(ep fwkdl.Endpoint) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.live, ep)
	f.released++
}

func TestStoreApply(t *testing.T) {
	ff := &fakeFactory{live: map[fwkdl.Endpoint]bool{}}
	s := NewStore(context.Background(), ff, datalayer.NewEndpointPool("default", "pool"))
	parse := func(y string) []Endpoint {
		l, err := Parse([]byte(y))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	steps := []struct {
		file     string
		want     Change
		released int
	}{
		{file: "endpoints:\n- {name: a, address: 127.0.0.2, port: 1, annotations: {k: v}}\n- {name: b, address: 127.0.0.3, port: 1}\n",
			want: Change{Added: 2}},
		{file: "endpoints:\n- {name: a, address: 127.0.0.2, port: 1, annotations: {k: w}}\n- {name: b, address: 127.0.0.3, port: 1}\n",
			want: Change{Updated: 1, Unchanged: 1}},
		{file: "endpoints:\n- {name: a, address: 127.0.0.2, port: 2, annotations: {k: w}}\n",
			want: Change{Added: 1, Removed: 1}, released: 2},
		{file: "endpoints: []\n", want: Change{Removed: 1}, released: 3},
	}
	for i, st := range steps {
		got := s.Apply(parse(st.file))
		if got != st.want {
			t.Fatalf("step %d: change %+v, want %+v", i, got, st.want)
		}
		if ff.released != st.released {
			t.Fatalf("step %d: released %d, want %d", i, ff.released, st.released)
		}
		if len(ff.live) != s.Len() || len(s.PodList(nil)) != s.Len() {
			t.Fatalf("step %d: live %d store %d", i, len(ff.live), s.Len())
		}
		if i == 1 {
			for _, ep := range s.PodList(nil) {
				m := ep.GetMetadata()
				if m.NamespacedName.Name == "a" && m.Labels[protocol.AnnotationLabelPrefix+"k"] != "w" {
					t.Fatalf("annotation not mirrored: %v", m.Labels)
				}
			}
		}
	}
}
