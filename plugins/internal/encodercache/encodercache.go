// Package encodercache is the endpoint attribute llm-d's mm-embeddings-cache-producer writes
// and mm-embeddings-cache-scorer reads: how many of a request's multimodal items an endpoint's
// encoder cache (probably) holds.
package encodercache

import fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"

// DefaultProducer is the producer's type (and default instance) name.
const DefaultProducer = "mm-embeddings-cache-producer"

// Key is llm-d's key string for a producer instance.
func Key(producer string) string {
	if producer == "" {
		producer = DefaultProducer
	}
	return "MultiModalEncoderCacheMatchInfoKey/" + producer
}

// MatchInfo is the attribute: matched of total items (each weighs 1).
type MatchInfo struct{ Matched, Total int }

// Clone implements fwkdl.Cloneable.
func (m *MatchInfo) Clone() fwkdl.Cloneable {
	if m == nil {
		return nil
	}
	c := *m
	return &c
}
