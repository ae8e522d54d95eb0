package extproctest

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// The replies a fake EPP sends most, built as GIE's FULL_DUPLEX_STREAMED server builds them, so
// that each fake spells out only what its suite varies.

// StreamedRequestBody is a reply carrying one streamed frame of the (possibly rewritten)
// request body.
func StreamedRequestBody(chunk []byte, eos bool) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: streamed(chunk, eos)}}
}

// StreamedResponseBody is a reply carrying one streamed frame of the response body.
func StreamedResponseBody(chunk []byte, eos bool) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: streamed(chunk, eos)}}
}

func streamed(chunk []byte, eos bool) *extprocv3.BodyResponse {
	return &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
		Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{Body: chunk, EndOfStream: eos}}}}}
}

// SetHeaders is a header mutation that sets each key, value pair of kv, in order (raw values,
// as GIE sets them).
func SetHeaders(kv ...string) *extprocv3.HeaderMutation {
	m := &extprocv3.HeaderMutation{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.SetHeaders = append(m.SetHeaders, SetHeader(kv[i], kv[i+1]))
	}
	return m
}

// SetHeader is one header a mutation sets (a raw value).
func SetHeader(key, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: key, RawValue: []byte(value)}}
}
