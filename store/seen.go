package store

import (
	"hash/maphash"
	"sync/atomic"
)

// seenBuyers remembers, per instance, buyers a reserve call found holding
// units (it reserved for them, or answered them PENDING or PURCHASED). A
// buyer whose home shard is dry normally has units moved to it before the
// reserve (steal.lua, then reserve.lua deposits and reserves in one call);
// for a buyer already at their limit that moved a unit for nothing, and two
// such buyers on different shards clicking again bounced the last unit
// between their shards on every click: a move id written per click, and
// fresh buyers told SOLD_OUT while the unit was in transit (red-team
// finding, docs/decisions.md §34). A remembered buyer's reserve runs first:
// its limit check answers before any write, and only EMPTY leads to a
// steal. Direct-mapped and lock-free: a slot holds one buyer's hash, a
// newcomer overwrites it. A miss only costs the old order (steal first);
// a false hit only costs one reserve call that answers EMPTY.
type seenBuyers struct {
	slots [1 << 16]atomic.Uint64 // 512 KiB
	seed  maphash.Seed
}

func newSeenBuyers() *seenBuyers { return &seenBuyers{seed: maphash.MakeSeed()} }

func (b *seenBuyers) hash(act, user string) uint64 {
	return buyerHash(b.seed, act, user) | 1 // never 0, an empty slot
}

func (b *seenBuyers) add(act, user string) {
	h := b.hash(act, user)
	b.slots[h%uint64(len(b.slots))].Store(h)
}

func (b *seenBuyers) has(act, user string) bool {
	h := b.hash(act, user)
	return b.slots[h%uint64(len(b.slots))].Load() == h
}
