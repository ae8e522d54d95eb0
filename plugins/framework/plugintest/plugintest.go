// Package plugintest holds what the plugins' tests share: a plugin built for a test, the check
// of an expected configuration error or early answer, a factory's handle, attribute fakes and the names of a filter's
// endpoints. Only test files import it.
package plugintest

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
)

// WantAnswer fails t at once unless err fits an admission row: status 0 wants no error (and
// headers go unchecked, so a table's header column may stay filled); any other status wants an
// early answer (contract.Answer) with that status carrying each of headers. It returns the answer, nil when none was wanted, for the row's further checks.
func WantAnswer(t testing.TB, err error, status int, headers ...contract.Header) *contract.Answer {
	t.Helper()
	if status == 0 {
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		return nil
	}
	a, ok := contract.AnswerOf(err)
	if !ok || a.Status != status {
		t.Fatalf("err %v, want a %d answer", err, status)
		return nil
	}
	for _, h := range headers {
		if !slices.Contains(a.Headers, h) {
			t.Fatalf("answer lacks %s: %s: %v", h.Name, h.Value, a.Headers)
			return nil
		}
	}
	return a
}

// Build builds instance name with factory from raw parameters on handle (nil: none), failing t
// at once when the factory fails or builds another type than P, the plugin's own.
func Build[P fwkplugin.Plugin](t testing.TB, factory fwkplugin.FactoryFunc, name, raw string, handle fwkplugin.Handle) P {
	t.Helper()
	p, err := factory(name, json.RawMessage(raw), handle)
	if err != nil {
		t.Fatalf("build %q: %v", name, err)
	}
	built, ok := p.(P)
	if !ok && err == nil {
		t.Fatalf("build %q: factory built %T, want %T", name, p, built)
	}
	return built
}

// WantErr fails t at once unless err fits want: "" wants no error; any other text wants an
// error that contains it and every one of naming (the plugin type or instance it must name).
// It reports whether an error was wanted, so the caller then has nothing more to check.
func WantErr(t testing.TB, err error, want string, naming ...string) (wanted bool) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case want == "":
	case err == nil:
		t.Fatalf("no error, want one naming %q", append([]string{want}, naming...))
	default:
		for _, w := range append([]string{want}, naming...) {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("error %v, want one naming %q", err, w)
			}
		}
	}
	return want != ""
}

// Attrs is an endpoint's attributes as a test writes them: Get reads them as GIE's scheduling
// and data-layer endpoints do.
type Attrs map[string]fwkdl.Cloneable

// Get returns the value under k.
func (a Attrs) Get(k string) (fwkdl.Cloneable, bool) { v, ok := a[k]; return v, ok }

// Other is a value of no plugin's type, for a test that stores the wrong type under a key.
type Other struct{}

// Clone implements fwkdl.Cloneable.
func (Other) Clone() fwkdl.Cloneable { return Other{} }

// Names joins the endpoints' names with commas, in order: what a filter kept, as a table
// test's want column spells it.
func Names(eps []fwksched.Endpoint) string {
	s := make([]string, len(eps))
	for i, ep := range eps {
		s[i] = ep.GetMetadata().NamespacedName.Name
	}
	return strings.Join(s, ",")
}

// Handle is the EPP handle a factory gets in a unit test: ctx (and what it carries, such as a
// registerer or a seed) over a pool with no pods.
func Handle(ctx context.Context) fwkplugin.Handle {
	return fwkplugin.NewEppHandle(ctx, func() []types.NamespacedName { return nil })
}
