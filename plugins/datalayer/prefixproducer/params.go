package prefixproducer

import (
	"encoding/json"
	"fmt"

	"github.com/pdgate/pdgate/plugins/lib/pluginkit"
)

// Defaults: GIE v1.5.0 approx-prefix-cache-producer's.
const (
	DefaultBlockSizeTokens      = 16
	DefaultMaxPrefixBlocks      = 256
	DefaultLRUCapacityPerServer = 31250
	// CharactersPerToken converts the block size in tokens to prompt bytes (GIE's
	// averageCharactersPerToken).
	CharactersPerToken = 4
)

// Parameters are GIE's approx-prefix-cache-producer parameters (also prefix-cache-scorer's),
// with its defaults and its validation. Unknown fields are refused (GIE ignores them), as
// every pdgate plugin does, naming the field.
type Parameters struct {
	// AutoTune takes the block size from the first endpoint's CacheBlockSize metric and the
	// index capacity of a server from its CacheNumBlocks metric.
	AutoTune bool `json:"autoTune"`
	// BlockSizeTokens is the block size in tokens (× 4 prompt bytes).
	BlockSizeTokens int `json:"blockSizeTokens"`
	// BlockSize is GIE's deprecated block size in characters: refused unless
	// BlockSizeTokens is set.
	BlockSize int `json:"blockSize"`
	// MaxPrefixBlocksToMatch caps the blocks hashed and matched per request.
	MaxPrefixBlocksToMatch int `json:"maxPrefixBlocksToMatch"`
	// MaxPrefixTokensToMatch, when > 0, sets the cap to MaxPrefixTokensToMatch / block size.
	MaxPrefixTokensToMatch int `json:"maxPrefixTokensToMatch"`
	// LRUCapacityPerServer is the index capacity (blocks) of a server.
	LRUCapacityPerServer int `json:"lruCapacityPerServer"`
}

// DefaultParameters are GIE's defaults.
func DefaultParameters() Parameters {
	return Parameters{AutoTune: true, BlockSizeTokens: DefaultBlockSizeTokens,
		MaxPrefixBlocksToMatch: DefaultMaxPrefixBlocks, LRUCapacityPerServer: DefaultLRUCapacityPerServer}
}

// ParseParameters decodes raw over the defaults and validates as GIE does.
func ParseParameters(name string, raw json.RawMessage) (Parameters, error) {
	p := DefaultParameters()
	if err := pluginkit.Decode(Type, name, raw, &p); err != nil {
		return p, err
	}
	if err := p.validate(); err != nil {
		return p, fmt.Errorf("%s: %w", Type, err)
	}
	return p, nil
}

func (p Parameters) validate() error {
	if p.BlockSize > 0 && p.BlockSizeTokens <= 0 {
		return fmt.Errorf("invalid configuration: BlockSize (%d) is deprecated; please use BlockSizeTokens instead to define the cache block size in tokens", p.BlockSize)
	}
	if !p.AutoTune && p.BlockSizeTokens <= 0 {
		return fmt.Errorf("invalid configuration: BlockSizeTokens must be > 0 when AutoTune is disabled (current value: %d)", p.BlockSizeTokens)
	}
	if p.MaxPrefixTokensToMatch < 0 {
		return fmt.Errorf("invalid configuration: MaxPrefixTokensToMatch must be >= 0 (current value: %d)", p.MaxPrefixTokensToMatch)
	}
	return nil
}
