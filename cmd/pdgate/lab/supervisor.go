package lab

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Supervisor starts processes, each in its own process group (so a signal reaches every
// child it forks) with the kernel's parent-death signal set (so nothing outlives a lab that
// is killed outright), and stops them all.
type Supervisor struct {
	logDir string
	mu     sync.Mutex
	procs  []*proc
	exited chan string // names of processes that exited on their own
}

type proc struct {
	spec ProcSpec
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  string
}

// NewSupervisor writes each process's output to <logDir>/<name>.log.
func NewSupervisor(logDir string) *Supervisor {
	return &Supervisor{logDir: logDir, exited: make(chan string, 256)}
}

// Start launches one process.
func (s *Supervisor) Start(spec ProcSpec) error {
	if _, err := os.Stat(spec.Binary); err != nil {
		return fmt.Errorf("%s: %w (run `make build` first)", spec.Name, err)
	}
	logPath := filepath.Join(s.logDir, spec.Name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("%s: log file: %w", spec.Name, err)
	}
	cmd := exec.Command(spec.Binary, spec.Args...)
	cmd.Stdout, cmd.Stderr = f, f
	if len(spec.Env) > 0 {
		cmd.Env = append(os.Environ(), spec.Env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("%s: start: %w", spec.Name, err)
	}
	p := &proc{spec: spec, cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
		select {
		case s.exited <- spec.Name:
		default:
		}
	}()
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	return nil
}

// Exited delivers the name of every process that ended (stopped or crashed).
func (s *Supervisor) Exited() <-chan string { return s.exited }

// Describe explains why a process ended, with the tail of its log.
func (s *Supervisor) Describe(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		if p.spec.Name == name {
			return fmt.Sprintf("%s exited (%v); last lines of %s:\n%s", name, p.err, p.log, tail(p.log, 15))
		}
	}
	return name + " exited"
}

// Running reports whether the named process is still alive.
func (s *Supervisor) Running(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		if p.spec.Name == name {
			select {
			case <-p.done:
				return false
			default:
				return true
			}
		}
	}
	return false
}

// Stop ends every process in reverse start order: SIGTERM to its group, then SIGKILL to
// the group after grace. It returns once every process has been reaped.
func (s *Supervisor) Stop(grace time.Duration) {
	s.mu.Lock()
	procs := append([]*proc(nil), s.procs...)
	s.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		_ = syscall.Kill(-procs[i].cmd.Process.Pid, syscall.SIGTERM)
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	for _, p := range procs {
		select {
		case <-p.done:
		case <-deadline.C:
		}
	}
	for _, p := range procs {
		// The group may hold children even after the leader exited: kill it regardless,
		// and wait (bounded) until no live member is left.
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		for i := 0; i < 100 && len(GroupMembers(p.cmd.Process.Pid)) > 0; i++ {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// Pids returns the process ids (group leaders) the supervisor started.
func (s *Supervisor) Pids() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]int, 0, len(s.procs))
	for _, p := range s.procs {
		out = append(out, p.cmd.Process.Pid)
	}
	return out
}

// WaitHealthy polls every spec's health URL until all answer 2xx, a process exits, or ctx
// ends.
func (s *Supervisor) WaitHealthy(ctx context.Context, specs []ProcSpec) error {
	client := &http.Client{Timeout: 2 * time.Second}
	pending := map[string]string{}
	for _, sp := range specs {
		if sp.Health != "" {
			pending[sp.Name] = sp.Health
		}
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for len(pending) > 0 {
		for name, url := range pending {
			if !s.Running(name) {
				return errors.New(s.Describe(name))
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			resp, err := client.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode/100 == 2 {
					delete(pending, name)
				}
			}
		}
		if len(pending) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not healthy in time: %s", strings.Join(sortedKeys(pending), ", "))
		case <-tick.C:
		}
	}
	return nil
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "  (" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

// GroupMembers lists the live (non-zombie) processes of a process group, from /proc.
// Zombies are excluded: they hold no resources and their reaping is up to their parent.
func GroupMembers(pgid int) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []int
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		// Fields after the command name (which may contain spaces) start at the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if pg, err := strconv.Atoi(f[2]); err == nil && pg == pgid {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
			out = append(out, pid)
		}
	}
	return out
}
