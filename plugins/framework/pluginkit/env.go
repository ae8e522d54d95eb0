package pluginkit

import "os"

// Env looks up an environment variable, like os.LookupEnv. Factories take the process
// environment (OSEnv); tests pass MapEnv so they never set process-wide state.
type Env func(key string) (value string, ok bool)

// OSEnv is the EPP process's environment.
var OSEnv Env = os.LookupEnv

// MapEnv is an environment made of m (tests, tools).
func MapEnv(m map[string]string) Env {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// OrOS returns e, or the process environment when e is nil.
func (e Env) OrOS() Env {
	if e == nil {
		return OSEnv
	}
	return e
}
