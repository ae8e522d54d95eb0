package pluginkit

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

func TestEndpointName(t *testing.T) {
	md := &fwkdl.EndpointMetadata{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "pod-a"}, Address: "10.0.0.1", Port: "8000"}
	tests := []struct {
		name string
		ep   fwksched.Endpoint
		want string
	}{
		{name: "named", ep: fwksched.NewEndpoint(md, nil, nil), want: "pod-a"},
		{name: "no metadata", ep: fwksched.NewEndpoint(nil, nil, nil), want: "<nil>"},
		{name: "no endpoint", want: "<nil>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := EndpointName(tt.ep); got != tt.want {
				t.Fatalf("EndpointName = %q, want %q", got, tt.want)
			}
		})
	}
}
