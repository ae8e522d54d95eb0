package app

import (
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// sidecarRow matches a row of docs/aibrix-knobs.md that maps a variable to a sidecar flag:
// | `AIBRIX_X` | default … | sidecar `--flag` … |
var sidecarRow = regexp.MustCompile("(?m)^\\| `([A-Z_]+)` \\| ([^|]+) \\| sidecar `--([a-z-]+)`")

// Every default docs/aibrix-knobs.md states for a sidecar flag is the flag's default (with the
// variables unset): the documented AIBrix default is what an AIBrix fleet gets.
func TestDocumentedSidecarDefaultsMatchCode(t *testing.T) {
	raw, err := os.ReadFile("../../../docs/aibrix-knobs.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := sidecarRow.FindAllStringSubmatch(string(raw), -1)
	if len(rows) < 9 {
		t.Fatalf("found %d sidecar rows in docs/aibrix-knobs.md; the table format changed", len(rows))
	}
	for _, r := range rows {
		t.Setenv(r[1], "")
	}
	o := NewOptions()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	o.BindFlags(fs)
	for _, r := range rows {
		variable, documented, name := r[1], docDefault(r[2]), r[3]
		f := fs.Lookup(name)
		if f == nil {
			t.Errorf("%s: docs name --%s, which the sidecar does not have", variable, name)
			continue
		}
		if !sameValue(documented, f.DefValue) {
			t.Errorf("%s: docs say the default is %q, --%s defaults to %q", variable, documented, name, f.DefValue)
		}
	}
}

// docDefault takes the value from a default cell: "`shfs`", "30 s", "3 s, 0 = no abort",
// "0 (off)", "0, [0,1024)".
func docDefault(cell string) string {
	v := strings.TrimSpace(cell)
	if i := strings.IndexAny(v, ",("); i >= 0 {
		v = strings.TrimSpace(v[:i])
	}
	v = strings.Trim(v, "`")
	if strings.HasSuffix(v, " s") {
		v = strings.TrimSuffix(v, " s") + "s"
	}
	return v
}

func sameValue(doc, code string) bool {
	if doc == code {
		return true
	}
	dd, err1 := time.ParseDuration(doc)
	cd, err2 := time.ParseDuration(code)
	if doc == "0" {
		dd, err1 = 0, nil
	}
	return err1 == nil && err2 == nil && dd == cd
}

// checkEngineSettings resets to NewDefaults: it must agree with NewOptions.
func TestNewDefaultsMatchNewOptions(t *testing.T) {
	for _, k := range []string{"AIBRIX_KV_CONNECTOR_TYPE", "AIBRIX_TRT_SCHEDULE_STYLE", "AIBRIX_TRT_MACHINE_ID", "SGLANG_BOOTSTRAP_PORT",
		"AIBRIX_DECODE_ABORT_TIMEOUT", "AIBRIX_DECODE_ABORT_RETRY_DELAY"} {
		t.Setenv(k, "")
	}
	o, d := NewOptions(), NewDefaults()
	if o.KVConnector != d.KVConnector || o.TRTSchedule != d.TRTSchedule || o.TRTMachineID != d.TRTMachineID ||
		o.BootstrapPort != d.BootstrapPort || o.AbortTimeout != d.AbortTimeout || o.AbortRetryDelay != d.AbortRetryDelay {
		t.Fatalf("NewOptions %+v, NewDefaults %+v", o, d)
	}
}

// sidecarProfileRow matches a sidecar row of docs/aibrix-knobs.md with its Profile cell.
var sidecarProfileRow = regexp.MustCompile("(?m)^\\| `(AIBRIX_[A-Z_]+)` \\| [^|]+ \\| sidecar `--[a-z-]+`[^|]* \\| ([^|\\n]+) \\|$")

// The Profile column says where AIBrix allows a per-profile override. AIBrix's PD guide lists
// all six sidecar timeouts as routingConfig.pd fields (the watchdog three included), so each
// row names its field and none is called a pdgate extension.
func TestDocumentedSidecarProfileKnobsAreAIBrix(t *testing.T) {
	raw, err := os.ReadFile("../../../docs/aibrix-knobs.md")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"AIBRIX_PREFILL_REQUEST_TIMEOUT":       "pd.prefillRequestTimeout",
		"AIBRIX_DECODE_ABORT_TIMEOUT":          "pd.decodeAbortTimeout",
		"AIBRIX_DECODE_ABORT_RETRY_DELAY":      "pd.decodeAbortRetryDelay",
		"AIBRIX_DECODE_FIRST_RESPONSE_TIMEOUT": "pd.decodeFirstResponseTimeout",
		"AIBRIX_DECODE_RESPONSE_TIMEOUT":       "pd.decodeResponseTimeout",
		"AIBRIX_DECODE_STREAM_IDLE_TIMEOUT":    "pd.decodeStreamIdleTimeout",
	}
	seen := map[string]bool{}
	for _, r := range sidecarProfileRow.FindAllStringSubmatch(string(raw), -1) {
		variable, cell := r[1], r[2]
		field, ok := want[variable]
		if !ok {
			continue
		}
		seen[variable] = true
		if !strings.Contains(cell, "`"+field+"`") {
			t.Errorf("%s: Profile cell %q does not name %s", variable, cell, field)
		}
		if strings.Contains(strings.ToLower(cell), "extension") {
			t.Errorf("%s: Profile cell %q calls an AIBrix routingConfig.pd field a pdgate extension", variable, cell)
		}
	}
	for v := range want {
		if !seen[v] {
			t.Errorf("docs/aibrix-knobs.md has no sidecar row for %s", v)
		}
	}
	if regexp.MustCompile(`watchdog three are a\s+pdgate extension`).Match(raw) {
		t.Error("docs/aibrix-knobs.md still calls the per-profile watchdog timeouts a pdgate extension")
	}
}
