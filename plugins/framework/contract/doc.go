// Package contract is the request-path contract between pdgate's plugins and pdgate's EPP core
// (cmd/epp/extproc). It holds what more than one plugin, or a plugin and the EPP, must agree on:
//
//   - Answer: an early answer (status, body, headers, cause) that a plugin returns as an error
//     or records on the request's context, found by the EPP with errors.As. It is the only way
//     a plugin answers a request itself; nothing travels as text to parse or as a header.
//   - Cause: the typed reason behind a decision or an answer, used by metrics and traces.
//   - Decider: pdgate's stage decider (prefill, encode), which receives the CycleState.
//   - ConditionalDecodeGate: the one RFC 7240 "Prefer: if-available" gate, run by the EPP once
//     scheduling is over and before any PreRequest plugin.
//   - StageClassifier: what a decider tells the EPP's admission about a request before the
//     scheduler runs (does it need a prefill leg at all).
//   - Clocked, Swept, Settler: how a plugin that keeps time lets the simulation run it on a
//     virtual clock.
//   - The CycleState keys through which the disaggregation profile handler composes with
//     filters, scorers and pair selection.
//
// The package imports GIE's plugin interfaces and plugins/wire/protocol, never another plugin.
package contract
