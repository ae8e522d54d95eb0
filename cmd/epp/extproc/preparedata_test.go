package extproc

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// stepPlugin is a PrepareData plugin that records that it ran, on which goroutine, and then
// does what its step says.
type stepPlugin struct {
	name    string
	step    func(ctx context.Context) error
	ran     *[]string
	threads *[]int
}

func (p stepPlugin) TypedName() fwkplugin.TypedName {
	return fwkplugin.TypedName{Type: "step", Name: p.name}
}
func (stepPlugin) Produces() map[string]any { return nil }
func (stepPlugin) Consumes() map[string]any { return nil }
func (p stepPlugin) PrepareRequestData(ctx context.Context, _ *fwksched.LLMRequest, _ []fwksched.Endpoint) error {
	*p.ran = append(*p.ran, p.name)
	*p.threads = append(*p.threads, syscall.Gettid())
	if p.step == nil {
		return nil
	}
	return p.step(ctx)
}

// The PrepareData plugins run in order on the request's own goroutine; an error or the budget
// running out stops the ones after it and is returned (Decide logs it and goes on, as GIE
// does), and a plugin that waits on its context is released at the deadline.
func TestRunPrepareData(t *testing.T) {
	fail := errors.New("no data")
	waitForDeadline := func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return nil // a plugin that gives up quietly: the director still sees the deadline
		case <-time.After(time.Minute):
			return errors.New("the deadline never came")
		}
	}
	tests := []struct {
		name    string
		inline  bool
		steps   []func(context.Context) error
		wantRan string
		wantErr string
	}{
		{"all run in order", false, []func(context.Context) error{nil, nil, nil}, "a b c", ""},
		{"an error stops the rest", false, []func(context.Context) error{nil, func(context.Context) error { return fail }, nil},
			"a b", "prepare data plugin b/step failed: no data"},
		{"the budget stops the rest", false, []func(context.Context) error{waitForDeadline, nil}, "a", "timed out after 50ms (at a/step)"},
		{"no budget on a virtual clock", true, []func(context.Context) error{func(ctx context.Context) error {
			if _, ok := ctx.Deadline(); ok {
				return errors.New("a wall-clock deadline under bench sim")
			}
			return nil
		}, nil}, "a b", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var ran []string
			var threads []int
			var hooks Hooks
			for i, step := range tc.steps {
				hooks.PrepareData = append(hooks.PrepareData, fwkrc.PrepareDataPlugin(stepPlugin{name: string(rune('a' + i)), step: step, ran: &ran, threads: &threads}))
			}
			d := &Director{hooks: hooks, inline: tc.inline, prepareDataTimeout: 50 * time.Millisecond}
			// The caller's goroutine holds its thread: a plugin on that thread ran on it.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			caller := syscall.Gettid()
			err := d.runPrepareData(context.Background(), &fwksched.LLMRequest{}, nil)
			if got := strings.Join(ran, " "); got != tc.wantRan {
				t.Errorf("ran %q, want %q", got, tc.wantRan)
			}
			if (err == nil) != (tc.wantErr == "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %v, want %q", err, tc.wantErr)
			}
			for i, tid := range threads {
				if tid != caller {
					t.Errorf("plugin %s ran on thread %d, not the request's %d", ran[i], tid, caller)
				}
			}
		})
	}
}
