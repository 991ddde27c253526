package e2e_test

import (
	"context"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// TestWarmMakesListenerWorkersReady: a warm-up leaves the listener with n
// idle workers (goroutines) waiting for connections, made by n connections
// held at once; every warm-up request is answered by the proxy itself.
func TestWarmMakesListenerWorkersReady(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := rqProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "wm", Stock: 5}}}, nil)
	before := runtime.NumGoroutine()
	if got := p.Server.Warm(p.Addr, 300); got != 300 {
		t.Fatalf("Warm(300) made %d workers ready, want 300 (every warm-up request held in the handler at once, then answered 204)", got)
	}
	// Other tests' goroutines come and go meanwhile: a loose check.
	if after := runtime.NumGoroutine(); after < before+250 {
		t.Fatalf("goroutines %d before the warm-up, %d after: want about 300 idle workers more", before, after)
	}
	if g := p.Gauge(p.Metrics.WarmWorkers); g != 300 {
		t.Fatalf("seckill_warm_workers = %v, want 300", g)
	}
	// The workers serve buyers as usual.
	if got := e2e.Buy(p.Addr, "wm", "after-warm"); got.Code != "WIN" {
		t.Fatalf("a buy after the warm-up: %d %s", got.Status, got.Body)
	}
	if len(shop.Requests()) != 1 {
		t.Fatalf("the shop got %d requests, want only the buy (a warm-up never reaches it)", len(shop.Requests()))
	}
}

// TestWarmPathIsNotPublic: the warm-up path answers only the process's own
// requests (its nonce); anyone else gets the public prefix's 404, and the
// shop never sees it.
func TestWarmPathIsNotPublic(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := rqProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "wp", Stock: 5}}}, nil)
	for _, h := range [][2]string{{"Seckill-Proxy-Warm", "guess"}, {"Seckill-Proxy-Warm", ""}, {"X-Other", "1"}} {
		got := e2e.Do(nil, p.Addr, e2e.Req{Method: "GET", URI: "/_seckill/_warm", Header: [][2]string{h}, Timeout: 2 * time.Second})
		if got.Status != http.StatusNotFound {
			t.Fatalf("GET /_seckill/_warm with %s: %q: %d %s, want 404", h[0], h[1], got.Status, got.Body)
		}
	}
	if len(shop.Requests()) != 0 {
		t.Fatalf("the shop got %d requests", len(shop.Requests()))
	}
}

// TestWarmRunsBeforeEachActivityStart: RunWarmups warms at start-up and
// again shortly before an activity's start (the sale's first wave), once.
func TestWarmRunsBeforeEachActivityStart(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	start := time.Now().Add(3500 * time.Millisecond).Truncate(time.Second)
	p := rqProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "ws", Stock: 5, Start: start, End: start.Add(time.Hour)}}},
		func(c *config.Config) { c.Server.WarmWorkers = 50 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.Server.RunWarmups(ctx, p.Addr)
	e2e.Eventually(t, 2*time.Second, "the start-up warm-up", func() bool { return p.Server.Warmups() == 1 })
	e2e.Eventually(t, time.Until(start)+time.Second, "a warm-up before the activity's start", func() bool { return p.Server.Warmups() == 2 })
	if early := time.Until(start); early < 0 || early > 2500*time.Millisecond {
		t.Fatalf("the pre-start warm-up ran %v before the start, want within 2 s of it", early)
	}
	time.Sleep(time.Until(start) + 700*time.Millisecond)
	if n := p.Server.Warmups(); n != 2 {
		t.Fatalf("%d warm-ups, want 2 (start-up, then once before the start)", n)
	}
}
