// Package kvevents is the library behind pdgate's precise prefix-cache plugins: it subscribes
// to the KV-cache events the engines publish over ZeroMQ (one SUB socket per endpoint, or one
// bound socket the engines connect to), keeps a bounded index of which endpoint holds which
// blocks, and answers "how much of this prompt does each endpoint hold".
//
// It is a library, not a plugin: precise-prefix-cache-producer and precise-prefix-cache-scorer
// are thin plugins over it. The event format itself (DecodeBatch, EncodeBatch, Event) is wire,
// in plugins/wire/kvevents, which the simulator shares; this package imports it as kvwire.
package kvevents
