package e2e_test

import (
	"bytes"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// re15Clock is admission's server clock, moved by the test.
type re15Clock struct{ off atomic.Int64 }

func (c *re15Clock) now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }

func (c *re15Clock) set(d time.Duration) { c.off.Store(int64(d)) }

// re15Sale is one sync activity ("re15") ending end from now, 10 units,
// one shard, verify at the shop, served by a proxy on clk.
func re15Sale(t *testing.T, end time.Duration, clk *re15Clock) (*e2e.Proxy, *e2e.Shop) {
	t.Helper()
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	cfg := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, Activities: []e2e.Activity{
		{ID: "re15", Stock: 10, Shards: 1, End: time.Now().Add(end)},
	}}.Config(t)
	p := e2e.StartProxyClock(t, cfg, clk.now)
	p.Preheat(t, "re15")
	return p, shop
}

func re15Buy(p *e2e.Proxy, user, rid string) e2e.Resp {
	return e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/re15/" + e2e.SKU + "/buy",
		Header: [][2]string{{"X-User-Id", user}, {"X-Request-Id", rid}}})
}

// A winner's answer is lost on the way (a mobile network, a balancer's
// idle cut) in the last second of the sale, and the client repeats the
// request, same X-Request-Id, a moment after `end`. SPEC §4: a repeat within
// 5 minutes "returns the same outcome and never reserves twice"; §9: it
// gets the shop's original answer with the same token. It was answered
// 403 ENDED — a buyer the shop holds an order for is told the sale closed
// without them — because the window is judged before the request id's
// record is read. Likewise a repeat while the first copy is still at the
// shop must say PENDING (its true state), not ENDED.
func TestRE15RepeatJustAfterEndGetsItsOutcome(t *testing.T) {
	clk := &re15Clock{}
	p, shop := re15Sale(t, time.Hour, clk)

	first := re15Buy(p, "alice", "r-alice")
	if first.Code != "WIN" {
		t.Fatalf("first buy = %d %s %s", first.Status, first.Code, first.Body)
	}
	// bob's buy is at the shop when the sale ends.
	release := shop.Hang("bob")
	bobDone := make(chan e2e.Resp, 1)
	go func() { bobDone <- re15Buy(p, "bob", "r-bob") }()
	e2e.Eventually(t, 3*time.Second, "bob's buy at the shop", func() bool { return shop.SeenBuy("bob") })

	clk.set(time.Hour + time.Second) // one second after end

	again := re15Buy(p, "alice", "r-alice")
	if again.Status != first.Status || !bytes.Equal(again.Body, first.Body) || again.Token() != first.Token() {
		t.Errorf("alice's repeat 1 s after end = %d %s %q token %q; want the shop's %d %q with token %q",
			again.Status, again.Code, again.Body, again.Token(), first.Status, first.Body, first.Token())
	}
	pend := re15Buy(p, "bob", "r-bob")
	if pend.Status != 202 || pend.Code != "PENDING" {
		t.Errorf("bob's repeat while his buy is at the shop, after end = %d %s %s; want 202 PENDING", pend.Status, pend.Code, pend.Body)
	}
	release()
	if b := <-bobDone; b.Code != "WIN" {
		t.Fatalf("bob's buy = %d %s %s", b.Status, b.Code, b.Body)
	}
	// A fresh request after end is still ENDED, and a repeat reserves nothing.
	if fresh := re15Buy(p, "carol", "r-carol"); fresh.Status != 403 || fresh.Code != "ENDED" {
		t.Errorf("a fresh buy after end = %d %s %s, want 403 ENDED", fresh.Status, fresh.Code, fresh.Body)
	}
	if fresh := re15Buy(p, "alice", "r-other"); fresh.Status != 403 || fresh.Code != "ENDED" {
		t.Errorf("alice's new request after end = %d %s %s, want 403 ENDED", fresh.Status, fresh.Code, fresh.Body)
	}
	// Beyond the request ids' 5 minutes, the repeat is a new request: ENDED.
	clk.set(time.Hour + 6*time.Minute)
	if late := re15Buy(p, "alice", "r-alice"); late.Status != 403 || late.Code != "ENDED" {
		t.Errorf("alice's repeat 6 min after end = %d %s %s, want 403 ENDED", late.Status, late.Code, late.Body)
	}
	if n := len(shop.Orders()); n != 2 {
		t.Errorf("shop orders = %d, want 2", n)
	}
	p.WantStock(t, "re15", 8, 0, 2)
}

// After the end, requests carrying fresh request ids (a crowd still
// clicking, a bot with a new id each time) are answered ENDED from the
// request-id bitset in client-side cached memory: the repeat look-up costs
// Redis no script, as they come before the rate limits.
func TestRE15FreshIDsAfterEndCostRedisNothing(t *testing.T) {
	clk := &re15Clock{}
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	cfg := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, Activities: []e2e.Activity{
		{ID: "re15", Stock: 10, Shards: 1, End: time.Now().Add(time.Hour)},
	}}.Config(t)
	p := e2e.StartProxyClock(t, cfg, clk.now)
	p.Preheat(t, "re15")
	first := re15Buy(p, "alice", "r-alice")
	if first.Code != "WIN" {
		t.Fatalf("first buy = %d %s", first.Status, first.Code)
	}
	clk.set(time.Hour + time.Second)
	// The first look-up after the end reads the bitset into the cache.
	if b := re15Buy(p, "warm", "r-warm"); b.Code != "ENDED" {
		t.Fatalf("fresh id after end = %d %s", b.Status, b.Code)
	}
	calls := func() int64 {
		var n int64
		for _, f := range []string{"cmdstat_evalsha", "cmdstat_evalsha_ro", "cmdstat_eval", "cmdstat_get"} {
			v := r.Node.Info("commandstats", f)
			if i := strings.Index(v, "calls="); i >= 0 {
				c, _ := strconv.ParseInt(strings.SplitN(v[i+6:], ",", 2)[0], 10, 64)
				n += c
			}
		}
		return n
	}
	before := calls()
	for i := range 200 {
		if b := re15Buy(p, "u"+strconv.Itoa(i), "fresh-"+strconv.Itoa(i)); b.Code != "ENDED" {
			t.Fatalf("fresh id %d after end = %d %s", i, b.Status, b.Code)
		}
	}
	if got := calls() - before; got > 10 {
		t.Errorf("200 fresh request ids after the end cost Redis %d script/GET calls; the cached bitset answers them", got)
	}
	if again := re15Buy(p, "alice", "r-alice"); again.Status != first.Status || again.Token() != first.Token() {
		t.Errorf("alice's repeat after end = %d %s token %q, want her win's %d, token %q", again.Status, again.Code, again.Token(), first.Status, first.Token())
	}
}
