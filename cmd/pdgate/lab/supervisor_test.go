package lab

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A process that forks a grandchild must leave nothing behind after Stop: the whole process
// group is signalled.
func TestSupervisorStopsProcessGroups(t *testing.T) {
	s := NewSupervisor(t.TempDir())
	specs := []ProcSpec{
		{Name: "forker", Binary: "/bin/sh", Args: []string{"-c", "sleep 300 & sleep 300 & wait"}},
		{Name: "ignores-term", Binary: "/bin/sh", Args: []string{"-c", "trap '' TERM; sleep 300 & wait; sleep 300"}},
	}
	for _, sp := range specs {
		if err := s.Start(sp); err != nil {
			t.Fatal(err)
		}
	}
	pids := s.Pids()
	// The forker's group holds the shell and its two sleeps once they are up.
	for i := 0; len(GroupMembers(pids[0])) < 3; i++ {
		if i > 500 {
			t.Fatalf("group %d members %v: want the shell and two children", pids[0], GroupMembers(pids[0]))
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.Stop(500 * time.Millisecond)
	for _, pid := range pids {
		if left := GroupMembers(pid); len(left) > 0 {
			t.Errorf("process group %d still has live members %v", pid, left)
		}
	}
}

func TestSupervisorReportsCrashAndMissingBinary(t *testing.T) {
	s := NewSupervisor(t.TempDir())
	if err := s.Start(ProcSpec{Name: "nope", Binary: "/nonexistent/sim"}); err == nil || !strings.Contains(err.Error(), "make build") {
		t.Fatalf("got %v", err)
	}
	if err := s.Start(ProcSpec{Name: "crash", Binary: "/bin/sh", Args: []string{"-c", "echo boom-detail; exit 3"}, Health: "http://127.0.0.1:1/health"}); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := s.WaitHealthy(ctx, []ProcSpec{{Name: "crash", Health: "http://127.0.0.1:1/health"}})
	if err == nil || !strings.Contains(err.Error(), "boom-detail") {
		t.Fatalf("want the crash with its log tail, got %v", err)
	}
}
