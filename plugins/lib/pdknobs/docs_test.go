package pdknobs

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

var docRow = regexp.MustCompile("(?m)^\\| `([A-Z_]+)` \\| ([^|]+) \\|([^\\n]*)$")

// Every default docs/aibrix-knobs.md states for a scheduling knob is Defaults()' value, and
// every routingConfig.pd field it lists is one ForProfile accepts (a knob, or a sidecar knob
// the header writer forwards): a documented knob is never refused or silently dropped.
func TestDocumentedKnobsMatchCode(t *testing.T) {
	raw, err := os.ReadFile("../../../docs/aibrix-knobs.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	byVar := map[string]string{}
	for param, v := range EnvVar {
		byVar[v] = param
	}
	var defaults map[string]any
	b, _ := json.Marshal(Defaults())
	_ = json.Unmarshal(b, &defaults)
	checked := 0
	for _, m := range docRow.FindAllStringSubmatch(doc, -1) {
		param, ok := byVar[m[1]]
		if !ok || strings.HasPrefix(param, "tokenLoad") { // token-load defaults are the ledger's
			continue
		}
		checked++
		documented := strings.Trim(strings.TrimSpace(strings.FieldsFunc(m[2], func(r rune) bool { return r == ',' || r == '(' })[0]), "` ")
		code := fmt.Sprint(defaults[param])
		if f, err := strconv.ParseFloat(documented, 64); err == nil {
			if cf, err := strconv.ParseFloat(code, 64); err != nil || cf != f {
				t.Errorf("%s: docs say %q, %s defaults to %s", m[1], documented, param, code)
			}
			continue
		}
		if documented != code {
			t.Errorf("%s: docs say %q, %s defaults to %q", m[1], documented, param, code)
		}
	}
	if checked < 15 {
		t.Fatalf("checked %d scheduling rows; the table format changed", checked)
	}
	pd := regexp.MustCompile("`pd\\.([A-Za-z]+)`")
	fields := pd.FindAllStringSubmatch(doc, -1)
	if len(fields) < 15 {
		t.Fatalf("found %d pd fields in the docs", len(fields))
	}
	for _, f := range fields {
		k := Defaults()
		err := k.applyPD(f[1], json.RawMessage("1"))
		if err != nil && strings.Contains(err.Error(), "unknown field") {
			t.Errorf("docs list routingConfig.pd.%s, which the EPP refuses as unknown", f[1])
		}
		if _, isParam := EnvVar[f[1]]; !isParam && !protocol.IsSidecarKnob(f[1]) {
			t.Errorf("routingConfig.pd.%s is neither a scheduling knob nor a sidecar knob", f[1])
		}
	}
}
