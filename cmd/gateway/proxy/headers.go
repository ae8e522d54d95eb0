package proxy

import (
	"net/http"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/pdgate/pdgate/cmd/gateway/extprocclient"
)

// headerSet is a request or response head as Envoy presents it to an ext_proc server:
// lower-case keys, pseudo-headers (":path", ":status", ...) next to ordinary ones, values kept
// in arrival order.
type headerSet struct {
	pseudo map[string]string
	h      http.Header
}

func newHeaderSet(pseudo map[string]string, h http.Header) *headerSet {
	hs := &headerSet{pseudo: map[string]string{}, h: http.Header{}}
	for k, v := range pseudo {
		hs.pseudo[k] = v
	}
	for k, vs := range h {
		hs.h[http.CanonicalHeaderKey(k)] = append([]string(nil), vs...)
	}
	return hs
}

// get returns the first value of key (pseudo or ordinary), case-insensitively.
func (hs *headerSet) get(key string) string {
	key = strings.ToLower(key)
	if strings.HasPrefix(key, ":") {
		return hs.pseudo[key]
	}
	return hs.h.Get(key)
}

// toHeaderMap renders the set the way Envoy does: pseudo-headers first, in a stable order,
// then every ordinary header (one entry per value), keys lower-case, values in RawValue.
func (hs *headerSet) toHeaderMap() *corev3.HeaderMap {
	return extprocclient.HTTPHeaderMap(hs.pseudo, hs.h)
}

// settablePseudo are the pseudo-headers an ext_proc server may change. Envoy ignores
// mutations of :method, :authority, :scheme and host (and x-envoy-*) unless mutation rules
// allow them; :path is honoured. We follow the default rules.
var settablePseudo = map[string]bool{":path": true}

// apply applies a HeaderMutation: removals first, then sets, as Envoy's ext_proc filter does.
// Without an explicit append flag a set overwrites (Envoy's ext_proc treats an unset
// `append` as false); append_action values other than the default are honoured.
func (hs *headerSet) apply(m *extprocv3.HeaderMutation) {
	if m == nil {
		return
	}
	for _, k := range m.GetRemoveHeaders() {
		k = strings.ToLower(k)
		if strings.HasPrefix(k, ":") || k == "host" {
			continue
		}
		hs.h.Del(k)
	}
	for _, opt := range m.GetSetHeaders() {
		hv := opt.GetHeader()
		if hv == nil || hv.GetKey() == "" {
			continue
		}
		key := strings.ToLower(hv.GetKey())
		val := extprocclient.HeaderValue(hv)
		if strings.HasPrefix(key, ":") {
			if settablePseudo[key] {
				hs.pseudo[key] = val
			}
			continue
		}
		if key == "host" || strings.HasPrefix(key, "x-envoy-") {
			continue
		}
		if val == "" && !opt.GetKeepEmptyValue() {
			// Envoy drops a set with an empty value unless keep_empty_value is true; the
			// header keeps its old value. Clearing a header needs RemoveHeaders.
			continue
		}
		_, exists := hs.h[http.CanonicalHeaderKey(key)]
		switch {
		//lint:ignore SA1019 Envoy still honours the deprecated append field, so its stand-in must too.
		case opt.GetAppend() != nil && opt.GetAppend().GetValue():
			hs.h.Add(key, val)
		//lint:ignore SA1019 see above.
		case opt.GetAppend() != nil:
			hs.h.Set(key, val)
		case opt.GetAppendAction() == corev3.HeaderValueOption_ADD_IF_ABSENT:
			if !exists {
				hs.h.Set(key, val)
			}
		case opt.GetAppendAction() == corev3.HeaderValueOption_OVERWRITE_IF_EXISTS:
			if exists {
				hs.h.Set(key, val)
			}
		default:
			hs.h.Set(key, val)
		}
	}
}

// hopByHop are the connection-level headers a proxy never forwards (RFC 9110 §7.6.1).
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func stripHopByHop(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, k := range strings.Split(f, ",") {
			if k = strings.TrimSpace(k); k != "" {
				h.Del(k)
			}
		}
	}
	for _, k := range hopByHop {
		h.Del(k)
	}
}
