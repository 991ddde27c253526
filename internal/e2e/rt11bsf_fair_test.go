package e2e_test

import (
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// Red team round 11: bundles, shadow mode and fair start under faults and
// scalpers. This file: fair start.

// rt11bsfFair is a fairFixture whose options are kept, so a test can
// render the same config with one change and reload it (as serve's SIGHUP
// does: Server.Apply, then admission's Apply).
type rt11bsfFair struct {
	*fairFixture
	opts e2e.Options
}

func rt11bsfStartFair(t *testing.T, o e2e.Options) *rt11bsfFair {
	t.Helper()
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	o.Redis, o.ShopURL = r.Addrs, shop.URL
	o.RedisTimeout = 2 * time.Second
	for i := range o.Activities {
		if o.Activities[i].End.IsZero() {
			o.Activities[i].End = o.Activities[i].Start.Add(time.Hour)
		}
	}
	clock := &fakeClock{}
	clock.set(fairT0.Add(-time.Minute))
	p := e2e.StartProxyClock(t, o.Config(t), clock.now)
	for _, a := range o.Activities {
		p.Preheat(t, a.ID)
	}
	return &rt11bsfFair{fairFixture: &fairFixture{shop: shop, p: p, clock: clock, c: &fasthttp.Client{MaxConnsPerHost: 4096}}, opts: o}
}

// reload renders f.opts after edit and applies it to the running proxy.
func (f *rt11bsfFair) reload(t *testing.T, edit func(o *e2e.Options)) {
	t.Helper()
	edit(&f.opts)
	next := f.opts.Config(t)
	if err := f.p.Server.Apply(next); err != nil {
		t.Fatalf("reload refused: %v", err)
	}
	f.p.Pipeline.Apply(next)
}

// README, Fair start: "What the operator changes while buys are held holds
// for them too: at release the window, the kill switch (PAUSED), the
// invite list and the blocklists are checked again". The window is
// changed by a reload (SIGHUP / watch). Here the operator postpones a sale
// that opened by mistake (start moved an hour later) while buys are held
// in its fair_start window. A fresh buy is then NOT_STARTED; the held buys
// must be too (403 NOT_STARTED, nothing reserved, nothing at the shop).
// The release re-checks the window against the activity the buy was
// parsed with (admission/admission.go, holdFair's caller: `a` is the old
// config's), so the held buys reserve and reach the shop in a sale that,
// by the running config, has not started.
func TestRT11BSFFairStartReloadPostponeHeldBuys(t *testing.T) {
	t0 := fairT0.Add(20 * time.Minute)
	f := rt11bsfStartFair(t, e2e.Options{Activities: []e2e.Activity{{ID: "rt11pp", Stock: 10, Start: t0, End: t0.Add(2 * time.Hour),
		FairStart: 500 * time.Millisecond, FairStartSpread: 100 * time.Millisecond}}})
	f.clock.at(t0, 10*time.Millisecond)
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[string]e2e.Resp{}
	f.fire(&wg, "rt11pp", users("rt11pp-held", 4), func(u string, r e2e.Resp) { mu.Lock(); got[u] = r; mu.Unlock() })
	e2e.Eventually(t, 10*time.Second, "4 held", func() bool { return f.held() == 4 })

	// The reload: the sale starts an hour later.
	f.reload(t, func(o *e2e.Options) { o.Activities[0].Start = t0.Add(time.Hour) })
	if r := f.buy("rt11pp", "rt11pp-fresh"); r.Code != "NOT_STARTED" || r.Status != 403 {
		t.Fatalf("a fresh buy after the reload: %d %s, want 403 NOT_STARTED", r.Status, r.Body)
	}
	f.clock.at(t0, 700*time.Millisecond) // past the old spread, long before the new start
	wg.Wait()
	for u, r := range got {
		if r.Code != "NOT_STARTED" || r.Status != 403 {
			t.Errorf("%s, held when the sale was postponed: %d %s, want 403 NOT_STARTED", u, r.Status, r.Body)
		}
	}
	if n := len(f.shop.Orders()); n != 0 {
		t.Errorf("the shop took %d orders in a sale that has not started by the running config", n)
	}
	k := f.p.SKUStatus(t, "rt11pp")
	if !k.OK || k.Remaining+k.Pending+k.Confirmed != 10 || k.Confirmed != int64(len(f.shop.Orders())) {
		t.Errorf("stock %+v, shop orders %d", k, len(f.shop.Orders()))
	}
	t.Logf("stock after the release: %+v", k)
}

// The same with the end brought forward (the operator ends the sale now by
// reload): held buys released after the new end must be ENDED.
func TestRT11BSFFairStartReloadEndHeldBuys(t *testing.T) {
	t0 := fairT0.Add(25 * time.Minute)
	f := rt11bsfStartFair(t, e2e.Options{Activities: []e2e.Activity{{ID: "rt11pe", Stock: 10, Start: t0, End: t0.Add(2 * time.Hour),
		FairStart: 500 * time.Millisecond, FairStartSpread: 100 * time.Millisecond}}})
	f.clock.at(t0, 10*time.Millisecond)
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[string]e2e.Resp{}
	f.fire(&wg, "rt11pe", users("rt11pe-held", 3), func(u string, r e2e.Resp) { mu.Lock(); got[u] = r; mu.Unlock() })
	e2e.Eventually(t, 10*time.Second, "3 held", func() bool { return f.held() == 3 })
	// The sale now ends at start + 620ms: after the fair_start window and
	// spread (validation wants the end after them), before the clock's
	// next step.
	f.reload(t, func(o *e2e.Options) { o.Activities[0].End = t0.Add(620 * time.Millisecond) })
	f.clock.at(t0, 650*time.Millisecond)
	if r := f.buy("rt11pe", "rt11pe-fresh"); r.Code != "ENDED" {
		t.Fatalf("a fresh buy after the new end: %d %s, want 403 ENDED", r.Status, r.Body)
	}
	// The held buys' release moments are in [start+500ms, start+600ms):
	// the clock is past them (they go now) and past the new end.
	wg.Wait()
	for u, r := range got {
		if r.Code != "ENDED" {
			t.Errorf("%s, held when the sale was ended by reload: %d %s, want 403 ENDED", u, r.Status, r.Body)
		}
	}
	if n := len(f.shop.Orders()); n != 0 {
		t.Errorf("the shop took %d orders after the sale ended by the running config", n)
	}
}
