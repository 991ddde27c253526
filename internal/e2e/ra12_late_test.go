package e2e

import (
	"testing"
	"time"
)

// TestRA12LateShopAnswerThenRepeat: the shop answers 2xx after the
// proxy's timeout (504 with the token, pending); the reconciler confirms
// it by verify. The buyer's repeats of the same request id see the
// reservation's state, never an older one, and never buy twice; the
// shop holds one order. Holds.
func TestRA12LateShopAnswerThenRepeat(t *testing.T) {
	r := StartRedis(t)
	shop := ra12StartShop(t, 700*time.Millisecond)
	o := Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamTimeout: 300 * time.Millisecond,
		Activities: []Activity{{ID: "act_lt", Stock: 3, Pending: 20 * time.Second}}}
	p := StartProxy(t, o.Config(t))
	p.Preheat(t, "act_lt")
	first := ra12Buy(p.Addr, "act_lt", "lu", "lrid", 5*time.Second)
	if first.Code != "UPSTREAM_TIMEOUT" || first.Token() == "" {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	again := ra12Buy(p.Addr, "act_lt", "lu", "lrid", 5*time.Second)
	fresh := ra12Buy(p.Addr, "act_lt", "lu", "other", 5*time.Second)
	t.Logf("repeat while pending: %d %s; fresh id: %d %s", again.Status, again.Body, fresh.Status, fresh.Body)
	for _, x := range []Resp{again, fresh} {
		if !ra12SpecCode(x) || x.Code == "WIN" || x.Code == "SOLD_OUT" {
			t.Errorf("while pending: %d %s", x.Status, x.Body)
		}
	}
	Eventually(t, 5*time.Second, "shop idle", func() bool { return shop.cur.Load() == 0 })
	ra12Reconcile(t, p, "act_lt", time.Now().Add(time.Minute))
	after := ra12Buy(p.Addr, "act_lt", "lu", "lrid", 5*time.Second)
	t.Logf("repeat after reconcile: %d %s", after.Status, after.Body)
	if after.Code != "ALREADY_PURCHASED" && !ra12Replay(after) {
		t.Errorf("repeat after the reconciler confirmed: %d %s", after.Status, after.Body)
	}
	if after.Token() != "" && after.Token() != first.Token() {
		t.Errorf("repeat token %s, first %s", after.Token(), first.Token())
	}
	n, _ := shop.counts()
	if k := p.SKUStatus(t, "act_lt"); k.Confirmed != 1 || k.Pending != 0 || n != 1 {
		t.Fatalf("status %+v, shop orders %d", k, n)
	}
}
