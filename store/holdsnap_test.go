package store_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestHoldersSnapshotFollowsInvalidations: an instance answers "may this
// buyer hold a unit" from its local copy of the holders bitset while no
// invalidation of that key reached it; a reservation on another instance
// (the bit set) reaches it as fast as Redis's invalidation, never at the
// snapshot's bound (an hour here); a release there leaves the bit. Ten buyers in turn, so a copy read just before an invalidation is
// caught out if it were ever kept.
func TestHoldersSnapshotFollowsInvalidations(t *testing.T) {
	defer store.SetOutSnapTTL(time.Hour)()
	srv := redistest.Start(t)
	a := openStore(t, redisConfig([]string{srv.Addr}, false))
	b := openStore(t, redisConfig([]string{srv.Addr}, false))
	act := newActivity("hsnap", 100, 2, 1)
	mustPreheat(t, b, act)
	sku := act.SKUs[0].ID
	mayHold := func(user string) func() bool {
		return func() bool { return a.MayHold(context.Background(), act.ID, sku, act.Shards, user) }
	}
	const within = 3 * time.Second
	for round := range 10 {
		u := "u" + strconv.Itoa(round)
		for range 100 { // answered from the local copy
			if mayHold(u)() {
				t.Fatalf("round %d: %s may hold before any reserve", round, u)
			}
		}
		r := mustReserve(t, b, act, u, 1, lua.OK)
		eventually(t, within, "the reserve on the other instance seen", mayHold(u))
		for range 100 {
			if !mayHold(u)() {
				t.Fatalf("round %d: %s seen holding, then not", round, u)
			}
		}
		if code, err := b.Release(ctx(t), r.Token, act.Shards, "test", time.Now().UnixMilli(), true); err != nil || code != lua.OK {
			t.Fatalf("release = %v, %v", code, err)
		}
		// The bit stays (a bitset only grows): MayHold reads the bit only
		// (red team rte: the users field, which says 0 now, is read by the
		// reserve path's sold-out answer, after the rate limits).
		if !mayHold(u)() {
			t.Fatalf("round %d: %s's bit cleared by a release", round, u)
		}
	}
}

// BenchmarkMayHoldSoldOut: the check every sold-out buy without a request
// id makes before SOLD_OUT from memory, for a buyer who holds nothing (the
// common case once a SKU is sold out), nothing changing in Redis.
func BenchmarkMayHoldSoldOut(b *testing.B) {
	srv := redistest.Start(b)
	s := openStore(b, redisConfig([]string{srv.Addr}, false))
	act := newActivity("hsnapb", 4, 1, 1)
	mustPreheat(b, s, act)
	for i := range 4 {
		mustReserve(b, s, act, "w"+strconv.Itoa(i), 1, lua.OK)
	}
	users := make([]string, 1024)
	for i := range users {
		users[i] = "buyer-" + strconv.Itoa(i)
	}
	c := context.Background()
	sku := act.SKUs[0].ID
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if s.MayHold(c, act.ID, sku, act.Shards, users[i%len(users)]) {
			b.Fatal("a buyer who bought nothing may hold")
		}
	}
}

// TestRidBitsSnapshotFollowsInvalidations: the same for the request-id
// bitset a sold-out answer reads. A winner on another instance whose unit
// came back and went again while this instance answered SOLD_OUT from its
// copy is, on repeating their request id here, answered by their record
// (the replay), never SOLD_OUT from a copy older than their reserve.
func TestRidBitsSnapshotFollowsInvalidations(t *testing.T) {
	defer store.SetOutSnapTTL(time.Hour)()
	srv := redistest.Start(t)
	a := openStore(t, redisConfig([]string{srv.Addr}, false))
	b := openStore(t, redisConfig([]string{srv.Addr}, false))
	act := newActivity("rsnap", 1, 1, 1)
	mustPreheat(t, b, act)
	buy := func(s *store.Store, user, rid string) store.ReserveResult {
		q := reserveReq(act, user, 1)
		q.RequestID = rid
		res, err := s.Reserve(ctx(t), q)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	won := buy(b, "w0", "rid-w0")
	if won.Code != lua.OK {
		t.Fatalf("first buyer: %v", won.Code)
	}
	for round := range 10 {
		// This instance knows the sell-out from memory, the bitset read.
		eventually(t, 3*time.Second, "the sell-out seen from memory", func() bool {
			r := buy(a, "late", "rid-late-"+strconv.Itoa(round))
			return r.Code == lua.Empty && r.FromMemory
		})
		if code, err := b.Release(ctx(t), won.Token, act.Shards, "test", time.Now().UnixMilli(), true); err != nil || code != lua.OK {
			t.Fatalf("release = %v, %v", code, err)
		}
		next := "w" + strconv.Itoa(round+1)
		if won = buy(b, next, "rid-"+next); won.Code != lua.OK {
			t.Fatalf("round %d: %s after the release: %v", round, next, won.Code)
		}
		// The new winner repeats their request on this instance.
		eventually(t, 3*time.Second, "the winner's repeat answered by its record", func() bool {
			r := buy(a, next, "rid-"+next)
			if r.Code == lua.Empty {
				return false // the sell-out and the bit may still be on their way
			}
			if r.Token != won.Token {
				t.Fatalf("round %d: %s's repeat: %v token %v, want their token %v", round, next, r.Code, r.Token, won.Token)
			}
			return true
		})
	}
}
