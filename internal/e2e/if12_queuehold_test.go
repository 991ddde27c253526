package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestIf12QueueWorkersHoldSlotAfterTimeout: TestRA12InflightShopAboveLimitAfterTimeouts
// for queue workers. A worker whose send timed out leaves the reservation
// pending and goes on to the next entry; the shop, slower than
// upstream.timeout (but within the one more upstream.timeout the proxy
// allows for), still works on the one it gave up on. The slot stays taken
// meanwhile: the shop never works on more than max_inflight at once.
func TestIf12QueueWorkersHoldSlotAfterTimeout(t *testing.T) {
	const stock, limit = 8, 2
	r := StartRedis(t)
	shop := ra12StartShop(t, 700*time.Millisecond)
	o := Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamTimeout: 400 * time.Millisecond,
		UpstreamExtra: []string{"max_inflight: 2"},
		Activities:    []Activity{{ID: "act_qh", Stock: stock, Mode: "queue", Pending: 30 * time.Second}}}
	p := StartProxy(t, o.Config(t))
	p.Preheat(t, "act_qh")
	var wg sync.WaitGroup
	for i := 0; i < stock; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if res := ra12Buy(p.Addr, "act_qh", fmt.Sprintf("q%d", i), "", 5*time.Second); res.Code != "QUEUED" {
				t.Errorf("buyer %d: %d %s", i, res.Status, res.Body)
			}
		}()
	}
	wg.Wait()
	p.StartQueue(t)
	Eventually(t, 20*time.Second, "every entry sent", func() bool { return shop.received.Load() == stock })
	Eventually(t, 5*time.Second, "shop idle", func() bool { return shop.cur.Load() == 0 })
	t.Logf("shop peak %d at once, received %d", shop.peak.Load(), shop.received.Load())
	if pk := shop.peak.Load(); pk > limit {
		t.Fatalf("the shop worked on %d buys at once with max_inflight %d (a worker's slot freed at its timeout while the shop still worked)", pk, limit)
	}
}
