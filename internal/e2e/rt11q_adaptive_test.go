package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// rt11qFlipShop takes each order fast or slow by phase (alternating every
// phase), counts how many it works on at once and every time a token
// arrives, and fails (503, no order) above capacity concurrent orders.
type rt11qFlipShop struct {
	URL      string
	capacity int64
	phase    time.Duration
	fast     time.Duration
	slow     time.Duration
	t0       time.Time

	cur, peak, failed atomic.Int64
	mu                sync.Mutex
	orders            map[string]string
	sends             map[string]int
}

func rt11qStartFlipShop(t *testing.T, capacity int64) *rt11qFlipShop {
	s := &rt11qFlipShop{capacity: capacity, phase: 250 * time.Millisecond, fast: 5 * time.Millisecond,
		slow: 120 * time.Millisecond, t0: time.Now(), orders: map[string]string{}, sends: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

func (s *rt11qFlipShop) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path == "/internal/orders" {
		s.mu.Lock()
		id, ok := s.orders[r.URL.Query().Get("token")]
		s.mu.Unlock()
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"order_id": id})
		return
	}
	tok := r.Header.Get("X-Seckill-Token")
	if tok == "" {
		w.WriteHeader(http.StatusForbidden)
		return
	}
	s.mu.Lock()
	s.sends[tok]++
	s.mu.Unlock()
	c := s.cur.Add(1)
	defer s.cur.Add(-1)
	for p := s.peak.Load(); c > p && !s.peak.CompareAndSwap(p, c); p = s.peak.Load() {
	}
	if c > s.capacity {
		s.failed.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	d := s.fast
	if (time.Since(s.t0)/s.phase)%2 == 1 {
		d = s.slow
	}
	time.Sleep(d)
	s.mu.Lock()
	id, ok := s.orders[tok]
	if !ok {
		id = strconv.Itoa(len(s.orders) + 1)
		s.orders[tok] = id
	}
	s.mu.Unlock()
	w.Header().Set("X-Shop", "order")
	_ = json.NewEncoder(w).Encode(map[string]string{"order_id": id})
}

// TestRT11QAdaptiveFlipFlopShopNeverAboveMax: README "Protecting the
// shop": adaptive: true with max_inflight 6, min_inflight 2, overflow:
// queue, two instances with queue workers, a shop that alternates fast
// and slow every 250 ms and fails above 6 orders at once. The fleet never
// has more than max_inflight winners at the shop; every winner (sync or
// QUEUED) ends confirmed, each token sent once; shop orders == confirmed.
func TestRT11QAdaptiveFlipFlopShopNeverAboveMax(t *testing.T) {
	if testing.Short() {
		t.Skip("a multi-second queue fault run: the plain pass of make test runs it")
	}
	const stock, limit = 80, 6
	r := e2e.StartRedis(t)
	shop := rt11qStartFlipShop(t, limit)
	opts := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamTimeout: 2 * time.Second,
		UpstreamExtra: []string{"max_inflight: 6", "min_inflight: 2", "adaptive: true", "overflow: queue"},
		Activities:    []e2e.Activity{{ID: "rt11qa", Stock: stock, Shards: 2}}}
	p1 := rqProxy(t, opts, nil)
	p2 := e2e.StartProxy(t, opts.Config(t))
	p2.WaitPreheated(t, "rt11qa")
	p1.StartQueue(t)
	p2.StartQueue(t)

	var mu sync.Mutex
	var toks []string
	codes := map[string]int{}
	var wg sync.WaitGroup
	for i := 0; i < stock; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			addr := p1.Addr
			if i%2 == 1 {
				addr = p2.Addr
			}
			time.Sleep(time.Duration(i%20) * 25 * time.Millisecond)
			got := e2e.Buy(addr, "rt11qa", fmt.Sprintf("rt11qa-u%d", i))
			mu.Lock()
			defer mu.Unlock()
			codes[got.Code]++
			if got.Code == "WIN" || got.Code == "QUEUED" {
				toks = append(toks, got.Token())
			}
		}(i)
	}
	wg.Wait()
	t.Logf("answers %v; shop peak %d, failed %d", codes, shop.peak.Load(), shop.failed.Load())
	if codes["WIN"]+codes["QUEUED"] != stock {
		t.Fatalf("answers %v: want every buyer to win or be queued", codes)
	}
	last := rqAwaitSettled(p1.Addr, toks, 8*time.Second)
	for i, l := range last {
		if l.State != store.StateConfirmed {
			t.Errorf("winner %d (%s): %s, want confirmed", i, toks[i], l)
		}
	}
	if pk := shop.peak.Load(); pk > limit {
		t.Errorf("the shop had %d orders at once, max_inflight %d", pk, limit)
	}
	shop.mu.Lock()
	for tok, n := range shop.sends {
		if n != 1 {
			t.Errorf("token %s sent %d times", tok, n)
		}
	}
	orders := len(shop.orders)
	shop.mu.Unlock()
	k := rqWantStock(t, p1.Store, p1.Activity(t, "rt11qa"))
	if int64(orders) != k.Confirmed {
		t.Errorf("shop orders %d, confirmed %d (%+v)", orders, k.Confirmed, k)
	}
}
