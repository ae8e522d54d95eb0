package simbench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// Results keep the jobs' order whatever order the runs finish in, a failed job's result is
// kept, and the error joins every failure.
func TestRunJobsKeepsOrderAndJoinsErrors(t *testing.T) {
	jobs := crossJobs([]int{1, 2, 3}, []string{"a", "b"})
	if len(jobs) != 6 || jobs[1] != (pair[int, string]{1, "b"}) || jobs[2] != (pair[int, string]{2, "a"}) {
		t.Fatalf("crossJobs = %v, want a-major order", jobs)
	}
	got, err := runJobs(context.Background(), 4, jobs, func(j pair[int, string]) (string, error) {
		name := fmt.Sprintf("%d%s", j.a, j.b)
		if j.a == 2 {
			return name, errors.New(name + " failed")
		}
		return name, nil
	})
	if want := "1a 1b 2a 2b 3a 3b"; strings.Join(got, " ") != want {
		t.Errorf("results %v, want %s", got, want)
	}
	if err == nil || !strings.Contains(err.Error(), "2a failed") || !strings.Contains(err.Error(), "2b failed") {
		t.Errorf("err = %v, want both failures", err)
	}
}

func TestRunJobsStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got, err := runJobs(ctx, 2, []int{1, 2, 3}, func(int) (int, error) { return 1, nil })
	if !errors.Is(err, context.Canceled) || len(got) != 3 {
		t.Errorf("runJobs after cancel = %v, %v; want three zero results and context.Canceled", got, err)
	}
}
