package eppharness

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of utime/stime in /proc/<pid>/stat. Linux always exports these in
// USER_HZ = 100 ticks per second regardless of the kernel's CONFIG_HZ, so a CPU figure has a
// 10 ms resolution: measure phases long enough to make that negligible.
const userHZ = 100

// Memory is a process's resident memory from /proc/<pid>/status.
type Memory struct {
	// RSS is VmRSS (resident now), in bytes.
	RSS int64
	// HWM is VmHWM (the peak resident set since the process started), in bytes.
	HWM int64
}

// procCPUTime reads utime+stime of pid (all threads, including exited ones).
func procCPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading CPU time of pid %d: %w", pid, err)
	}
	return parseStatCPU(b)
}

// parseStatCPU extracts utime (field 14) + stime (field 15) from a /proc/<pid>/stat line. The
// command name (field 2) is parenthesised and may contain spaces and parentheses, so fields are
// counted from the last ')'.
func parseStatCPU(b []byte) (time.Duration, error) {
	end := bytes.LastIndexByte(b, ')')
	if end < 0 {
		return 0, fmt.Errorf("/proc stat: no ')' after the command name in %q", truncate(b))
	}
	// After ") " come fields 3.. (state, ppid, ...): utime is field 14, i.e. index 11 here.
	fields := strings.Fields(string(b[end+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after the command name, want >= 13", len(fields))
	}
	var ticks int64
	for _, f := range fields[11:13] {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil || v < 0 {
			return 0, fmt.Errorf("/proc stat: CPU field %q is not a tick count", f)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// ProcMemory reads VmRSS and VmHWM of any process (the benchmarks measure the sidecar too).
func ProcMemory(pid int) (Memory, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, fmt.Errorf("reading memory of pid %d: %w", pid, err)
	}
	return parseStatusMemory(b)
}

// parseStatusMemory extracts VmRSS and VmHWM ("VmRSS:   123456 kB") from /proc/<pid>/status.
func parseStatusMemory(b []byte) (Memory, error) {
	var m Memory
	seen := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return Memory{}, fmt.Errorf("/proc status: %s: want '<n> kB', got %q", key, strings.TrimSpace(rest))
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb < 0 {
			return Memory{}, fmt.Errorf("/proc status: %s: %q is not a size", key, f[0])
		}
		if key == "VmRSS" {
			m.RSS = kb << 10
		} else {
			m.HWM = kb << 10
		}
		seen++
	}
	if seen != 2 {
		return Memory{}, fmt.Errorf("/proc status: VmRSS and VmHWM not both present (kernel thread or exited process?)")
	}
	return m, nil
}

func truncate(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}
