package store_test

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// BenchmarkWinnerDurable: a winner's Redis work, reserve alone (plain)
// and reserve + the wait for one replica (durable: redis.durable_winners
// {replicas: 1, timeout: 50ms}), against a master and its replica on
// 127.0.0.1; 2 and 32 winners in flight (on 2 cores), each a new user.
// Reports each winner's p50 and p99 (µs).
//
//	go test -run XXX -bench WinnerDurable -benchtime 20000x ./store/
func BenchmarkWinnerDurable(b *testing.B) {
	m := redistest.Start(b)
	redistest.StartReplica(b, m)
	for _, par := range []int{1, 16} {
		for _, durable := range []bool{false, true} {
			name := "plain"
			cfg := redisConfig([]string{m.Addr}, false)
			if durable {
				name = "durable"
				cfg.DurableWinners = config.DurableWinners{Replicas: 1, Timeout: 50 * time.Millisecond, OnTimeout: config.DurableRefuse}
			}
			var next atomic.Int64 // users are new across the runs of one sub-benchmark
			s := openStore(b, cfg)
			a := newActivity("bench_"+name+strconv.Itoa(par), 1_000_000_000, 1, 1)
			mustPreheat(b, s, a)
			b.Run(name+"/inflight="+strconv.Itoa(2*par), func(b *testing.B) {
				var mu sync.Mutex
				lat := make([]time.Duration, 0, b.N)
				var refused atomic.Int64
				b.SetParallelism(par) // GOMAXPROCS (2 here) × par in flight
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					mine := make([]time.Duration, 0, 1024)
					for pb.Next() {
						q := reserveReq(a, "w"+strconv.FormatInt(next.Add(1), 10), 1)
						t0 := time.Now()
						res, err := s.Reserve(ctx(b), q)
						if err != nil || res.Code != lua.OK {
							b.Errorf("reserve: %v %v", res.Code, err)
							return
						}
						if d, _ := s.MakeDurable(ctx(b), q, res); durable && d != store.DurableOK {
							refused.Add(1)
						}
						mine = append(mine, time.Since(t0))
					}
					mu.Lock()
					lat = append(lat, mine...)
					mu.Unlock()
				})
				b.StopTimer()
				if len(lat) == 0 {
					return
				}
				slices.Sort(lat)
				us := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) }
				b.ReportMetric(us(0.50), "p50-µs")
				b.ReportMetric(us(0.99), "p99-µs")
				b.ReportMetric(float64(refused.Load()), "refused")
			})
		}
	}
}
