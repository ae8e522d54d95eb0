package pdtokenledger

import (
	"strings"
	"testing"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/framework/plugintest"
)

func envMap(m map[string]string) pluginkit.Env {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestDefaultParamsFromEnv(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		// check applies when wantErr is empty; wantErr lists the variables the error names.
		check   func(Params) bool
		wantErr []string
	}{
		{"built-in defaults", nil, func(p Params) bool {
			return p.RequestCost == 3500 && p.KVWeight == 0.3 && p.TTLSeconds == 3600 && p.SessionTTLSeconds == 1800 &&
				p.MaxSessions == 100000 && p.SharedLedger && p.DecodeOutputGrowth && p.Redis.Address == "" &&
				p.Redis.TimeoutMS == 50 && p.Redis.SyncIntervalMS == 1000
		}, nil},
		{"valid env", map[string]string{EnvRequestCost: "100", EnvKVWeight: " 0.5 ", EnvTTLSeconds: "10",
			EnvSessionTTLSeconds: "0", EnvMaxSessions: "7", EnvSharedLedger: "false", EnvDecodeOutputGrowth: "false"},
			func(p Params) bool {
				return p.RequestCost == 100 && p.KVWeight == 0.5 && p.TTLSeconds == 10 && p.SessionTTLSeconds == 0 &&
					p.MaxSessions == 7 && !p.SharedLedger && !p.DecodeOutputGrowth
			}, nil},
		{"empty values are unset", map[string]string{EnvRequestCost: "", EnvTTLSeconds: "  "},
			func(p Params) bool { return p.RequestCost == 3500 && p.TTLSeconds == 3600 }, nil},
		{"every invalid variable is named", map[string]string{EnvRequestCost: "0", EnvKVWeight: "-1", EnvTTLSeconds: "0",
			EnvSessionTTLSeconds: "-1", EnvMaxSessions: "x", EnvSharedLedger: "maybe", EnvDecodeOutputGrowth: "2"},
			nil, []string{EnvRequestCost, EnvKVWeight, EnvTTLSeconds, EnvSessionTTLSeconds, EnvMaxSessions, EnvSharedLedger, EnvDecodeOutputGrowth}},
		{"NaN is not > 0", map[string]string{EnvKVWeight: "NaN"}, nil, []string{EnvKVWeight}},
		{"Inf is not a weight", map[string]string{EnvKVWeight: "+Inf"}, nil, []string{EnvKVWeight}},
		{"redis host and port", map[string]string{EnvRedisHost: "10.0.0.1", EnvRedisPort: "6380", EnvRedisPassword: "pw"},
			func(p Params) bool {
				return p.Redis.Address == "10.0.0.1:6380" && p.Redis.password == "pw" && p.SharingEnabled()
			}, nil},
		{"redis default port", map[string]string{EnvRedisHost: "redis"}, func(p Params) bool { return p.Redis.Address == "redis:6379" }, nil},
		{"shared ledger off disables sharing", map[string]string{EnvRedisHost: "redis", EnvSharedLedger: "false"},
			func(p Params) bool { return !p.SharingEnabled() }, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := DefaultParams(envMap(tc.env))
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("want an error naming %v, got params %+v", tc.wantErr, p)
				}
				for _, name := range tc.wantErr {
					if !strings.Contains(err.Error(), name) {
						t.Errorf("error %q does not name %s", err, name)
					}
				}
				return
			}
			if err != nil || !tc.check(p) {
				t.Fatalf("params %+v err %v", p, err)
			}
			if err := p.Validate(); err != nil {
				t.Fatalf("defaults invalid: %v", err)
			}
		})
	}
	// ParseParams names the plugin too.
	_, err := ParseParams("ledger-a", nil, envMap(map[string]string{EnvKVWeight: "heavy"}))
	if err == nil || !strings.Contains(err.Error(), "ledger-a") || !strings.Contains(err.Error(), EnvKVWeight) {
		t.Fatalf("ParseParams error %v", err)
	}
}

