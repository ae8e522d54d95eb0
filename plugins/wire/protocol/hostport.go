package protocol

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// HostPort is one parsed endpoint address.
type HostPort struct {
	Host string // without brackets
	Port int
}

// String formats the address as host:port with IPv6 literals bracketed.
func (h HostPort) String() string { return net.JoinHostPort(h.Host, strconv.Itoa(h.Port)) }

// FormatHostPort joins a host and a port, bracketing IPv6 literals.
func FormatHostPort(host, port string) string {
	return net.JoinHostPort(strings.Trim(host, "[]"), port)
}

// ErrEmpty is returned when a header carries no address.
var ErrEmpty = errors.New("empty address")

// ParseHostPort parses one host:port. The host must be an IP literal (IPv6 bracketed) or a
// DNS name; the port must be 1..65535. Whitespace around the value is ignored.
func ParseHostPort(s string) (HostPort, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return HostPort{}, ErrEmpty
	}
	if strings.ContainsAny(s, "/@?#\\ \t\r\n") {
		return HostPort{}, fmt.Errorf("address %q: contains a forbidden character", s)
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return HostPort{}, fmt.Errorf("address %q: %w", s, err)
	}
	if host == "" {
		return HostPort{}, fmt.Errorf("address %q: empty host", s)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 || port[0] == '+' || port[0] == '0' {
		return HostPort{}, fmt.Errorf("address %q: port must be a number in 1..65535", s)
	}
	if ip := net.ParseIP(host); ip == nil {
		if strings.Contains(host, ":") || !validDNSName(host) {
			return HostPort{}, fmt.Errorf("address %q: host is neither an IP literal nor a DNS name", s)
		}
	} else if strings.Contains(host, ":") && !strings.HasPrefix(s, "[") {
		return HostPort{}, fmt.Errorf("address %q: IPv6 host must be bracketed", s)
	}
	return HostPort{Host: host, Port: p}, nil
}

// ParseHostPortList parses a comma-separated list of host:port values (x-encoder-hosts-ports).
// Empty items are skipped; any malformed item fails the whole list.
func ParseHostPortList(s string) ([]HostPort, error) {
	var out []HostPort
	for _, item := range strings.Split(s, ",") {
		if strings.TrimSpace(item) == "" {
			continue
		}
		hp, err := ParseHostPort(item)
		if err != nil {
			return nil, err
		}
		out = append(out, hp)
	}
	return out, nil
}

// FormatHostPortList joins addresses with commas, the x-encoder-hosts-ports format.
func FormatHostPortList(list []HostPort) string {
	parts := make([]string, len(list))
	for i, hp := range list {
		parts[i] = hp.String()
	}
	return strings.Join(parts, ",")
}

func validDNSName(h string) bool {
	if len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
