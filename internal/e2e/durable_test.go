package e2e_test

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// TestDurableWinnersReplicaStopped (issue 11 §2): with durable winners and
// the replica SIGSTOPped, no winner reaches the shop, every would-be
// winner is answered 503 STORE_UNAVAILABLE, and nothing stays held (the
// stock is back, nothing pending); once the replica runs again, buys win
// again and the sale ends with exactly the stock sold.
func TestDurableWinnersReplicaStopped(t *testing.T) {
	const stock, stopped = 8, 12
	// Every refusal waits the timeout out; a healthy replica must never
	// miss it, also on a loaded machine.
	timeout := redistest.TimeoutScale * 200 * time.Millisecond
	m := redistest.Start(t)
	r := redistest.StartReplica(t, m)
	shop := e2e.StartShop(t)
	p := e2e.StartProxy(t, e2e.Options{Redis: []string{m.Addr}, ShopURL: shop.URL,
		RedisExtra: []string{"durable_winners: { replicas: 1, timeout: " + timeout.String() + ", on_timeout: refuse }"},
		Activities: []e2e.Activity{{ID: "dw", Stock: stock, Shards: 2}}}.Config(t))
	p.Preheat(t, "dw")

	if got := e2e.Buy(p.Addr, "dw", "first"); got.Code != "WIN" {
		t.Fatalf("buy with the replica up: %d %s %s", got.Status, got.Code, got.Body)
	}

	r.Pause(t)
	var wg sync.WaitGroup
	answers := make([]e2e.Resp, stopped)
	for i := range answers {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			answers[i] = e2e.Buy(p.Addr, "dw", "stopped-"+strconv.Itoa(i))
		}(i)
	}
	wg.Wait()
	// At once: every unit is taken by a would-be winner waiting for the
	// replica, so the others find it sold out meanwhile.
	unavailable := 0
	for i, a := range answers {
		switch {
		case a.Err == nil && a.Status == 503 && a.Code == "STORE_UNAVAILABLE":
			unavailable++
		case a.Err == nil && a.Code == "SOLD_OUT":
		default:
			t.Errorf("buy %d with the replica stopped: %d %s %s %v", i, a.Status, a.Code, a.Body, a.Err)
		}
	}
	if unavailable < stock-1 {
		t.Errorf("%d STORE_UNAVAILABLE answers to %d buys at once, want at least the %d units", unavailable, stopped, stock-1)
	}
	// One after the other: each would-be winner's unit is back before the
	// next buy, so every one is a winner refused. (The sold-out mark of
	// the burst may be read for a moment more: the proxy's snapshot
	// follows Redis's invalidations within milliseconds.)
	for i := 0; i < stopped; i++ {
		var a e2e.Resp
		e2e.Eventually(t, 2*time.Second, "the burst's sold-out mark lifted", func() bool {
			a = e2e.Buy(p.Addr, "dw", "stopped-"+strconv.Itoa(i))
			return a.Code != "SOLD_OUT"
		})
		if a.Err != nil || a.Status != 503 || a.Code != "STORE_UNAVAILABLE" {
			t.Errorf("buy %d with the replica stopped: %d %s %s %v", i, a.Status, a.Code, a.Body, a.Err)
		}
		unavailable++
	}
	if n := len(shop.Orders()); n != 1 {
		t.Fatalf("the shop holds %d orders, want the 1 from before the stop", n)
	}
	for _, b := range shop.Buys() {
		if b.User != "first" {
			t.Fatalf("the shop saw a buy of %s while the replica was stopped", b.User)
		}
	}
	// A buyer of the burst whose home shard was dry moved a unit from the
	// other shard first; the donor's replica could not have that move
	// either, so it was refused too (STORE_UNAVAILABLE) and its unit stays
	// in transit — counted as remaining — until the replica has it.
	k := p.WantStock(t, "dw", stock-1, 0, 1)
	moved := k.InTransit
	if n := p.Counter(p.Metrics.DurableWinners, "buy", "refused"); n != float64(unavailable-int(moved)) {
		t.Errorf("durable_winners{buy,refused} = %v, want %d (%d refusals, %d of them steals)", n, unavailable-int(moved), unavailable, moved)
	}
	if n := p.Counter(p.Metrics.Rejections, "redis", "not_durable"); n != float64(unavailable-int(moved)) {
		t.Errorf("rejections{redis,not_durable} = %v, want %d", n, unavailable-int(moved))
	}

	r.Resume(t)
	// A move held for the replica is settled once it has it.
	e2e.Eventually(t, 20*time.Second, "units in transit settled after SIGCONT", func() bool {
		return p.SKUStatus(t, "dw").InTransit == 0
	})
	// The refused buyers hold nothing: they buy again and win.
	e2e.Eventually(t, 10*time.Second, "a buy wins after SIGCONT", func() bool {
		return e2e.Buy(p.Addr, "dw", "stopped-0").Code == "WIN"
	})
	// A buyer who finds the SKU empty while a settle of it finished here
	// less than ~400 ms ago hears STORE_UNAVAILABLE, not SOLD_OUT (holding
	// nothing: units may still come back; decisions §54, §58); asked
	// again, they hear the final answer. (Asked once, 2 runs in 12 answered 5
	// of these buyers STORE_UNAVAILABLE, right after the stall's settles.)
	codes := map[string]int{}
	for i := 1; i < stopped; i++ {
		var a e2e.Resp
		e2e.Eventually(t, 5*time.Second, "a final answer", func() bool {
			a = e2e.Buy(p.Addr, "dw", "stopped-"+strconv.Itoa(i))
			return a.Code != "STORE_UNAVAILABLE"
		})
		codes[a.Code]++
	}
	if codes["WIN"] != stock-2 || codes["SOLD_OUT"] != stopped-1-(stock-2) {
		t.Fatalf("after SIGCONT: %v, want %d WIN and the rest SOLD_OUT", codes, stock-2)
	}
	p.WantStock(t, "dw", 0, 0, stock)
	if n := len(shop.Orders()); n != stock {
		t.Fatalf("the shop holds %d orders, want %d", n, stock)
	}
	if n := p.Counter(p.Metrics.DurableWinners, "buy", "durable"); n != stock {
		t.Errorf("durable_winners{buy,durable} = %v, want %d", n, stock)
	}
}
