// Package pluginkit is what every pdgate plugin factory is built from, so that all of them
// treat a configuration the same way:
//
//   - Decode: the one parameter decoder. Absent, null and {} parameters all mean "defaults";
//     anything else must be a JSON object whose every field the plugin declares, or the error
//     names the plugin type, the instance and the field. After decoding, a Validate method
//     runs, so a factory is always defaults, then decode, then validation, then construction.
//   - Env: the one environment lookup (the AIBRIX_* knobs read the EPP's environment as their
//     defaults); tests pass a map instead of touching the process environment.
//   - Registerer / WithRegisterer / Register: metrics go to the Prometheus registerer the EPP
//     puts on the plugin handle's context, never to a package-level collector; a plugin built
//     without one (a test, a tool) gets a private registry of its own.
//   - Context: the handle's context, for loggers and lifetimes.
//
// It imports GIE's plugin interfaces and Prometheus, never a plugin.
package pluginkit
