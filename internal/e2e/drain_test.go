package e2e_test

import (
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// After Drain (the first step of a graceful stop) every buy is answered
// 503 BUSY with Retry-After and closes its connection, nothing is
// reserved, and other routes are still passed to the shop.
func TestDrainRefusesBuys(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "dr", Stock: 5}}}.Config(t))
	p.Preheat(t, "dr")
	// NOT_READY until the preheat's invalidation arrives; then a win.
	e2e.Eventually(t, 5*time.Second, "a win before Drain", func() bool {
		got := e2e.Buy(p.Addr, "dr", "before")
		if got.Code != "WIN" && got.Code != "NOT_READY" {
			t.Fatalf("buy before Drain: %d %s", got.Status, got.Code)
		}
		return got.Code == "WIN"
	})
	p.Server.Drain()
	for _, u := range []string{"a", "b", "c"} {
		got := e2e.Buy(p.Addr, "dr", u)
		if got.Status != 503 || got.Code != "BUSY" || got.Header["Retry-After"] != "1" || got.Header["Connection"] != "close" {
			t.Errorf("buy while draining: %d %s headers %v", got.Status, got.Code, got.Header)
		}
	}
	if shop.SeenBuy("a") {
		t.Error("a buy sent while draining reached the shop")
	}
	p.WantStock(t, "dr", 4, 0, 1)
	if got := e2e.Do(nil, p.Addr, e2e.Req{Method: "GET", URI: "/catalog"}); got.Status != 200 || got.Header["X-Shop"] == "" {
		t.Errorf("pass-through while draining: %d %v", got.Status, got.Header)
	}
}
