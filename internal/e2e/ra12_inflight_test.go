package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestRA12InflightShopAboveLimitAfterTimeouts: a shop slower than
// upstream.timeout that keeps working on a buy after the proxy gave up on
// it (a legacy shop in a DB transaction) — exactly the shop that needs
// protecting. README "Protecting the shop": "max_inflight: 2 # the shop
// works on at most 2 orders of an activity at once". The proxy frees the
// slot at its own timeout and sends the next winner while the shop is
// still working on the one it gave up on. Afterwards the late orders must
// be settled by reconcile --repair: orders == confirmed, nothing pending.
//
// What the proxy promises (the window config.MinPendingTimeout assumes, a
// shop behind a balancer with the same timeout): the shop may work on a
// request up to one more upstream.timeout after the proxy gave up, and the
// slot stays taken that long. This shop takes 1.75 × upstream.timeout; one
// slower than 2 × upstream.timeout is beyond what any proxy-side timeout can
// bound (the red team's first version used 3 ×, 1200 ms against 400 ms).
func TestRA12InflightShopAboveLimitAfterTimeouts(t *testing.T) {
	const stock, limit = 12, 2
	r := StartRedis(t)
	shop := ra12StartShop(t, 700*time.Millisecond)
	o := Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamTimeout: 400 * time.Millisecond,
		UpstreamExtra: []string{"max_inflight: 2", "overflow: wait", "overflow_wait: 10s"},
		Activities:    []Activity{{ID: "act_ra", Stock: stock, Pending: 30 * time.Second}}}
	p := StartProxy(t, o.Config(t))
	p.Preheat(t, "act_ra")

	var wg sync.WaitGroup
	codes := map[string]int{}
	var mu sync.Mutex
	for i := 0; i < stock; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := ra12Buy(p.Addr, "act_ra", fmt.Sprintf("u%d", i), "", 15*time.Second)
			mu.Lock()
			codes[fmt.Sprintf("%d %s", res.Status, res.Code)]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	// Let the shop finish what it still works on.
	Eventually(t, 5*time.Second, "shop idle", func() bool { return shop.cur.Load() == 0 })
	t.Logf("answers %v; shop peak %d at once, received %d", codes, shop.peak.Load(), shop.received.Load())

	rep := ra12Reconcile(t, p, "act_ra", time.Now().Add(time.Minute))
	for _, ar := range rep.Activities {
		for _, al := range ar.Alerts {
			t.Logf("alert: %s", al)
		}
	}
	k := p.SKUStatus(t, "act_ra")
	orders, perUser := shop.counts()
	if !k.OK || k.Pending != 0 || k.Confirmed != int64(orders) || perUser > 1 {
		t.Errorf("after reconcile: %+v; shop orders %d (max per user %d)", k, orders, perUser)
	}
	if pk := shop.peak.Load(); pk > limit {
		t.Fatalf("the shop worked on %d buys at once with max_inflight %d (slots freed at the proxy's timeout while the shop still worked)", pk, limit)
	}
}
