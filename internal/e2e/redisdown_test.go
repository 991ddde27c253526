package e2e_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// clientTimeout is the generous bound a buyer's client waits: a refusal must
// come back before it, never a hang.
const clientTimeout = 3 * time.Second

func buyWithin(f *fixture, act, user string) e2e.Resp {
	return e2e.Do(nil, f.p.Addr, e2e.Req{URI: "/api/seckill/" + act + "/" + e2e.SKU + "/buy",
		Header: [][2]string{{"X-User-Id", user}}, Timeout: clientTimeout})
}

// TestRedisKilledMidSale: with Redis gone, buys are refused with
// STORE_UNAVAILABLE (nothing reserved) while ordinary routes keep working;
// a restarted, empty Redis answers NOT_READY until preheat, then sells.
func TestRedisKilledMidSale(t *testing.T) {
	f := newFixture(t)
	for i := 0; i < 5; i++ {
		wantWin(t, buyWithin(f, actOpen, "before"+strconv.Itoa(i)))
	}
	wantWin(t, buyWithin(f, actTiny, "before"))
	wantCode(t, buyWithin(f, actTiny, "before-late"), "SOLD_OUT", 410)
	f.redis.Node.Kill()

	for i := 0; i < 5; i++ {
		r := buyWithin(f, actOpen, "during"+strconv.Itoa(i))
		wantCode(t, r, "STORE_UNAVAILABLE", 503)
		wantRetryAfter(t, r)
		g := e2e.Do(nil, f.p.Addr, e2e.Req{Method: "GET", URI: "/catalog?i=" + strconv.Itoa(i), Timeout: clientTimeout})
		if g.Err != nil || g.Status != 200 || g.Header["X-Shop"] != "pass" {
			t.Fatalf("ordinary route with Redis down: %d %s (err %v)", g.Status, g.Body, g.Err)
		}
		wantCode(t, buyWithin(f, actQuery+"-unknown", "x"), "UNKNOWN_ITEM", 404)
	}
	if n := len(f.shop.Buys()); n != 6 {
		t.Errorf("shop got %d buys, want the 6 before the kill", n)
	}

	f.redis.Node.Restart(t)
	n := 0
	e2e.Eventually(t, 10*time.Second, "NOT_READY after restart", func() bool {
		n++
		r := buyWithin(f, actOpen, "after"+strconv.Itoa(n))
		if r.Code != "NOT_READY" && r.Code != "STORE_UNAVAILABLE" {
			t.Fatalf("before preheat: %d %s", r.Status, r.Body)
		}
		return r.Code == "NOT_READY"
	})
	f.p.Preheat(t, actOpen)
	e2e.Eventually(t, 3*time.Second, "a win after preheat", func() bool {
		n++
		return buyWithin(f, actOpen, "after"+strconv.Itoa(n)).Code == "WIN"
	})
	// What the proxy remembered of the old Redis (sold out) is gone with it.
	f.p.Preheat(t, actTiny)
	wantWin(t, buyWithin(f, actTiny, "after-tiny"))
	k := f.p.SKUStatus(t, actOpen)
	if !k.OK || k.Confirmed != 1 || k.Pending != 0 || k.Remaining != 99 {
		t.Errorf("status after restart: %+v", k)
	}
}

// TestProxyStartedBeforeRedis: a proxy whose Redis is not up yet serves
// ordinary routes, refuses buys with STORE_UNAVAILABLE, and sells once
// Redis is up and preheated.
func TestProxyStartedBeforeRedis(t *testing.T) {
	shop := e2e.StartShop(t)
	port := redistest.FreePort(t)
	cfg := e2e.Options{Redis: []string{"127.0.0.1:" + strconv.Itoa(port)}, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: actOpen, Stock: 10}}}.Config(t)
	p := e2e.StartProxy(t, cfg)
	f := &fixture{shop: shop, p: p}

	g := e2e.Do(nil, p.Addr, e2e.Req{Method: "GET", URI: "/catalog", Timeout: clientTimeout})
	if g.Err != nil || g.Status != 200 || g.Header["X-Shop"] != "pass" {
		t.Fatalf("ordinary route without Redis: %d %s (err %v)", g.Status, g.Body, g.Err)
	}
	wantCode(t, buyWithin(f, actOpen, "early"), "STORE_UNAVAILABLE", 503)
	if r := e2e.Do(nil, p.Addr, e2e.Req{Method: "GET", URI: "/_seckill/time"}); r.Status != 200 {
		t.Errorf("time without Redis: %d", r.Status)
	}

	redistest.StartOn(t, port)
	e2e.Eventually(t, 10*time.Second, "preheat once Redis is up", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := p.Store.Preheat(ctx, p.Activity(t, actOpen), false, time.Now())
		return err == nil
	})
	n := 0
	e2e.Eventually(t, 5*time.Second, "a win", func() bool {
		n++
		r := buyWithin(f, actOpen, "late"+strconv.Itoa(n))
		if r.Code != "WIN" && r.Code != "STORE_UNAVAILABLE" && r.Code != "NOT_READY" {
			t.Fatalf("after Redis came up: %d %s", r.Status, r.Body)
		}
		return r.Code == "WIN"
	})
	p.WantStock(t, actOpen, 9, 0, 1)
}
