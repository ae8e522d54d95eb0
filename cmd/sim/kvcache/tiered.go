package kvcache

// Tiered is an engine's prefix cache with a CPU offload tier below the GPU one, as vLLM's
// offloading connector (--kv-offloading-size) and LMCache keep: every block the engine
// computes is also written to CPU memory, which is larger, so a prefix the GPU has evicted can
// still be loaded back over PCIe instead of computed again. CPU nil is a GPU-only engine.
type Tiered struct {
	GPU, CPU *PrefixCache
}

// Match returns how many leading blocks of hashes the GPU holds and how many the two tiers
// hold together (a block counts when either tier has it: the GPU's first, then the CPU's),
// and marks them used in the tier that has them.
func (t Tiered) Match(hashes []uint64) (onGPU, total int) {
	onGPU = t.GPU.Match(hashes)
	if t.CPU == nil {
		return onGPU, onGPU
	}
	total = t.leadingEither(hashes, onGPU)
	t.CPU.mu.Lock()
	t.CPU.touchHeadLast(hashes[:total])
	t.CPU.mu.Unlock()
	return onGPU, total
}

// Peek is Match's total without marking anything used.
func (t Tiered) Peek(hashes []uint64) int {
	onGPU := t.GPU.Peek(hashes)
	if t.CPU == nil {
		return onGPU
	}
	return t.leadingEither(hashes, onGPU)
}

// leadingEither extends a GPU prefix of onGPU blocks with the blocks either tier holds.
func (t Tiered) leadingEither(hashes []uint64, onGPU int) int {
	t.GPU.mu.Lock()
	defer t.GPU.mu.Unlock()
	t.CPU.mu.Lock()
	defer t.CPU.mu.Unlock()
	n := onGPU
	for _, h := range hashes[onGPU:] {
		_, g := t.GPU.blocks[h]
		_, c := t.CPU.blocks[h]
		if !g && !c {
			break
		}
		n++
	}
	return n
}
