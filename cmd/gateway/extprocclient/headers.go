package extprocclient

import (
	"net/http"
	"sort"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/pdgate/pdgate/cmd/internal/commalist"
)

// Names of the EPP protocol (GIE's pkg/epp/metadata): the destination the EPP picked and the
// endpoint the proxy actually served from.
const (
	DestinationHeader = "x-gateway-destination-endpoint"
	LBNamespace       = "envoy.lb"
	ServedKey         = "x-gateway-destination-endpoint-served"
)

// pseudoOrder is the order Envoy presents pseudo-headers in, before every ordinary header.
var pseudoOrder = map[string]int{":authority": 0, ":path": 1, ":method": 2, ":scheme": 3, ":status": 4}

// HeaderMap renders headers as Envoy presents them: lower-case names, pseudo-headers first,
// the rest sorted (a stable order keeps tests and traces reproducible), values in RawValue.
func HeaderMap(headers map[string]string) *corev3.HeaderMap {
	keys := make([]string, 0, len(headers))
	for k := range headers {
		keys = append(keys, k)
	}
	sortHeaderNames(keys)
	m := &corev3.HeaderMap{Headers: make([]*corev3.HeaderValue, 0, len(keys))}
	for _, k := range keys {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: strings.ToLower(k), RawValue: []byte(headers[k])})
	}
	return m
}

// HTTPHeaderMap renders pseudo-headers and an http.Header the same way, one entry per value.
func HTTPHeaderMap(pseudo map[string]string, h http.Header) *corev3.HeaderMap {
	keys := make([]string, 0, len(pseudo)+len(h))
	for k := range pseudo {
		keys = append(keys, k)
	}
	for k := range h {
		keys = append(keys, k)
	}
	sortHeaderNames(keys)
	m := &corev3.HeaderMap{}
	for _, k := range keys {
		if v, ok := pseudo[k]; ok {
			m.Headers = append(m.Headers, &corev3.HeaderValue{Key: k, RawValue: []byte(v)})
			continue
		}
		for _, v := range h[k] {
			m.Headers = append(m.Headers, &corev3.HeaderValue{Key: strings.ToLower(k), RawValue: []byte(v)})
		}
	}
	return m
}

func sortHeaderNames(keys []string) {
	rank := func(k string) int { // pseudo-headers first, in Envoy's order
		if r, ok := pseudoOrder[k]; ok {
			return r
		}
		if strings.HasPrefix(k, ":") {
			return len(pseudoOrder)
		}
		return len(pseudoOrder) + 1
	}
	sort.SliceStable(keys, func(i, j int) bool {
		a, b := strings.ToLower(keys[i]), strings.ToLower(keys[j])
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra < rb
		}
		return a < b
	})
}

// HeaderValue reads a HeaderValue the way Envoy does: RawValue wins when present.
func HeaderValue(hv *corev3.HeaderValue) string {
	if len(hv.GetRawValue()) > 0 {
		return string(hv.GetRawValue())
	}
	return hv.GetValue()
}

// ImmediateStatus is an ImmediateResponse's HTTP status; an unset or invalid one is 200, the
// status Envoy sends then.
func ImmediateStatus(ir *extprocv3.ImmediateResponse) int {
	code := int(ir.GetStatus().GetCode())
	if code < 100 || code > 999 {
		return http.StatusOK
	}
	return code
}

// SplitEndpoints splits a comma-separated endpoint list (primary, then fallbacks).
func SplitEndpoints(raw string) []string { return commalist.Split(raw) }

// mergeMetadata folds src into dst namespace by namespace: keys of a namespace both carry are
// merged (src wins), anything else is replaced. src is copied, so dst owns what it holds.
func mergeMetadata(dst, src *structpb.Struct) *structpb.Struct {
	if len(src.GetFields()) == 0 {
		return dst
	}
	if dst == nil {
		dst = &structpb.Struct{Fields: map[string]*structpb.Value{}}
	}
	for k, v := range src.GetFields() {
		if sub := v.GetStructValue(); sub != nil {
			if old := dst.Fields[k].GetStructValue(); old != nil {
				if old.Fields == nil {
					old.Fields = map[string]*structpb.Value{}
				}
				for kk, vv := range sub.GetFields() {
					old.Fields[kk] = proto.Clone(vv).(*structpb.Value)
				}
				continue
			}
		}
		dst.Fields[k] = proto.Clone(v).(*structpb.Value)
	}
	return dst
}
