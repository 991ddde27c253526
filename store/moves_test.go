package store_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

func TestReserveStealsWhenHomeIsDry(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("act_st", 2, 4, 1) // shards 0 and 1 hold one unit each
	mustPreheat(t, s, a)

	r := mustReserve(t, s, a, userOn(3, 4, 0), 1, lua.OK)
	if r.Token.Shard != 3 || r.Moves != 1 {
		t.Fatalf("reserve on a dry home = %+v, want shard 3 and one move", r)
	}
	if st := wantStatus(t, s, a, 1, 1, 0); st.InTransit != 0 {
		t.Fatalf("in transit = %d after a completed move", st.InTransit)
	}
	// The reserve deposited the move: settling finds nothing to do and
	// forgets it on the donor.
	if n, err := s.SettleMoves(ctx(t), a, 0, time.Now()); err != nil || n != 0 {
		t.Fatalf("SettleMoves = %d, %v; want 0", n, err)
	}
	for i, sk := range s.SKUKeys(a.ID, testSKU, 4).Shards {
		if n, _ := srv.Do("HLEN", sk.Moves); n != "0" {
			t.Errorf("shard %d still records %s moves", i, n)
		}
	}
	r = mustReserve(t, s, a, userOn(2, 4, 0), 1, lua.OK)
	if r.Token.Shard != 2 || r.Moves != 1 {
		t.Fatalf("second dry-home reserve = %+v", r)
	}
	mustReserve(t, s, a, userOn(3, 4, 1), 1, lua.Empty)
	wantStatus(t, s, a, 0, 2, 0)
}

// No "fragment" refusal: every unit sells to buyers homed on an empty shard.
func TestReserveSellsEveryUnitToOneDryShard(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("act_fr", 7, 8, 1) // shard 7 starts empty
	mustPreheat(t, s, a)
	for n := 0; n < 7; n++ {
		mustReserve(t, s, a, userOn(7, 8, n), 1, lua.OK)
	}
	mustReserve(t, s, a, userOn(7, 8, 7), 1, lua.Empty)
	mustReserve(t, s, a, userOn(0, 8, 0), 1, lua.Empty)
	wantStatus(t, s, a, 0, 7, 0)
}

// A buyer asking for more than any one shard holds gathers from several.
func TestReserveGathersQtyFromSeveralShards(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("act_q", 4, 4, 4) // one unit per shard
	mustPreheat(t, s, a)
	r := mustReserve(t, s, a, userOn(0, 4, 0), 3, lua.OK)
	if r.Moves != 2 {
		t.Fatalf("moves = %d, want 2", r.Moves)
	}
	mustReserve(t, s, a, userOn(1, 4, 0), 2, lua.Empty)
	wantStatus(t, s, a, 1, 3, 0)
	if rec, ok, err := s.Lookup(ctx(t), r.Token, a.Shards); err != nil || !ok || rec.Qty != 3 {
		t.Fatalf("Lookup = %+v, %v, %v", rec, ok, err)
	}
}

