//go:build warm

// Package warm imports the heavy dependencies so that one `go build -tags warm ./hack/warm`
// fills the build cache before parallel work starts.
package warm

import (
	_ "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	_ "github.com/redis/go-redis/v9"
	_ "github.com/spf13/cobra"
	_ "gonum.org/v1/plot/plotter"
	_ "gonum.org/v1/plot/vg/draw"
	_ "helm.sh/helm/v3/pkg/action"
	_ "helm.sh/helm/v3/pkg/chart/loader"
	_ "sigs.k8s.io/controller-runtime/pkg/envtest"
	_ "sigs.k8s.io/gateway-api-inference-extension/cmd/epp/runner"
	_ "sigs.k8s.io/gateway-api-inference-extension/test/integration"
	_ "sigs.k8s.io/gateway-api-inference-extension/test/utils"
)
