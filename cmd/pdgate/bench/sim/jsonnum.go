package simbench

import (
	"encoding/json"
	"math"
)

// num writes NaN and infinities (an empty distribution, a pod with no requests) as null,
// which encoding/json cannot produce from a float64.
type num float64

func (n num) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(n)) || math.IsInf(float64(n), 0) {
		return []byte("null"), nil
	}
	return json.Marshal(float64(n))
}

// MarshalJSON writes non-finite values as null.
func (d Dist) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct{ P50, P90, P99, Mean num }{num(d.P50), num(d.P90), num(d.P99), num(d.Mean)})
}

// MarshalJSON writes legs that never ran as null.
func (l LegMeans) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct{ Local, Prefill, Decode num }{num(l.Local), num(l.Prefill), num(l.Decode)})
}

// MarshalJSON writes non-finite spreads as null.
func (s Summary) MarshalJSON() ([]byte, error) {
	type plain Summary
	return json.Marshal(struct {
		plain
		DecodeSpread, DecodeCV, PrefillSpread, PrefillCV num
	}{plain(s), num(s.DecodeSpread), num(s.DecodeCV), num(s.PrefillSpread), num(s.PrefillCV)})
}
