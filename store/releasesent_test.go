package store_test

import (
	"testing"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestReleaseSentRefusesAResend: a pending-only release conditional on the
// send stamp its caller judged by (a queue worker's own claim, the
// reconciler's read) is refused RESTAMPED once a takeover re-claimed the
// reservation (claim.lua SAME re-stamps it) and sent it again: that send
// the shop may still take. With the current stamp it releases.
func TestReleaseSentRefusesAResend(t *testing.T) {
	m := redistest.Start(t)
	s := openStore(t, redisConfig([]string{m.Addr}, false))
	a := newActivity("act_rsent", 5, 1, 1)
	a.Mode = config.ModeQueue
	mustPreheat(t, s, a)
	q := reserveReq(a, "u1", 1)
	q.Queue = true
	res, err := s.Reserve(ctx(t), q)
	if err != nil || res.Code != lua.OK {
		t.Fatalf("queued reserve = %+v, %v", res, err)
	}
	const first, second = 1_000_000, 1_000_500
	if c, err := s.Claim(ctx(t), res.Token, a.Shards, first, q.ExpireAt); err != nil || c != lua.OK {
		t.Fatalf("claim = %v, %v", c, err)
	}
	if c, err := s.Claim(ctx(t), res.Token, a.Shards, second, q.ExpireAt); err != nil || c != lua.Same {
		t.Fatalf("takeover claim = %v, %v", c, err)
	}
	if c, err := s.ReleaseSent(ctx(t), res.Token, a.Shards, "shop_status_409", 2_000_000, first); err != nil || c != lua.Restamped {
		t.Fatalf("release of the first send = %v, %v; want RESTAMPED", c, err)
	}
	if c, err := s.ReleaseFenced(ctx(t), res.Token, a.Shards, "verify_absent", 2_000_000, true, first, store.Fence{Token: 1, ExpireAt: store.ExpireAt(a)}); err != nil || c != lua.Restamped {
		t.Fatalf("reconciler's release of the first send = %v, %v; want RESTAMPED", c, err)
	}
	if r, _, _ := s.Lookup(ctx(t), res.Token, a.Shards); r.State != store.StatePending || r.CreatedMs != second {
		t.Fatalf("after the refused releases: %+v, want pending since %d", r, second)
	}
	wantStatus(t, s, a, 4, 1, 0)
	if c, err := s.ReleaseSent(ctx(t), res.Token, a.Shards, "shop_status_409", 2_000_000, second); err != nil || c != lua.OK {
		t.Fatalf("release of the current send = %v, %v; want OK", c, err)
	}
	wantStatus(t, s, a, 5, 0, 0)
}
