package app

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pdgate/pdgate/cmd/sidecar/proxy"
)

// engineSetting is one setting that matters to some engines only.
type engineSetting struct {
	flag    string
	engines []proxy.Engine // the engines that use it
	value   func() string  // the current value as text
	valid   func() bool
	allowed string
	reset   func() // back to the built-in default
	// keepDefaultFromEnv: AIBrix documents "unknown → default, logged" for this variable, so
	// a bad value from the environment is a warning even on an engine that uses it.
	keepDefaultFromEnv bool
}

// checkEngineSettings applies one rule to every engine-scoped setting, so a typo in a
// fleet-wide variable cannot take down pods that never use it:
//   - a bad value for a setting this pod's --engine does not use is a warning, and the
//     setting goes back to its default;
//   - a bad value for a setting the engine uses is refused at start, naming the variable or
//     flag, the value and the allowed values;
//   - AIBRIX_TRT_SCHEDULE_STYLE follows AIBrix's documented rule (unknown → context_first,
//     logged) whatever the engine; the --trt-schedule-style flag is checked like the rest.
//
// Warnings are kept in o.warnings for Run to log. "-" in a schedule style is read as "_".
func (o *Options) checkEngineSettings() error {
	o.warnings = nil
	engine := proxy.Engine(strings.ToLower(strings.TrimSpace(o.Engine)))
	if !oneOfEngine(engine, proxy.Engines) {
		return fmt.Errorf("--engine %q: must be one of %s", o.Engine, proxy.Join(proxy.Engines))
	}
	o.Engine = string(engine)
	o.KVConnector = strings.ToLower(strings.TrimSpace(o.KVConnector))
	o.TRTSchedule = strings.ReplaceAll(strings.ToLower(strings.TrimSpace(o.TRTSchedule)), "-", "_")
	def := NewDefaults()
	settings := []engineSetting{
		{flag: "kv-connector", engines: []proxy.Engine{proxy.EngineVLLM}, value: func() string { return o.KVConnector },
			valid:   func() bool { return oneOfConnector(proxy.Connector(o.KVConnector)) },
			allowed: "one of " + proxy.Join(proxy.Connectors), reset: func() { o.KVConnector = def.KVConnector }},
		{flag: "trt-schedule-style", engines: []proxy.Engine{proxy.EngineTRTLLM}, value: func() string { return o.TRTSchedule },
			valid: func() bool {
				return o.TRTSchedule == string(proxy.ContextFirst) || o.TRTSchedule == string(proxy.GenerationFirst)
			},
			allowed: "one of " + proxy.Join(proxy.ScheduleStyles), reset: func() { o.TRTSchedule = def.TRTSchedule }, keepDefaultFromEnv: true},
		{flag: "trt-machine-id", engines: []proxy.Engine{proxy.EngineTRTLLM}, value: func() string { return strconv.Itoa(o.TRTMachineID) },
			valid: func() bool { return o.TRTMachineID >= 0 && o.TRTMachineID < 1024 }, allowed: "an integer in [0,1024)",
			reset: func() { o.TRTMachineID = def.TRTMachineID }},
		{flag: "trt-machine-id-slots", engines: []proxy.Engine{proxy.EngineTRTLLM}, value: func() string { return strconv.Itoa(o.TRTMachineIDSlots) },
			valid: func() bool { return o.TRTMachineIDSlots >= 0 && o.TRTMachineIDSlots <= trtMachineIDs }, allowed: "an integer in [0,1024]",
			reset: func() { o.TRTMachineIDSlots = def.TRTMachineIDSlots }},
		{flag: "sglang-bootstrap-port", engines: []proxy.Engine{proxy.EngineSGLang}, value: func() string { return strconv.Itoa(o.BootstrapPort) },
			valid: func() bool { return o.BootstrapPort >= 1 && o.BootstrapPort <= 65535 }, allowed: "an integer in 1..65535",
			reset: func() { o.BootstrapPort = def.BootstrapPort }},
		{flag: "decode-abort-timeout", engines: []proxy.Engine{proxy.EngineSGLang}, value: func() string { return o.AbortTimeout.String() },
			valid: func() bool { return o.AbortTimeout >= 0 }, allowed: "a duration >= 0 (0 = no aborts; the variable: integer seconds)",
			reset: func() { o.AbortTimeout = def.AbortTimeout }},
		{flag: "decode-abort-retry-delay", engines: []proxy.Engine{proxy.EngineSGLang}, value: func() string { return o.AbortRetryDelay.String() },
			valid: func() bool { return o.AbortRetryDelay >= 0 }, allowed: "a duration >= 0 (0 = one abort; the variable: integer seconds)",
			reset: func() { o.AbortRetryDelay = def.AbortRetryDelay }},
	}
	var errs []error
	for _, st := range settings {
		env, fromEnv := o.env[st.flag]
		// The value came from the variable when the flag did not replace it: equal to what
		// the variable parsed to, or (a variable that did not parse) still the default.
		fromEnv = fromEnv && ((env.err == nil && env.parsed == st.value()) || (env.err != nil && st.value() == defaultOf(st, def)))
		bad := !st.valid() || (fromEnv && env.err != nil)
		if !bad {
			continue
		}
		source := fmt.Sprintf("--%s %q", st.flag, st.value())
		if fromEnv {
			source = fmt.Sprintf("%s=%q", env.name, env.raw)
		}
		applies := oneOfEngine(engine, st.engines)
		if applies && !(fromEnv && st.keepDefaultFromEnv) {
			errs = append(errs, fmt.Errorf("%s: must be %s (--engine %s uses it)", source, st.allowed, engine))
			continue
		}
		st.reset()
		why := "--engine " + string(engine) + " does not use it"
		if applies {
			why = "AIBrix keeps the default for an unknown value"
		}
		o.warnings = append(o.warnings, fmt.Sprintf("ignoring %s (must be %s): %s; using --%s %s", source, st.allowed, why, st.flag, st.value()))
	}
	return errors.Join(errs...)
}

// NewDefaults returns the built-in defaults, without the environment.
func NewDefaults() Options {
	return Options{
		KVConnector: string(proxy.ConnectorSHFS), TRTSchedule: string(proxy.ContextFirst), TRTMachineID: 0,
		BootstrapPort: 8998, AbortTimeout: 3 * time.Second, AbortRetryDelay: 2 * time.Second,
	}
}

// defaultOf renders st's default value as text, by resetting a copy.
func defaultOf(st engineSetting, def Options) string {
	switch st.flag {
	case "kv-connector":
		return def.KVConnector
	case "trt-schedule-style":
		return def.TRTSchedule
	case "trt-machine-id":
		return strconv.Itoa(def.TRTMachineID)
	case "trt-machine-id-slots":
		return strconv.Itoa(def.TRTMachineIDSlots)
	case "sglang-bootstrap-port":
		return strconv.Itoa(def.BootstrapPort)
	case "decode-abort-timeout":
		return def.AbortTimeout.String()
	case "decode-abort-retry-delay":
		return def.AbortRetryDelay.String()
	}
	return ""
}

func oneOfEngine(e proxy.Engine, all []proxy.Engine) bool {
	for _, a := range all {
		if a == e {
			return true
		}
	}
	return false
}

func oneOfConnector(c proxy.Connector) bool {
	for _, a := range proxy.Connectors {
		if a == c {
			return true
		}
	}
	return false
}
