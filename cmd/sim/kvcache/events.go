package kvcache

import "github.com/pdgate/pdgate/plugins/wire/kvevents"

// Events turns the cache changes of one insert of a prompt (InsertObserved's ops, the
// prompt's block hashes and tokens) into vLLM's KV events: a BlockStored per run of
// consecutive new blocks (chained to the block before it), a BlockRemoved per evicted block,
// in the order they happened, all on the GPU tier.
func Events(ops []Op, hashes []uint64, tokens []uint32, blockSize int) []kvevents.Event {
	return TierEvents("GPU", ops, hashes, tokens, blockSize)
}

// TierEvents is Events for the tier medium names: "CPU" for an offload tier's stores and
// evictions, which newer vLLM publishes self-describing (tokens and parent included).
func TierEvents(medium string, ops []Op, hashes []uint64, tokens []uint32, blockSize int) []kvevents.Event {
	var out []kvevents.Event
	for i := 0; i < len(ops); {
		op := ops[i]
		if !op.Added {
			out = append(out, kvevents.Event{Kind: kvevents.KindRemoved, Hashes: []uint64{op.Evicted}, Medium: medium})
			i++
			continue
		}
		j := i
		for j+1 < len(ops) && ops[j+1].Added && ops[j+1].Index == ops[j].Index+1 {
			j++
		}
		first, last := ops[i].Index, ops[j].Index
		ev := kvevents.Event{Kind: kvevents.KindStored, Hashes: append([]uint64(nil), hashes[first:last+1]...),
			Tokens: append([]uint32(nil), tokens[first*blockSize:(last+1)*blockSize]...), BlockSize: blockSize, Medium: medium}
		if first > 0 {
			ev.Parent, ev.HasParent = hashes[first-1], true
		}
		out = append(out, ev)
		i = j + 1
	}
	return out
}
