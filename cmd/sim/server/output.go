package server

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"math/rand/v2"
)

// vocabulary of the simulated model; token id = 1000 + index.
var vocab = []string{
	" the", " a", " model", " server", " token", " cache", " prefill", " decode", " request",
	" batch", " of", " and", " to", " in", " is", " that", " with", " for", " on", " as",
	" route", " pod", " gateway", " block", " latency", " queue", " stream", " data", " time",
	" fast", " slow", " load", " score", " pick", " run", " wait", " KV", " GPU", " step", ".",
}

// output is the deterministic completion of one request: its length and token ids depend
// only on the seed and the prompt.
type output struct {
	ids          []uint32
	finishLength bool // the request's max tokens cut it (finish_reason "length")
}

func newOutput(seed uint64, promptHash string, maxTokens, meanTokens, room int) output {
	ph, _ := hex.DecodeString(promptHash)
	var k uint64
	if len(ph) >= 8 {
		k = binary.LittleEndian.Uint64(ph[:8])
	}
	rng := rand.New(rand.NewPCG(seed, k))
	n, byLimit := maxTokens, true
	if maxTokens < 0 {
		// geometric draw with the profile's mean
		p := 1 / float64(meanTokens)
		u := rng.Float64()
		n = 1 + int(math.Floor(math.Log(1-u)/math.Log(1-p)))
		byLimit = false
	}
	if n > room {
		n, byLimit = room, true
	}
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = 1000 + uint32(rng.IntN(len(vocab)))
	}
	return output{ids: ids, finishLength: byLimit}
}

var quotedVocab = func() [][]byte {
	out := make([][]byte, len(vocab))
	for i, w := range vocab {
		out[i], _ = json.Marshal(w)
	}
	return out
}()

func quotedToken(id uint32) []byte {
	i := int(id) - 1000
	if i < 0 || i >= len(vocab) {
		return []byte(`""`)
	}
	return quotedVocab[i]
}

func tokenText(id uint32) string {
	i := int(id) - 1000
	if i < 0 || i >= len(vocab) {
		return ""
	}
	return vocab[i]
}

func (o output) text(from, to int) string {
	var b []byte
	for _, id := range o.ids[from:to] {
		b = append(b, tokenText(id)...)
	}
	return string(b)
}

func (o output) finishReason() string {
	if o.finishLength {
		return "length"
	}
	return "stop"
}
