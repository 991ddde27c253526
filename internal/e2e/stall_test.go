package e2e_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// stallProxy is a proxy with redis.timeout 100 ms in front of a Redis that
// takes DEBUG SLEEP, with activity "stall" preheated and its scripts
// loaded (a script first sent during a stall would find NOSCRIPT later and
// never run, hiding what a stall does).
func stallProxy(t *testing.T, stock int64) (*redistest.Server, *e2e.Shop, *e2e.Proxy) {
	t.Helper()
	// An append-only file synced on every write: a test may kill Redis and
	// start it again with its data.
	node := redistest.Start(t, "--enable-debug-command", "yes", "--appendonly", "yes", "--appendfsync", "always")
	shop := e2e.StartShop(t)
	cfg := e2e.Options{Redis: []string{node.Addr}, ShopURL: shop.URL, RedisTimeout: 100 * time.Millisecond,
		Activities: []e2e.Activity{{ID: "stall", Stock: stock}}}.Config(t)
	p := e2e.StartProxy(t, cfg)
	p.Preheat(t, "stall")
	wantWin(t, stallBuy(p, "warm-up"))
	return node, shop, p
}

func stallBuy(p *e2e.Proxy, user string) e2e.Resp {
	return e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/stall/" + e2e.SKU + "/buy",
		Header: [][2]string{{"X-User-Id", user}}, Timeout: clientTimeout})
}

// sleepRedis blocks Redis for d (DEBUG SLEEP) and returns once the sleep
// has begun; the returned function waits for its end.
func sleepRedis(t *testing.T, node *redistest.Server, d time.Duration) (wait func()) {
	done := make(chan error, 1)
	go func() { _, err := node.Do("DEBUG", "SLEEP", fmt.Sprint(d.Seconds())); done <- err }()
	time.Sleep(30 * time.Millisecond)
	return func() {
		if err := <-done; err != nil {
			t.Fatalf("DEBUG SLEEP: %v", err)
		}
	}
}

// Issue 8 §2, as measured: redis.timeout 100 ms, Redis stalled 400 ms
// three times with 10 buyers in flight each. STORE_UNAVAILABLE means
// nothing is held: with no reconciler running, nothing stays pending,
// every refused buyer buys again at once and wins, stock adds up and the
// shop holds one order per winner.
func TestRedisStallLeavesNoPhantoms(t *testing.T) {
	node, shop, p := stallProxy(t, 100)
	unavailable := stallRounds(t, node, func(user string) e2e.Resp { return stallBuy(p, user) })
	if len(unavailable) == 0 {
		t.Fatal("no buyer was in flight during a stall")
	}
	for _, u := range unavailable {
		if r := stallBuy(p, u); r.Code != "WIN" {
			t.Errorf("%s, refused during a stall, buys again: %d %s, want a win", u, r.Status, r.Body)
		}
	}
	e2e.Eventually(t, 3*time.Second, "nothing pending after the stalls", func() bool {
		k := p.SKUStatus(t, "stall")
		return k.OK && k.Pending == 0
	})
	orders := shop.Orders()
	k := p.SKUStatus(t, "stall")
	if k.Confirmed != int64(len(orders)) || k.Remaining+k.Confirmed != 100 {
		t.Errorf("status %+v with %d shop orders", k, len(orders))
	}
	perUser := map[string]int{}
	for _, o := range orders {
		if perUser[o.User]++; perUser[o.User] > 1 {
			t.Errorf("user %s has %d orders", o.User, perUser[o.User])
		}
	}
}

// A confirm that fails after the shop accepted the order is retried when
// Redis answers again: the order ends confirmed moments later, not when the
// reconciler comes by. During a stall the timed-out confirm may also run
// late by itself; across a restart (the confirm never reached Redis) only
// the retry confirms.
func TestConfirmDuringOutageEndsConfirmed(t *testing.T) {
	tests := []struct {
		name   string
		outage func(t *testing.T, node *redistest.Server) (end func())
	}{
		{name: "stall", outage: func(t *testing.T, node *redistest.Server) func() {
			return sleepRedis(t, node, 600*time.Millisecond)
		}},
		{name: "restart", outage: func(t *testing.T, node *redistest.Server) func() {
			node.Kill()
			return func() {
				time.Sleep(300 * time.Millisecond)
				node.Restart(t)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node, shop, p := stallProxy(t, 10)
			release := shop.Hang("u1")
			res := make(chan e2e.Resp, 1)
			go func() { res <- stallBuy(p, "u1") }()
			e2e.Eventually(t, 3*time.Second, "the shop has the buy", func() bool { return shop.SeenBuy("u1") })
			end := tt.outage(t, node)
			release() // the shop says 200 while Redis is out: the confirm fails
			wantWin(t, <-res)
			end()
			e2e.Eventually(t, 3*time.Second, "the order confirmed after the outage", func() bool {
				k, err := p.Store.Status(context.Background(), p.Activity(t, "stall"))
				return err == nil && len(k.SKUs) == 1 && k.SKUs[0].OK && k.SKUs[0].Pending == 0 && k.SKUs[0].Confirmed == 2
			})
		})
	}
}

// stallRounds stalls node three times for 400 ms (DEBUG SLEEP) with 10
// buyers in flight each (buy, users r<round>-u<i>) and returns the users
// answered STORE_UNAVAILABLE; any answer but that or a win fails t.
func stallRounds(t *testing.T, node *redistest.Server, buy func(user string) e2e.Resp) []string {
	t.Helper()
	var mu sync.Mutex
	var unavailable []string
	for round := 0; round < 3; round++ {
		wait := sleepRedis(t, node, 400*time.Millisecond)
		var wg sync.WaitGroup
		for i := 0; i < 10; i++ {
			user := fmt.Sprintf("r%d-u%d", round, i)
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := buy(user)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case r.Code == "STORE_UNAVAILABLE" && r.Status == 503:
					unavailable = append(unavailable, user)
				case r.Code == "WIN":
				default:
					t.Errorf("%s during a stall: %d %s (err %v)", user, r.Status, r.Body, r.Err)
				}
			}()
		}
		wg.Wait()
		wait()
	}
	return unavailable
}
