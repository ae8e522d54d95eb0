package requestpath

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datastore"

	"github.com/pdgate/pdgate/cmd/epp/core"
	benchepp "github.com/pdgate/pdgate/cmd/pdgate-bench/epp"
	"github.com/pdgate/pdgate/test/testsupport"
)

// shippedDatastore holds a bench layout's pods (labels as pdgate-bench epp sets them).
func shippedDatastore(ctx context.Context, factory datalayer.EndpointFactory, layout string) datastore.Datastore {
	hosts := make([]string, 32)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("127.0.1.%d", i+1)
	}
	eps, _, err := benchepp.Layout(layout, 8, hosts, 8000)
	if err != nil {
		panic(err)
	}
	pool := datalayer.NewEndpointPool("default", "pool")
	pool.TargetPorts = []int{8000}
	ds := datastore.NewDatastore(ctx, factory, 0).WithEndpointPool(pool)
	for _, ep := range eps {
		ds.PodUpdateOrAddIfNotExist(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: ep.Name, Namespace: "default", Labels: ep.Labels},
			Status: corev1.PodStatus{PodIP: ep.Address, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}})
	}
	return ds
}

// BenchmarkShippedConfigs runs pdgate's shipped P/D configs (with pdgate-openai-parser, as
// pdgate-bench epp runs them) on their pod layouts against stock GIE's default config on 8
// plain pods, in process, and logs each one's efficiency (stock CPU / pdgate CPU per request).
// pdgate-bench epp measures the same over real processes and gRPC.
func BenchmarkShippedConfigs(b *testing.B) {
	root := filepath.Join("..", "..", "..")
	type variant struct{ name, file, layout string }
	variants := []variant{{"stock-gie", "", "plain"}, {"llmd-pd", "config/llmd/pd.yaml", "llmd-pd"},
		{"llmd-epd", "config/llmd/e-p-d.yaml", "llmd-epd"}, {"aibrix-pd", "config/aibrix-pd.yaml", "aibrix"},
		{"recommended", "config/recommended.yaml", "aibrix"}}
	for _, size := range []int{1 << 10, 16 << 10, 220 << 10} {
		var base float64
		for i, v := range variants {
			var cpu float64
			b.Run(fmt.Sprintf("%dKB/%s", size>>10, v.name), func(b *testing.B) {
				var p processor
				if v.file == "" {
					p = newStockOn(b, gieParser, func(ctx context.Context, f datalayer.EndpointFactory) datastore.Datastore {
						return shippedDatastore(ctx, f, v.layout)
					})
				} else {
					raw, err := os.ReadFile(filepath.Join(root, v.file))
					if err != nil {
						b.Fatal(err)
					}
					cfg, _, err := benchepp.WithFastParser(raw, "map")
					if err != nil {
						b.Fatal(err)
					}
					c, err := core.New(b.Context(), core.Options{Config: cfg, Standalone: true, RefreshMetricsInterval: time.Hour,
						NewDatastore: func(ctx context.Context, f datalayer.EndpointFactory) (datastore.Datastore, error) {
							return shippedDatastore(ctx, f, v.layout), nil
						}})
					if err != nil {
						b.Fatal(err)
					}
					p = c.Server
				}
				body := benchBody(size)
				runtime.GC()
				n := 0
				cpu, _ = testsupport.LoopCPU(b, func() error {
					h := map[string]string{":path": "/v1/chat/completions", "content-type": "application/json",
						"x-request-id": fmt.Sprintf("r%d", n)}
					n++
					return p.Process(&stream{ctx: context.Background(), in: frames(h, body, 16<<10)})
				})
			})
			if i == 0 {
				base = cpu
			} else if cpu > 0 && base > 0 {
				b.Logf("%dKB %s: %.0f CPU ns/request, efficiency %.2fx stock GIE", size>>10, v.name, cpu, base/cpu)
			}
		}
	}
}
