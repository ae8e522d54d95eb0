package sessionaffinity

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseParameters(t *testing.T) {
	encodedDefaults := Config{Strategy: StrategyEncodedEndpointHeader, Header: "x-session-token", LoadAllowance: -1,
		TTL: 300 * time.Second, Sweep: 10 * time.Second, MaxSessions: DefaultMaxSessions}
	sessionDefaults := Config{Strategy: StrategySessionID, Sources: []Source{{Header: "x-session-id"}}, LoadAllowance: -1,
		TTL: 300 * time.Second, Sweep: 10 * time.Second, MaxSessions: DefaultMaxSessions}
	with := func(c Config, f func(*Config)) Config { f(&c); return c }
	tests := []struct {
		name    string
		raw     string
		scorer  bool // Options.LoadAllowance
		want    Config
		wantErr []string // substrings of the error
	}{
		{name: "absent: encoded_endpoint_header defaults", raw: ``, want: encodedDefaults},
		{name: "empty object", raw: `{}`, want: encodedDefaults},
		{name: "header lower-cased and trimmed", raw: `{"encodedEndpointHeaderConfig":{"header":" X-My-Token "}}`,
			want: with(encodedDefaults, func(c *Config) { c.Header = "x-my-token" })},
		{name: "profileName kept", raw: `{"profileName":"prefill"}`,
			want: with(encodedDefaults, func(c *Config) { c.ProfileName = "prefill" })},
		{name: "only the strategy's block is read", raw: `{"sessionIdConfig":{"evictionTtlSeconds":0}}`, want: encodedDefaults},
		{name: "session_id defaults", raw: `{"strategy":"session_id"}`, want: sessionDefaults},
		{name: "session_id ignores the header block", raw: `{"strategy":"session_id","encodedEndpointHeaderConfig":{"header":"x"}}`, want: sessionDefaults},
		{name: "session_id full", raw: `{"strategy":"session_id","sessionIdConfig":{"sources":[{"header":"X-Aibrix-Session-Key"},{"attribute":"agent-identity","producer":"agent"}],"evictionTtlSeconds":60,"evictionSweepSeconds":2,"maxSessions":5}}`,
			want: with(sessionDefaults, func(c *Config) {
				c.Sources = []Source{{Header: "x-aibrix-session-key"}, {Attribute: "agent-identity", Producer: "agent"}}
				c.TTL, c.Sweep, c.MaxSessions = time.Minute, 2*time.Second, 5
			})},
		{name: "scorer load allowance", raw: `{"loadAllowance":3}`, scorer: true, want: with(encodedDefaults, func(c *Config) { c.LoadAllowance = 3 })},
		{name: "load allowance zero is a value", raw: `{"strategy":"session_id","loadAllowance":0}`, scorer: true, want: with(sessionDefaults, func(c *Config) { c.LoadAllowance = 0 })},

		{name: "unknown strategy", raw: `{"strategy":"session_id_header"}`, wantErr: []string{`sa-plugin "inst"`, "strategy", "session_id_header"}},
		{name: "unknown field", raw: `{"headerName":"x"}`, wantErr: []string{`sa-plugin "inst"`, "headerName"}},
		{name: "source with both", raw: `{"strategy":"session_id","sessionIdConfig":{"sources":[{"header":"a","attribute":"b"}]}}`, wantErr: []string{`sa-plugin "inst"`, "sessionIdConfig.sources[0]", "exactly one"}},
		{name: "source with neither", raw: `{"strategy":"session_id","sessionIdConfig":{"sources":[{"header":"a"},{"producer":"p"}]}}`, wantErr: []string{"sessionIdConfig.sources[1]", "exactly one"}},
		{name: "producer on a header source", raw: `{"strategy":"session_id","sessionIdConfig":{"sources":[{"header":"a","producer":"p"}]}}`, wantErr: []string{"sessionIdConfig.sources[0].producer"}},
		{name: "empty sources", raw: `{"strategy":"session_id","sessionIdConfig":{"sources":[]}}`, wantErr: []string{"sessionIdConfig.sources", "at least one"}},
		{name: "ttl zero", raw: `{"strategy":"session_id","sessionIdConfig":{"evictionTtlSeconds":0}}`, wantErr: []string{"sessionIdConfig.evictionTtlSeconds=0", "> 0"}},
		{name: "sweep negative", raw: `{"strategy":"session_id","sessionIdConfig":{"evictionSweepSeconds":-1}}`, wantErr: []string{"sessionIdConfig.evictionSweepSeconds=-1"}},
		{name: "ttl not an integer", raw: `{"strategy":"session_id","sessionIdConfig":{"evictionTtlSeconds":"5m"}}`, wantErr: []string{"evictionTtlSeconds"}},
		{name: "maxSessions zero", raw: `{"strategy":"session_id","sessionIdConfig":{"maxSessions":0}}`, wantErr: []string{"sessionIdConfig.maxSessions=0"}},
		{name: "load allowance on the filter", raw: `{"loadAllowance":1}`, wantErr: []string{`sa-plugin "inst"`, "loadAllowance", "scorer"}},
		{name: "negative load allowance", raw: `{"loadAllowance":-1}`, scorer: true, wantErr: []string{"loadAllowance=-1", ">= 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseParameters("sa-plugin", "inst", json.RawMessage(tt.raw), Options{LoadAllowance: tt.scorer})
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("no error, config %+v", got)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not mention %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("config\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestSourceKey(t *testing.T) {
	tests := []struct {
		src  Source
		want string
	}{
		{Source{Header: "x-session-id"}, ""},
		{Source{Attribute: "agent-identity"}, "agent-identity"},
		{Source{Attribute: "agent-identity", Producer: "agent"}, "agent-identity/agent"},
	}
	for _, tt := range tests {
		if got := tt.src.Key(); got != tt.want {
			t.Errorf("%+v: key %q, want %q", tt.src, got, tt.want)
		}
	}
}
