package e2e

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// ra12Stall stops Redis for d: DEBUG SLEEP, or SIGSTOP/SIGCONT.
func ra12Stall(t *testing.T, node *redistest.Server, d time.Duration, sigstop bool) {
	if sigstop {
		node.Pause(t)
		time.Sleep(d)
		node.Resume(t)
		return
	}
	done := make(chan struct{})
	go func() { defer close(done); _, _ = node.Do("DEBUG", "SLEEP", fmt.Sprint(d.Seconds())) }()
	<-done
}

// TestRA12BadDay: in-flight limit (overflow: wait), a shop slower than
// some buyers' patience, buyers who hang up at random points of their
// win (before the slot, during the shop call, after) and retry with the
// same X-Request-Id, and Redis stalling (DEBUG SLEEP, then SIGSTOP) while
// winners are at the shop (their confirms hit the stall). Afterwards and
// after one reconcile --repair: stock adds up, nothing pending, Redis
// confirmed == shop orders, nobody above the limit, every answer a SPEC
// code, every final WIN's token an order at the shop, and the shop never
// had more than max_inflight at once (its latency stays under the
// proxy's timeout here).
func TestRA12BadDay(t *testing.T) {
	Soak(t)
	if testing.Short() {
		t.Skip("≈15 s")
	}
	// With request ids a winner's confirm runs before its answer
	// (settleBeforeAnswer); without, after it, batched (confirmbatch).
	t.Run("request ids", func(t *testing.T) { ra12BadDay(t, true) })
	t.Run("no request ids", func(t *testing.T) { ra12BadDay(t, false) })
}

func ra12BadDay(t *testing.T, withRID bool) {
	const stock, buyers, limit = 40, 60, 3
	r := StartRedis(t)
	shop := ra12StartShop(t, 300*time.Millisecond)
	o := Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamTimeout: 2 * time.Second,
		UpstreamExtra: []string{"max_inflight: 3", "overflow: wait", "overflow_wait: 3s"},
		Activities:    []Activity{{ID: "act_bd", Stock: stock, Pending: 20 * time.Second}}}
	p := StartProxy(t, o.Config(t))
	p.Preheat(t, "act_bd")

	stop := make(chan struct{})
	stalled := make(chan struct{})
	go func() {
		defer close(stalled)
		for i := 0; i < 4; i++ {
			select {
			case <-stop:
				return
			case <-time.After(700 * time.Millisecond):
			}
			ra12Stall(t, r.Node, 500*time.Millisecond, i%2 == 1)
		}
	}()

	type final struct {
		r     Resp
		tries int
	}
	finals := make([]final, buyers)
	var odd []string
	inter := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 20)
	for i := 0; i < buyers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			user, rid := fmt.Sprintf("b%d", i), fmt.Sprintf("rid-%d", i)
			if !withRID {
				rid = ""
			}
			deadline := time.Now().Add(12 * time.Second)
			for n := 1; time.Now().Before(deadline); n++ {
				// The first tries hang up at a random point.
				timeout := 10 * time.Second
				if n <= 2 {
					timeout = time.Duration(20+rand.IntN(400)) * time.Millisecond
				}
				res := ra12Buy(p.Addr, "act_bd", user, rid, timeout)
				if res.Err != nil {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				if !ra12SpecCode(res) {
					mu.Lock()
					odd = append(odd, fmt.Sprintf("%s: %d %s", user, res.Status, res.Body))
					mu.Unlock()
				}
				mu.Lock()
				inter[res.Code]++
				mu.Unlock()
				switch res.Code {
				case "PENDING", "STORE_UNAVAILABLE", "BUSY":
					time.Sleep(100 * time.Millisecond)
					continue
				}
				if ra12Replay(res) {
					res.Code = "WIN"
				}
				finals[i] = final{res, n}
				return
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-stalled

	codes := map[string]int{}
	wins := 0
	orders := shop.orders
	for i, f := range finals {
		codes[f.r.Code]++
		if f.r.Code == "WIN" || (f.r.Code == "ALREADY_PURCHASED" && f.r.Token() != "") {
			shop.mu.Lock()
			_, ok := orders[f.r.Token()]
			shop.mu.Unlock()
			if !ok {
				t.Errorf("buyer b%d final %s with token %q: the shop holds no order for it", i, f.r.Code, f.r.Token())
			}
			wins++
		}
		if f.r.Code == "ALREADY_PURCHASED" {
			wins++
		}
	}
	t.Logf("final answers %v; every answer %v; odd %v", codes, inter, odd)
	if len(odd) > 0 {
		t.Errorf("answers outside SPEC: %v", odd)
	}
	Eventually(t, 10*time.Second, "shop idle", func() bool { return shop.cur.Load() == 0 })
	time.Sleep(2500 * time.Millisecond) // confirms retried after the stalls
	before := p.SKUStatus(t, "act_bd")
	ra12Reconcile(t, p, "act_bd", time.Now().Add(time.Minute))
	k := p.SKUStatus(t, "act_bd")
	n, perUser := shop.counts()
	t.Logf("confirms retried after a stall: %v (confirm/retry), %v (redis retries confirm ok)",
		p.Counter(p.Metrics.Settlements, "confirm", "retry"), p.Counter(p.Metrics.RedisRetries, "confirm", "ok"))
	t.Logf("before reconcile %+v; after %+v; shop orders %d; shop peak %d", before, k, n, shop.peak.Load())
	if !k.OK || k.Pending != 0 || k.Confirmed != int64(n) || perUser > 1 || k.Confirmed > stock {
		t.Errorf("after reconcile: %+v; shop orders %d, max per user %d", k, n, perUser)
	}
	if pk := shop.peak.Load(); pk > limit {
		t.Errorf("shop peak %d at once, max_inflight %d", pk, limit)
	}
}
