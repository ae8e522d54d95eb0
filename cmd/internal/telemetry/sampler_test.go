package telemetry

import (
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// SamplerFromEnv builds the sampler the SDK builds from the same variables, and refuses what
// the SDK would replace by a default.
func TestSamplerFromEnv(t *testing.T) {
	for _, c := range []struct {
		name, sampler, arg string
		want               sdktrace.Sampler
		err                string
	}{
		{name: "unset", want: sdktrace.ParentBased(sdktrace.AlwaysSample())},
		{name: "always_on", sampler: "always_on", want: sdktrace.AlwaysSample()},
		{name: "always_off, any case", sampler: " Always_Off ", want: sdktrace.NeverSample()},
		{name: "traceidratio", sampler: "traceidratio", arg: "0.25", want: sdktrace.TraceIDRatioBased(0.25)},
		{name: "traceidratio without a ratio", sampler: "traceidratio", want: sdktrace.TraceIDRatioBased(1)},
		{name: "parentbased_always_on", sampler: "parentbased_always_on", want: sdktrace.ParentBased(sdktrace.AlwaysSample())},
		{name: "parentbased_always_off", sampler: "parentbased_always_off", want: sdktrace.ParentBased(sdktrace.NeverSample())},
		{name: "parentbased_traceidratio", sampler: "parentbased_traceidratio", arg: "0.1",
			want: sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.1))},
		{name: "unknown sampler", sampler: "jaeger_remote", err: EnvTracesSampler},
		{name: "ratio not a number", sampler: "traceidratio", arg: "half", err: EnvTracesSamplerArg},
		{name: "ratio above 1", sampler: "parentbased_traceidratio", arg: "1.5", err: EnvTracesSamplerArg},
		{name: "negative ratio", sampler: "traceidratio", arg: "-0.1", err: EnvTracesSamplerArg},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{EnvTracesSampler: c.sampler, EnvTracesSamplerArg: c.arg}
			got, err := SamplerFromEnv(func(k string) string { return env[k] })
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one naming %s", err, c.err)
				}
				return
			}
			if err != nil || got.Description() != c.want.Description() {
				t.Fatalf("sampler %v, %v; want %s", got, err, c.want.Description())
			}
		})
	}
}
