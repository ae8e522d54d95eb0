package proxy

import (
	"time"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// timeouts are one request's leg timeouts: the flags, overridden by the sidecar knobs of the
// request's model.aibrix.ai/config profile that the EPP sends in protocol.HeaderSidecarKnobs
// (routingConfig.pd.prefillRequestTimeout and friends). The header comes only from the EPP,
// which overwrites or removes it on every request; it is still validated and bounded here
// (protocol.ParseSidecarKnobs), and an invalid item keeps the flag.
type timeouts struct {
	prefill       time.Duration
	abort         time.Duration
	abortRetry    time.Duration
	firstResponse time.Duration
	response      time.Duration
	streamIdle    time.Duration
}

func timeoutsFor(cfg *Config, rq *request, header string) timeouts {
	t := timeouts{
		prefill: cfg.PrefillTimeout, abort: cfg.AbortTimeout, abortRetry: cfg.AbortRetryDelay,
		firstResponse: cfg.FirstResponseTimeout, response: cfg.ResponseTimeout, streamIdle: cfg.StreamIdleTimeout,
	}
	if header == "" {
		return t
	}
	k, err := protocol.ParseSidecarKnobs(header)
	if err != nil {
		cfg.Metrics.KnobRejections.Inc()
		rq.log.Info("ignoring invalid per-profile sidecar knobs; the flags apply", "err", err.Error())
	}
	for name, dst := range map[string]*time.Duration{
		protocol.KnobPrefillRequestTimeout:      &t.prefill,
		protocol.KnobDecodeAbortTimeout:         &t.abort,
		protocol.KnobDecodeAbortRetryDelay:      &t.abortRetry,
		protocol.KnobDecodeFirstResponseTimeout: &t.firstResponse,
		protocol.KnobDecodeResponseTimeout:      &t.response,
		protocol.KnobDecodeStreamIdleTimeout:    &t.streamIdle,
	} {
		if d, ok := k.Duration(name); ok {
			*dst = d
		}
	}
	return t
}