// A proxy that dies between steal.lua and the reserve that deposits leaves
// units in transit; Status counts them, SettleMoves lands them exactly once.
func TestSettleMovesAfterCrashBetweenStealAndDeposit(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("act_cr", 8, 4, 1) // two units per shard
	mustPreheat(t, s, a)
	c, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	keys := s.SKUKeys(a.ID, testSKU, 4)
	donor, home := keys.Shards[1], keys.Shards[3]
	now := time.Now()
	steal := rueidis.NewLuaScript(lua.Steal)
	got, err := steal.Exec(ctx(t), c, []string{donor.Stock, donor.Moves, donor.Out},
		[]string{"1", testSKU + ":move-1", "3", strconv.FormatInt(now.UnixMilli(), 10), strconv.FormatInt(store.ExpireAt(a), 10)}).AsIntSlice()
	if err != nil || len(got) != 3 || got[0] != int64(lua.OK) || got[1] != 1 {
		t.Fatalf("steal = %v, %v; want [1 1 <generation>]", got, err)
	}
	if st := wantStatus(t, s, a, 8, 0, 0); st.InTransit != 1 {
		t.Fatalf("in transit = %d, want 1", st.InTransit)
	}

	// Too young: a proxy may still be about to deposit it.
	if n, err := s.SettleMoves(ctx(t), a, time.Minute, now); err != nil || n != 0 {
		t.Fatalf("SettleMoves of a young move = %d, %v; want 0", n, err)
	}
	if n, err := s.SettleMoves(ctx(t), a, time.Minute, now.Add(2*time.Minute)); err != nil || n != 1 {
		t.Fatalf("SettleMoves = %d, %v; want 1", n, err)
	}
	if n, err := s.SettleMoves(ctx(t), a, time.Minute, now.Add(2*time.Minute)); err != nil || n != 0 {
		t.Fatalf("second SettleMoves = %d, %v; want 0", n, err)
	}
	if st := wantStatus(t, s, a, 8, 0, 0); st.InTransit != 0 {
		t.Fatalf("in transit = %d after settling", st.InTransit)
	}
	for _, c := range []struct {
		key, want string
	}{{home.Stock, "3"}, {donor.Stock, "1"}} {
		for _, f := range []string{"r", "i"} {
			if v, _ := srv.Do("HGET", c.key, f); v != c.want {
				t.Errorf("%s %s = %s, want %s", c.key, f, v, c.want)
			}
		}
	}
	if n, _ := srv.Do("HLEN", donor.Moves); n != "0" {
		t.Errorf("donor still records %s moves", n)
	}
	// A late reserve carrying the same move id must not deposit it again.
	args := []string{"late", "1", "1", testSKU + ":AAAAAAAAAAAAAAAAAAAAAA", "1", strconv.FormatInt(store.ExpireAt(a), 10), "0", "1", testSKU + ":move-1", "100", "x"}
	reserve := rueidis.NewLuaScript(lua.Reserve)
	if _, err := reserve.Exec(ctx(t), c, home.ReserveKeys(), args).ToArray(); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, s, a, 7, 1, 0)
	// All eight units still sell.
	for n := 0; n < 7; n++ {
		mustReserve(t, s, a, "buyer-"+strconv.Itoa(n), 1, lua.OK)
	}
	mustReserve(t, s, a, "buyer-last", 1, lua.Empty)
	wantStatus(t, s, a, 0, 8, 0)
}

// TestSettleMovesOfABigCatalogReadsEachShardOnce: 500 SKUs over 4 shards,
// a crashed steal left in transit for two of them. Settling lands each
// exactly once and reads each shard's moves hash (shared by the SKUs)
// once, not once per SKU: SKUs × shards HGETALLs, each of every SKU's
// moves, per repairing pass before (red team cat16's left item).
func TestSettleMovesOfABigCatalogReadsEachShardOnce(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("act_bc", 8, 4, 1)
	a.SKUs = nil
	for i := range 500 {
		a.SKUs = append(a.SKUs, config.SKU{ID: "s" + strconv.Itoa(i), Stock: 8})
	}
	mustPreheat(t, s, a)
	c, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	steal := rueidis.NewLuaScript(lua.Steal)
	for _, sku := range []string{"s7", "s321"} {
		donor := s.SKUKeys(a.ID, sku, 4).Shards[1]
		got, err := steal.Exec(ctx(t), c, []string{donor.Stock, donor.Moves, donor.Out},
			[]string{"1", sku + ":move-1", "3", strconv.FormatInt(now.UnixMilli(), 10), strconv.FormatInt(store.ExpireAt(a), 10)}).AsIntSlice()
		if err != nil || got[0] != int64(lua.OK) {
			t.Fatalf("steal %s = %v, %v", sku, got, err)
		}
	}
	hgetall := func() int64 { return redistest.ParseStat(srv.Info("commandstats", "cmdstat_hgetall"), "calls") }
	before := hgetall()
	if n, err := s.SettleMoves(ctx(t), a, time.Minute, now.Add(2*time.Minute)); err != nil || n != 2 {
		t.Fatalf("SettleMoves = %d, %v; want 2", n, err)
	}
	if calls := hgetall() - before; calls != 4 {
		t.Errorf("settling read the moves hashes with %d HGETALLs for 500 SKUs on 4 shards, want 4 (one a shard)", calls)
	}
	if n, err := s.SettleMoves(ctx(t), a, time.Minute, now.Add(2*time.Minute)); err != nil || n != 0 {
		t.Fatalf("second SettleMoves = %d, %v; want 0", n, err)
	}
	st, err := s.Status(ctx(t), a)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range st.SKUs {
		if k.InTransit != 0 || !k.OK || k.Remaining != 8 {
			t.Errorf("%s after settling: %+v", k.ID, k)
		}
	}
}
