// Package eppclient sends a test's requests to an EPP over real ext_proc streams with pdgate's
// ext_proc client (cmd/gateway/extprocclient), as the dev gateway does, and finds a started
// bin/epp's listeners in its banner (DialStarted).
package eppclient

import (
	"context"
	"fmt"
	"time"

	"github.com/pdgate/pdgate/cmd/gateway/extprocclient"
)

// Open opens a stream on c, bounded by timeout, and sends one JSON POST to path: headers over
// :path, :method and content-type, then the whole body. It returns the EPP's routing and the
// stream, left open: the request is in flight, as while its response streams, until done
// closes the stream, which runs the EPP's end-of-request hooks. Call done in any case.
func Open(c *extprocclient.Client, path string, headers map[string]string, body []byte, timeout time.Duration) (*extprocclient.Routing, *extprocclient.Stream, func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	st, err := c.Open(ctx)
	if err != nil {
		cancel()
		return nil, nil, func() {}, fmt.Errorf("ext_proc stream: %w", err)
	}
	done := func() {
		st.Close()
		cancel()
	}
	h := map[string]string{":path": path, ":method": "POST", "content-type": "application/json"}
	for k, v := range headers {
		h[k] = v
	}
	rt, err := st.Route(ctx, extprocclient.HeaderMap(h), body)
	if err != nil {
		return nil, st, done, fmt.Errorf("ext_proc exchange: %w", err)
	}
	return rt, st, done, nil
}
