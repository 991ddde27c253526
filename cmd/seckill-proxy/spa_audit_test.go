package main

// SPEC audit spa (2026-12-07): SPEC §6 "serve runs the reconciler in the
// background (one instance at a time, under a Redis lease, every minute),
// and a reservation pending longer than pending_timeout is settled by
// asking verify; where no verify is configured it is reported, never
// guessed". No test ran serve's loop itself: the CLI tests run `reconcile`.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

func TestSPABackgroundReconcilerSettlesStalePending(t *testing.T) {
	old := reconcileEvery
	reconcileEvery = 50 * time.Millisecond
	t.Cleanup(func() { reconcileEvery = old })

	var mu sync.Mutex
	orders := map[string]bool{} // tokens the shop holds an order for
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ok := orders[r.URL.Query().Get("token")]
		mu.Unlock()
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		fmt.Fprintf(w, `{"order_id":"O-%s"}`, r.URL.Query().Get("token"))
	}))
	t.Cleanup(shop.Close)

	srv := redistest.Start(t)
	// kact asks the shop; nover has no verify.url.
	extra := fmt.Sprintf(`    verify: { url: "%s/internal/orders?token={token}" }
  - id: nover
    start: %s
    end: %s
    skus: [{ id: "sku1", stock: 5 }]
    shards: 4
    pending_timeout: 3s
`, shop.URL, time.Now().Add(-time.Minute).Format(time.RFC3339), time.Now().Add(time.Hour).Format(time.RFC3339))
	cfgPath := lifeConfig(t, srv.Addr, shop.URL, 5, extra)
	want(t, 0, "kact", "preheat", "-c", cfgPath)
	cfg, st := openStore(t, cfgPath)

	// Reservations made an hour ago by the proxy's clock: long past
	// pending_timeout. On kact: u1 the shop confirmed (and Redis knows),
	// u2 the shop took but the proxy never heard, u3 the shop never got.
	reserve := func(act, user string) store.Token {
		t.Helper()
		a := cfg.Activity(act)
		r, err := st.Reserve(context.Background(), store.ReserveRequest{Activity: act, SKU: "sku1", User: user, Qty: 1, Limit: 1,
			Shards: 4, NowMs: time.Now().Add(-time.Hour).UnixMilli(), ExpireAt: store.ExpireAt(a)})
		if err != nil || r.Code != lua.OK {
			t.Fatalf("reserve %s %s: %v %v", act, user, r.Code, err)
		}
		return r.Token
	}
	t1, t2, t3 := reserve("kact", "u1"), reserve("kact", "u2"), reserve("kact", "u3")
	t4 := reserve("nover", "u4")
	mu.Lock()
	orders[t1.String()], orders[t2.String()] = true, true
	mu.Unlock()
	if c, err := st.Confirm(context.Background(), t1, 4, "O-"+t1.String()); c != lua.OK || err != nil {
		t.Fatalf("confirm u1: %v %v", c, err)
	}

	// Two instances' loops at once, as a fleet runs them: the lease lets
	// one at a time repair.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		rc := cfg.Redis
		rc.ClientCache = false
		ist, err := store.OpenNow(rc, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ist.Close)
		rec := reservation.NewReconciler(ist, metrics.New(), zap.NewNop())
		wg.Add(1)
		go func() {
			defer wg.Done()
			backgroundReconciler(ctx, rec, func() *config.Config { return cfg }, zap.NewNop())
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })

	state := func(tok store.Token) string {
		r, ok, err := st.Lookup(context.Background(), tok, 4)
		if err != nil || !ok {
			t.Fatalf("lookup %s: %v %v", tok, ok, err)
		}
		return r.State
	}
	deadline := time.Now().Add(20 * time.Second)
	for state(t2) != store.StateConfirmed || state(t3) != store.StateReleased {
		if time.Now().After(deadline) {
			t.Fatalf("background reconciler did not settle: u2 %s (want confirmed), u3 %s (want released)", state(t2), state(t3))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Several more passes: the one without verify is reported, never guessed.
	time.Sleep(10 * reconcileEvery)
	if s := state(t4); s != store.StatePending {
		t.Fatalf("nover's stale reservation: %s, want pending (no verify: never guessed)", s)
	}
	if k := skuStatus(t, st, cfg.Activity("kact")); !k.OK || k.Initial != 5 || k.Remaining != 3 || k.Pending != 0 || k.Confirmed != 2 || k.Released != 1 {
		t.Fatalf("kact after the background passes: %+v", k)
	}
	if k := skuStatus(t, st, cfg.Activity("nover")); !k.OK || k.Remaining != 4 || k.Pending != 1 {
		t.Fatalf("nover after the background passes: %+v", k)
	}
}
