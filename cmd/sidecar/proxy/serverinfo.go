package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/pdgate/pdgate/cmd/sidecar/jsonbody"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

const (
	serverInfoMaxBytes   = 1 << 20
	serverInfoMaxEntries = 1024
)

// serverInfoCache looks /server_info up lazily per context server: successes are kept for the
// TTL, failures are not cached, and concurrent lookups of one server share a single call.
type serverInfoCache struct {
	cfg Config

	mu       sync.Mutex
	entries  map[string]serverInfoEntry
	inflight map[string]*serverInfoCall
}

type serverInfoEntry struct {
	info    ctxInfo
	expires time.Time
}

type serverInfoCall struct {
	done chan struct{}
	info ctxInfo
	err  error
}

func newServerInfoCache(cfg Config) *serverInfoCache {
	return &serverInfoCache{cfg: cfg, entries: map[string]serverInfoEntry{}, inflight: map[string]*serverInfoCall{}}
}

func (c *serverInfoCache) get(ctx context.Context, hp protocol.HostPort) (ctxInfo, error) {
	key := hp.String()
	now := time.Now()
	c.mu.Lock()
	if e, ok := c.entries[key]; ok && now.Before(e.expires) {
		c.mu.Unlock()
		return e.info, nil
	}
	call, ok := c.inflight[key]
	if !ok {
		call = &serverInfoCall{done: make(chan struct{})}
		c.inflight[key] = call
		go c.fetch(key, call)
	}
	c.mu.Unlock()
	select {
	case <-call.done:
		return call.info, call.err
	case <-ctx.Done():
		return ctxInfo{}, fmt.Errorf("server_info lookup: %w", ctx.Err())
	}
}

func (c *serverInfoCache) fetch(key string, call *serverInfoCall) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ServerInfoTimeout)
	defer cancel()
	call.info, call.err = c.lookup(ctx, key)
	c.mu.Lock()
	delete(c.inflight, key)
	if call.err == nil {
		if len(c.entries) >= serverInfoMaxEntries {
			now := time.Now()
			for k, e := range c.entries {
				if now.After(e.expires) || len(c.entries) >= serverInfoMaxEntries {
					delete(c.entries, k)
				}
			}
		}
		c.entries[key] = serverInfoEntry{info: call.info, expires: time.Now().Add(c.cfg.ServerInfoTTL)}
	}
	c.mu.Unlock()
	close(call.done)
}

func (c *serverInfoCache) lookup(ctx context.Context, key string) (ctxInfo, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.cfg.PrefillScheme+"://"+key+"/server_info", nil)
	if err != nil {
		return ctxInfo{}, fmt.Errorf("server_info request: %w", err)
	}
	resp, err := c.cfg.PrefillClient.Do(req)
	if err != nil {
		return ctxInfo{}, fmt.Errorf("server_info of %s: %w", key, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return ctxInfo{}, fmt.Errorf("server_info of %s: status %d", key, resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, serverInfoMaxBytes+1))
	if err != nil {
		return ctxInfo{}, fmt.Errorf("server_info of %s: %w", key, err)
	}
	if len(b) > serverInfoMaxBytes {
		return ctxInfo{}, fmt.Errorf("server_info of %s: body exceeds %d bytes", key, serverInfoMaxBytes)
	}
	return parseServerInfo(b)
}

// ctxInfo is what generation_first needs from a context server's /server_info.
type ctxInfo struct {
	endpoint string
	dpRank   int64
	opaque   json.RawMessage
}

// parseServerInfo validates disaggregated_params of a /server_info answer.
func parseServerInfo(b []byte) (ctxInfo, error) {
	obj, err := jsonbody.Parse(b)
	if err != nil {
		return ctxInfo{}, fmt.Errorf("server_info: %w", err)
	}
	dp, ok := obj.Object("disaggregated_params")
	if !ok {
		return ctxInfo{}, fmt.Errorf("server_info: disaggregated_params missing")
	}
	var info ctxInfo
	raw, _ := dp.Raw("ctx_info_endpoint")
	var s string
	var list []string
	switch {
	case json.Unmarshal(raw, &s) == nil && s != "":
		info.endpoint = s
	case json.Unmarshal(raw, &list) == nil && len(list) == 1 && list[0] != "":
		info.endpoint = list[0]
	default:
		return ctxInfo{}, fmt.Errorf("server_info: disaggregated_params.ctx_info_endpoint must be a non-empty string")
	}
	raw, ok = dp.Raw("ctx_dp_rank")
	var n json.Number
	if !ok || json.Unmarshal(raw, &n) != nil {
		return ctxInfo{}, fmt.Errorf("server_info: disaggregated_params.ctx_dp_rank missing")
	}
	rank, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil || rank < 0 {
		return ctxInfo{}, fmt.Errorf("server_info: disaggregated_params.ctx_dp_rank must be an integer >= 0")
	}
	info.dpRank = rank
	if raw, ok := dp.Raw("encoded_opaque_state"); ok && string(raw) != "null" {
		info.opaque = raw
	}
	return info, nil
}
