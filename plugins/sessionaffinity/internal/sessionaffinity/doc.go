// Package sessionaffinity is the engine behind session-affinity-scorer and
// session-affinity-filter (llm-d v0.11's session affinity, plus pdgate's load allowance and
// table bound): parameter parsing and validation, the session_id binding table with TTL
// eviction, the encoded_endpoint_header encoding, the per-request lookup, the PreRequest
// binding, the response header and the pdgate_session_affinity_* metrics. It imports GIE's
// interfaces and pdgate libraries, never a plugin.
package sessionaffinity
