package testsupport

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// Run starts binDir/name with args until the test ends, its output in a log file whose tail
// is printed when the test failed. The process (and its group) dies with the test, and with
// the test binary if that is killed first.
func Run(t testing.TB, binDir, name string, args ...string) {
	t.Helper()
	logf, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, name), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			if len(b) > 3000 {
				b = b[len(b)-3000:]
			}
			t.Logf("%s log:\n%s", name, b)
		}
	})
}
