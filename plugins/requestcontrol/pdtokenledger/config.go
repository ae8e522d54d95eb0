package pdtokenledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/tokenload"
)

// Environment variables read as parameter defaults (AIBrix names, same defaults and rules).
const (
	EnvRequestCost        = "AIBRIX_TOKEN_LOAD_REQUEST_COST"
	EnvKVWeight           = "AIBRIX_TOKEN_LOAD_KV_WEIGHT"
	EnvTTLSeconds         = "AIBRIX_TOKEN_LOAD_TTL_SECONDS"
	EnvSessionTTLSeconds  = "AIBRIX_TOKEN_LOAD_SESSION_TTL_SECONDS"
	EnvMaxSessions        = "AIBRIX_TOKEN_LOAD_MAX_SESSIONS"
	EnvSharedLedger       = "AIBRIX_TOKEN_LOAD_SHARED_LEDGER"
	EnvDecodeOutputGrowth = "AIBRIX_DECODE_TOKEN_LOAD_OUTPUT_GROWTH"
	// EnvRedisHost / EnvRedisPort / EnvRedisPassword are the AIBrix gateway's Redis variables.
	EnvRedisHost     = "REDIS_HOST"
	EnvRedisPort     = "REDIS_PORT"
	EnvRedisPassword = "REDIS_PASSWORD"
)

// Built-in defaults (AIBrix Appendix A; janitor 60 s).
const (
	DefaultRequestCost       = 3500
	DefaultKVWeight          = 0.3
	DefaultTTLSeconds        = 3600
	DefaultSessionTTLSeconds = 1800
	DefaultMaxSessions       = 100000
	DefaultJanitorSeconds    = 60
	DefaultUnconfirmedSecs   = 60
	DefaultKeyPrefix         = "pdgate:dtl:"
	DefaultEncodeProfile     = "encode" // disagg-profile-handler's default
	DefaultRedisTimeoutMS    = 50
	DefaultSyncIntervalMS    = 1000
	DefaultLivenessSeconds   = 10
	DefaultKeyTTLSeconds     = 600
	// MaxSessionKeyBytes is the longest x-aibrix-session-key the session table accepts.
	MaxSessionKeyBytes = 256
)

// Params are the pd-token-ledger plugin parameters.
type Params struct {
	RequestCost        float64 `json:"requestCost"`
	KVWeight           float64 `json:"kvWeight"`
	TTLSeconds         int     `json:"ttlSeconds"`
	SessionTTLSeconds  int     `json:"sessionTTLSeconds"`
	MaxSessions        int     `json:"maxSessions"`
	SharedLedger       bool    `json:"sharedLedger"`
	DecodeOutputGrowth bool    `json:"decodeOutputGrowth"`
	// DecodeRequestCost is added to a decode pod's token load for each open decode charge
	// (pdgate's extension; 0, the default, is AIBrix's token_load): a decode step's cost grows
	// with the sequences batched as well as with their KV, so a pod holding many short
	// requests is as loaded as one holding fewer long ones.
	DecodeRequestCost float64 `json:"decodeRequestCost"`
	// JanitorIntervalSeconds is how often TTLs, sessions and idle pods are swept.
	JanitorIntervalSeconds int `json:"janitorIntervalSeconds"`
	// UnconfirmedTimeoutSeconds releases charges of requests that never reached PreRequest
	// (scheduling failed after a scorer charged); 0 disables.
	UnconfirmedTimeoutSeconds int `json:"unconfirmedTimeoutSeconds"`
	// ReconcileGraceSeconds turns on reconciliation with the scraped metrics (0, the default,
	// leaves it off): a lease older than this that the pod's running + waiting requests cannot
	// explain is released. It must outlast a prefill leg and a scrape, since a decode engine
	// counts a request only once its KV arrived.
	ReconcileGraceSeconds int `json:"reconcileGraceSeconds"`
	// EncodeProfile is the scheduling profile whose picks are the request's encoders (the
	// disagg-profile-handler's encode profile); each gets an encode lease. "" disables.
	EncodeProfile string      `json:"encodeProfile"`
	Redis         RedisParams `json:"redis"`
	// AIBrixMetricNames also emits the ledger gauges under AIBrix's names (pd_token_load_*),
	// so AIBrix dashboards keep working next to pdgate's.
	AIBrixMetricNames bool `json:"aibrixMetricNames"`
}

