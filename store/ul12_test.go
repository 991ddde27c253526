package store_test

import (
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestUL12AtLimitNamesAHeldReservation: limit 2. Once the buyer's last
// reservation is given back, a buyer over their limit is answered by one
// they hold: PURCHASED with the confirmed one and its order id (not a
// PURCHASED naming none), also after the buyer memo remembered the
// released one (its epoch moved with the release).
func TestUL12AtLimitNamesAHeldReservation(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("act_ul12", 10, 1, 2)
	mustPreheat(t, s, a)
	t1 := mustReserve(t, s, a, "u1", 1, lua.OK).Token
	if code, err := s.Confirm(ctx(t), t1, a.Shards, "O-1"); err != nil || code != lua.OK {
		t.Fatalf("Confirm t1 = %v, %v", code, err)
	}
	t2 := mustReserve(t, s, a, "u1", 1, lua.OK).Token
	if r := mustReserve(t, s, a, "u1", 1, lua.Pending); r.Token != t2 {
		t.Fatalf("at the limit: PENDING %v, want the pending one %v", r.Token, t2)
	}
	if code, err := s.Release(ctx(t), t2, a.Shards, "shop 409", time.Now().UnixMilli(), true); err != nil || code != lua.OK {
		t.Fatalf("Release t2 = %v, %v", code, err)
	}
	if r := mustReserve(t, s, a, "u1", 2, lua.Purchased); r.Token != t1 || r.OrderID != "O-1" {
		t.Fatalf("qty 2 after the last's release: PURCHASED %v %q, want %v O-1", r.Token, r.OrderID, t1)
	}

	// The memo: a confirmed last remembered, then refunded.
	t3 := mustReserve(t, s, a, "u1", 1, lua.OK).Token
	if code, err := s.Confirm(ctx(t), t3, a.Shards, "O-3"); err != nil || code != lua.OK {
		t.Fatalf("Confirm t3 = %v, %v", code, err)
	}
	if r := mustReserve(t, s, a, "u1", 1, lua.Purchased); r.Token != t3 {
		t.Fatalf("at the limit: PURCHASED %v, want %v", r.Token, t3)
	}
	if r := mustReserve(t, s, a, "u1", 1, lua.Purchased); r.Token != t3 || !r.FromMemo {
		t.Fatalf("repeat: %+v, want PURCHASED %v from the memo", r, t3)
	}
	if code, err := s.Release(ctx(t), t3, a.Shards, "refund", time.Now().UnixMilli(), false); err != nil || code != lua.OK {
		t.Fatalf("Release t3 = %v, %v", code, err)
	}
	// (The epoch in local memory is invalidated asynchronously: until then
	// the memo may still answer as before the release.)
	eventually(t, 5*time.Second, "an answer from Redis after the refund", func() bool {
		r := mustReserve(t, s, a, "u1", 2, lua.Purchased)
		if r.FromMemo {
			return false
		}
		if r.Token != t1 || r.OrderID != "O-1" {
			t.Fatalf("qty 2 after the refund of the last: PURCHASED %v %q, want %v O-1", r.Token, r.OrderID, t1)
		}
		return true
	})
}

// TestUL12BundleNamesNoneKnown: a users hash value an older build wrote
// names only a reservation given back since ("<units>|<released>"): a
// bundle over the limit is PURCHASED naming none, not an invalid reply.
func TestUL12BundleNamesNoneKnown(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := bundleActivity("act_ul12b", 1, 2, config.SKU{ID: "a", Stock: 10}, config.SKU{ID: "b", Stock: 10})
	mustPreheat(t, s, a)
	q := reserveReq(a, "u1", 1)
	q.SKU = "a"
	r, err := s.Reserve(ctx(t), q)
	if err != nil || r.Code != lua.OK {
		t.Fatalf("Reserve = %+v, %v", r, err)
	}
	if code, err := s.Release(ctx(t), r.Token, a.Shards, "refund", time.Now().UnixMilli(), false); err != nil || code != lua.OK {
		t.Fatalf("Release = %v, %v", code, err)
	}
	c, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	users := "seckill:{" + a.ID + ":0}:users"
	if err := c.Do(ctx(t), c.B().Hset().Key(users).FieldValue().FieldValue("u1", "1|"+r.Token.Field()).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	b, err := s.ReserveBundle(ctx(t), bundleReq(a, "u1", item("a", 1), item("b", 1)))
	if err != nil || b.Code != lua.Purchased || b.Token != (store.Token{}) {
		t.Fatalf("bundle over the limit = %+v, %v; want PURCHASED naming none", b, err)
	}
}
