package sessionaffinity

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// Strategies (llm-d's names).
const (
	// StrategyEncodedEndpointHeader: the response carries the served endpoint, encoded, in a
	// header the client sends back on its next request. No server-side state.
	StrategyEncodedEndpointHeader = "encoded_endpoint_header"
	// StrategySessionID: a server-side table binds each session ID to an endpoint.
	StrategySessionID = "session_id"
)

// Defaults (llm-d v0.11's, except DefaultMaxSessions, which is pdgate's).
const (
	DefaultHeader               = "x-session-token"
	DefaultSessionHeader        = "x-session-id"
	DefaultEvictionTTLSeconds   = 300
	DefaultEvictionSweepSeconds = 10
	// DefaultMaxSessions bounds the binding table (AIBrix's session-table bound,
	// AIBRIX_TOKEN_LOAD_MAX_SESSIONS, reused as the number).
	DefaultMaxSessions = 100000
)

// Parameters are the parameters of session-affinity-scorer and session-affinity-filter:
// llm-d v0.11's keys, plus pdgate's sessionIdConfig.maxSessions and the scorer's loadAllowance.
type Parameters struct {
	// Strategy is encoded_endpoint_header (default) or session_id.
	Strategy string `json:"strategy"`
	// ProfileName names the profile whose pick is remembered; "" is the primary profile (the
	// decode profile in a P/D config).
	ProfileName string `json:"profileName"`
	// EncodedEndpointHeaderConfig is read only under encoded_endpoint_header.
	EncodedEndpointHeaderConfig *EncodedEndpointHeaderConfig `json:"encodedEndpointHeaderConfig"`
	// SessionIDConfig is read only under session_id.
	SessionIDConfig *SessionIDConfig `json:"sessionIdConfig"`
	// LoadAllowance (pdgate, scorer only; unset = off, llm-d's behaviour): the extra load
	// (waiting + running requests) the session's endpoint may carry over the least-loaded
	// candidate before its affinity score drops to 0. Must be >= 0.
	LoadAllowance *int `json:"loadAllowance"`
}

// EncodedEndpointHeaderConfig configures encoded_endpoint_header.
type EncodedEndpointHeaderConfig struct {
	// Header carries the encoded endpoint both ways (default x-session-token; lower-cased).
	Header string `json:"header"`
}

// SessionIDConfig configures session_id.
type SessionIDConfig struct {
	// Sources are tried in order; the first non-empty (trimmed) value is the session ID.
	// Default [{header: x-session-id}].
	Sources []Source `json:"sources"`
	// EvictionTTLSeconds: a binding idle longer than this is forgotten (default 300, > 0).
	EvictionTTLSeconds *int `json:"evictionTtlSeconds"`
	// EvictionSweepSeconds: how often the sweeper runs (default 10, > 0).
	EvictionSweepSeconds *int `json:"evictionSweepSeconds"`
	// MaxSessions (pdgate) bounds the table; new sessions beyond it are not bound (default
	// 100000, > 0).
	MaxSessions *int `json:"maxSessions"`
}

// Source is where a session ID is read: exactly one of Header or Attribute.
type Source struct {
	Header    string `json:"header"`
	Attribute string `json:"attribute"`
	// Producer qualifies Attribute: the key read is "<attribute>/<producer>".
	Producer string `json:"producer"`
}

// Key is the attribute key a source reads ("" for a header source).
func (s Source) Key() string {
	if s.Attribute == "" || s.Producer == "" {
		return s.Attribute
	}
	return s.Attribute + "/" + s.Producer
}

// Config is the validated configuration.
type Config struct {
	Strategy    string
	ProfileName string
	// Header is the encoded_endpoint_header header, lower-cased.
	Header      string
	Sources     []Source
	TTL         time.Duration
	Sweep       time.Duration
	MaxSessions int
	// LoadAllowance < 0 means no load check.
	LoadAllowance int
}

// Options say which optional parameters a plugin type takes.
type Options struct {
	// LoadAllowance: the type accepts loadAllowance (the scorer; the filter is hard affinity).
	LoadAllowance bool
}