// RedisParams configure the shared decode ledger. An empty Address disables sharing.
type RedisParams struct {
	Address            string `json:"address"`
	DB                 int    `json:"db"`
	KeyPrefix          string `json:"keyPrefix"`
	TimeoutMS          int    `json:"timeoutMs"`
	SyncIntervalMS     int    `json:"syncIntervalMs"`
	LivenessTTLSeconds int    `json:"livenessTTLSeconds"`
	KeyTTLSeconds      int    `json:"keyTTLSeconds"`
	ReplicaID          string `json:"replicaID"`
	password           string // from REDIS_PASSWORD only, never from a config file
}

// DefaultParams returns the defaults with the environment applied. An invalid environment value
// is an error naming the variable (AIBrix falls back to the default; pdgate, like
// aibrix-pd-pair's knobs for the same variables, refuses to start so a typo is seen at once).
func DefaultParams(env pluginkit.Env) (Params, error) {
	env = env.OrOS()
	p := Params{
		RequestCost: DefaultRequestCost, KVWeight: DefaultKVWeight, TTLSeconds: DefaultTTLSeconds,
		SessionTTLSeconds: DefaultSessionTTLSeconds, MaxSessions: DefaultMaxSessions,
		SharedLedger: true, DecodeOutputGrowth: true, JanitorIntervalSeconds: DefaultJanitorSeconds,
		UnconfirmedTimeoutSeconds: DefaultUnconfirmedSecs, EncodeProfile: DefaultEncodeProfile,
		Redis: RedisParams{KeyPrefix: DefaultKeyPrefix, TimeoutMS: DefaultRedisTimeoutMS,
			SyncIntervalMS: DefaultSyncIntervalMS, LivenessTTLSeconds: DefaultLivenessSeconds,
			KeyTTLSeconds: DefaultKeyTTLSeconds},
	}
	var errs []error
	// An empty value counts as unset (a Deployment's `value: ""`).
	lookup := func(name string) (string, bool) {
		v, ok := env(name)
		v = strings.TrimSpace(v)
		return v, ok && v != ""
	}
	posFloat := func(name string, dst *float64) {
		if v, ok := lookup(name); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || !(f > 0) || math.IsInf(f, 0) {
				errs = append(errs, fmt.Errorf("env %s=%q: must be a number > 0", name, v))
				return
			}
			*dst = f
		}
	}
	intMin := func(name string, dst *int, minimum int) {
		if v, ok := lookup(name); ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < minimum {
				errs = append(errs, fmt.Errorf("env %s=%q: must be an integer >= %d", name, v, minimum))
				return
			}
			*dst = n
		}
	}
	boolean := func(name string, dst *bool) {
		if v, ok := lookup(name); ok {
			b, err := strconv.ParseBool(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("env %s=%q: must be a boolean", name, v))
				return
			}
			*dst = b
		}
	}
	posFloat(EnvRequestCost, &p.RequestCost)
	posFloat(EnvKVWeight, &p.KVWeight)
	intMin(EnvTTLSeconds, &p.TTLSeconds, 1)
	intMin(EnvSessionTTLSeconds, &p.SessionTTLSeconds, 0)
	intMin(EnvMaxSessions, &p.MaxSessions, 1)
	boolean(EnvSharedLedger, &p.SharedLedger)
	boolean(EnvDecodeOutputGrowth, &p.DecodeOutputGrowth)
	if host, ok := env(EnvRedisHost); ok && strings.TrimSpace(host) != "" {
		port := "6379"
		if v, ok := env(EnvRedisPort); ok && strings.TrimSpace(v) != "" {
			port = strings.TrimSpace(v)
		}
		p.Redis.Address = net.JoinHostPort(strings.TrimSpace(host), port)
	}
	if v, ok := env(EnvRedisPassword); ok {
		p.Redis.password = v
	}
	return p, errors.Join(errs...)
}

// ParseParams decodes raw plugin parameters over the defaults (pluginkit.Decode) and validates
// them. Errors name the plugin instance and the field.
func ParseParams(pluginName string, raw json.RawMessage, env pluginkit.Env) (Params, error) {
	p, err := DefaultParams(env)
	if err != nil {
		return Params{}, pluginkit.Errorf(Type, pluginName, "%w", err)
	}
	if err := pluginkit.Decode(Type, pluginName, raw, &p); err != nil {
		return Params{}, err
	}
	return p, nil
}

