package testsupport

import (
	"io"
	"net"
	"testing"
	"time"
)

func TestDropper(t *testing.T) {
	d := NewDropper(t, "127.0.0.1:0")
	for i := range 2 {
		c, err := net.Dial("tcp", d.Addr())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("connection %d: read %v, want EOF (closed by the dropper)", i, err)
		}
		_ = c.Close()
	}
	Eventually(t, 5*time.Second, "two connections counted", func() bool { return d.Hits() == 2 })
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("tcp", d.Addr()); err == nil {
		_ = c.Close()
		t.Fatal("a closed dropper still accepts")
	}
}
