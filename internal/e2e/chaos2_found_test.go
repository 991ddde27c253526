package e2e

import (
	"sync"
	"testing"
	"time"
)

// Defects red team chaos2 found (docs/decisions.md §53), each replayed
// deterministically.

// TestChaos2FairStartHeldWinnerIsForwarded: an activity with fair_start
// (README "Fair start"): a buy arriving in [start, start+fair_start) is
// held, then goes on to the reserve script "exactly as an ordinary buy".
// TestChaos's fair mix saw every winner of A answered 504
// UPSTREAM_TIMEOUT (40 of 40 in each run) while the shop took the orders
// within 20 ms.
func TestChaos2FairStartHeldWinnerIsForwarded(t *testing.T) {
	const act = "c2fs"
	r := StartRedis(t)
	shop := ra12StartShop(t, 20*time.Millisecond)
	start := time.Now().Add(1500 * time.Millisecond).Truncate(time.Millisecond)
	o := Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamTimeout: 500 * time.Millisecond,
		Activities: []Activity{{ID: act, Stock: 10, Shards: 1, Start: start, FairStart: 400 * time.Millisecond, FairStartSpread: 300 * time.Millisecond}}}
	p := StartProxy(t, o.Config(t))
	p.Preheat(t, act)
	time.Sleep(time.Until(start.Add(50 * time.Millisecond)))
	var wg sync.WaitGroup
	res := make([]Resp, 5)
	for i := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = Buy(p.Addr, act, "u"+string(rune('a'+i)))
		}()
	}
	wg.Wait()
	for i, r := range res {
		if r.Code != "WIN" {
			t.Errorf("held buyer %d: %d %s (%v), want the shop's 200", i, r.Status, r.Body, r.Err)
		}
	}
}
