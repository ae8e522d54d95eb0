package prefillpolicy

// podIDs numbers the pods a two-generation table records entries for (PrefixTable, and the
// hash-chain table its tests keep as the reference), so that an entry carries a small id and
// not a name, and tracks which generation each pod last wrote to, so that an id is freed only
// once no kept generation can hold an entry under it.
type podIDs struct {
	epoch   uint64            // the recent generation; the old one is epoch-1
	holders map[uint32]uint64 // pods that may hold entries → epoch of their last Add
	ids     map[string]uint32
	names   []string // pod id → name
	freeIDs []uint32
	// retired are forgotten pods' ids → epoch of their last Add: their entries stay until
	// their generation is dropped, and the id is reused only then.
	retired map[uint32]uint64
}

func newPodIDs() podIDs {
	return podIDs{holders: map[uint32]uint64{}, ids: map[string]uint32{}, retired: map[uint32]uint64{}}
}

// hold is pod's id, recorded as writing to the recent generation.
func (p *podIDs) hold(pod string) uint32 {
	id := p.id(pod)
	p.holders[id] = p.epoch
	return id
}

// prune forgets the pods whose entries all went with a dropped generation and frees their ids;
// hasOld says whether the old generation is still kept.
func (p *podIDs) prune(hasOld bool) {
	oldest := p.epoch
	if hasOld {
		oldest--
	}
	for id, last := range p.holders {
		if last < oldest {
			p.release(id)
		}
	}
	for id, last := range p.retired {
		if last < oldest {
			delete(p.retired, id)
			p.freeIDs = append(p.freeIDs, id)
		}
	}
}

func (p *podIDs) id(pod string) uint32 {
	if id, ok := p.ids[pod]; ok {
		return id
	}
	var id uint32
	if n := len(p.freeIDs); n > 0 {
		id, p.freeIDs = p.freeIDs[n-1], p.freeIDs[:n-1]
		p.names[id] = pod
	} else {
		id = uint32(len(p.names))
		p.names = append(p.names, pod)
	}
	p.ids[pod] = id
	return id
}

// release forgets a pod that has no entries left; its id may be reused.
func (p *podIDs) release(id uint32) {
	delete(p.holders, id)
	delete(p.ids, p.names[id])
	p.names[id] = ""
	p.freeIDs = append(p.freeIDs, id)
}

// forget removes a pod (it left the pool): it is never matched again; its id is reused once
// the generations it wrote to are dropped.
func (p *podIDs) forget(pod string) {
	id, ok := p.ids[pod]
	if !ok {
		return
	}
	last, held := p.holders[id]
	delete(p.holders, id)
	delete(p.ids, pod)
	p.names[id] = ""
	if held {
		p.retired[id] = last
	} else {
		p.freeIDs = append(p.freeIDs, id)
	}
}
