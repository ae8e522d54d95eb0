package aibrix

import (
	"fmt"
	"path/filepath"
	"testing"
)

// Every shipped AIBrix config loads in the EPP's plugin set and places a request on a pair.
func TestShippedConfigsPlaceARequest(t *testing.T) {
	files, err := filepath.Glob("../../../config/aibrix/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../../config/aibrix-pd.yaml")
	if len(files) < 5 {
		t.Fatalf("expected the shipped configs, found %v", files)
	}
	for i, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			prefill := aibrixPod("a-prefill", fmt.Sprintf("127.0.4.%d", 101+2*i), "prefill", "a", "", 0)
			decode := aibrixPod("a-decode", fmt.Sprintf("127.0.4.%d", 102+2*i), "decode", "a", "", 0)
			// llm-d's role filters read llm-d.ai/role; AIBrix fleets relabelled for that variant.
			prefill.labels["llm-d.ai/role"], decode.labels["llm-d.ai/role"] = "prefill", "decode"
			e := startEPP(t, f, []pod{prefill, decode})
			a := e.send(t, nil, body(promptOf("cfg", 200)))
			if a.immediate != 0 || a.decode != "a-decode" || a.prefill != "a-prefill" {
				t.Fatalf("%s: %+v", f, a)
			}
		})
	}
}
