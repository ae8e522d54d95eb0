package contract

// Cause is the typed reason behind a decision or an early answer. Metrics use it as a label
// value and traces print it, so its values are stable, lower_snake_case and few.
type Cause string

// Causes of early answers.
const (
	// CauseConditionalDecodeMiss: Prefer: if-available and the decode pick lacks the prompt's
	// KV cache (412).
	CauseConditionalDecodeMiss Cause = "conditional_decode_miss"
	// CauseRateLimited: the model's requests-per-second cap was exceeded (429).
	CauseRateLimited Cause = "rate_limited"
	// CauseNoDecodeEndpoint: the decode profile found no endpoint (503).
	CauseNoDecodeEndpoint Cause = "no_decode_endpoint"
	// CauseNoBucket: no complete prompt-length bucket and no combined pod fits (503).
	CauseNoBucket Cause = "no_bucket"
	// CauseNoPair: no complete prefill/decode pair and no combined pod (503).
	CauseNoPair Cause = "no_pair"
	// CauseEngineMismatch: the pool mixes engines a pair cannot span (503).
	CauseEngineMismatch Cause = "engine_mismatch"
	// CauseBadProfile: the model's config profile cannot be resolved (503).
	CauseBadProfile Cause = "bad_profile"
	// CauseUnknownStrategy: a routing strategy pdgate does not implement (400).
	CauseUnknownStrategy Cause = "unknown_strategy"
	// CauseUnknownProfile: the request names a scheduling profile the config does not have
	// (header-profile-handler; 400).
	CauseUnknownProfile Cause = "unknown_profile"
	// CauseBodyTooLarge: the request body exceeds the EPP's limit (413).
	CauseBodyTooLarge Cause = "body_too_large"
	// CauseModelNotFound: every endpoint of the pool declares the models it serves and none
	// serves the request's model (404).
	CauseModelNotFound Cause = "model_not_found"
)

// Causes of stage decisions (disaggregate or not) and of combined-pod picks.
const (
	CauseAlways           Cause = "always"             // the decider approves every request
	CauseNoDecider        Cause = "no_decider"         // no decider configured for the stage
	CauseSkipMarker       Cause = "skip_marker"        // a plugin marked the stage skipped
	CauseCombinedPod      Cause = "combined_pod"       // the decode pick prefills locally
	CauseShortPrompt      Cause = "short_prompt"       // fewer prompt tokens than the threshold
	CauseCached           Cause = "cached"             // the decode pod holds enough of the prompt
	CausePrefillBackedUp  Cause = "prefill_backed_up"  // every prefill queue misses the TTFT target: the decode pod prefills
	CauseUncached         Cause = "uncached"           // too much of the prompt is not cached
	CauseNoPrefixInfo     Cause = "no_prefix_info"     // prefix information missing: fail open
	CauseNoMultimodal     Cause = "no_multimodal"      // no multimodal content to encode
	CauseMultimodal       Cause = "multimodal"         // multimodal content to encode
	CausePaired           Cause = "paired"             // AIBrix pair selection picked a prefill pod
	CauseOverflow         Cause = "overflow"           // the P/D tier is hot: combined pod
	CauseStrategy         Cause = "strategy"           // the routing strategy is not P/D
	CauseNoProfile        Cause = "no_profile"         // the stage's profile found no endpoint
	CauseNoRequest        Cause = "no_request"         // nothing to decide on
	CauseDecisionNotFound Cause = "decision_not_found" // no pair decision in this cycle
)
