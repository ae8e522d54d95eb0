package inprocepp

import (
	"strings"
	"time"

	"github.com/pdgate/pdgate/cmd/gateway/extprocclient"
	"github.com/pdgate/pdgate/test/testsupport/eppclient"
)

// Answer is what the EPP told the gateway about one request.
type Answer struct {
	Immediate        int               // HTTP status of an ImmediateResponse, 0 when forwarded
	Body             string            // the ImmediateResponse body
	ImmediateHeaders map[string]string // the ImmediateResponse headers
	Set              map[string]string
	Removed          map[string]bool
	Destinations     []string // the endpoints picked, primary first (Routing.Destinations)
}

// Open runs one request (request headers, then the whole body) through a real ext_proc stream
// with pdgate's ext_proc client, as the dev gateway sends it, and keeps the stream open, as
// while the response is still streaming, until done is called; done ends it, which runs the
// EPP's end-of-request hooks. Header names in Set and Removed are lower case. The stream is
// bounded by timeout.
func (e *EPP) Open(path string, headers map[string]string, body string, timeout time.Duration) (Answer, func(), error) {
	r, _, done, err := eppclient.Open(extprocclient.New(extprocclient.Options{}, e.Client), path, headers, []byte(body), timeout)
	if err != nil {
		return Answer{}, done, err
	}
	a := Answer{Immediate: r.Status(), Body: string(r.Immediate.GetBody()), ImmediateHeaders: map[string]string{},
		Set: r.SetHeaders(), Removed: map[string]bool{}, Destinations: r.Destinations()}
	for _, o := range r.Immediate.GetHeaders().GetSetHeaders() {
		a.ImmediateHeaders[strings.ToLower(o.GetHeader().GetKey())] = extprocclient.HeaderValue(o.GetHeader())
	}
	for _, k := range r.RemovedHeaders() {
		a.Removed[k] = true
	}
	return a, done, nil
}
