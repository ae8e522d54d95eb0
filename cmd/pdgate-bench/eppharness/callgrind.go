package eppharness

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Instruction counting. On a machine other work shares, CPU time per request moves with what
// runs beside the EPP: cache and memory-bandwidth contention, frequency, and the Go runtime
// spinning for work it does not get. The number of instructions the EPP executes does not.
// With Options.Callgrind the EPP runs under valgrind's callgrind, which counts every
// instruction of every thread; the bench reads the count between two points by asking
// callgrind for a dump, which also zeroes its counters, and sums the dumps.
//
// callgrind runs the program 30-100x slower and one thread at a time, so an instruction-count
// run wants fewer requests and a slower metrics refresh than a timed one (the bench sets
// both). Go's asynchronous preemption signals are turned off under it: valgrind delivers
// them late and they only add runtime work that differs from run to run. RDTSCP is turned
// off too: valgrind 3.19 reports it in CPUID but stops the program on it (SIGILL in the
// runtime's cputicks). GOMAXPROCS is 1: callgrind runs one thread at a time anyway, and with
// more Ps the runtime's idle ones spin looking for work, instructions that grow with the wall
// time of a phase (so with whatever else the machine runs) rather than with its requests.

// callgrindArgs returns the command line running bin under callgrind, its dumps going to dir.
func callgrindArgs(bin string, args []string, dir string) (string, []string) {
	vg := []string{"--tool=callgrind", "--callgrind-out-file=" + filepath.Join(dir, "callgrind.out.%p"),
		"--dump-instr=no", "--compress-strings=no", "--compress-pos=no", "-q", bin}
	return "valgrind", append(vg, args...)
}

// callgrindEnv is added to the environment of a process run under callgrind.
var callgrindEnv = []string{"GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off", "GOMAXPROCS=1"}

// instructionMeter sums callgrind's dumps of one process.
type instructionMeter struct {
	mu    sync.Mutex
	pid   int
	dir   string
	dumps int
	total uint64
	last  string // the newest dump: what the process executed since the read before
}

// CallgrindAvailable reports whether valgrind and callgrind_control are on PATH.
func CallgrindAvailable() error {
	for _, tool := range []string{"valgrind", "callgrind_control"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("instruction counting needs %s (Debian package valgrind): %w", tool, err)
		}
	}
	return nil
}

// Instructions is the number of instructions the EPP has executed so far, counted by
// callgrind (Options.Callgrind); an error without it.
func (e *EPP) Instructions() (uint64, error) {
	if e.instr == nil {
		return 0, fmt.Errorf("%s EPP pid %d: not started under callgrind", e.Kind, e.PID)
	}
	return e.instr.read()
}

func (m *instructionMeter) read() (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out, err := exec.Command("callgrind_control", "--dump", strconv.Itoa(m.pid)).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("callgrind_control --dump %d: %w: %s", m.pid, err, bytes.TrimSpace(out))
	}
	m.dumps++
	// Dump k of process p is written as callgrind.out.<p>.<k>; callgrind_control returns once
	// it is complete.
	file := filepath.Join(m.dir, fmt.Sprintf("callgrind.out.%d.%d", m.pid, m.dumps))
	n, err := dumpTotal(file)
	if err != nil {
		return 0, err
	}
	m.total += n
	if m.last != "" {
		_ = os.Remove(m.last)
	}
	m.last = file
	return m.total, nil
}

// removeDumps deletes what callgrind left of a stopped process: the dump it writes at exit
// and the newest read's, unless kept. Nil-safe, for EPPs not run under callgrind.
func (m *instructionMeter) removeDumps() {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.last != "" {
		_ = os.Remove(m.last)
		m.last = ""
	}
	_ = os.Remove(filepath.Join(m.dir, fmt.Sprintf("callgrind.out.%d", m.pid)))
}

// KeepInstructionProfile moves the callgrind dump of what the EPP executed between the last two
// Instructions calls (a measured phase, when the bench reads the count around it) to path, a
// function-level instruction profile for callgrind_annotate.
func (e *EPP) KeepInstructionProfile(path string) error {
	if e.instr == nil {
		return fmt.Errorf("%s EPP pid %d: not started under callgrind", e.Kind, e.PID)
	}
	e.instr.mu.Lock()
	defer e.instr.mu.Unlock()
	if e.instr.last == "" {
		return fmt.Errorf("%s EPP pid %d: no callgrind dump yet", e.Kind, e.PID)
	}
	if err := os.Rename(e.instr.last, path); err != nil {
		return fmt.Errorf("keeping the instruction profile: %w", err)
	}
	e.instr.last = ""
	return nil
}

// dumpTotal reads the instruction count (event Ir) of one callgrind dump: its "totals:" line,
// or "summary:" in older formats.
func dumpTotal(file string) (uint64, error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, fmt.Errorf("callgrind dump: %w", err)
	}
	defer f.Close()
	var summary string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		line := s.Text()
		if v, ok := strings.CutPrefix(line, "totals:"); ok {
			return parseIr(file, v)
		}
		if v, ok := strings.CutPrefix(line, "summary:"); ok {
			summary = v
		}
	}
	if err := s.Err(); err != nil {
		return 0, fmt.Errorf("callgrind dump %s: %w", file, err)
	}
	if summary == "" {
		return 0, fmt.Errorf("callgrind dump %s: no totals or summary line", file)
	}
	return parseIr(file, summary)
}

// parseIr reads the first event of a totals line; the bench collects Ir only, callgrind's
// default first event.
func parseIr(file, v string) (uint64, error) {
	fields := strings.Fields(v)
	if len(fields) == 0 {
		return 0, fmt.Errorf("callgrind dump %s: empty totals line", file)
	}
	n, err := strconv.ParseUint(fields[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("callgrind dump %s: totals %q: %w", file, fields[0], err)
	}
	return n, nil
}
