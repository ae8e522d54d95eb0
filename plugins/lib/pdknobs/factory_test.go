package pdknobs

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
)

func TestLoadForPlugin(t *testing.T) {
	tests := []struct {
		name, env, params string
		wantErr           string // substring; "" = no error
		wantLog           string // substring of the one logged line; "" = nothing logged
		wantPolicy        string
	}{
		{name: "defaults", params: `{}`, wantPolicy: PrefillPrefixCache},
		{name: "parameter wins", params: `{"prefillScorePolicy":"least_request"}`, wantPolicy: PrefillLeastRequest},
		{name: "unknown env policy falls back, logged with the instance", env: "bogus", params: `{}`,
			wantLog: `"msg"="AIBrix knob fallback" "plugin"="inst" "detail"="unknown AIBRIX_PREFILL_SCORE_POLICY=\"bogus\"`, wantPolicy: PrefillPrefixCache},
		{name: "errors name type and instance", params: `{"nope":1}`, wantErr: `aibrix-x "inst": invalid parameters`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("AIBRIX_PREFILL_SCORE_POLICY", tt.env)
			var lines []string
			ctx := log.IntoContext(context.Background(), funcr.New(func(_, args string) { lines = append(lines, args) }, funcr.Options{}))
			k, err := LoadForPlugin(ctx, "aibrix-x", "inst", []byte(tt.params))
			if plugintest.WantErr(t, err, tt.wantErr) {
				return
			}
			if k.PrefillScorePolicy != tt.wantPolicy {
				t.Errorf("policy %q, want %q", k.PrefillScorePolicy, tt.wantPolicy)
			}
			switch {
			case tt.wantLog == "" && len(lines) != 0:
				t.Errorf("logged %v, want nothing", lines)
			case tt.wantLog != "" && (len(lines) != 1 || !strings.Contains(lines[0], tt.wantLog)):
				t.Errorf("logged %v, want one line with %s", lines, tt.wantLog)
			}
		})
	}
}
