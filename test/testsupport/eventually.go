package testsupport

import (
	"testing"
	"time"
)

// PollInterval is how often Eventually re-evaluates its condition.
const PollInterval = 10 * time.Millisecond

// Eventually polls cond until it holds, failing the test with what when timeout passes first.
// Suites use it for effects of background goroutines and other processes; the condition, not
// the clock, decides, so the timeout is a generous upper bound, never a performance claim.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(PollInterval)
	}
}
