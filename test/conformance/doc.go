// Package conformance drives the same ext_proc request sequences through GIE v1.5.0's stock
// request path (handlers.StreamingServer over requestcontrol.Director, assembled as GIE's
// runner assembles it) and through pdgate's own request path (extproc.Server, assembled by
// cmd/epp/core.New), over the same datastore contents, and fails when the two differ in
// anything but what cmd/epp/README.md documents as intended: the routing decision, the
// effective upstream request headers and body, immediate responses, the response phase and
// GIE's metrics.
//
// The cases are every case of GIE v1.5.0's hermetic integration suite
// (test/integration/epp/hermetic_test.go and common_tests.go in the GIE module), built with
// GIE's own exported request builders, plus the error cases that suite lacks and pdgate's own
// early answers, where pdgate's documented behaviour is asserted instead of equality.
//
// Everything runs in process over loopback gRPC: no envtest, no built binaries. See README.md.
package conformance
