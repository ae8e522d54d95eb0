package telemetry

import (
	"fmt"
	"strconv"
	"strings"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The sampler settings; the SDK's TracerProvider reads the same two variables when it is given
// no sampler.
const (
	EnvTracesSampler    = "OTEL_TRACES_SAMPLER"
	EnvTracesSamplerArg = "OTEL_TRACES_SAMPLER_ARG"
)

// SamplerFromEnv is the sampler OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG name, with the
// values and defaults the SDK accepts (parentbased_always_on when unset; a ratio defaults to
// 1). The process builds it once and gives the same sampler to its TracerProvider and to the
// spans it records itself (Tracer), so both decide alike. Where the SDK reports an unknown
// sampler or a bad ratio and falls back to a default, this is an error: malformed
// configuration stops the binary at start-up, as for the OTEL_BSP_* settings.
func SamplerFromEnv(getenv func(string) string) (sdktrace.Sampler, error) {
	name := strings.ToLower(strings.TrimSpace(getenv(EnvTracesSampler)))
	arg := strings.TrimSpace(getenv(EnvTracesSamplerArg))
	ratio := func() (sdktrace.Sampler, error) {
		if arg == "" {
			return sdktrace.TraceIDRatioBased(1), nil
		}
		v, err := strconv.ParseFloat(arg, 64)
		if err != nil || v < 0 || v > 1 {
			return nil, fmt.Errorf("%s=%q: want a ratio from 0 to 1", EnvTracesSamplerArg, arg)
		}
		return sdktrace.TraceIDRatioBased(v), nil
	}
	switch name {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "traceidratio":
		return ratio()
	case "parentbased_traceidratio":
		s, err := ratio()
		if err != nil {
			return nil, err
		}
		return sdktrace.ParentBased(s), nil
	}
	return nil, fmt.Errorf("%s=%q: not a sampler the OpenTelemetry SDK supports "+
		"(always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio)",
		EnvTracesSampler, name)
}
