package proxy

import (
	"net/http"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestHeaderSetApply(t *testing.T) {
	opt := func(k, v string) *corev3.HeaderValueOption {
		return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)}}
	}
	tests := []struct {
		name string
		m    *extprocv3.HeaderMutation
		key  string
		want []string
	}{
		{name: "set overwrites by default", m: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{opt("x-a", "new")}}, key: "x-a", want: []string{"new"}},
		{name: "set adds", m: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{opt("x-new", "v")}}, key: "x-new", want: []string{"v"}},
		{name: "Value used when RawValue empty", m: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-a", Value: "plain"}}}}, key: "x-a", want: []string{"plain"}},
		{name: "append true appends", m: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-a", RawValue: []byte("2")}, Append: wrapperspb.Bool(true)}}}, key: "x-a", want: []string{"old", "2"}},
		{name: "add if absent keeps", m: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-a", RawValue: []byte("2")}, AppendAction: corev3.HeaderValueOption_ADD_IF_ABSENT}}}, key: "x-a", want: []string{"old"}},
		{name: "overwrite if exists skips absent", m: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-b", RawValue: []byte("2")}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS}}}, key: "x-b", want: nil},
		{name: "remove", m: &extprocv3.HeaderMutation{RemoveHeaders: []string{"X-A"}}, key: "x-a", want: nil},
		{name: "empty value is dropped, header kept", m: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{opt("x-a", "")}}, key: "x-a", want: []string{"old"}},
		{name: "empty value kept on request", m: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-a"}, KeepEmptyValue: true}}}, key: "x-a", want: []string{""}},
		{name: ":path settable", m: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{opt(":path", "/v2")}}, key: ":path", want: []string{"/v2"}},
		{name: ":authority ignored", m: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{opt(":authority", "evil")}}, key: ":authority", want: []string{"gw"}},
		{name: "x-envoy ignored", m: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{opt("x-envoy-foo", "1")}}, key: "x-envoy-foo", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hs := newHeaderSet(map[string]string{":path": "/v1", ":authority": "gw"}, http.Header{"X-A": {"old"}})
			hs.apply(tt.m)
			var got []string
			if tt.key[0] == ':' {
				got = []string{hs.pseudo[tt.key]}
			} else {
				got = hs.h.Values(tt.key)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("%s = %q, want %q", tt.key, got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("%s = %q, want %q", tt.key, got, tt.want)
				}
			}
		})
	}
}

func TestToHeaderMapOrderAndRaw(t *testing.T) {
	hs := newHeaderSet(map[string]string{":path": "/p", ":method": "POST", ":authority": "a", ":scheme": "http"},
		http.Header{"B": {"2"}, "A": {"1", "1b"}})
	m := hs.toHeaderMap().GetHeaders()
	want := [][2]string{{":authority", "a"}, {":path", "/p"}, {":method", "POST"}, {":scheme", "http"}, {"a", "1"}, {"a", "1b"}, {"b", "2"}}
	if len(m) != len(want) {
		t.Fatalf("got %d headers", len(m))
	}
	for i, w := range want {
		if m[i].GetKey() != w[0] || string(m[i].GetRawValue()) != w[1] || m[i].GetValue() != "" {
			t.Errorf("header %d = %s=%q (Value %q), want %s=%q in RawValue", i, m[i].GetKey(), m[i].GetRawValue(), m[i].GetValue(), w[0], w[1])
		}
	}
}
