package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// TestRA12QueueDurableForwardOutlivesPendingTimeout: queue mode with
// durable_winners { on_timeout: forward } and the replica SIGSTOPped. A
// worker claims an entry (the claim stamps it: pending_timeout counts from
// there), then waits durable_winners.timeout for the replica, then sends.
// Sync mode refuses to send a winner that old (lateToSend, reason "late");
// the worker has no such check. pending_timeout is the minimum the config
// allows (2 × upstream.timeout + 2 s), and the shop answers within the
// 2 × upstream.timeout the README says a shop behind a balancer may take.
// A reconcile pass (the background one runs every minute on some
// instance) that comes while the shop works on the buy asks verify
// ("absent"), releases the unit, and the shop then takes the order: an
// order for a released unit, the unit back on sale.
func TestRA12QueueDurableForwardOutlivesPendingTimeout(t *testing.T) {
	Soak(t)
	if testing.Short() {
		t.Skip("≈12 s")
	}
	m := redistest.Start(t)
	rep := redistest.StartReplica(t, m)
	shop := ra12StartShop(t, 1500*time.Millisecond)
	o := Options{Redis: []string{m.Addr}, ShopURL: shop.URL, UpstreamTimeout: time.Second,
		RedisExtra: []string{"durable_winners: { replicas: 1, timeout: 3s, on_timeout: forward }"},
		Activities: []Activity{{ID: "act_rd", Stock: 3, Mode: "queue", Pending: 4 * time.Second, Shards: 1}}}
	p := StartProxy(t, o.Config(t))
	p.Preheat(t, "act_rd")
	p.StartQueue(t)
	rep.Pause(t)

	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := ra12Buy(p.Addr, "act_rd", fmt.Sprintf("d%d", i), "", 10*time.Second)
			if !ra12SpecCode(res) {
				t.Errorf("buyer %d: %d %s", i, res.Status, res.Body)
			}
		}()
	}
	Eventually(t, 15*time.Second, "a buy at the shop", func() bool { return shop.received.Load() > 0 })
	// The shop answers 1.5 s after the send (within 2 × upstream.timeout);
	// a reconcile pass comes 1.2 s after the send.
	time.Sleep(1200 * time.Millisecond)
	r1 := ra12Reconcile(t, p, "act_rd", time.Now())
	wg.Wait()
	Eventually(t, 10*time.Second, "shop idle", func() bool { return shop.cur.Load() == 0 && shop.received.Load() == 3 })
	time.Sleep(1500 * time.Millisecond)
	r2 := ra12Reconcile(t, p, "act_rd", time.Now().Add(time.Minute))
	var alerts []string
	for _, ar := range append(r1.Activities, r2.Activities...) {
		for _, f := range ar.Stale {
			t.Logf("stale %s age %d ms: %s %s %s", f.Token, f.AgeMs, f.Verdict, f.Action, f.Detail)
		}
		alerts = append(alerts, ar.Alerts...)
	}
	k := p.SKUStatus(t, "act_rd")
	orders, _ := shop.counts()
	t.Logf("status %+v; shop orders %d; alerts %v", k, orders, alerts)
	if k.Confirmed != int64(orders) || strings.Contains(strings.Join(alerts, " "), "order_for_released") {
		t.Fatalf("shop holds %d orders, Redis confirmed %d, released %d: the reconciler released units the shop was still taking orders for (alerts %v)",
			orders, k.Confirmed, k.Released, alerts)
	}
}
