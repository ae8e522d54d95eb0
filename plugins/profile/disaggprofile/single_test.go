package disaggprofile

import (
	"context"
	"reflect"
	"sync"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// namedProfile is a comparable profile; listProfile is one whose type cannot be compared.
type namedProfile struct{ name string }

func (namedProfile) Run(context.Context, *fwksched.LLMRequest, *fwksched.CycleState, []fwksched.Endpoint) (*fwksched.ProfileRunResult, error) {
	return nil, nil
}

type listProfile struct{ names []string }

func (listProfile) Run(context.Context, *fwksched.LLMRequest, *fwksched.CycleState, []fwksched.Endpoint) (*fwksched.ProfileRunResult, error) {
	return nil, nil
}

func TestSinglesOf(t *testing.T) {
	var s singles
	a, b := &namedProfile{"a"}, &namedProfile{"b"}
	profiles := map[string]fwksched.SchedulerProfile{"decode": a, "prefill": b}
	want := func(m map[string]fwksched.SchedulerProfile, name string, p fwksched.SchedulerProfile) {
		t.Helper()
		if len(m) != 1 || m[name] != p {
			t.Fatalf("got %v, want {%s: %v}", m, name, p)
		}
	}
	d1 := s.of("decode", profiles)
	want(d1, "decode", a)
	want(s.of("prefill", profiles), "prefill", b)
	if d2 := s.of("decode", profiles); reflect.ValueOf(d2).UnsafePointer() != reflect.ValueOf(d1).UnsafePointer() {
		t.Fatal("the decode stage's map was built again for an unchanged profile")
	}
	if n := testing.AllocsPerRun(100, func() { s.of("decode", profiles) }); n != 0 {
		t.Fatalf("a kept map cost %v allocations", n)
	}

	// Another profile under the same name (another configuration, another map) is answered
	// with itself, never with the kept map.
	other := &namedProfile{"a"}
	want(s.of("decode", map[string]fwksched.SchedulerProfile{"decode": other}), "decode", other)
	want(s.of("decode", profiles), "decode", a)
	// A name that is not configured maps to nil, as a map lookup would.
	want(s.of("encode", profiles), "encode", nil)

	// A profile of an incomparable type is answered, not kept, and comparing kept profiles
	// with it does not panic.
	l := listProfile{names: []string{"x"}}
	for range 2 {
		if m := s.of("decode", map[string]fwksched.SchedulerProfile{"decode": l}); len(m) != 1 || m["decode"].(listProfile).names[0] != "x" {
			t.Fatalf("got %v", m)
		}
	}
	for _, e := range *s.p.Load() {
		if _, ok := e.profile.(listProfile); ok {
			t.Fatal("an incomparable profile was kept")
		}
	}
}

// The kept list is bounded whatever callers pass.
func TestSinglesBound(t *testing.T) {
	var s singles
	for i := range 3 * maxSingles {
		s.of("decode", map[string]fwksched.SchedulerProfile{"decode": &namedProfile{string(rune('a' + i))}})
	}
	if n := len(*s.p.Load()); n > maxSingles {
		t.Fatalf("%d maps kept, bound %d", n, maxSingles)
	}
}

func TestSinglesConcurrent(t *testing.T) {
	var s singles
	profiles := map[string]fwksched.SchedulerProfile{"decode": &namedProfile{"d"}, "prefill": &namedProfile{"p"}, "encode": &namedProfile{"e"}}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				for name, p := range profiles {
					if m := s.of(name, profiles); len(m) != 1 || m[name] != p {
						t.Errorf("%s: got %v", name, m)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}
