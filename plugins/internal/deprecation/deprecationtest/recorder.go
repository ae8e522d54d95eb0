// Package deprecationtest checks, in a plugin package's tests, that each deprecated plugin type
// logs its notice exactly once per process however many instances are built.
package deprecationtest

import (
	"context"
	"encoding/json"
	"fmt"
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

// Build is one plugin instance a configuration declares: its factory and parameters.
type Build struct {
	Factory fwkplugin.FactoryFunc
	Params  string
}

// LoggedOnce builds three instances of each build on a new Recorder's handle, failing t on a
// factory error, and expects each of wants logged exactly once: a deprecated type's notice
// comes once per process, however many instances the configuration declares.
func LoggedOnce(t testing.TB, builds []Build, wants ...string) {
	t.Helper()
	r := New()
	for i := range 3 {
		for _, b := range builds {
			if _, err := b.Factory(fmt.Sprintf("instance-%d", i), json.RawMessage(b.Params), r.Handle()); err != nil {
				t.Fatal(err)
			}
		}
	}
	r.ExpectOnce(t, wants...)
}
