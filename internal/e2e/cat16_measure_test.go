package e2e

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/config"
)

// catalogSKUs is n SKUs of stock units each, named s0..s<n-1>.
func catalogSKUs(n int, stock int64) []config.SKU {
	out := make([]config.SKU, n)
	for i := range out {
		out[i] = config.SKU{ID: "s" + strconv.Itoa(i), Stock: stock}
	}
	return out
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestCat16MeasureRefresher is a measurement, not a check (CAT16_MEASURE=1):
// the process's CPU with an idle sale and a busy one over n SKUs, and the
// share of a CPU profile spent in the refresher.
func TestCat16MeasureRefresher(t *testing.T) {
	if os.Getenv("CAT16_MEASURE") == "" {
		t.Skip("measurement: CAT16_MEASURE=1")
	}
	n, _ := strconv.Atoi(os.Getenv("CAT16_SKUS"))
	if n == 0 {
		n = 2000
	}
	shards, _ := strconv.Atoi(os.Getenv("CAT16_SHARDS"))
	stock, _ := strconv.ParseInt(os.Getenv("CAT16_STOCK"), 10, 64)
	if stock == 0 {
		stock = 20
	}
	rate, _ := strconv.Atoi(os.Getenv("CAT16_RATE"))
	if rate == 0 {
		rate = 2000
	}
	r := StartRedis(t)
	shop := StartShop(t)
	cfg := Options{Redis: r.Addrs, ShopURL: shop.URL, Activities: []Activity{{ID: "big", SKUs: catalogSKUs(n, stock), Shards: shards}}}.Config(t)
	p := StartProxy(t, cfg)
	p.Preheat(t, "big")
	time.Sleep(time.Second)
	var iprof bytes.Buffer
	_ = pprof.StartCPUProfile(&iprof)
	c0, w0 := cpuNow(), time.Now()
	time.Sleep(3 * time.Second)
	idle := float64(cpuNow()-c0) / float64(time.Since(w0))
	pprof.StopCPUProfile()
	_ = os.WriteFile(fmt.Sprintf("/tmp/cat16_idle_%d.pb.gz", n), iprof.Bytes(), 0o644)
	t.Logf("skus=%d idle: %.3f CPU", n, idle)

	var prof bytes.Buffer
	_ = pprof.StartCPUProfile(&prof)
	c0, w0 = cpuNow(), time.Now()
	var codes sync.Map
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var seq atomic.Int64
	cl := &fasthttp.Client{MaxConnsPerHost: 256}
	var lat []time.Duration
	var latMu sync.Mutex
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Duration(64 * int64(time.Second) / int64(rate)))
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				i := seq.Add(1)
				sku := "s" + strconv.Itoa(rand.IntN(n))
				st := time.Now()
				resp := Do(cl, p.Addr, Req{URI: "/api/seckill/big/" + sku + "/buy", Header: [][2]string{{"X-User-Id", "u" + strconv.FormatInt(i, 10)}, {"X-Request-Id", "r" + strconv.FormatInt(i, 10)}}})
				d := time.Since(st)
				latMu.Lock()
				lat = append(lat, d)
				latMu.Unlock()
				v, _ := codes.LoadOrStore(resp.Code, new(atomic.Int64))
				v.(*atomic.Int64).Add(1)
			}
		}()
	}
	time.Sleep(5 * time.Second)
	close(stop)
	wg.Wait()
	busy := float64(cpuNow()-c0) / float64(time.Since(w0))
	pprof.StopCPUProfile()
	_ = os.WriteFile(fmt.Sprintf("/tmp/cat16_prof_%d.pb.gz", n), prof.Bytes(), 0o644)
	m := map[string]int64{}
	codes.Range(func(k, v any) bool { m[k.(string)] = v.(*atomic.Int64).Load(); return true })
	var sum time.Duration
	var worst time.Duration
	for _, d := range lat {
		sum += d
		worst = max(worst, d)
	}
	t.Logf("skus=%d busy: %.3f CPU (process, load generator and shop included), %d requests, mean %v max %v, codes %v, invalidation passes see profile",
		n, busy, len(lat), sum/time.Duration(max(len(lat), 1)), worst, m)
}
