package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestRA12ReloadToggleInflightTwiceShopAboveLimit: max_inflight 2, two
// winners at the shop; a reload lifts the bound and the next puts it back
// (an operator toggling it, or `watch: true` seeing two quick edits). The
// retired budget and the new one register in Redis under the same
// instance name, so the new one's "others" leave out the two still at the
// shop, and it grants two more: the shop works on 4 at once under
// max_inflight 2, though nothing was sent while the bound was off.
func TestRA12ReloadToggleInflightTwiceShopAboveLimit(t *testing.T) {
	const limit = 2
	r := StartRedis(t)
	shop := ra12StartShop(t, 1500*time.Millisecond)
	o := Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamTimeout: 3 * time.Second,
		UpstreamExtra: []string{"max_inflight: 2", "overflow: wait", "overflow_wait: 5s"},
		Activities:    []Activity{{ID: "act_rl", Stock: 10, Pending: 30 * time.Second}}}
	bounded := o.Config(t)
	p := StartProxy(t, bounded)
	p.Preheat(t, "act_rl")
	var wg sync.WaitGroup
	buy := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if res := ra12Buy(p.Addr, "act_rl", fmt.Sprintf("rl%d", i), "", 10*time.Second); res.Code != "WIN" {
				t.Errorf("buyer %d: %d %s", i, res.Status, res.Body)
			}
		}()
	}
	buy(0)
	buy(1)
	Eventually(t, 3*time.Second, "two at the shop", func() bool { return shop.cur.Load() == 2 })

	unbounded := *bounded
	unbounded.Upstream.MaxInflight = 0
	if err := p.Server.Apply(&unbounded); err != nil {
		t.Fatalf("reload without max_inflight: %v", err)
	}
	again := *bounded
	if err := p.Server.Apply(&again); err != nil {
		t.Fatalf("reload with max_inflight: %v", err)
	}
	buy(2)
	buy(3)
	wg.Wait()
	t.Logf("shop peak %d at once, received %d", shop.peak.Load(), shop.received.Load())
	if pk := shop.peak.Load(); pk > limit {
		t.Fatalf("the shop worked on %d buys at once after the bound came back, max_inflight %d", pk, limit)
	}
}
