package extproc

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	attrprefix "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/attribute/prefix"
)

func TestSnapshotEndpoint(t *testing.T) {
	meta := &fwkdl.EndpointMetadata{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "p"}, Labels: map[string]string{"a": "b"}}
	live := fwkdl.NewEndpoint(meta, &fwkdl.Metrics{WaitingQueueSize: 3})
	live.GetAttributes().Put("kept", attrprefix.NewPrefixCacheMatchInfo(1, 2, 3))

	snap := newSnapshotEndpoint(live)
	cases := []struct {
		name string
		ok   bool
	}{
		{"metadata shared, not copied", snap.GetMetadata() == live.GetMetadata()},
		{"metrics shared, not copied", snap.GetMetrics() == live.GetMetrics()},
		{"attributes copied", func() bool { _, ok := snap.Get("kept"); return ok }()},
		{"a request's attribute stays on its snapshot", func() bool {
			snap.Put("per-request", attrprefix.NewPrefixCacheMatchInfo(0, 1, 1))
			_, leaked := live.GetAttributes().Get("per-request")
			return !leaked
		}()},
		{"a later metadata update leaves the snapshot as it was", func() bool {
			live.UpdateMetadata(&fwkdl.EndpointMetadata{NamespacedName: meta.NamespacedName, Labels: map[string]string{"a": "c"}})
			return snap.GetMetadata().Labels["a"] == "b"
		}()},
		{"String names the endpoint", strings.Contains(snap.String(), "ns/p") && strings.Contains(snap.String(), "WaitingQueueSize:3")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.ok {
				t.Fatal("failed")
			}
		})
	}
	if (*snapshotEndpoint)(nil).String() != "<nil>" {
		t.Fatal("nil endpoint string")
	}
}

// TestSnapshotAttributes checks the request's attribute map against what GIE's Attributes
// (the map each snapshot cloned before) does for the same calls.
func TestSnapshotAttributes(t *testing.T) {
	live := fwkdl.NewEndpoint(&fwkdl.EndpointMetadata{}, &fwkdl.Metrics{})
	live.GetAttributes().Put("endpoint", attrprefix.NewPrefixCacheMatchInfo(1, 2, 3))
	live.GetAttributes().Put("replaced", attrprefix.NewPrefixCacheMatchInfo(1, 1, 1))
	snap := newSnapshotEndpoint(live)
	gie := live.GetAttributes().Clone()
	for _, m := range []fwkdl.AttributeMap{snap, gie} {
		m.Put("request", attrprefix.NewPrefixCacheMatchInfo(4, 5, 6))
		m.Put("replaced", attrprefix.NewPrefixCacheMatchInfo(7, 8, 9))
		m.Put("nil", nil)
	}
	if got, want := keys(snap), keys(gie); !slices.Equal(got, want) {
		t.Fatalf("keys %v, GIE's clone %v", got, want)
	}
	for _, k := range []string{"endpoint", "request", "replaced", "nil", "absent"} {
		got, ok := snap.Get(k)
		want, wantOK := gie.Get(k)
		if ok != wantOK || (ok && *got.(*attrprefix.PrefixCacheMatchInfo) != *want.(*attrprefix.PrefixCacheMatchInfo)) {
			t.Fatalf("%s: %v %v, GIE's clone %v %v", k, got, ok, want, wantOK)
		}
	}
	stored := &writable{N: 1}
	snap.Put("request", stored)
	if got, _ := snap.Get("request"); got == stored {
		t.Fatal("Get returned the stored value itself, not a clone")
	}
	// GIE's prefix match has getters only: no caller can change it, so a read shares it.
	match := attrprefix.NewPrefixCacheMatchInfo(1, 2, 3)
	snap.Put("match", match)
	if got, _ := snap.Get("match"); got != match {
		t.Fatal("a read-only prefix match was cloned")
	}
	clone := snap.Clone()
	clone.Put("clone-only", attrprefix.NewPrefixCacheMatchInfo(1, 1, 1))
	if _, ok := snap.Get("clone-only"); ok {
		t.Fatal("a clone's Put reached the map it was cloned from")
	}
	if _, ok := clone.Get("endpoint"); !ok {
		t.Fatal("the clone lost the endpoint's attribute")
	}
	if _, ok := live.GetAttributes().Get("request"); ok {
		t.Fatal("a request's attribute reached the live endpoint")
	}
}

