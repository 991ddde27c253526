package store

import (
	"strconv"
	"strings"
	"testing"
)

// TestKeyCacheBounded: names built for SKUs no config has (a caller that
// skipped its check) never grow the cache past its bound.
func TestKeyCacheBounded(t *testing.T) {
	c := keyCache{prefix: "p"}
	for i := 0; i < maxCachedSKUs+5000; i++ {
		k := c.get("act", "sku-"+strconv.Itoa(i), 2)
		if len(k.Shards) != 2 || !strings.HasSuffix(k.Shards[1].Stock, "stock:sku-"+strconv.Itoa(i)) {
			t.Fatalf("keys of sku-%d: %+v", i, k.Shards)
		}
	}
	if c.n != maxCachedSKUs || len(c.m["act"].skus) != maxCachedSKUs {
		t.Fatalf("cache holds %d (%d) SKUs, want the bound %d", c.n, len(c.m["act"].skus), maxCachedSKUs)
	}
	if k := c.get("act", "sku-1", 2); k != c.m["act"].skus["sku-1"] {
		t.Fatal("a cached SKU is not served from the cache")
	}
}

// TestKeyCacheTracksFlagKeys: an invalidation of a cached shard's sold-out
// flag marks that shard only, and of its holders or request-id bitset ends
// that shard's view only; keys the cache dropped (a new placement, a new
// shard count) are no longer tracked, so the index stays the cache's size
// (four keys a shard), and their views are never used again. A transit
// mark's invalidation (fleetmark.go) moves the SKU's outGen, so that
// SoldOutMany reads it again, and flips no shard.
func TestKeyCacheTracksFlagKeys(t *testing.T) {
	c := keyCache{prefix: "p"}
	k := c.get("act", "s", 2)
	c.outInvalidated(k.outKeys[1])
	c.outInvalidated("p:{other:0}:out:s")
	if k.outInval[0].Load() || !k.outInval[1].Load() {
		t.Fatalf("marks %v %v, want shard 1 only", k.outInval[0].Load(), k.outInval[1].Load())
	}
	c.outInvalidated(k.Shards[0].Holders)
	c.outInvalidated(k.Shards[1].RidBits)
	if k.holders[0].gen.Load() != 1 || k.holders[1].gen.Load() != 0 || k.ridbits[0].gen.Load() != 0 || k.ridbits[1].gen.Load() != 1 {
		t.Fatal("a bitset's invalidation reached another shard's view")
	}
	gen := k.outGen.Load()
	c.outInvalidated(k.Shards[0].Transit)
	if k.outGen.Load() != gen+1 || k.outInval[0].Load() {
		t.Fatal("a transit mark's invalidation: outGen not moved, or a shard flipped")
	}
	count := func() (n int) {
		c.outs.Range(func(any, any) bool { n++; return true })
		return n
	}
	k3 := c.get("act", "s", 3) // the shard count changed: new keys
	if n := count(); n != 12 {
		t.Fatalf("%d keys tracked after a new shard count, want 12", n)
	}
	if k.tracked.Load() || !k3.tracked.Load() {
		t.Fatal("the dropped keys' views are still used, or the new ones' not")
	}
	c.setPlace("act", "x,y,z") // a placement: the cached keys go
	if n := count(); n != 0 {
		t.Fatalf("%d keys tracked after the keys were dropped, want 0", n)
	}
	if k3.tracked.Load() {
		t.Fatal("keys dropped by a placement: their views are still used")
	}
	c.outInvalidated(k3.outKeys[0])
	if k3.outInval[0].Load() {
		t.Fatal("a dropped SKU's shard was marked")
	}
}

// TestTakeFlips: a flag read brings the bitsets only when a flipped shard
// may have sold the SKU out (every other shard out by the last snapshot);
// the marks go either way.
func TestTakeFlips(t *testing.T) {
	k := newSKUKeys("p", "a", "s", 3, nil)
	sn := &outSnap{out: []bool{false, false, true}}
	if k.takeFlips(sn) {
		t.Fatal("bitsets with no flip")
	}
	k.outInval[0].Store(true) // shard 0 went dry; shard 1 still sells
	if k.takeFlips(sn) {
		t.Error("bitsets while shard 1 has units")
	}
	if k.outInval[0].Load() {
		t.Error("the mark outlived the read")
	}
	sn = &outSnap{out: []bool{true, false, true}}
	k.outInval[1].Store(true) // the last shard with units
	if !k.takeFlips(sn) {
		t.Error("no bitsets when the last shard went dry")
	}
	k.outInval[2].Store(true)
	if !k.takeFlips(nil) {
		t.Error("no bitsets on a flip with no snapshot to go by")
	}
}
