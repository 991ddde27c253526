package store

import (
	"context"
	"time"
)

// SetOutSnapTTL sets outSnapTTL for a test and returns what restores it.
func SetOutSnapTTL(d time.Duration) (restore func()) {
	old := outSnapTTL
	outSnapTTL = d
	return func() { outSnapTTL = old }
}

// ReserveKeys is reserve.lua's KEYS[1..8] of a shard (a test that calls
// the script directly sends them in the store's order).
func (sk ShardKeys) ReserveKeys() []string { return sk.reserveKeys() }

// OutInvalidated reports whether Redis invalidated shard's sold-out flag
// since a buyer with a request id last read the flags (outFlagsIn).
func (s *Store) OutInvalidated(ctx context.Context, act, sku string, shards, shard int) bool {
	k, err := s.skuKeys(ctx, act, sku, shards)
	return err == nil && k.outInval[shard].Load()
}

// ReadOutFlagsAs reads a SKU's sold-out flags as a buyer with a request id
// does before its reserve.
func (s *Store) ReadOutFlagsAs(ctx context.Context, act, sku string, shards int) ([]bool, error) {
	c, err := s.Client()
	if err != nil {
		return nil, err
	}
	k, err := s.skuKeys(ctx, act, sku, shards)
	if err != nil {
		return nil, err
	}
	return s.outFlagsIn(ctx, c, k, true)
}

// BitsInMemory reports whether shard's request-id bitset is in the
// client-side cache: a read of it would need no round trip.
func (s *Store) BitsInMemory(ctx context.Context, act, sku string, shards, shard int) bool {
	c, err := s.Client()
	if err != nil {
		return false
	}
	k, err := s.skuKeys(ctx, act, sku, shards)
	if err != nil {
		return false
	}
	return c.DoCache(ctx, c.B().Get().Key(k.Shards[shard].RidBits).Cache(), flagTTL).IsCacheHit()
}

// BumpInvalGen counts one invalidation of some key, as OnInvalidations
// does: every SKU's flag snapshot (outFlagsIn) is stale after it.
func (s *Store) BumpInvalGen() { s.invalGen.Add(1) }

// ReadAt is when SoldOutMany last read the mark's flags (unix ns, 0: never).
func (m OutMark) ReadAt() int64 { return m.at }

// SetAfterSteal sets a function Reserve calls once a steal has replied,
// before the reserve that deposits its units is written (a test stops a
// node there), and returns what restores it.
func SetAfterSteal(f func()) (restore func()) {
	old := afterSteal
	afterSteal = f
	return func() { afterSteal = old }
}

// SetBundleEndSeen sets bundleEndSeen for a test and returns what
// restores it.
func SetBundleEndSeen(f func(again bool)) (restore func()) {
	old := bundleEndSeen
	bundleEndSeen = f
	return func() { bundleEndSeen = old }
}
