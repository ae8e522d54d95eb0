package disaggprofile

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"

	"github.com/pdgate/pdgate/plugins/internal/deprecation"
)

// Each deprecated plugin type logs its deprecation once per process, however many instances.
func TestDeprecationLoggedOnce(t *testing.T) {
	deprecation.Reset()
	var mu sync.Mutex
	var lines []string
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, args)
	}, funcr.Options{})
	h := fwkplugin.NewEppHandle(log.IntoContext(context.Background(), logger), func() []types.NamespacedName { return nil })
	for i := 0; i < 3; i++ {
		if _, err := PDHandlerFactory("pd", nil, h); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{"Deprecated: pd-profile-handler is deprecated"} {
		n := 0
		for _, l := range lines {
			if strings.Contains(l, want) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%q logged %d times; lines: %v", want, n, lines)
		}
	}
}
