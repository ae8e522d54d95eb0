package podmodel

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
)

// ModelConfig is the model.aibrix.ai/config annotation.
type ModelConfig struct {
	LockedRoutingStrategy string             `json:"lockedRoutingStrategy,omitempty"`
	DefaultProfile        string             `json:"defaultProfile,omitempty"`
	Profiles              map[string]Profile `json:"profiles"`
}

// Profile is one named profile of a ModelConfig.
type Profile struct {
	RoutingStrategy   string        `json:"routingStrategy,omitempty"`
	RequestsPerSecond int           `json:"requestsPerSecond,omitempty"`
	RoutingConfig     RoutingConfig `json:"routingConfig,omitempty"`
}

// RoutingConfig holds the PD fields of a profile. Pointers distinguish "unset" from a zero
// value where the field overrides a plugin parameter.
type RoutingConfig struct {
	PromptLenBucketMinLength int    `json:"promptLenBucketMinLength,omitempty"`
	PromptLenBucketMaxLength int    `json:"promptLenBucketMaxLength,omitempty"`
	Combined                 bool   `json:"combined,omitempty"`
	PromptLengthBucketing    *bool  `json:"promptLengthBucketing,omitempty"`
	BucketServe              *bool  `json:"bucketServe,omitempty"`
	BucketServeMode          string `json:"bucketServeMode,omitempty"`
	PrefillScorePolicy       string `json:"prefillScorePolicy,omitempty"`
	DecodeScorePolicy        string `json:"decodeScorePolicy,omitempty"`
	PrefixCache              *struct {
		StandardDeviationFactor int `json:"standardDeviationFactor,omitempty"`
	} `json:"prefixCache,omitempty"`
	// PD holds the per-profile knob overrides (routingConfig.pd.<field>), kept raw: the knob
	// owner validates each one and keeps its default (with a warning) when invalid.
	PD map[string]json.RawMessage `json:"pd,omitempty"`

	// Auto-selection hints for config-profile: auto (lower bounds inclusive, upper exclusive).
	PromptTokensGte *int `json:"promptTokensGte,omitempty"`
	PromptTokensLt  *int `json:"promptTokensLt,omitempty"`
	MaxTokensGte    *int `json:"maxTokensGte,omitempty"`
	MaxTokensLt     *int `json:"maxTokensLt,omitempty"`
}

// BucketBounds returns min and max (inclusive; max 0 = unlimited) with negative min → 0.
func (rc RoutingConfig) BucketBounds() (lo, hi int, scoped bool) {
	lo, hi = rc.PromptLenBucketMinLength, rc.PromptLenBucketMaxLength
	if lo < 0 {
		lo = 0
	}
	if hi < 0 {
		hi = 0
	}
	return lo, hi, true
}

// AutoHints are the request facts config-profile: auto matches against.
type AutoHints struct {
	PromptTokens int
	MaxTokens    int // max_tokens, else max_completion_tokens; -1 when absent
}

func (rc RoutingConfig) hintCount() int {
	n := 0
	for _, p := range []*int{rc.PromptTokensGte, rc.PromptTokensLt, rc.MaxTokensGte, rc.MaxTokensLt} {
		if p != nil {
			n++
		}
	}
	return n
}

func (rc RoutingConfig) hintsMatch(h AutoHints) bool {
	if rc.hintCount() == 0 {
		return false
	}
	if rc.PromptTokensGte != nil && h.PromptTokens < *rc.PromptTokensGte {
		return false
	}
	if rc.PromptTokensLt != nil && h.PromptTokens >= *rc.PromptTokensLt {
		return false
	}
	if rc.MaxTokensGte != nil || rc.MaxTokensLt != nil {
		if h.MaxTokens < 0 {
			return false
		}
		if rc.MaxTokensGte != nil && h.MaxTokens < *rc.MaxTokensGte {
			return false
		}
		if rc.MaxTokensLt != nil && h.MaxTokens >= *rc.MaxTokensLt {
			return false
		}
	}
	return true
}

// ProfileAuto is the config-profile value that selects a profile by its hints.
const ProfileAuto = "auto"

// Resolve picks the profile for a config-profile header value: the exact name when present;
// "auto" → the matching profile with the most hints (ties by name); otherwise (or when
// nothing matches) defaultProfile, or "default". A nil config resolves to nothing.
func (c *ModelConfig) Resolve(header string, hints AutoHints) (string, *Profile) {
	name, ok := c.ResolveName(header, hints)
	if !ok {
		return "", nil
	}
	p := c.Profiles[name]
	return name, &p
}

// ResolveName is Resolve without a copy of the profile: callers on the per-pod path read the
// profile from c.Profiles themselves (a returned *Profile copy escaped to the heap for every
// pod of every request).
func (c *ModelConfig) ResolveName(header string, hints AutoHints) (string, bool) {
	if c == nil || len(c.Profiles) == 0 {
		return "", false
	}
	if header != "" && header != ProfileAuto {
		if _, ok := c.Profiles[header]; ok {
			return header, true
		}
	}
	if header == ProfileAuto {
		names := make([]string, 0, len(c.Profiles))
		for n := range c.Profiles {
			names = append(names, n)
		}
		sort.Strings(names)
		best, bestN := "", -1
		for _, n := range names {
			rc := c.Profiles[n].RoutingConfig
			if rc.hintsMatch(hints) && rc.hintCount() > bestN {
				best, bestN = n, rc.hintCount()
			}
		}
		if best != "" {
			return best, true
		}
	}
	def := c.DefaultProfile
	if def == "" {
		def = "default"
	}
	if _, ok := c.Profiles[def]; ok {
		return def, true
	}
	return "", false
}

// ErrNoProfiles is returned for a config without profiles (AIBrix treats it as absent).
var ErrNoProfiles = errors.New("model config has no profiles")

// configCache memoises parses by annotation text: the same annotation is on every pod of a
// deployment and is read on every request. Bounded; cleared when full.
var configCache sync.Map

type cachedConfig struct {
	cfg *ModelConfig
	err error
}

const maxCachedConfigs = 1024

var cacheSize int64
var cacheMu sync.Mutex

// ParseConfig parses a model.aibrix.ai/config annotation. Invalid JSON or no profiles → error
// (the caller treats the pod as having no config). The returned value is shared: read-only.
func ParseConfig(raw string) (*ModelConfig, error) {
	if v, ok := configCache.Load(raw); ok {
		c := v.(cachedConfig)
		return c.cfg, c.err
	}
	cfg, err := parseConfig(raw)
	cacheMu.Lock()
	if cacheSize >= maxCachedConfigs {
		configCache.Clear()
		cacheSize = 0
	}
	if _, loaded := configCache.LoadOrStore(raw, cachedConfig{cfg, err}); !loaded {
		cacheSize++
	}
	cacheMu.Unlock()
	return cfg, err
}

func parseConfig(raw string) (*ModelConfig, error) {
	var cfg ModelConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		return nil, fmt.Errorf("parse %s: %w", AnnotationConfig, err)
	}
	if len(cfg.Profiles) == 0 {
		return nil, fmt.Errorf("parse %s: %w", AnnotationConfig, ErrNoProfiles)
	}
	return &cfg, nil
}
