package store

import (
	"context"
	"hash/maphash"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/redis/rueidis"

	"github.com/seckill-proxy/seckill-proxy/lua"
)

// buyerMemo remembers buyers Redis answered "at your limit, none of your
// reservations is pending, this one is confirmed" (the repeat clicks of
// every winner, the most common request of a sale that still has stock),
// so their next repeats are answered from this instance's memory instead
// of a script call.
//
// Such a buyer stays at their limit, with none pending (a confirmed
// reservation stays confirmed), until one of their reservations is
// released (release.lua, abort.lua, bundlerelease.lua: giveBack, which
// also names another held one in the users hash) or the stock is
// preheated anew; both change the home shard's epoch key
// (ShardKeys.Epoch), so a remembered token is never one released since
// the answer. The script hands out the epoch with the answer, atomically;
// a remembered answer is used only while the epoch read through
// client-side caching (local memory, invalidated by Redis) is still the
// same. So a memory answer is at most as old as Redis's invalidation
// message, the same staleness as every client-side cached read. Without
// client-side caching nothing is remembered. An evicted or dropped entry
// only costs a script call.
type buyerMemo struct {
	c    *ristretto.Cache[uint64, memoEntry]
	seed maphash.Seed
}

type memoEntry struct {
	act, user string
	token     Token
	orderID   string
	units     int64
	epoch     string
}

func newBuyerMemo(size int) *buyerMemo {
	if size <= 0 {
		return nil
	}
	c, err := ristretto.NewCache(&ristretto.Config[uint64, memoEntry]{
		NumCounters: int64(size) * 10, MaxCost: int64(size), BufferItems: 64,
		// Cost is one per buyer: without this, ristretto adds its own
		// ~56 bytes to each entry's cost and the memo held 1/57th of
		// redis.buyer_memo (TestBuyerMemoHoldsItsBound).
		IgnoreInternalCost: true,
	})
	if err != nil {
		return nil
	}
	return &buyerMemo{c: c, seed: maphash.MakeSeed()}
}

func (m *buyerMemo) key(act, user string) uint64 { return buyerHash(m.seed, act, user) }

// buyerHash is a buyer of an activity hashed with seed (the memo's key,
// seenBuyers' slot).
func buyerHash(seed maphash.Seed, act, user string) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	h.WriteString(act)
	h.WriteByte(0)
	h.WriteString(user)
	return h.Sum64()
}

func (m *buyerMemo) close() {
	if m != nil {
		m.c.Close()
	}
}

// memoAnswer answers q from the memo when the buyer is remembered at
// their limit and their home shard's epoch is unchanged.
func (s *Store) memoAnswer(ctx context.Context, c rueidis.Client, sk *ShardKeys, q *ReserveRequest) (ReserveResult, bool) {
	m := s.memo
	if m == nil || q.RequestID != "" {
		return ReserveResult{}, false
	}
	e, ok := m.c.Get(m.key(q.Activity, q.User))
	if !ok || e.user != q.User || e.act != q.Activity || e.units < q.Limit {
		return ReserveResult{}, false
	}
	epoch, err := c.DoCache(ctx, c.B().Get().Key(sk.Epoch).Cache(), flagTTL).ToString()
	if err != nil || epoch != e.epoch {
		return ReserveResult{}, false
	}
	return ReserveResult{Code: lua.Purchased, Token: e.token, OrderID: e.orderID, FromMemo: true}, true
}

// remember keeps a PURCHASED answer that came with the buyer's units and
// their shard's epoch (reserve.lua gives both to a buyer without request id),
// only for a buyer at the limit: below it (a qty 2 refused with one unit
// held) a later reserve of one unit raises the units without moving the
// epoch, and the memo would go on naming the old purchase over the new
// pending one (red-team finding ul13). At the limit only a release changes
// the answer, and a release moves the epoch.
func (s *Store) remember(q *ReserveRequest, r *reserveReply, tok Token) {
	if s.memo == nil || r.epoch == "" || r.units < q.Limit {
		return
	}
	s.memo.c.Set(s.memo.key(q.Activity, q.User), memoEntry{
		act: q.Activity, user: q.User, token: tok, orderID: r.orderID, units: r.units, epoch: r.epoch,
	}, 1)
	// Sets are applied by ristretto's goroutine: wait, so the buyer's next
	// click finds it (once per buyer per epoch, never on the common path).
	s.memo.c.Wait()
}
