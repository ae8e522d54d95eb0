package pdknobs

import (
	"context"
	"encoding/json"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// LoadForPlugin is Load as a plugin factory calls it: the AIBRIX_* variables come from the
// process environment, the plugin is named "<type> <name>" in errors, and an environment
// fallback is logged at Info on ctx's logger with the instance name.
func LoadForPlugin(ctx context.Context, pluginType, name string, raw json.RawMessage) (Knobs, error) {
	return Load(pluginType, name, raw, pluginkit.OSEnv, LogFallback(log.FromContext(ctx).WithValues("plugin", name)))
}

// LogFallback returns a Load warn function that logs each fallback at Info on logger.
func LogFallback(logger logr.Logger) func(string) {
	return func(detail string) { logger.Info("AIBrix knob fallback", "detail", detail) }
}
