package otel

import (
	"testing"

	"github.com/pdgate/pdgate/cmd/pdgate/lab/otlpreceiver"
)

// span is one span as the OTLP receiver got it.
type span = otlpreceiver.Span

// receiver is the shared OTLP/gRPC trace endpoint, keeping every span it is sent.
type receiver struct{ *otlpreceiver.Receiver }

func startReceiver(t *testing.T) receiver {
	t.Helper()
	r, err := otlpreceiver.Start(otlpreceiver.Options{Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return receiver{r}
}

// trace returns the spans of the trace whose gateway span carries request id id.
func (r receiver) trace(id string) []span { return r.Trace(spanGateway, "pdgate.request_id", id) }
