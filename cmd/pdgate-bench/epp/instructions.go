package epp

import (
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate-bench/eppharness"
)

// Instruction-count mode (--instructions): every EPP runs under valgrind's callgrind and the
// phases are metered in instructions executed instead of CPU time, so that a run on a machine
// other work shares gives the same figures as on a quiet one (eppharness/callgrind.go says
// why). The CPU columns of the report then read in millions of instructions: one instruction
// is carried as one nanosecond through the same arithmetic (per request, net of the idle rate,
// ratios to the baseline and the floor).

// instructionRefresh is the metrics refresh interval under callgrind. GIE's 50 ms scrapes of
// every pod would, at callgrind's slowdown, take the whole of the EPP's one thread; at 1 s
// the idle rate stays a small, measured share that the net figure removes.
const instructionRefresh = "--refresh-metrics-interval=1s"

// instructionReady bounds an EPP's start under callgrind (tens of seconds: the runtime, the
// informers and the first scrapes all run 30-100x slower).
const instructionReady = 10 * time.Minute

// instructionConcurrency is the streams of an instruction-count run unless --concurrency says.
const instructionConcurrency = 4

// instructionMessageTimeout bounds one EPP message under callgrind. A request waits for the
// ones ahead of it on the EPP's one thread: 16 streams of 1 MB bodies, at some seconds each
// under callgrind, pass Envoy's 30 s without counting any differently.
const instructionMessageTimeout = 10 * time.Minute

// messageTimeout is the client's bound on one EPP message (0: the driver's 30 s).
func (o *Options) messageTimeout() time.Duration {
	if o.Instructions {
		return instructionMessageTimeout
	}
	return 0
}

// meter returns what a phase is measured with: the EPP's CPU time, or its instruction count.
func (o *Options) meter(e *eppharness.EPP) CPUFunc {
	if !o.Instructions {
		return e.CPUTime
	}
	return func() (time.Duration, error) {
		n, err := e.Instructions()
		return time.Duration(n), err
	}
}

// harnessOptions adds instruction counting to the options of one EPP.
func (o *Options) harnessOptions(h eppharness.Options) eppharness.Options {
	if !o.Instructions {
		return h
	}
	h.Callgrind = true
	h.ReadyTimeout = instructionReady
	if h.Kind != eppharness.KindFloor { // the floor scrapes nothing and takes no such flag
		h.ExtraArgs = append(h.ExtraArgs, instructionRefresh)
	}
	return h
}

// MeterName says what the CPU columns of a run measure.
func (o *Options) MeterName() string {
	if o.Instructions {
		return "instructions"
	}
	return "cpu"
}

// instructionNote heads the report of an instruction-count run.
const instructionNote = "**Instruction-count run** (`--instructions`): every EPP ran under valgrind's callgrind " +
	"with metrics refreshed every second; the CPU columns are millions of instructions per request " +
	"(the idle column millions per second), repeatable whatever else the machine runs. Instructions " +
	"weigh a cache miss like an add, so they understate what memory-bound work costs in time."

// applyInstructionDefaults scales the request counts the user did not set to callgrind's pace
// (a twentieth, at least 10), lifts the phase cap they did not set to 30 minutes, and runs 4
// streams unless told otherwise: callgrind runs one thread at a time, so 32 concurrent 1 MB
// requests queue past the client's deadline without counting any differently.
func (o *Options) applyInstructionDefaults(requestsSet, maxPhaseSet, concurrencySet bool) {
	if !concurrencySet {
		o.Concurrency = instructionConcurrency
	}
	if !requestsSet {
		for i, n := range o.Requests {
			o.Requests[i] = max(10, n/20)
		}
	}
	if !maxPhaseSet {
		o.MaxPhase = 30 * time.Minute
	}
}