// ParseParameters decodes (strictly), defaults and validates the parameters of one instance of
// pluginType. Every error names the plugin and the field.
func ParseParameters(pluginType, name string, raw json.RawMessage, opt Options) (Config, error) {
	var p Parameters
	if err := pluginkit.Decode(pluginType, name, raw, &p); err != nil {
		return Config{}, err
	}
	bad := func(field string, value any, why string) error {
		return pluginkit.Errorf(pluginType, name, "parameter %s=%v: %s", field, value, why)
	}
	c := Config{Strategy: p.Strategy, ProfileName: p.ProfileName, LoadAllowance: -1,
		TTL: DefaultEvictionTTLSeconds * time.Second, Sweep: DefaultEvictionSweepSeconds * time.Second,
		MaxSessions: DefaultMaxSessions}
	if c.Strategy == "" {
		c.Strategy = StrategyEncodedEndpointHeader
	}
	switch c.Strategy {
	case StrategyEncodedEndpointHeader:
		c.Header = DefaultHeader
		if e := p.EncodedEndpointHeaderConfig; e != nil && strings.TrimSpace(e.Header) != "" {
			c.Header = strings.ToLower(strings.TrimSpace(e.Header))
		}
	case StrategySessionID:
		if err := c.sessionID(p.SessionIDConfig, bad); err != nil {
			return Config{}, err
		}
	default:
		return Config{}, bad("strategy", fmt.Sprintf("%q", p.Strategy),
			"must be "+StrategyEncodedEndpointHeader+" or "+StrategySessionID)
	}
	if p.LoadAllowance != nil {
		if !opt.LoadAllowance {
			return Config{}, bad("loadAllowance", *p.LoadAllowance, "only session-affinity-scorer takes it (the filter is hard affinity)")
		}
		if *p.LoadAllowance < 0 {
			return Config{}, bad("loadAllowance", *p.LoadAllowance, "must be >= 0")
		}
		c.LoadAllowance = *p.LoadAllowance
	}
	return c, nil
}

func (c *Config) sessionID(s *SessionIDConfig, bad func(string, any, string) error) error {
	c.Sources = []Source{{Header: DefaultSessionHeader}}
	if s == nil {
		return nil
	}
	if s.Sources != nil {
		if len(s.Sources) == 0 {
			return bad("sessionIdConfig.sources", "[]", "must list at least one source (omit it for [{header: x-session-id}])")
		}
		c.Sources = make([]Source, 0, len(s.Sources))
		for i, src := range s.Sources {
			field := fmt.Sprintf("sessionIdConfig.sources[%d]", i)
			src.Header = strings.ToLower(strings.TrimSpace(src.Header))
			src.Attribute = strings.TrimSpace(src.Attribute)
			src.Producer = strings.TrimSpace(src.Producer)
			switch {
			case (src.Header == "") == (src.Attribute == ""):
				return bad(field, fmt.Sprintf("%+v", src), "must set exactly one of header or attribute")
			case src.Header != "" && src.Producer != "":
				return bad(field+".producer", fmt.Sprintf("%q", src.Producer), "applies to an attribute source only")
			}
			c.Sources = append(c.Sources, src)
		}
	}
	for _, f := range []struct {
		field string
		v     *int
		into  *time.Duration
	}{{"sessionIdConfig.evictionTtlSeconds", s.EvictionTTLSeconds, &c.TTL}, {"sessionIdConfig.evictionSweepSeconds", s.EvictionSweepSeconds, &c.Sweep}} {
		if f.v == nil {
			continue
		}
		if *f.v <= 0 {
			return bad(f.field, *f.v, "must be > 0")
		}
		*f.into = time.Duration(*f.v) * time.Second
	}
	if s.MaxSessions != nil {
		if *s.MaxSessions <= 0 {
			return bad("sessionIdConfig.maxSessions", *s.MaxSessions, "must be > 0")
		}
		c.MaxSessions = *s.MaxSessions
	}
	return nil
}
