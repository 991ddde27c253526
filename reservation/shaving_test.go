package reservation_test

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
)

// TestQueuePeakShaving measures, for BENCHMARKS.md ("Reservation life"),
// the shop's peak request rate under the same spike in sync and in queue
// mode, and queue mode's throughput from buy to confirmed. It asserts only
// what the design promises (the shop never above queue.rate plus the
// bucket's capacity), never a speed. Run:
//
//	go test -run TestQueuePeakShaving -v ./reservation/
func TestQueuePeakShaving(t *testing.T) {
	if testing.Short() {
		t.Skip("measurement")
	}
	const buyers, stock = 2000, 500
	runs := []struct {
		mode string
		rate float64
	}{{config.ModeSync, 200}, {config.ModeQueue, 200}, {config.ModeQueue, 100000}}
	for _, r := range runs {
		mode, rate := r.mode, r.rate
		srv := redistest.Start(t)
		sh := newShop(t)
		sh.slow = func(string) time.Duration { return 5 * time.Millisecond }
		cfg := proxyConfig(t, []string{srv.Addr}, sh.srv.URL, mode, stock, 32, rate)
		addr, st := startProxy(t, cfg)
		var q *reservation.Queue
		if mode == config.ModeQueue {
			q = reservation.NewQueue(st, metrics.New(), zap.NewNop(), reservation.QueueOptions{})
			q.Start(cfg)
		}
		t0 := time.Now()
		codes, _ := spike(addr, buyers, fmt.Sprint(mode, rate, "-"))
		answered := time.Since(t0)
		eventually(t, 60*time.Second, "every reservation settled", func() bool { return status(t, st, &cfg.Activities[0]).Pending == 0 })
		sold := status(t, st, &cfg.Activities[0]).Confirmed
		done := time.Since(t0)
		if q != nil {
			q.Stop()
		}
		sh.mu.Lock()
		times := append([]time.Time(nil), sh.times...)
		sh.mu.Unlock()
		sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
		peak := 0 // most orders in any one-second window
		peak100 := 0
		for i := range times {
			n, m := 0, 0
			for j := i; j < len(times) && times[j].Sub(times[i]) < time.Second; j++ {
				n++
				if times[j].Sub(times[i]) < 100*time.Millisecond {
					m++
				}
			}
			peak, peak100 = max(peak, n), max(peak100, m)
		}
		t.Logf("%s (queue.rate %g): %d buyers, %d units: answers %v in %v; %d confirmed after %v (%.0f units/s buy->confirmed); shop peak %d orders in 1 s, %d in 100 ms (%d/s)",
			mode, rate, buyers, stock, codes, answered.Round(time.Millisecond), sold, done.Round(time.Millisecond),
			float64(sold)/done.Seconds(), peak, peak100, peak100*10)
		// Grants: at most rate per second plus the bucket's capacity (rate/10);
		// arrivals at the shop add dispatch jitter on top (more on a loaded
		// machine): the slack keeps the test deterministic while a queue
		// that does not pace (500 at once) still fails it.
		if mode == config.ModeQueue && float64(peak) > rate*1.5 {
			t.Errorf("queue mode: %d orders in one second, queue.rate %g", peak, rate)
		}
	}
}
