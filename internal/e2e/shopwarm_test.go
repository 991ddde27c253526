package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// upstream.warm_conns: around a sale's start the proxy keeps connections to
// the shop dialled and unused, and a burst of winners after a quiet moment
// (more than upstream.idle_timeout: the buy client holds nothing idle) is
// sent on those, not on connections each winner dials first. Every buy
// here reaches the shop on a connection accepted before the burst began;
// once the first wave is over (warmHold), the pool is let go.
func TestShopWarmWinnersSendOnConnectionsDialledAhead(t *testing.T) {
	Soak(t)
	r := StartRedis(t)
	shop := StartShop(t)
	const warm, winners = 8, 6
	o := Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamExtra: []string{fmt.Sprintf("warm_conns: %d", warm), "idle_timeout: 1s"},
		Activities: []Activity{{ID: "act_sw", Stock: 100, Start: time.Now().Add(1500 * time.Millisecond)}}}
	p := StartProxy(t, o.Config(t))
	p.Preheat(t, "act_sw")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.Server.RunWarmups(ctx, p.Addr)
	Eventually(t, 5*time.Second, "the pool dialled", func() bool { return shop.Conns() >= warm })
	time.Sleep(time.Until(p.Activity(t, "act_sw").Start))

	// A first burst, then a quiet moment past idle_timeout, then the burst
	// measured: the buy client's own connections have closed by then.
	burst := func(prefix string) time.Time {
		t0 := time.Now()
		var wg sync.WaitGroup
		for i := range winners {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if res := Buy(p.Addr, "act_sw", fmt.Sprintf("%s%d", prefix, i)); res.Status != 200 {
					t.Errorf("%s%d: %d %s", prefix, i, res.Status, res.Body)
				}
			}()
		}
		wg.Wait()
		return t0
	}
	burst("a")
	time.Sleep(1300 * time.Millisecond)
	t0 := burst("b")
	n := 0
	for _, q := range shop.Requests() {
		if q.Header.Get("X-Seckill-Token") == "" || q.Header.Get("X-Seckill-User")[0] != 'b' {
			continue
		}
		n++
		if q.ConnAt.IsZero() || !q.ConnAt.Before(t0) {
			t.Errorf("winner %s was sent on a connection accepted %v after the burst began (dialled on its path)",
				q.Header.Get("X-Seckill-User"), q.ConnAt.Sub(t0))
		}
	}
	if n != winners {
		t.Fatalf("the shop got %d buys of the second burst, want %d", n, winners)
	}
	// Past the first wave the pool is let go: only the buy client's own
	// connections stay, until their idle_timeout.
	Eventually(t, 15*time.Second, "the pool let go after the first wave", func() bool { return shop.Conns() == 0 })
}
