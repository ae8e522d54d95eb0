package inprocepp

import (
	"context"
	"fmt"
	"strings"
	"time"

	configPb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// Answer is what the EPP told the gateway about one request.
type Answer struct {
	Immediate int    // HTTP status of an ImmediateResponse, 0 when forwarded
	Body      string // the ImmediateResponse body
	Set       map[string]string
	Removed   map[string]bool
}

// Open runs one request (request headers, then the whole body) through a real ext_proc stream
// and keeps the stream open, as while the response is still streaming, until done is called;
// done ends it, which runs the EPP's end-of-request hooks. Header names in Set and Removed are
// lower case. The stream is bounded by timeout.
func (e *EPP) Open(path string, headers map[string]string, body string, timeout time.Duration) (Answer, func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	stream, err := e.Client.Process(ctx)
	if err != nil {
		cancel()
		return Answer{}, func() {}, err
	}
	done := func() {
		_ = stream.CloseSend()
		cancel()
	}
	hv := []*configPb.HeaderValue{
		{Key: ":path", RawValue: []byte(path)}, {Key: ":method", RawValue: []byte("POST")},
		{Key: "content-type", RawValue: []byte("application/json")},
	}
	for k, v := range headers {
		hv = append(hv, &configPb.HeaderValue{Key: k, RawValue: []byte(v)})
	}
	if err := stream.Send(&extProcPb.ProcessingRequest{Request: &extProcPb.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extProcPb.HttpHeaders{Headers: &configPb.HeaderMap{Headers: hv}}}}); err != nil {
		return Answer{}, done, err
	}
	if err := stream.Send(&extProcPb.ProcessingRequest{Request: &extProcPb.ProcessingRequest_RequestBody{
		RequestBody: &extProcPb.HttpBody{Body: []byte(body), EndOfStream: true}}}); err != nil {
		return Answer{}, done, err
	}
	a := Answer{Set: map[string]string{}, Removed: map[string]bool{}}
	for i := 0; i < 8; i++ {
		resp, err := stream.Recv()
		if err != nil {
			return a, done, fmt.Errorf("recv: %w", err)
		}
		if ir := resp.GetImmediateResponse(); ir != nil {
			a.Immediate = int(ir.GetStatus().GetCode())
			a.Body = string(ir.GetBody())
			break
		}
		if hr := resp.GetRequestHeaders(); hr != nil {
			mut := hr.GetResponse().GetHeaderMutation()
			for _, h := range mut.GetSetHeaders() {
				v := string(h.GetHeader().GetRawValue())
				if v == "" {
					v = h.GetHeader().GetValue()
				}
				a.Set[strings.ToLower(h.GetHeader().GetKey())] = v
			}
			for _, k := range mut.GetRemoveHeaders() {
				a.Removed[strings.ToLower(k)] = true
			}
			break
		}
	}
	return a, done, nil
}
