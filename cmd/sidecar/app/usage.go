package app

import (
	"flag"
	"fmt"

	"github.com/pdgate/pdgate/cmd/sidecar/proxy"
)

// Usage prints --help: the value sets first, then every flag with its default.
func Usage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprintf(w, `pdgate routing sidecar: runs in front of the decode engine and performs the encode and
prefill legs named by x-prefiller-host-port / x-encoder-hosts-ports.

Engines (--engine):                      %s
KV connectors (--kv-connector, vLLM):    %s
TRT-LLM schedule styles:                 %s
Prefill failure policies:                %s
TLS stages (--enable-tls):               prefiller, decoder, encoder

Timeouts and their defaults:
  --prefill-timeout                30s   (AIBRIX_PREFILL_REQUEST_TIMEOUT)
  --decode-first-response-timeout  60s   (AIBRIX_DECODE_FIRST_RESPONSE_TIMEOUT)
  --decode-response-timeout        0 = off (AIBRIX_DECODE_RESPONSE_TIMEOUT)
  --decode-stream-idle-timeout     120s  (AIBRIX_DECODE_STREAM_IDLE_TIMEOUT)
  --decode-abort-timeout           3s    (AIBRIX_DECODE_ABORT_TIMEOUT)
  --decode-abort-retry-delay       2s    (AIBRIX_DECODE_ABORT_RETRY_DELAY)
  --encode-timeout                 30s
  --prefill-release-timeout        500ms (0 = no callback to the EPP)
  --prefill-retry-backoff          200ms
  --read-header-timeout            30s
  --idle-timeout                   300s
  --shutdown-timeout               60s
The AIBRIX_* variables, when set (integer seconds), replace the defaults.

Flags:
`, proxy.Join(proxy.Engines), proxy.Join(proxy.Connectors), proxy.Join(proxy.ScheduleStyles), proxy.Join(proxy.FailurePolicies))
	fs.PrintDefaults()
}
