// Package allowlist decides which host:port targets the sidecar may call for prefill and
// encode legs. Matching is exact on host and port: unlike an IP-only list, a pool pod's other
// ports (metrics, admin, bootstrap) are not reachable through the routing headers.
package allowlist

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Checker answers whether a target may be called.
type Checker interface {
	Allowed(hp protocol.HostPort) bool
}

// Canonical returns the comparison key of a target: IP literals in their canonical form
// (so ::ffff:10.0.0.1, 10.0.0.1 and zero-padded IPv6 spellings compare equal), DNS names
// lowercased without a trailing dot.
func Canonical(hp protocol.HostPort) string {
	host := hp.Host
	if ip := net.ParseIP(host); ip != nil {
		host = ip.String()
	} else {
		host = strings.TrimSuffix(strings.ToLower(host), ".")
	}
	return protocol.FormatHostPort(host, fmt.Sprint(hp.Port))
}

// Static is a fixed list of targets.
type Static struct {
	mu  sync.RWMutex
	set map[string]struct{}
}

// NewStatic builds a static list.
func NewStatic(list []protocol.HostPort) *Static {
	s := &Static{set: make(map[string]struct{}, len(list))}
	for _, hp := range list {
		s.set[Canonical(hp)] = struct{}{}
	}
	return s
}

// Allowed implements Checker.
func (s *Static) Allowed(hp protocol.HostPort) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.set[Canonical(hp)]
	return ok
}

// Len returns the number of entries.
func (s *Static) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.set)
}

// ParseList parses the --allowlist flag value (comma-separated host:port).
func ParseList(s string) ([]protocol.HostPort, error) {
	list, err := protocol.ParseHostPortList(s)
	if err != nil {
		return nil, fmt.Errorf("allow-list: %w", err)
	}
	return list, nil
}

// LoadFile reads one host:port per line (commas also accepted); '#' starts a comment.
func LoadFile(path string) ([]protocol.HostPort, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("allow-list file: %w", err)
	}
	defer func() { _ = f.Close() }()
	var out []protocol.HostPort
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		list, err := protocol.ParseHostPortList(text)
		if err != nil {
			return nil, fmt.Errorf("allow-list file %s line %d: %w", path, line, err)
		}
		out = append(out, list...)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("allow-list file %s: %w", path, err)
	}
	return out, nil
}

// AllowAll is the checker of --allowlist-disable.
type AllowAll struct{}

// Allowed implements Checker.
func (AllowAll) Allowed(protocol.HostPort) bool { return true }
