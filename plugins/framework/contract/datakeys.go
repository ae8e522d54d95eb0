package contract

// TokenizedPromptKey is the data key the token producer (token-producer) writes; consumers
// (prefix-based-pd-decider, the precise and burst prefix producers, the multimodal cache
// producer) declare it with TokenizedPromptData so GIE's DAG orders the producer before them.
// It lives here, not in the producer, so that consumers depend on the key and not on the
// plugin that produces it.
const TokenizedPromptKey = "TokenizedPrompt"

// TokenizedPromptData is the DAG type token for TokenizedPromptKey (a comparable value: GIE
// compares tokens with !=).
type TokenizedPromptData struct{}
