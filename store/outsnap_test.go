package store_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestOutFlagSnapshotFollowsInvalidations: an instance answers the sold-out
// flags from a snapshot while no invalidation reached it; a sale on another
// instance, and a release there, reach it as fast as Redis's invalidation,
// not at the snapshot's bound. Ten rounds, so a snapshot taken just before
// an invalidation is caught out if it were ever kept.
func TestOutFlagSnapshotFollowsInvalidations(t *testing.T) {
	// An hour: only an invalidation may end a snapshot here, so a snapshot
	// that outlived one would fail the test instead of expiring in 100 ms.
	defer store.SetOutSnapTTL(time.Hour)()
	srv := redistest.Start(t)
	a := openStore(t, redisConfig([]string{srv.Addr}, false))
	b := openStore(t, redisConfig([]string{srv.Addr}, false))
	act := newActivity("snap", 1, 1, 1)
	mustPreheat(t, b, act)
	soldOut := func() bool {
		out, err := a.SoldOut(ctx(t), act.ID, act.SKUs[0].ID, act.Shards)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// Generous bounds (a loaded CI machine); the invalidation normally lands
	// within a millisecond. What must never happen is a stale answer kept.
	const within = 3 * time.Second
	for round := range 10 {
		if soldOut() {
			t.Fatalf("round %d: sold out before the sale", round)
		}
		for range 100 { // reads served from the snapshot
			if soldOut() {
				t.Fatalf("round %d: flag flipped with nothing sold", round)
			}
		}
		r := mustReserve(t, b, act, "u"+strconv.Itoa(round), 1, lua.OK)
		eventually(t, within, "the sale on the other instance seen", soldOut)
		if code, err := b.Release(ctx(t), r.Token, act.Shards, "test", time.Now().UnixMilli(), true); err != nil || code != lua.OK {
			t.Fatalf("release = %v, %v", code, err)
		}
		eventually(t, within, "the release on the other instance seen", func() bool { return !soldOut() })
	}
}

// BenchmarkSoldOutFlags: one SKU's flags as every reserve reads them first,
// with nothing changing (the common case): from the snapshot.
func BenchmarkSoldOutFlags(b *testing.B) {
	srv := redistest.Start(b)
	s := openStore(b, redisConfig([]string{srv.Addr}, false))
	act := newActivity("snapb", 10, 1, 1)
	mustPreheat(b, s, act)
	c := ctx(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if out, err := s.SoldOut(c, act.ID, act.SKUs[0].ID, act.Shards); err != nil || out {
			b.Fatal(out, err)
		}
	}
}
