package prefixproducer

import (
	"encoding/json"
	"fmt"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// Defaults: GIE v1.5.0 approx-prefix-cache-producer's, except the match cap.
const (
	DefaultBlockSizeTokens = 16
	// GIEMaxPrefixBlocks is GIE's default cap (256 blocks, 4,096 tokens with 16-token blocks).
	// pdgate's default is no block cap but the context length: a fully cached long prompt
	// must match all its blocks (see README, "Whole-prompt matching").
	GIEMaxPrefixBlocks = 256
	// DefaultContextLengthTokens caps the tokens matched when neither
	// maxPrefixBlocksToMatch nor maxPrefixTokensToMatch is set: 1 Mi tokens, above every
	// served model's context length, so in practice the whole prompt.
	DefaultContextLengthTokens  = 1 << 20
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
	// MaxPrefixBlocksToMatch, when > 0, caps the blocks hashed and matched per request;
	// 0 (the default) leaves the cap to ContextLengthTokens.
	MaxPrefixBlocksToMatch int `json:"maxPrefixBlocksToMatch"`
	// MaxPrefixTokensToMatch, when > 0, sets the cap to MaxPrefixTokensToMatch / block size.
	MaxPrefixTokensToMatch int `json:"maxPrefixTokensToMatch"`
	// ContextLengthTokens caps the tokens matched when neither of the two above is set
	// (pdgate's; GIE has no such field).
	ContextLengthTokens int `json:"contextLengthTokens"`
	// LRUCapacityPerServer is the index capacity (blocks) of a server without AutoTune.
	LRUCapacityPerServer int `json:"lruCapacityPerServer"`
	// OffloadTokensPerServer is the tokens of KV each server keeps in an offload tier under its
	// GPU cache (pdgate's; vLLM's offloading connector, LMCache's CPU backend): every block the
	// server computes is written there too, so a prefix its GPU has evicted is still served,
	// loaded back instead of computed. The server's index capacity grows by as many blocks.
	// 0 (the default) is a GPU-only server.
	OffloadTokensPerServer int `json:"offloadTokensPerServer"`
}

// MaxBlocks is the number of blocks hashed and matched per request at block size blockSize
// (tokens): maxPrefixTokensToMatch / blockSize when set (GIE's precedence), else
// maxPrefixBlocksToMatch when set, else contextLengthTokens / blockSize.
func (p Parameters) MaxBlocks(blockSize int) int {
	switch {
	case blockSize <= 0:
		return 0
	case p.MaxPrefixTokensToMatch > 0:
		return p.MaxPrefixTokensToMatch / blockSize
	case p.MaxPrefixBlocksToMatch > 0:
		return p.MaxPrefixBlocksToMatch
	}
	return p.ContextLengthTokens / blockSize
}

// DefaultParameters are GIE's defaults, with the match capped by the context length instead
// of GIE's 256 blocks.
func DefaultParameters() Parameters {
	return Parameters{AutoTune: true, BlockSizeTokens: DefaultBlockSizeTokens,
		ContextLengthTokens: DefaultContextLengthTokens, LRUCapacityPerServer: DefaultLRUCapacityPerServer}
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
	if p.MaxPrefixBlocksToMatch < 0 {
		return fmt.Errorf("invalid configuration: maxPrefixBlocksToMatch must be >= 0 (current value: %d)", p.MaxPrefixBlocksToMatch)
	}
	if !p.AutoTune && p.LRUCapacityPerServer <= 0 {
		return fmt.Errorf("invalid configuration: lruCapacityPerServer must be > 0 when AutoTune is disabled (current value: %d)", p.LRUCapacityPerServer)
	}
	if p.OffloadTokensPerServer < 0 {
		return fmt.Errorf("invalid configuration: offloadTokensPerServer must be >= 0 (current value: %d)", p.OffloadTokensPerServer)
	}
	if p.ContextLengthTokens <= 0 {
		return fmt.Errorf("invalid configuration: contextLengthTokens must be > 0 (current value: %d)", p.ContextLengthTokens)
	}
	return nil
}
