package store_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// evalCalls is how many scripts the server ran so far.
func evalCalls(srv *redistest.Server) int64 {
	return redistest.ParseStat(srv.Info("commandstats", "cmdstat_evalsha"), "calls")
}

// TestBuyerMemo: a buyer at their limit with a confirmed reservation is
// answered from memory after one script call, with the same token and
// order id; every change that lowers their units (a release on any
// instance, a forced preheat) ends that, so they can buy again.
func TestBuyerMemo(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	other := openStore(t, redisConfig([]string{srv.Addr}, false)) // a second instance
	a := newActivity("memo", 10, 2, 1)
	mustPreheat(t, s, a)

	won := mustReserve(t, s, a, "u1", 1, lua.OK)
	if code, err := s.Confirm(ctx(t), won.Token, a.Shards, "O-1"); err != nil || code != lua.OK {
		t.Fatalf("Confirm = %v, %v", code, err)
	}
	first := mustReserve(t, s, a, "u1", 1, lua.Purchased)
	if first.FromMemo || first.Token != won.Token || first.OrderID != "O-1" {
		t.Fatalf("first repeat = %+v, want the script's answer with token %s, order O-1", first, won.Token)
	}
	calls := evalCalls(srv)
	for range 50 {
		r := mustReserve(t, s, a, "u1", 1, lua.Purchased)
		if !r.FromMemo || r.Token != won.Token || r.OrderID != "O-1" {
			t.Fatalf("repeat = %+v, want from memory with token %s, order O-1", r, won.Token)
		}
	}
	if n := evalCalls(srv) - calls; n != 0 {
		t.Fatalf("50 remembered repeats ran %d scripts, want 0", n)
	}
	// Another user, and the same user asking within a higher limit, are not
	// answered from this buyer's entry.
	mustReserve(t, s, a, "u2", 1, lua.OK)
	higher := reserveReq(a, "u1", 1)
	higher.Limit = 2
	if r, err := s.Reserve(ctx(t), higher); err != nil || r.Code != lua.OK {
		t.Fatalf("Reserve within a raised limit = %+v, %v; want OK", r, err)
	}
	wantStatus(t, s, a, 7, 2, 1)

	// Released on the other instance (an operator's refund): the buyer is at
	// limit 1 no more once the invalidation arrives, and buys again.
	if code, err := other.Release(ctx(t), won.Token, a.Shards, "refund", time.Now().UnixMilli(), false); err != nil || code != lua.OK {
		t.Fatalf("Release = %v, %v", code, err)
	}
	// u1 still holds the unit bought under limit 2: release it too.
	held := mustReserve(t, other, a, "u1", 1, lua.Pending)
	if code, err := other.Release(ctx(t), held.Token, a.Shards, "refund", time.Now().UnixMilli(), false); err != nil || code != lua.OK {
		t.Fatalf("Release = %v, %v", code, err)
	}
	var again store.ReserveResult
	eventually(t, 5*time.Second, "a released buyer buys again", func() bool {
		r, err := s.Reserve(ctx(t), reserveReq(a, "u1", 1))
		if err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		again = r
		return r.Code == lua.OK
	})
	if again.FromMemo {
		t.Fatal("a fresh reservation came from memory")
	}
	if code, err := s.Confirm(ctx(t), again.Token, a.Shards, "O-2"); err != nil || code != lua.OK {
		t.Fatalf("Confirm = %v, %v", code, err)
	}
	mustReserve(t, s, a, "u1", 1, lua.Purchased)
	if r := mustReserve(t, s, a, "u1", 1, lua.Purchased); !r.FromMemo || r.OrderID != "O-2" {
		t.Fatalf("repeat = %+v, want from memory with order O-2", r)
	}

	// A forced preheat starts over: nobody holds anything, whatever this
	// instance remembers.
	if _, err := other.Preheat(ctx(t), a, true, time.Now()); err != nil {
		t.Fatalf("Preheat --force: %v", err)
	}
	eventually(t, 5*time.Second, "a buyer of the old stock buys the new", func() bool {
		r, err := s.Reserve(ctx(t), reserveReq(a, "u1", 1))
		if err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		return r.Code == lua.OK
	})
	wantStatus(t, s, a, 9, 1, 0)
}

// TestBuyerMemoNeedsClientCache: without client-side caching nothing can
// tell the instance that a release happened, so nothing is remembered.
func TestBuyerMemoNeedsClientCache(t *testing.T) {
	srv := redistest.Start(t)
	cfg := redisConfig([]string{srv.Addr}, false)
	cfg.ClientCache = false
	s := openStore(t, cfg)
	a := newActivity("memo", 10, 1, 1)
	mustPreheat(t, s, a)
	won := mustReserve(t, s, a, "u1", 1, lua.OK)
	if _, err := s.Confirm(ctx(t), won.Token, a.Shards, "O-1"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if r := mustReserve(t, s, a, "u1", 1, lua.Purchased); r.FromMemo {
			t.Fatal("answered from memory without client-side caching")
		}
	}
}

// TestConfirmMany: a batch confirms each pending reservation once, across
// shards and SKUs' shards, and answers for each what Confirm would: a
// released one stays released, an unknown one is unknown, one named twice
// counts once. Stock adds up after.
func TestConfirmMany(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("many", 100, 4, 1)
	mustPreheat(t, s, a)
	var items []store.ConfirmItem
	for i := range 40 {
		r := mustReserve(t, s, a, "u"+strconv.Itoa(i), 1, lua.OK)
		items = append(items, store.ConfirmItem{Token: r.Token, Shards: a.Shards, OrderID: "O" + strconv.Itoa(i)})
	}
	if code, err := s.Release(ctx(t), items[3].Token, a.Shards, "shop said no", time.Now().UnixMilli(), true); err != nil || code != lua.OK {
		t.Fatalf("Release = %v, %v", code, err)
	}
	if code, err := s.Confirm(ctx(t), items[5].Token, a.Shards, "O5"); err != nil || code != lua.OK {
		t.Fatalf("Confirm = %v, %v", code, err)
	}
	bogus := items[0].Token
	bogus.ID = "nosuchid"
	batch := append(append([]store.ConfirmItem{}, items...), items[7], store.ConfirmItem{Token: bogus, Shards: a.Shards})
	codes, errs := s.ConfirmMany(ctx(t), batch)
	for i, code := range codes {
		if errs[i] != nil {
			t.Fatalf("item %d: %v", i, errs[i])
		}
		want := lua.OK
		switch i {
		case 3:
			want = lua.Released
		case 5, 40: // confirmed before; named twice
			want = lua.Same
		case 41:
			want = lua.Unknown
		}
		if code != want {
			t.Errorf("item %d: %v, want %v", i, code, want)
		}
	}
	wantStatus(t, s, a, 61, 0, 39)
	r, ok, err := s.Lookup(ctx(t), items[9].Token, a.Shards)
	if err != nil || !ok || r.State != "confirmed" || r.OrderID != "O9" {
		t.Fatalf("Lookup = %+v, %v, %v; want confirmed with order O9", r, ok, err)
	}
}
