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

// Once logs msg (with keysAndValues) at Info on ctx's logger the first time key is seen in
// this process; later calls with the same key log nothing. Use the deprecated plugin type
// name as the key.
func Once(ctx context.Context, key, msg string, keysAndValues ...any) {
	if _, dup := seen.LoadOrStore(key, struct{}{}); dup {
		return
	}
	log.FromContext(ctx).Info(msg, keysAndValues...)
}

// Reset forgets every key, so a test can observe a notice again.
func Reset() { seen.Clear() }
