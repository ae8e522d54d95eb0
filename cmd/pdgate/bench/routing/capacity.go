package routing

import (
	"errors"
	"fmt"
	"time"

	"github.com/pdgate/pdgate/cmd/sim/batching"
	"github.com/pdgate/pdgate/cmd/sim/costmodel"
)

// Job is one request's size, as the simulator counts it.
type Job struct {
	Prompt, Output int
}

// Roles a simulated pod plays in the capacity derivation.
const (
	rolePrefill  = "prefill"
	roleDecode   = "decode"
	roleCombined = "combined"
)

// Capacity is a fleet's saturation throughput, derived from the cost model (model time).
type Capacity struct {
	// Per pod, requests per model second at saturation for the workload's mix.
	PrefillPodRPS, DecodePodRPS, CombinedPodRPS float64
	// PDRPS = min(prefill pods x PrefillPodRPS, decode pods x DecodePodRPS); CombinedRPS =
	// combined pods x CombinedPodRPS.
	PDRPS, CombinedRPS float64
}

// FleetCapacity derives the saturation throughput of a P/D fleet (nPrefill + nDecode pods)
// and of a combined-only fleet (nCombined pods) for a workload mix, by running the
// simulator's own continuous-batching scheduler on a virtual clock: each role closed-loop
// with MaxBatch requests outstanding, the jobs cycled in order. It reads no wall clock.
func FleetCapacity(prof *costmodel.Profile, jobs []Job, nPrefill, nDecode, nCombined int) (Capacity, error) {
	var c Capacity
	var err error
	if c.PrefillPodRPS, err = PodThroughput(prof, rolePrefill, jobs); err != nil {
		return c, err
	}
	if c.DecodePodRPS, err = PodThroughput(prof, roleDecode, jobs); err != nil {
		return c, err
	}
	if c.CombinedPodRPS, err = PodThroughput(prof, roleCombined, jobs); err != nil {
		return c, err
	}
	c.PDRPS = min(float64(nPrefill)*c.PrefillPodRPS, float64(nDecode)*c.DecodePodRPS)
	c.CombinedRPS = float64(nCombined) * c.CombinedPodRPS
	return c, nil
}

// PodThroughput is the requests per model second one pod of a role sustains on jobs:
// prefill pods compute the prompt and the first token (a prefill leg), decode pods receive
// the prompt's KV and generate every output token, combined pods do both. The pod runs
// closed-loop with the profile's MaxBatch requests outstanding; the rate is measured over
// the completions after the first MaxBatch (warm-up).
func PodThroughput(prof *costmodel.Profile, role string, jobs []Job) (float64, error) {
	if len(jobs) == 0 {
		return 0, errors.New("capacity: no jobs")
	}
	clk := batching.NewFakeClock()
	s, err := batching.New(batching.Config{Profile: prof, Clock: clk, MaxBatch: prof.MaxBatch,
		KVCapacityTokens: prof.KVCapacityTokens, ChunkedPrefillTokens: prof.ChunkedPrefillTokens,
		Policy: batching.PolicyQueue})
	if err != nil {
		return 0, fmt.Errorf("capacity: %w", err)
	}
	defer s.Close()
	conc := prof.MaxBatch
	warm, target := conc, conc+max(4*conc, len(jobs))
	var out []*batching.Request
	next, skipped := 0, 0
	submit := func() error {
		for {
			if skipped > len(jobs) {
				return errors.New("capacity: no job fits the pod's KV capacity")
			}
			j := jobs[next%len(jobs)]
			next++
			r := &batching.Request{PromptTokens: max(j.Prompt, 1), OutputTokens: max(j.Output, 1)}
			switch role {
			case rolePrefill:
				r.OutputTokens = 1
			case roleDecode:
				r.CachedTokens = r.PromptTokens
			case roleCombined:
			default:
				return fmt.Errorf("capacity: unknown role %q", role)
			}
			if err := s.Submit(r); errors.Is(err, batching.ErrTooLarge) {
				skipped++
				continue
			} else if err != nil {
				return fmt.Errorf("capacity: %w", err)
			}
			skipped = 0
			out = append(out, r)
			return nil
		}
	}
	for len(out) < conc {
		if err := submit(); err != nil {
			return 0, err
		}
	}
	done := 0
	var warmAt time.Time
	for done < target {
		d, ok := clk.NextIn()
		if !ok {
			return 0, fmt.Errorf("capacity: %s pod stalled with %d requests outstanding", role, len(out))
		}
		clk.Advance(d)
		keep := out[:0]
		for _, r := range out {
			if p := r.Progress(); p.Done {
				if p.Err != nil {
					return 0, fmt.Errorf("capacity: %s request failed: %w", role, p.Err)
				}
				done++
				if done == warm {
					warmAt = clk.Now()
				}
				continue
			}
			keep = append(keep, r)
		}
		out = keep
		for len(out) < conc {
			if err := submit(); err != nil {
				return 0, err
			}
		}
	}
	el := clk.Now().Sub(warmAt).Seconds()
	if el <= 0 {
		return 0, fmt.Errorf("capacity: %s pod measured no time", role)
	}
	return float64(done-warm) / el, nil
}
