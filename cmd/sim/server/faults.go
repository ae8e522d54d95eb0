package server

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/pdgate/pdgate/cmd/internal/commalist"
)

// HeaderFault asks the simulator to inject faults into one request.
const HeaderFault = "x-sim-fault"

// maxHang bounds hang and stall faults (model time): nothing waits forever.
const maxHang = 10 * time.Minute

// raceDelay is how much later than its handoff's failure a decode-error-race prefill answers
// its error (model time).
const raceDelay = time.Second

// faults injected into one request.
type faults struct {
	prefillFail bool
	// prefillAbort: the prefill is dropped once computed, but the engine still answers 200
	// (finish_reason length, no token), as SGLang did (#33507): the KV was never handed over.
	prefillAbort bool
	// kvDropped: the prefill computes its KV but its answer carries no handoff fields and the
	// handoff is never published (transfer metadata dropped on a leg, SGLang model gateway
	// #2176): a decode waiting on it fails at once.
	kvDropped bool
	// partialKV: the decode's pull delivers only the first half of the prompt's KV blocks;
	// it recomputes the rest and reports only what arrived as cached (a partly failed NIXL
	// read under vLLM's recompute policy).
	partialKV bool
	// wrongRank: the prefill names a data-parallel rank it does not have (vLLM
	// remote_dp_rank, TensorRT-LLM ctx_dp_rank: one past its ranks); an SGLang decode, whose
	// answers name no rank, asks the wrong prefill rank for its room and fails its pull.
	wrongRank bool
	// decodeRace: the prefill fails as prefill-fail does, but its error answer comes
	// raceDelay later than the handoff's failure, so a decode waiting on the KV answers its
	// error first.
	decodeRace  bool
	prefillSlow time.Duration
	hangFirst   bool
	stallAfter  int // > 0: stall after this many tokens
	drop        bool
	dropAfter   int // > 0: drop the connection after this many streamed tokens
	status      int // > 0: answer this status at once
}

// parseFaults reads an x-sim-fault value: a comma list of prefill-fail, prefill-abort,
// kv-params-dropped, partial-kv, wrong-rank, decode-error-race, prefill-slow=D,
// hang-first-token, stall-after=N, drop-connection, drop-after=N, http-500 / http-<code>.
func parseFaults(v string) (faults, error) {
	var f faults
	// the faults without an argument
	switches := map[string]*bool{"prefill-fail": &f.prefillFail, "prefill-abort": &f.prefillAbort, "kv-params-dropped": &f.kvDropped,
		"partial-kv": &f.partialKV, "wrong-rank": &f.wrongRank, "decode-error-race": &f.decodeRace, "hang-first-token": &f.hangFirst,
		"drop-connection": &f.drop}
	for _, item := range commalist.Split(v) {
		name, arg, hasArg := strings.Cut(item, "=")
		var err error
		switch on := switches[name]; {
		case on != nil && !hasArg:
			*on = true
		case name == "prefill-slow" && hasArg:
			f.prefillSlow, err = time.ParseDuration(arg)
			if err == nil && f.prefillSlow <= 0 {
				err = fmt.Errorf("must be > 0")
			}
		case name == "stall-after" && hasArg:
			f.stallAfter, err = positive(arg)
		case name == "drop-after" && hasArg:
			f.dropAfter, err = positive(arg)
		case strings.HasPrefix(name, "http-") && !hasArg:
			f.status, err = strconv.Atoi(strings.TrimPrefix(name, "http-"))
			if err == nil && (f.status < 400 || f.status > 599) {
				err = fmt.Errorf("status must be 4xx or 5xx")
			}
		default:
			return faults{}, fmt.Errorf("%s: unknown fault %q (want prefill-fail, prefill-abort, kv-params-dropped, partial-kv, wrong-rank, decode-error-race, prefill-slow=D, hang-first-token, stall-after=N, drop-connection, drop-after=N, http-<code>)", HeaderFault, item)
		}
		if err != nil {
			return faults{}, fmt.Errorf("%s: %q: %w", HeaderFault, item, err)
		}
	}
	return f, nil
}

func positive(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err == nil && n <= 0 {
		err = fmt.Errorf("must be > 0")
	}
	return n, err
}

// faultsFor combines the header's faults with the seeded flag-driven ones.
func (in *Instance) faultsFor(r *http.Request) (faults, error) {
	var f faults
	if v := r.Header.Get(HeaderFault); v != "" && *in.opts.AllowFaultHeader {
		var err error
		if f, err = parseFaults(v); err != nil {
			return faults{}, err
		}
	}
	o := in.opts
	if f.status == 0 && in.chance(o.Fault5xxRate) {
		f.status = http.StatusInternalServerError
	}
	if in.chance(o.FaultPrefillFailRate) {
		f.prefillFail = true
	}
	if f.prefillSlow == 0 {
		f.prefillSlow = o.FaultPrefillSlow.Duration
	}
	if in.chance(o.FaultHangFirstTokenRate) {
		f.hangFirst = true
	}
	if f.stallAfter == 0 {
		f.stallAfter = o.FaultStallAfter
	}
	if in.chance(o.FaultDropRate) {
		f.drop = true
	}
	if f != (faults{}) {
		for _, c := range []struct {
			name string
			on   bool
		}{{"prefill-fail", f.prefillFail}, {"prefill-abort", f.prefillAbort}, {"kv-params-dropped", f.kvDropped}, {"partial-kv", f.partialKV},
			{"wrong-rank", f.wrongRank}, {"decode-error-race", f.decodeRace}, {"prefill-slow", f.prefillSlow > 0}, {"hang-first-token", f.hangFirst},
			{"stall-after", f.stallAfter > 0}, {"drop-connection", f.drop || f.dropAfter > 0}, {"http-status", f.status > 0}} {
			if c.on {
				in.m.faults.WithLabelValues(c.name).Inc()
			}
		}
	}
	return f, nil
}

// dropConnection closes the client's TCP connection without a (further) answer.
func dropConnection(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}
