// Package deprecation logs the notice of a deprecated plugin type (or parameter) once per
// process, however many instances of it a config declares and however often configs reload:
// llm-d and AIBrix log such notices at construction, and a config with ten instances should
// not print ten identical lines.
package deprecation

import (
	"context"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/log"
)

var seen sync.Map // key → struct{}

// RemovalRelease is the release in which the deprecated names go away: llm-d plans the removal
// of its deprecated disaggregation plugin types for v0.11, and pdgate, which keeps them only
// for llm-d configs, removes them with it. A notice that does not say when is one users ignore.
const RemovalRelease = "v0.11"

// Once logs msg (with keysAndValues) at Info on ctx's logger the first time key is seen in
// this process; later calls with the same key log nothing. Use the deprecated plugin type
// name as the key. Every notice names the removal release (appended to msg, and as the
// "removal" value), so no caller can forget it.
func Once(ctx context.Context, key, msg string, keysAndValues ...any) {
	if _, dup := seen.LoadOrStore(key, struct{}{}); dup {
		return
	}
	log.FromContext(ctx).Info(WithRemoval(msg), append(keysAndValues, "removal", RemovalRelease)...)
}

// WithRemoval appends the planned removal release to a deprecation message.
func WithRemoval(msg string) string {
	return msg + "; planned removal: " + RemovalRelease
}

// Reset forgets every key, so a test can observe a notice again.
func Reset() { seen.Clear() }
