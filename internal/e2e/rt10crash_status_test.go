package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestRT10CrashStatusDuringStealsOnCluster: a 3-master cluster, 6 shards
// of 60 units each, and 400 buyers all homed on shard 0 (three sales, a
// forced preheat between), so almost every winner's units are moved from
// another shard (steal, then deposit) while `status` (store.Status, what
// `seckill-proxy status`, /admin/status and the reconciler's invariant
// check read) is read over and over from a client of its own, and
// report-only reconcile passes run. Nothing is
// broken in Redis (every script keeps i = r + p + c per shard, in-transit
// units are counted), so every read must say ok: a false "invariant
// broken" makes `status` exit 1 and the background reconciler record an
// `invariant` alert during a healthy sale (SPEC §2, §6).
func TestRT10CrashStatusDuringStealsOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("3-master cluster")
	}
	const shards, perShard, buyers, rounds = 6, 60, 400, 3
	r := StartCluster(t)
	shop := StartShop(t)
	o := Options{Redis: r.Addrs, Cluster: true, ShopURL: shop.URL,
		Activities: []Activity{{ID: "rts", Stock: shards * perShard, Shards: shards}}}
	p := StartProxy(t, o.Config(t))
	p.Preheat(t, "rts")
	a := p.Activity(t, "rts")
	// The operator's view comes from another process (the CLI, another
	// instance's reconciler): a client of its own.
	ops, err := store.OpenNow(p.Cfg.Redis, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer ops.Close()

	var reads, bad, alerts atomic.Int64
	var firstBad, firstAlert atomic.Value
	for round := 0; round < rounds; round++ {
		if round > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if _, err := p.Store.Preheat(ctx, a, true, time.Now()); err != nil {
				t.Fatalf("preheat --force: %v", err)
			}
			cancel()
			p.WaitPreheated(t, "rts")
		}
		var users []string
		for i := 0; len(users) < buyers; i++ {
			u := fmt.Sprintf("h%d-%d", round, i)
			if store.HomeShard(u, shards) == 0 {
				users = append(users, u)
			}
		}
		stop := make(chan struct{})
		var rw sync.WaitGroup
		for g := 0; g < 6; g++ {
			rw.Add(1)
			go func() {
				defer rw.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					s, err := ops.Status(ctx, a)
					cancel()
					if err != nil {
						continue
					}
					reads.Add(1)
					if k := s.SKUs[0]; !k.OK {
						bad.Add(1)
						firstBad.CompareAndSwap(nil, fmt.Sprintf("round %d: %+v", round, k))
					}
				}
			}()
		}
		// And what the reconciler makes of it (a report-only pass; serve's
		// background pass is the same with --repair, and records each
		// alert in the exceptions stream).
		rw.Add(1)
		go func() {
			defer rw.Done()
			rec := reservation.NewReconciler(ops, metrics.New(), zap.NewNop())
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				rep, err := rec.Run(ctx, []*config.Activity{a}, false, time.Now())
				cancel()
				if err == nil && rep.Alerting() {
					alerts.Add(1)
					firstAlert.CompareAndSwap(nil, fmt.Sprint(rep.Activities[0].Alerts))
				}
			}
		}()
		var wg sync.WaitGroup
		sem := make(chan struct{}, 48)
		for _, u := range users {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				Buy(p.Addr, "rts", u)
			}()
		}
		wg.Wait()
		close(stop)
		rw.Wait()
		if k := p.SKUStatus(t, "rts"); !k.OK || k.Confirmed != shards*perShard {
			t.Fatalf("round %d: final status %+v", round, k)
		}
	}
	t.Logf("status reads %d, not ok %d; reconcile passes alerting %d", reads.Load(), bad.Load(), alerts.Load())
	if bad.Load() > 0 {
		t.Errorf("%d of %d status reads during a healthy sale said the invariant was broken, first: %v", bad.Load(), reads.Load(), firstBad.Load())
	}
	if alerts.Load() > 0 {
		t.Errorf("%d reconcile passes during a healthy sale alerted, first: %v", alerts.Load(), firstAlert.Load())
	}
}