// Validate checks every field; the error names the field and what was expected.
func (p Params) Validate() error {
	switch {
	case !(p.RequestCost > 0) || p.RequestCost > 1e12:
		return fmt.Errorf("parameter requestCost: must be > 0, got %v", p.RequestCost)
	case !(p.KVWeight > 0) || p.KVWeight > 1e6:
		return fmt.Errorf("parameter kvWeight: must be > 0, got %v", p.KVWeight)
	case !(p.DecodeRequestCost >= 0) || p.DecodeRequestCost > 1e12:
		return fmt.Errorf("parameter decodeRequestCost: must be >= 0, got %v", p.DecodeRequestCost)
	case p.TTLSeconds <= 0:
		return fmt.Errorf("parameter ttlSeconds: must be > 0, got %d", p.TTLSeconds)
	case p.SessionTTLSeconds < 0:
		return fmt.Errorf("parameter sessionTTLSeconds: must be >= 0 (0 disables sessions), got %d", p.SessionTTLSeconds)
	case p.MaxSessions <= 0:
		return fmt.Errorf("parameter maxSessions: must be > 0, got %d", p.MaxSessions)
	case p.JanitorIntervalSeconds <= 0:
		return fmt.Errorf("parameter janitorIntervalSeconds: must be > 0, got %d", p.JanitorIntervalSeconds)
	case p.UnconfirmedTimeoutSeconds < 0:
		return fmt.Errorf("parameter unconfirmedTimeoutSeconds: must be >= 0 (0 disables), got %d", p.UnconfirmedTimeoutSeconds)
	case p.ReconcileGraceSeconds < 0:
		return fmt.Errorf("parameter reconcileGraceSeconds: must be >= 0 (0 disables), got %d", p.ReconcileGraceSeconds)
	}
	r := p.Redis
	if r.Address == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(r.Address); err != nil {
		return fmt.Errorf("parameter redis.address: want host:port, got %q: %w", r.Address, err)
	}
	switch {
	case r.DB < 0:
		return fmt.Errorf("parameter redis.db: must be >= 0, got %d", r.DB)
	case r.KeyPrefix == "":
		return fmt.Errorf("parameter redis.keyPrefix: must not be empty")
	case r.TimeoutMS <= 0 || r.TimeoutMS > 1000:
		return fmt.Errorf("parameter redis.timeoutMs: must be in (0, 1000], got %d", r.TimeoutMS)
	case r.SyncIntervalMS <= 0 || r.SyncIntervalMS > 1000:
		return fmt.Errorf("parameter redis.syncIntervalMs: must be in (0, 1000] (values are refreshed at least every second), got %d", r.SyncIntervalMS)
	case r.LivenessTTLSeconds <= 0:
		return fmt.Errorf("parameter redis.livenessTTLSeconds: must be > 0, got %d", r.LivenessTTLSeconds)
	case time.Duration(r.LivenessTTLSeconds)*time.Second < 2*time.Duration(r.SyncIntervalMS)*time.Millisecond:
		return fmt.Errorf("parameter redis.livenessTTLSeconds: must cover at least two sync intervals (%d ms), got %d s", r.SyncIntervalMS, r.LivenessTTLSeconds)
	case r.KeyTTLSeconds < r.LivenessTTLSeconds:
		return fmt.Errorf("parameter redis.keyTTLSeconds: must be >= livenessTTLSeconds (%d), got %d", r.LivenessTTLSeconds, r.KeyTTLSeconds)
	case strings.ContainsAny(r.ReplicaID, ", \t\n"):
		return fmt.Errorf("parameter redis.replicaID: must not contain commas or whitespace, got %q", r.ReplicaID)
	}
	return nil
}

// SharingEnabled reports whether the Redis-shared decode ledger is configured.
func (p Params) SharingEnabled() bool { return p.SharedLedger && p.Redis.Address != "" }

// Defaults returns the policy values scorers read.
func (p Params) Defaults() tokenload.Defaults {
	return tokenload.Defaults{RequestCost: p.RequestCost, KVWeight: p.KVWeight, TTL: time.Duration(p.TTLSeconds) * time.Second}
}
