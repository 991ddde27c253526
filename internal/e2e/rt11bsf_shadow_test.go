package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
)

// Red team round 11: bundles, shadow mode and fair start. This file:
// shadow mode.

// rt11bsfShadowActs is what serve's background reconciler and the CLI's
// status/reconcile act on for cfg (cmd/seckill-proxy activities(): the
// shadow copy of a shadow activity).
func rt11bsfShadowActs(cfg *config.Config) []*config.Activity {
	out := make([]*config.Activity, 0, len(cfg.Activities))
	for i := range cfg.Activities {
		out = append(out, cfg.Activities[i].ShadowOrSelf())
	}
	return out
}

// An operator switches a running, enforcing sale to `mode: shadow` by
// reload (SIGHUP or watch) mid-sale. The reload is accepted without a
// word, and then:
//   - every buy of the sale goes to the shop with no admission at all
//     (shadow mode forwards everything): the running sale's buy path is
//     open, exactly what keepsRunningSales (proxy/reload.go) refuses for a
//     dropped route ("would pass to the shop with no admission and no
//     token");
//   - the sale's own reservations are orphaned: status, reconcile and the
//     background reconciler act on the `<ID>~shadow` copy from now on, so
//     a winner left pending (the shop took the order behind a 502) is never
//     settled, even long past pending_timeout with verify.url saying the
//     order exists: the shop's orders never equal Redis's confirmed units.
//
// Want: the reload refused with a clear message while the sale runs (as
// for a dropped route), or the real activity's reservations still settled.
func TestRT11BSFReloadLiveSaleToShadow(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	now := time.Now()
	opts := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamTimeout: 2 * time.Second,
		Activities: []e2e.Activity{{ID: "rt11ls", Stock: 3, Shards: 1, Start: now.Add(-time.Minute), End: now.Add(time.Hour)}}}
	p := e2e.StartProxy(t, opts.Config(t))
	p.Preheat(t, "rt11ls")

	// The sale runs: one winner confirmed, one the shop took behind a 502
	// (left pending for verify).
	wantWin(t, e2e.Buy(p.Addr, "rt11ls", "w1"))
	shop.AnswerAfterOrder("w2", http.StatusBadGateway)
	if got := e2e.Buy(p.Addr, "rt11ls", "w2"); got.Code != "UPSTREAM_TIMEOUT" {
		t.Fatalf("w2: %d %s, want 504 UPSTREAM_TIMEOUT", got.Status, got.Body)
	}
	p.WantStock(t, "rt11ls", 1, 1, 1)

	// The reload.
	opts.Activities[0].Mode = config.ModeShadow
	opts.Activities[0].NoVerify = false
	next := opts.Config(t)
	err := p.Server.Apply(next)
	if err == nil {
		t.Errorf("a reload switching running sale rt11ls (preheated, 1 unit left, 1 pending) to mode: shadow was accepted without a word")
	} else {
		t.Logf("reload refused: %v", err)
		return
	}

	// Consequence 1: the running sale's buys reach the shop unadmitted,
	// beyond its stock (1 unit left) and without tokens.
	passed := 0
	for i := 0; i < 5; i++ {
		got := e2e.Buy(p.Addr, "rt11ls", fmt.Sprintf("late%d", i))
		if got.Status == 200 && got.Header["X-Shop"] == "pass" {
			passed++
		}
	}
	t.Logf("after the reload %d of 5 buys went to the shop with no admission (1 unit was left)", passed)

	// Consequence 2: the reconciler serve runs (activities() → the shadow
	// copy) never settles the real sale's pending winner.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a := next.Activity("rt11ls")
	if _, err := reservation.NewReconciler(p.Store, metrics.New(), zap.NewNop()).
		Run(ctx, rt11bsfShadowActs(next), true, time.Now().Add(a.PendingTimeout+time.Minute)); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	real, err := p.Store.Status(ctx, p.Activity(t, "rt11ls"))
	if err != nil {
		t.Fatal(err)
	}
	var confirmed, pending int64
	for _, k := range real.SKUs {
		confirmed += k.Confirmed
		pending += k.Pending
	}
	if orders := len(shop.Orders()); int64(orders) != confirmed || pending != 0 {
		t.Errorf("after the reconciler (past pending_timeout, verify.url set): the shop holds %d orders, the real sale's Redis %d confirmed and %d pending: its winner is never settled", orders, confirmed, pending)
	}
}

