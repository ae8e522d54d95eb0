package extproc

import (
	"strings"
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
