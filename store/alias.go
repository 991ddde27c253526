package store

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// Holder aliases (decisions §62). A buyer identified by a session
// (identity.user.session) is known by user id only once the shop answered
// the look-up, and the look-up comes after the sold-out check so that a
// sold-out SKU costs the shop nothing. An instance that never looked a
// session up cannot ask the holders bitset about its user, and told such a
// buyer SOLD_OUT beside a unit they held (red team chaos3, §57). So every
// reserve that wins for a session buyer also sets three bits of the
// session's alias in the holders bitset of the user's home shard; an
// instance checks an unknown session's alias against every shard's bitset
// from memory and looks the session up only when all three bits are set on
// one of them (a holder, or about one stranger in a few thousand).

// HolderAlias is the holder alias of a session credential: the first 96
// bits of its SHA-256 as 24 hex digits, so the credential itself is never
// sent to Redis (nor seen in its MONITOR or slow log). Fleet-wide the same
// for the same credential. The scripts read its three 32-bit words as the
// bit positions (each % the bitset's size): hashed here, not in Lua.
func HolderAlias(credential string) string {
	if credential == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(credential))
	var b [24]byte
	hex.Encode(b[:], sum[:12])
	return string(b[:])
}

// aliasHashes are alias's three positions in a holders bitset (each % its
// size): its three 32-bit words, as reserve.lua, reservebatch.lua and
// bundle.lua set them. ok is false for a string HolderAlias never makes.
func aliasHashes(alias string) (hs [3]uint32, ok bool) {
	var b [12]byte
	if len(alias) != 24 {
		return hs, false
	}
	if _, err := hex.Decode(b[:], []byte(alias)); err != nil {
		return hs, false
	}
	return [3]uint32{binary.BigEndian.Uint32(b[0:4]), binary.BigEndian.Uint32(b[4:8]), binary.BigEndian.Uint32(b[8:12])}, true
}

// aliasIn reports whether bitset v has all three of hs's bits set.
func aliasIn(v string, hs [3]uint32) bool {
	return bitIn(v, hs[0]) && bitIn(v, hs[1]) && bitIn(v, hs[2])
}

// MayHoldAlias reports whether a buyer known only by the holder alias of
// their session (HolderAlias) may hold units of act's sold-out SKU: all
// three of the alias's bits set in one of its shards' holders bitsets (the
// user's home shard is not known before the look-up), from local memory
// after the first read of each. A caller looks the session up then, and
// the user's own holders check decides. err is set when a bitset could
// not be read (Redis stalled or unreachable): the buyer may hold a unit,
// and nothing tells, so the caller answers STORE_UNAVAILABLE rather than
// SOLD_OUT or a look-up. Without client_cache: false, as MayHold.
func (s *Store) MayHoldAlias(ctx context.Context, act, sku string, shards int, alias string) (bool, error) {
	if shards < 1 || alias == "" || !s.clientCache {
		return false, nil
	}
	c, err := s.Client()
	if err != nil {
		return false, err
	}
	k, err := s.skuKeys(ctx, act, sku, shards)
	if err != nil {
		return false, err
	}
	hs, ok := aliasHashes(alias)
	if !ok {
		return false, nil
	}
	stale := false
	for i := range shards {
		v, ok := s.bitsSnapped(&k.holders[i], k)
		if !ok {
			stale = true
		} else if aliasIn(v, hs) {
			return true, nil
		}
	}
	if !stale {
		return false, nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = s.ctx(ctx)
		defer cancel()
	}
	for i := range shards {
		v, err := s.bitsRead(ctx, c, &k.holders[i], k.Shards[i].Holders, k)
		if err != nil {
			return false, err
		}
		if aliasIn(v, hs) {
			return true, nil
		}
	}
	return false, nil
}
