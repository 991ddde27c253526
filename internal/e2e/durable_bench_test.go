package e2e_test

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// BenchmarkWinnersDurable: winners through the proxy (reserve, forward
// to the harness shop, confirm), with and without redis.durable_winners
// {replicas: 1, timeout: 50ms}, against one master and its replica on
// 127.0.0.1; 32 buyers in flight, each a new user. Reports the winners'
// p50 and p99 (µs) as the client saw them.
//
//	go test -run XXX -bench WinnersDurable -benchtime 20000x ./internal/e2e/
func BenchmarkWinnersDurable(b *testing.B) {
	const inflight = 32
	m := redistest.Start(b)
	redistest.StartReplica(b, m)
	shop := e2e.StartShop(b)
	for _, durable := range []bool{false, true} {
		name := "plain"
		opts := e2e.Options{Redis: []string{m.Addr}, ShopURL: shop.URL,
			Activities: []e2e.Activity{{ID: "bw" + name, Stock: 1_000_000_000, Shards: 1, NoVerify: true}}}
		if durable {
			name = "durable"
			opts.Activities[0].ID = "bw" + name
			opts.RedisExtra = []string{"durable_winners: { replicas: 1, timeout: 50ms, on_timeout: refuse }"}
		}
		p := e2e.StartProxy(b, opts.Config(b))
		p.Preheat(b, opts.Activities[0].ID)
		uri := "/api/seckill/" + opts.Activities[0].ID + "/" + e2e.SKU + "/buy"
		var next atomic.Int64
		b.Run(name, func(b *testing.B) {
			c := &fasthttp.Client{MaxConnsPerHost: inflight}
			lat := make([]time.Duration, 0, b.N)
			var mu sync.Mutex
			var other atomic.Int64
			work := make(chan struct{}, b.N)
			for i := 0; i < b.N; i++ {
				work <- struct{}{}
			}
			close(work)
			b.ResetTimer()
			var wg sync.WaitGroup
			for g := 0; g < inflight; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					mine := make([]time.Duration, 0, b.N/inflight+1)
					for range work {
						user := "w" + strconv.FormatInt(next.Add(1), 10)
						t0 := time.Now()
						r := e2e.Do(c, p.Addr, e2e.Req{URI: uri, Header: [][2]string{{"X-User-Id", user}}})
						if r.Code != "WIN" {
							other.Add(1)
							continue
						}
						mine = append(mine, time.Since(t0))
					}
					mu.Lock()
					lat = append(lat, mine...)
					mu.Unlock()
				}()
			}
			wg.Wait()
			b.StopTimer()
			if len(lat) == 0 {
				b.Fatalf("no winners (%d other answers)", other.Load())
			}
			slices.Sort(lat)
			us := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) }
			b.ReportMetric(us(0.50), "p50-µs")
			b.ReportMetric(us(0.99), "p99-µs")
			b.ReportMetric(float64(other.Load()), "not-won")
		})
	}
}
