package protocol

import (
	"fmt"
	"regexp"
	"strconv"
)

// A scheduling failure can only leave GIE's director as text (it wraps every scheduler error
// into a 429 ImmediateResponse). Plugins that need another status (503 when no bucket and no
// combined pod fits, for example) embed a marker in their error; the EPP's ext_proc server
// finds it in the ImmediateResponse body, rewrites the status and strips the marker.

var statusMarker = regexp.MustCompile(`\[pdgate-status=([1-5][0-9][0-9])\] ?`)

// ConditionalDecodeMessage is llm-d's message for a conditional-decode (Prefer: if-available)
// miss, and ConditionalDecodeBody the 412 body llm-d's EPP answers with, whichever pdgate path
// (profile handler or the decider's PreRequest) rejects the request.
const (
	ConditionalDecodeMessage = "no decode worker has the requested KV cache"
	ConditionalDecodeBody    = "inference error: PreconditionFailed - " + ConditionalDecodeMessage
)

// StatusError returns an error whose text carries an HTTP status marker for the EPP server.
func StatusError(code int, msg string) error {
	return fmt.Errorf("[pdgate-status=%d] %s", code, msg)
}

// ParseStatusError finds a status marker in text and returns the status and the text with
// the marker removed.
func ParseStatusError(text string) (code int, cleaned string, ok bool) {
	m := statusMarker.FindStringSubmatchIndex(text)
	if m == nil {
		return 0, text, false
	}
	code, _ = strconv.Atoi(text[m[2]:m[3]])
	return code, text[:m[0]] + text[m[1]:], true
}

// StatusErrorBody is the body a client gets for a scheduling failure whose text carries a
// status marker: GIE's text without the marker, except a 412, which is answered with llm-d's
// own error code and the plugin's message (what conditional-decode clients match on) instead
// of GIE's "ResourceExhausted - failed to find target endpoint" wrapping.
func StatusErrorBody(text string) (code int, body string, ok bool) {
	m := statusMarker.FindStringSubmatchIndex(text)
	if m == nil {
		return 0, text, false
	}
	code, cleaned, _ := ParseStatusError(text)
	if code == 412 {
		return code, "inference error: PreconditionFailed - " + text[m[1]:], true
	}
	return code, cleaned, true
}

// AnnotationLabelPrefix: GIE's EndpointMetadata carries pod labels only. The EPP mirrors every
// pod annotation into the endpoint's labels under this prefix (both in Kubernetes and in
// standalone mode) so plugins can read model.aibrix.ai/config and friends.
const AnnotationLabelPrefix = "annotation.pdgate.io/"
