package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// TestRA12DurableSpikeReplicaStops: sync mode, durable_winners in both
// on_timeout modes, 80 buyers (twice each) for 30 units while the replica
// is SIGSTOPped for a while and the master sleeps (DEBUG SLEEP) once.
// Afterwards and after reconcile --repair: stock adds up, nothing pending,
// confirmed == shop orders, nobody above the limit, every answer a SPEC code.
func TestRA12DurableSpikeReplicaStops(t *testing.T) {
	Soak(t)
	if testing.Short() {
		t.Skip("≈15 s")
	}
	for _, mode := range []string{"refuse", "forward"} {
		t.Run(mode, func(t *testing.T) {
			const stock, buyers = 30, 80
			m := redistest.Start(t)
			rep := redistest.StartReplica(t, m)
			shop := ra12StartShop(t, 50*time.Millisecond)
			o := Options{Redis: []string{m.Addr}, ShopURL: shop.URL, UpstreamTimeout: time.Second,
				RedisExtra: []string{"durable_winners: { replicas: 1, timeout: 300ms, on_timeout: " + mode + " }"},
				Activities: []Activity{{ID: "act_ds", Stock: stock, Pending: 20 * time.Second}}}
			p := StartProxy(t, o.Config(t))
			p.Preheat(t, "act_ds")
			rep.Pause(t)
			go func() {
				time.Sleep(1500 * time.Millisecond)
				_, _ = m.Do("DEBUG", "SLEEP", "0.4")
				time.Sleep(300 * time.Millisecond)
				rep.Resume(t)
			}()
			var mu sync.Mutex
			codes := map[string]int{}
			var odd []string
			var wg sync.WaitGroup
			sem := make(chan struct{}, 16)
			for round := 0; round < 3; round++ {
				for i := 0; i < buyers; i++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						sem <- struct{}{}
						defer func() { <-sem }()
						res := ra12Buy(p.Addr, "act_ds", fmt.Sprintf("ds%d", i), fmt.Sprintf("r%d-%d", i, round), 5*time.Second)
						mu.Lock()
						defer mu.Unlock()
						codes[res.Code]++
						if !ra12SpecCode(res) {
							odd = append(odd, fmt.Sprintf("%d %s %v", res.Status, res.Body, res.Err))
						}
					}()
				}
				wg.Wait()
				time.Sleep(800 * time.Millisecond)
			}
			Eventually(t, 20*time.Second, "replica caught up", func() bool { return rep.Info("replication", "master_link_status") == "up" })
			time.Sleep(2 * time.Second)
			ra12Reconcile(t, p, "act_ds", time.Now().Add(time.Minute))
			k := p.SKUStatus(t, "act_ds")
			n, perUser := shop.counts()
			t.Logf("answers %v; status %+v; shop orders %d", codes, k, n)
			if len(odd) > 0 {
				t.Errorf("answers outside SPEC: %v", odd)
			}
			if !k.OK || k.Pending != 0 || k.Confirmed != int64(n) || perUser > 1 || k.Confirmed > stock {
				t.Errorf("after reconcile: %+v; shop orders %d, max per user %d", k, n, perUser)
			}
		})
	}
}