// The endpoint's own attributes are read when a plugin first asks, and that value holds for the
// rest of the request, whatever the live endpoint stores meanwhile.
func TestSnapshotAttributesReadLiveOnce(t *testing.T) {
	live := fwkdl.NewEndpoint(&fwkdl.EndpointMetadata{}, &fwkdl.Metrics{})
	snap := newSnapshotEndpoint(live)
	live.GetAttributes().Put("metrics", attrprefix.NewPrefixCacheMatchInfo(1, 1, 1))
	blocks := func(m fwkdl.AttributeMap) int {
		v, ok := m.Get("metrics")
		if !ok {
			t.Fatal("metrics: not found")
		}
		return v.(*attrprefix.PrefixCacheMatchInfo).MatchBlocks()
	}
	if got := blocks(snap); got != 1 {
		t.Fatalf("first read %d, want the live value 1", got)
	}
	live.GetAttributes().Put("metrics", attrprefix.NewPrefixCacheMatchInfo(2, 2, 1))
	clone := snap.Clone()
	if got := blocks(snap); got != 1 {
		t.Fatalf("second read %d: the value changed within the request", got)
	}
	if got := blocks(clone); got != 1 {
		t.Fatalf("a clone read %d, want the value its original had read", got)
	}
	if got := blocks(newSnapshotEndpoint(live)); got != 2 {
		t.Fatalf("the next request read %d, want the live value 2", got)
	}
	if got := keys(snap); !slices.Equal(got, []string{"metrics"}) {
		t.Fatalf("keys %v: a read live key is listed once", got)
	}
}

// writable is a value its readers could change.
type writable struct{ N int }

func (w *writable) Clone() fwkdl.Cloneable { c := *w; return &c }

func keys(m fwkdl.AttributeMap) []string { k := m.Keys(); slices.Sort(k); return k }

// A PrepareData plugin that outlived its timeout may still write while the scheduler reads.
func TestSnapshotAttributesConcurrentPutAndGet(t *testing.T) {
	snap := newSnapshotEndpoint(fwkdl.NewEndpoint(&fwkdl.EndpointMetadata{}, &fwkdl.Metrics{}))
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				snap.Put(fmt.Sprintf("k%d", (w+i)%8), attrprefix.NewPrefixCacheMatchInfo(i, 1, 1))
				_, _ = snap.Get("k0")
				_ = snap.Keys()
				_ = snap.Clone()
			}
		}()
	}
	wg.Wait()
	if n := len(snap.Keys()); n != 8 {
		t.Fatalf("%d keys, want 8", n)
	}
}

// A request's snapshot of eight endpoints, with a value put on each, costs three allocations
// (the list, the endpoints, the room for their values) whatever the number of endpoints; one
// endpoint and one value list each cost two per endpoint, and a clone of GIE's sync.Map-backed
// Attributes four or more with the map's root and entry nodes, on every request.
func TestSnapshotAllocations(t *testing.T) {
	candidates := make([]fwkdl.Endpoint, 8)
	for i := range candidates {
		candidates[i] = fwkdl.NewEndpoint(&fwkdl.EndpointMetadata{}, &fwkdl.Metrics{})
	}
	info := attrprefix.NewPrefixCacheMatchInfo(1, 2, 3)
	snapshotAndPut := func() {
		snapshot, _ := newSnapshot(candidates, defaultAttrRoom)
		for _, e := range snapshot {
			e.Put(attrprefix.PrefixCacheMatchInfoKey, info)
		}
	}
	if n := testing.AllocsPerRun(100, snapshotAndPut); n > 3 {
		t.Fatalf("%v allocations to snapshot 8 endpoints and put one value on each, want at most 3", n)
	}
	// An endpoint with its own attributes costs nothing more until a plugin reads one.
	candidates[0].GetAttributes().Put("engine", attrprefix.NewPrefixCacheMatchInfo(1, 1, 1))
	if n := testing.AllocsPerRun(100, snapshotAndPut); n > 3 {
		t.Fatalf("%v allocations with an unread endpoint attribute, want at most 3", n)
	}
	// Past its room an endpoint's values move to a list of their own, and its neighbour's
	// values stay where they were.
	snap, eps := newSnapshot(candidates[:2], defaultAttrRoom)
	for k := range defaultAttrRoom + 1 {
		snap[0].Put(fmt.Sprint("key", k), info)
	}
	snap[1].Put("neighbour", info)
	if _, ok := snap[1].Get("key0"); ok {
		t.Fatal("one endpoint's value read on its neighbour")
	}
	if n := len(snap[0].Keys()); n != defaultAttrRoom+2 { // the five put and the live "engine"
		t.Fatalf("%d keys on the first endpoint, want %d", n, defaultAttrRoom+2)
	}
	// The next request's room is what this one used: the most values one endpoint held.
	if got := attrRoom(eps); got != defaultAttrRoom+1 {
		t.Fatalf("room %d for the next request, want %d", got, defaultAttrRoom+1)
	}
	snap, eps = newSnapshot(candidates[:2], 0) // a configuration that puts nothing
	if n := testing.AllocsPerRun(100, func() { newSnapshot(candidates, 0) }); n > 2 {
		t.Fatalf("%v allocations for a snapshot without room, want 2", n)
	}
	snap[1].Put("late", info)
	if got := attrRoom(eps); got != 1 {
		t.Fatalf("room %d after one value on one endpoint, want 1", got)
	}
}
