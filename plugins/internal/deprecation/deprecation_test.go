package deprecation

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

func TestOnce(t *testing.T) {
	tests := []struct {
		name  string
		calls []string // keys, in order
		want  []string // keys whose notice appears, in order
	}{
		{name: "one key many calls", calls: []string{"a", "a", "a"}, want: []string{"a"}},
		{name: "keys are independent", calls: []string{"a", "b", "a", "b"}, want: []string{"a", "b"}},
		{name: "no calls", calls: nil, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			Reset()
			var mu sync.Mutex
			var lines []string
			ctx := log.IntoContext(context.Background(), funcr.New(func(_, args string) {
				mu.Lock()
				defer mu.Unlock()
				lines = append(lines, args)
			}, funcr.Options{}))
			var wg sync.WaitGroup
			for _, k := range tt.calls {
				wg.Add(1)
				go func() { defer wg.Done(); Once(ctx, k, "Deprecated: "+k, "plugin", k) }()
				wg.Wait() // in order, but from another goroutine each time
			}
			if len(lines) != len(tt.want) {
				t.Fatalf("lines %v, want notices for %v", lines, tt.want)
			}
			for i, k := range tt.want {
				if !strings.Contains(lines[i], `"Deprecated: `+k+`;`) || !strings.Contains(lines[i], `"plugin"="`+k+`"`) {
					t.Errorf("line %d %q, want the notice for %s with its plugin key", i, lines[i], k)
				}
			}
		})
	}
}

// Every notice names the release that removes the deprecated name (llm-d: v0.11).
func TestNoticeNamesRemovalRelease(t *testing.T) {
	Reset()
	var lines []string
	ctx := log.IntoContext(context.Background(), funcr.New(func(_, args string) { lines = append(lines, args) }, funcr.Options{}))
	Once(ctx, "x", "Deprecated: x is deprecated, use y instead", "plugin", "x")
	if len(lines) != 1 || !strings.Contains(lines[0], "planned removal: v0.11") || !strings.Contains(lines[0], `"removal"="v0.11"`) {
		t.Fatalf("notice %q does not name the removal release", lines)
	}
}
