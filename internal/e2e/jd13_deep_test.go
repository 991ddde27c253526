package e2e_test

import (
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// TestJD13DeepJSONBodyStack: a buy body is read up to 64 KiB (maxBuyBody):
// 32,768 nested arrays fit. jsonptr.DecodeStrict recurses once per level
// (strictValue, with no depth bound; encoding/json's Decode stops at
// 10,000), so each such buy grows its worker goroutine's stack to 8 MiB,
// and the worker keeps it after the answer until GC shrinks it by halves.
// 16 connections sending such bodies to a json: route hold over 100 MiB
// of stack (a thousand connections, max_conns' order: gigabytes) for
// 400 BAD_REQUESTs; the same connections with ordinary buys hold a few
// MiB. Want: a depth bound in DecodeStrict (the body is then malformed).
func TestJD13DeepJSONBodyStack(t *testing.T) {
	p, _ := jd13JSONProxy(t)
	depth := 32 << 10
	deep := []byte(strings.Repeat("[", depth) + strings.Repeat("]", depth))
	if len(deep) > 64<<10 {
		t.Fatalf("body %d bytes", len(deep))
	}
	run := func(body []byte) (peak uint64, codes map[string]int) {
		runtime.GC()
		runtime.GC()
		var base runtime.MemStats
		runtime.ReadMemStats(&base)
		var mx atomic.Uint64
		stop := make(chan struct{})
		var sw sync.WaitGroup
		sw.Add(1)
		go func() {
			defer sw.Done()
			var m runtime.MemStats
			for {
				select {
				case <-stop:
					return
				case <-time.After(2 * time.Millisecond):
				}
				runtime.ReadMemStats(&m)
				if m.StackInuse > mx.Load() {
					mx.Store(m.StackInuse)
				}
			}
		}()
		var mu sync.Mutex
		codes = map[string]int{}
		var wg sync.WaitGroup
		for c := 0; c < 16; c++ {
			wg.Add(1)
			go func(c int) {
				defer wg.Done()
				cl := &fasthttp.Client{MaxConnsPerHost: 1}
				for i := 0; i < 2; i++ {
					got := e2e.Do(cl, p.Addr, e2e.Req{URI: "/jd13j/buy", Header: [][2]string{{"X-User-Id", "jd13-deep"}, {"Content-Type", "application/json"}}, Body: body})
					mu.Lock()
					codes[got.Code]++
					mu.Unlock()
				}
			}(c)
		}
		wg.Wait()
		close(stop)
		sw.Wait()
		return mx.Load() - min(mx.Load(), base.StackInuse), codes
	}
	legit, lc := run([]byte(`{"sku":"nope","qty":1}`))
	attack, ac := run(deep)
	t.Logf("stack grown: ordinary bodies %d KiB %v; deep bodies %d KiB %v", legit>>10, lc, attack>>10, ac)
	if attack > 32<<20 {
		t.Errorf("16 connections of 64 KiB deep-nested bodies grew the proxy's stacks by %d MiB (ordinary bodies: %d MiB)", attack>>20, legit>>20)
	}
}
