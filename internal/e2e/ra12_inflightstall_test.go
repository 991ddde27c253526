package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestRA12InflightRedisStopTwoInstances: two instances share
// max_inflight 2 (overflow: wait), both with winners waiting for slots,
// and Redis is SIGSTOPped for longer than the budget's lease
// (upstream.timeout + 2 s). Every lease has expired in Redis when it
// comes back; each instance then re-registers with Floor = the slots it
// held before the stop (inflight.lua never takes a floor away), whatever
// it really uses, so the fleet holds 2 + 2 and the shop gets up to 4 at
// once.
func TestRA12InflightRedisStopTwoInstances(t *testing.T) {
	Soak(t)
	if testing.Short() {
		t.Skip("≈12 s")
	}
	const stock, limit = 40, 2
	r := StartRedis(t)
	shop := ra12StartShop(t, 300*time.Millisecond)
	o := Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamTimeout: time.Second,
		UpstreamExtra: []string{"max_inflight: 2", "overflow: wait", "overflow_wait: 10s"},
		Activities:    []Activity{{ID: "act_rs", Stock: stock, Pending: 30 * time.Second}}}
	p1, p2 := StartProxy(t, o.Config(t)), StartProxy(t, o.Config(t))
	p1.Preheat(t, "act_rs")
	p2.WaitPreheated(t, "act_rs")

	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[string]int{}
	var odd []string
	for i := 0; i < stock; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			addr := p1.Addr
			if i%2 == 1 {
				addr = p2.Addr
			}
			res := ra12Buy(addr, "act_rs", fmt.Sprintf("s%d", i), fmt.Sprintf("rid%d", i), 20*time.Second)
			mu.Lock()
			defer mu.Unlock()
			codes[res.Code]++
			if !ra12SpecCode(res) {
				odd = append(odd, fmt.Sprintf("%d %s %v", res.Status, res.Body, res.Err))
			}
		}()
	}
	Eventually(t, 5*time.Second, "both instances at the shop", func() bool {
		return p1.Server.Inflight().Budget("act_rs").InUse() > 0 && p2.Server.Inflight().Budget("act_rs").InUse() > 0
	})
	peakBefore := shop.peak.Load()
	r.Node.Pause(t)
	time.Sleep(4 * time.Second)
	r.Node.Resume(t)
	wg.Wait()
	Eventually(t, 5*time.Second, "shop idle", func() bool { return shop.cur.Load() == 0 })
	t.Logf("answers %v (odd %v); shop peak before the stop %d, overall %d; received %d", codes, odd, peakBefore, shop.peak.Load(), shop.received.Load())
	time.Sleep(2 * time.Second)
	ra12Reconcile(t, p1, "act_rs", time.Now().Add(time.Minute))
	k := p1.SKUStatus(t, "act_rs")
	n, perUser := shop.counts()
	if !k.OK || k.Pending != 0 || k.Confirmed != int64(n) || perUser > 1 {
		t.Errorf("after reconcile: %+v; shop orders %d, max per user %d", k, n, perUser)
	}
	if len(odd) > 0 {
		t.Errorf("answers outside SPEC: %v", odd)
	}
	if pk := shop.peak.Load(); pk > limit {
		t.Fatalf("the shop had %d buys at once after Redis came back, max_inflight %d", pk, limit)
	}
}
