// Package deprecationtest checks, in a plugin package's tests, that each deprecated plugin type
// logs its notice exactly once per process however many instances are built.
package deprecationtest

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

// Recorder captures the log lines of the plugins built with its Handle.
type Recorder struct {
	mu    sync.Mutex
	lines []string
	h     fwkplugin.Handle
}

// New forgets every notice already logged in this process (so the test sees them again) and
// returns a Recorder.
func New() *Recorder {
	deprecation.Reset()
	r := &Recorder{}
	logger := funcr.New(func(_, args string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.lines = append(r.lines, args)
	}, funcr.Options{})
	r.h = fwkplugin.NewEppHandle(log.IntoContext(context.Background(), logger), func() []types.NamespacedName { return nil })
	return r
}

// Handle is the EPP handle to build plugins with; their logs land in the Recorder.
func (r *Recorder) Handle() fwkplugin.Handle { return r.h }

// ExpectOnce fails t unless each of wants is contained in exactly one captured line.
func (r *Recorder) ExpectOnce(t testing.TB, wants ...string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, want := range wants {
		n := 0
		for _, l := range r.lines {
			if strings.Contains(l, want) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%q logged %d times; lines: %v", want, n, r.lines)
		}
	}
}
