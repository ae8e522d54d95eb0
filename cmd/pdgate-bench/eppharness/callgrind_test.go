package eppharness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
)

func TestDumpTotal(t *testing.T) {
	for _, tc := range []struct {
		name, dump string
		want       uint64
		err        string
	}{
		{name: "totals", dump: "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nsummary: 99\nfn=(1) main\n5 10\ntotals: 123456\n", want: 123456},
		{name: "summary only", dump: "events: Ir\nsummary: 4242\n", want: 4242},
		{name: "more events", dump: "events: Ir Dr\ntotals: 77 3\n", want: 77},
		{name: "no count", dump: "events: Ir\nfn=(1) main\n", err: "no totals or summary line"},
		{name: "bad count", dump: "totals: lots\n", err: `totals "lots"`},
		{name: "empty totals", dump: "totals:\n", err: "empty totals line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "callgrind.out.1.1")
			if err := os.WriteFile(file, []byte(tc.dump), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := dumpTotal(file)
			if plugintest.WantErr(t, err, tc.err) {
				return
			}
			if got != tc.want {
				t.Fatalf("got %d, want %d", got, tc.want)
			}
		})
	}
}

func TestCallgrindArgs(t *testing.T) {
	name, args := callgrindArgs("/bin/epp", []string{"--grpc-port", "9"}, "/w")
	joined := strings.Join(args, " ")
	if name != "valgrind" || !strings.HasPrefix(joined, "--tool=callgrind --callgrind-out-file=/w/callgrind.out.%p") ||
		!strings.HasSuffix(joined, "-q /bin/epp --grpc-port 9") {
		t.Fatalf("%s %s", name, joined)
	}
}