func TestParseParams(t *testing.T) {
	cases := []struct {
		name, raw, wantErr string
	}{
		{"nil", "", ""},
		{"null", "null", ""},
		{"all fields", `{"requestCost":1,"kvWeight":1,"ttlSeconds":1,"sessionTTLSeconds":0,"maxSessions":1,"sharedLedger":false,
			"decodeOutputGrowth":false,"decodeRequestCost":900,"janitorIntervalSeconds":5,"unconfirmedTimeoutSeconds":0,
			"redis":{"address":"127.0.0.1:6379","db":1,"keyPrefix":"x:","timeoutMs":20,"syncIntervalMs":100,"livenessTTLSeconds":1,"keyTTLSeconds":5,"replicaID":"a"}}`, ""},
		{"unknown field", `{"requestCosts": 1}`, `unknown field "requestCosts"`},
		{"bad json", `{`, "invalid parameters"},
		{"request cost", `{"requestCost": 0}`, "parameter requestCost"},
		{"kv weight", `{"kvWeight": 0}`, "parameter kvWeight"},
		{"decode request cost", `{"decodeRequestCost": -1}`, "parameter decodeRequestCost"},
		{"ttl", `{"ttlSeconds": 0}`, "parameter ttlSeconds"},
		{"session ttl", `{"sessionTTLSeconds": -1}`, "parameter sessionTTLSeconds"},
		{"max sessions", `{"maxSessions": 0}`, "parameter maxSessions"},
		{"janitor", `{"janitorIntervalSeconds": 0}`, "parameter janitorIntervalSeconds"},
		{"unconfirmed", `{"unconfirmedTimeoutSeconds": -1}`, "parameter unconfirmedTimeoutSeconds"},
		{"reconcile grace", `{"reconcileGraceSeconds": -1}`, "parameter reconcileGraceSeconds"},
		{"reconcile on", `{"reconcileGraceSeconds": 120}`, ""},
		{"redis address", `{"redis":{"address":"nohost"}}`, "parameter redis.address"},
		{"redis db", `{"redis":{"address":"h:1","db":-1}}`, "parameter redis.db"},
		{"redis prefix", `{"redis":{"address":"h:1","keyPrefix":""}}`, "parameter redis.keyPrefix"},
		{"redis timeout", `{"redis":{"address":"h:1","timeoutMs":0}}`, "parameter redis.timeoutMs"},
		{"redis sync interval over 1s", `{"redis":{"address":"h:1","syncIntervalMs":1001}}`, "parameter redis.syncIntervalMs"},
		{"redis liveness", `{"redis":{"address":"h:1","livenessTTLSeconds":0}}`, "parameter redis.livenessTTLSeconds"},
		{"redis liveness vs interval", `{"redis":{"address":"h:1","syncIntervalMs":1000,"livenessTTLSeconds":1}}`, "two sync intervals"},
		{"redis key ttl", `{"redis":{"address":"h:1","keyTTLSeconds":1}}`, "parameter redis.keyTTLSeconds"},
		{"redis replica id", `{"redis":{"address":"h:1","replicaID":"a,b"}}`, "parameter redis.replicaID"},
		{"redis fields ignored without address", `{"redis":{"timeoutMs":0}}`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseParams("pl", []byte(tc.raw), envMap(nil))
			plugintest.WantErr(t, err, tc.wantErr, `pd-token-ledger "pl"`)
		})
	}
}

func FuzzParseParams(f *testing.F) {
	f.Add([]byte(`{"requestCost": 1, "redis": {"address": "127.0.0.1:1"}}`))
	f.Add([]byte(`{"kvWeight": 1e308}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := ParseParams("fuzz", raw, envMap(nil))
		if err == nil {
			if verr := p.Validate(); verr != nil {
				t.Fatalf("accepted params fail validation: %v", verr)
			}
		}
	})
}

func TestSharedValueRoundTrip(t *testing.T) {
	cases := []struct {
		tokens  float64
		charges int
		sumAt   float64
	}{{0, 0, 0}, {1234.5, 3, 5400000000.125}, {1e9, 100000, 1.8e14}}
	for _, c := range cases {
		v := FormatSharedValue(c.tokens, c.charges, c.sumAt)
		tk, ch, s, err := ParseSharedValue(v)
		if err != nil || tk != c.tokens || ch != c.charges || s != c.sumAt {
			t.Fatalf("%q -> %v %v %v %v", v, tk, ch, s, err)
		}
	}
	for _, bad := range []string{"", "1,2", "a,1,1", "1,b,1", "1,1,c", "-1,1,1", "1,-1,1", "1,1,-1", "NaN,1,1", "1,1,1,1", "1,1.5,1"} {
		if _, _, _, err := ParseSharedValue(bad); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
}

func FuzzParseSharedValue(f *testing.F) {
	f.Add("100,2,3600000000.5")
	f.Add("0,0,0")
	f.Add("1e309,1,1")
	f.Fuzz(func(t *testing.T, v string) {
		tokens, charges, sumAt, err := ParseSharedValue(v)
		if err != nil {
			return
		}
		if !validTokens(tokens) || charges < 0 || !validTokens(sumAt) {
			t.Fatalf("%q parsed to invalid values %v %v %v", v, tokens, charges, sumAt)
		}
	})
}

func TestSharedPrefillRoundTrip(t *testing.T) {
	for _, c := range []struct {
		tokens float64
		legs   int
	}{{0, 0}, {8160.5, 2}, {1e9, 5000}} {
		v := FormatSharedPrefill(c.tokens, c.legs)
		tokens, legs, err := ParseSharedPrefill(v)
		if err != nil || tokens != c.tokens || legs != c.legs {
			t.Fatalf("%q -> %v %v %v", v, tokens, legs, err)
		}
	}
	for _, bad := range []string{"", "1", "a,1", "1,b", "-1,1", "1,-1", "Inf,1", "1,1,1"} {
		if _, _, err := ParseSharedPrefill(bad); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
}

func TestSharedBudgetRoundTrip(t *testing.T) {
	cases := []struct {
		output   float64
		budgeted int
	}{{0, 0}, {9000, 2}, {4e9, 100000}}
	for _, c := range cases {
		v := FormatSharedBudget(c.output, c.budgeted)
		out, n, err := ParseSharedBudget(v)
		if err != nil || out != c.output || n != c.budgeted {
			t.Fatalf("%q -> %v %v %v", v, out, n, err)
		}
	}
	for _, bad := range []string{"", "1", "a,1", "1,b", "-1,1", "1,-1", "NaN,1", "1,1,1", "1,1.5"} {
		if _, _, err := ParseSharedBudget(bad); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
}
