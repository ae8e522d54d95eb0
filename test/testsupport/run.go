package testsupport

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// Run starts binDir/name with args until the test ends (see Start).
func Run(t testing.TB, binDir, name string, args ...string) {
	t.Helper()
	Start(t, filepath.Join(binDir, name), nil, args...)
}

// Start runs the binary at path with args, env added to the test's environment, until the
// test ends; its output goes to a log file whose tail is logged when the test failed. The
// process (and its group) dies with the test, and with the test binary if that is killed
// first. The channel returned is closed when the process has exited.
func Start(t testing.TB, path string, env []string, args ...string) <-chan struct{} {
	t.Helper()
	name := filepath.Base(path)
	logf, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		_ = logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("%s log (tail):\n%s", name, b)
		}
	})
	return exited
}