// README, Shadow mode: "Every buy is forwarded unchanged ... and the shop's
// answer goes back as it is. Nothing is refused ... The one exception: a
// chunked buy body over 64 KiB". Requests on a shadow activity's buy path
// that the proxy would refuse in enforcing mode for their method or
// spelling: are they the shop's to answer?
func TestRT11BSFShadowMethodAndSpellingNotRefused(t *testing.T) {
	_, p := rmShadowFixture(t, "", func(a *e2e.Activity) { a.SKUs = []config.SKU{{ID: "a", Stock: 10}} })
	for _, rq := range []e2e.Req{
		{Method: "GET", URI: "/api/seckill/sh/a/buy", Header: [][2]string{{"X-User-Id", "g1"}}},
		{Method: "PUT", URI: "/api/seckill/sh/a/buy", Header: [][2]string{{"X-User-Id", "g2"}}},
		{URI: "/api/seckill/sh/a%2Fb/buy", Header: [][2]string{{"X-User-Id", "g3"}}},
		{URI: "/api/seckill/sh/a/../a/buy", Header: [][2]string{{"X-User-Id", "g4"}}},
	} {
		got := e2e.Do(nil, p.Addr, rq)
		if got.Err != nil || got.Header["X-Shop"] != "pass" {
			t.Errorf("%s %s on a shadow activity: %d %s (err %v), want the shop's own answer", rt11bsfOr(rq.Method, "POST"), rq.URI, got.Status, got.Body, got.Err)
		}
	}
}

func rt11bsfOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// README, Shadow mode: "Every buy is forwarded unchanged (as ordinary
// traffic is ...) and the shop's answer goes back as it is. Nothing is
// refused" — the point is to stand in front of a live legacy shop
// "without changing anything the shop or its buyers see". A legacy shop
// under a flash sale is slow: here it answers a buy after 1.5 s. As
// ordinary traffic the buy would wait up to upstream.pass_timeout (60 s);
// a shadowed buy is sent with the buy client and upstream.timeout (here
// 500 ms, default 3 s, sized for winners) and the buyer gets the proxy's
// own "504 upstream timeout" while the shop goes on and takes the order:
// the buyer sees a failure for a buy that succeeded (and a legacy client
// retries it). Want: the shop's own answer (a shadowed buy waits as
// ordinary traffic would).
func TestRT11BSFShadowSlowShopAnswerKept(t *testing.T) {
	if testing.Short() {
		t.Skip("a multi-second fault, cluster or memory run: the plain pass of make test runs it")
	}
	r := e2e.StartRedis(t)
	var mu sync.Mutex
	orders := 0
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		time.Sleep(1500 * time.Millisecond)
		mu.Lock()
		orders++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Shop", "slow")
		_, _ = io.WriteString(w, `{"order_id":"legacy-1"}`)
	}))
	t.Cleanup(shop.Close)
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamTimeout: 500 * time.Millisecond,
		Activities: []e2e.Activity{{ID: "rt11sl", Mode: config.ModeShadow, NoVerify: true, SKUs: []config.SKU{{ID: "a", Stock: 5}}}}}.Config(t))
	p.Preheat(t, "rt11sl")
	got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/rt11sl/a/buy", Header: [][2]string{{"X-User-Id", "slowbuyer"}}, Timeout: 10 * time.Second})
	time.Sleep(1200 * time.Millisecond) // the shop finishes its order either way
	mu.Lock()
	n := orders
	mu.Unlock()
	if got.Err != nil || got.Status != 200 || got.Header["X-Shop"] != "slow" {
		t.Errorf("shadowed buy at a shop that answers in 1.5 s: %d %q (err %v), want the shop's 200; the shop took %d order(s)", got.Status, got.Body, got.Err, n)
	}
	// The same shop as ordinary traffic: its answer comes back.
	pass := e2e.Do(nil, p.Addr, e2e.Req{Method: "GET", URI: "/somewhere/else", Timeout: 10 * time.Second})
	if pass.Status != 200 || pass.Header["X-Shop"] != "slow" {
		t.Errorf("ordinary request to the same shop: %d %q", pass.Status, pass.Body)
	}
}
