package e2e_test

import (
	"context"
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
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestRT11QRepairRacesTakeoverResend: queue mode, verify configured. A's
// worker claims buyer u's reservation, sends it, and dies before an
// answer (the shop never took the order). The reservation is now pending
// since A's send. A repairing reconcile pass whose clock has it past
// pending_timeout picks it from the pending index and asks verify (404:
// true, the shop has no order). Meanwhile B takes the entry over: its
// claim answers SAME and re-stamps the send time "so the reconciler does
// not verify it while the new request is in flight" (docs/reservations.md,
// queue mode), verify says absent, and B sends it again. The reconciler's
// verdict lands now: it releases the reservation B has in flight at the
// shop. The shop then takes B's order (2xx) and B's confirm answers
// RELEASED: the unit is back on sale while the shop holds an order for it;
// the next buyer takes it and the shop holds two orders for one unit.
//
// Expected (SPEC §6, docs/reservations.md): the reconciler never releases a
// reservation whose send it did not verify (the release should be
// conditional on the send stamp it read); shop orders == confirmed; no
// oversell.
func TestRT11QRepairRacesTakeoverResend(t *testing.T) {
	if testing.Short() {
		t.Skip("a multi-second queue fault run: the plain pass of make test runs it")
	}
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)

	// verify.url: the shop's answer, but the first call (the reconciler's)
	// is held until the test lets it go; its verdict is what the shop
	// says at that moment.
	var mu sync.Mutex
	calls := 0
	held := make(chan struct{})
	gate := make(chan struct{})
	verify := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		calls++
		first := calls == 1
		mu.Unlock()
		if first {
			close(held)
			<-gate
		}
		if _, ok := shop.Orders()[req.URL.Query().Get("token")]; ok {
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(`{}`))
			return
		}
		http.Error(w, "no such order", http.StatusNotFound)
	}))
	t.Cleanup(verify.Close)
	var gateOnce sync.Once
	openGate := func() { gateOnce.Do(func() { close(gate) }) }
	t.Cleanup(openGate)

	const pt = 30 * time.Second
	opts := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "rt11qr", Stock: 1, Shards: 1, Mode: "queue", Pending: pt}}}
	p := rqProxy(t, opts, func(c *config.Config) {
		c.Activities[0].Queue.Workers = 1
		c.Activities[0].Queue.Rate = 100
		c.Activities[0].Verify.URL = verify.URL + "/internal/orders?token={token}"
	})
	a := p.Activity(t, "rt11qr")
	st := opsStore(t, p.Cfg)

	relA := shop.Hang("rt11qr-u")
	got := e2e.Buy(p.Addr, "rt11qr", "rt11qr-u")
	if got.Code != "QUEUED" {
		t.Fatalf("buy: %d %s", got.Status, got.Body)
	}
	tok := got.Token()
	qa := rqQueue(t, p, "A", 1500*time.Millisecond)
	e2e.Eventually(t, 5*time.Second, "A's send at the shop", func() bool { return shop.SeenBuy("rt11qr-u") })
	qa.Kill() // A dies with the request unanswered: the shop has no order
	time.Sleep(500 * time.Millisecond)
	// B's resend will hang at the shop too, until the reconciler has spoken.
	relB := relA
	t.Cleanup(relB)

	// The background reconcile pass: its clock has A's send past pending_timeout.
	type out struct {
		rep reservation.Report
		err error
	}
	done := make(chan out, 1)
	go func() {
		rec := reservation.NewReconciler(st, metrics.New(), zap.NewNop())
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		rep, err := rec.Run(ctx, []*config.Activity{a}, true, time.Now().Add(pt-200*time.Millisecond))
		done <- out{rep, err}
	}()
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		t.Fatal("the reconciler never asked verify about the stale reservation")
	}

	// B takes the entry over and sends it again with the same token.
	rqQueue(t, p, "B", 1500*time.Millisecond)
	e2e.Eventually(t, 8*time.Second, "B's resend at the shop", func() bool {
		n := 0
		for _, rq := range shop.Requests() {
			if rq.Header.Get("X-Seckill-Token") == tok {
				n++
			}
		}
		return n >= 2
	})
	openGate() // verify: 404 (the shop has still taken no order)
	o := <-done
	if o.err != nil {
		t.Logf("reconcile: %v", o.err)
	}
	relB() // the shop takes B's order
	e2e.Eventually(t, 5*time.Second, "the shop's order", func() bool { return len(shop.Orders()) == 1 })
	last := rqAwaitSettled(p.Addr, []string{tok}, 5*time.Second)[0]
	t.Logf("buyer after the race: %s", last)
	if last.State != store.StateConfirmed {
		t.Errorf("buyer u: %s; want confirmed (the shop holds order %v)", last, shop.Orders()[tok].OrderID)
	}

	// The next buyer: is the unit on sale again?
	next := e2e.Buy(p.Addr, "rt11qr", "rt11qr-v")
	t.Logf("next buyer: %d %s", next.Status, next.Body)
	if next.Code == "QUEUED" {
		rqAwaitSettled(p.Addr, []string{next.Token()}, 5*time.Second)
	}
	orders := shop.Orders()
	k := rqWantStock(t, st, a)
	if int64(len(orders)) != k.Confirmed || len(orders) > 1 {
		t.Errorf("stock 1: the shop holds %d orders, Redis confirmed %d (%+v): oversold", len(orders), k.Confirmed, k)
	}
}
