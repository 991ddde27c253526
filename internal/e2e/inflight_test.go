package e2e

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
)

// capShop is a shop with a capacity: each order takes latency(c), c being
// the orders it works on at once (this one included), and above capacity
// concurrent orders it fails them (503, no order), as a legacy shop
// falling over would. Orders are kept by token (a repeat of a token is the
// same order); /internal/orders?token= is the verify endpoint.
type capShop struct {
	URL      string
	capacity int64 // 0: none
	latency  func(c int64) time.Duration

	cur, peak, failed, received atomic.Int64

	mu     sync.Mutex
	orders map[string]string // token -> order id
	users  map[string]bool
}

func startCapShop(t testing.TB, capacity int64, latency func(c int64) time.Duration) *capShop {
	t.Helper()
	s := &capShop{capacity: capacity, latency: latency, orders: map[string]string{}, users: map[string]bool{}}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

func (s *capShop) serve(w http.ResponseWriter, r *http.Request) {
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
	s.received.Add(1)
	c := s.cur.Add(1)
	defer s.cur.Add(-1)
	for p := s.peak.Load(); c > p && !s.peak.CompareAndSwap(p, c); p = s.peak.Load() {
	}
	if s.capacity > 0 && c > s.capacity {
		s.failed.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	time.Sleep(s.latency(c))
	s.mu.Lock()
	id, ok := s.orders[tok]
	if !ok {
		id = strconv.Itoa(len(s.orders) + 1)
		s.orders[tok] = id
		s.users[r.Header.Get("X-Seckill-User")] = true
	}
	s.mu.Unlock()
	w.Header().Set("X-Shop", "order")
	_ = json.NewEncoder(w).Encode(map[string]string{"order_id": id})
}

func (s *capShop) counts() (orders, users int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.orders), len(s.users)
}

func flat(d time.Duration) func(int64) time.Duration { return func(int64) time.Duration { return d } }

// inflightOptions is a config for shop behind proxies with upstream lines.
func inflightOptions(r *Redis, shop string, stock int64, upstream ...string) Options {
	return Options{Redis: r.Addrs, ShopURL: shop, UpstreamTimeout: 2 * time.Second, UpstreamExtra: upstream,
		Activities: []Activity{{ID: "act_if", Stock: stock}}}
}

// TestInflightShopNeverAboveLimit is issue 11 §1's test: a shop that fails
// above 4 concurrent orders, 200 winners through 2 instances with
// max_inflight 4 and overflow: queue. The shop never sees more than 4 at
// once, no order fails, and every winner ends confirmed (sync 2xx or
// queued then sent by the workers). The shop takes 200 ms an order, as
// the issue says (≈10 s: 200 orders, 4 at a time); 50 ms under -short.
func TestInflightShopNeverAboveLimit(t *testing.T) {
	Soak(t)
	const stock, limit = 200, 4
	delay := 200 * time.Millisecond
	if testing.Short() {
		delay = 50 * time.Millisecond
	}
	r := StartRedis(t)
	shop := startCapShop(t, limit, flat(delay))
	o := inflightOptions(r, shop.URL, stock, "max_inflight: 4", "overflow: queue")
	p1, p2 := StartProxy(t, o.Config(t)), StartProxy(t, o.Config(t))
	p1.Preheat(t, "act_if")
	p2.WaitPreheated(t, "act_if")
	p1.StartQueue(t)
	p2.StartQueue(t)

	res := Spike{Addrs: []string{p1.Addr, p2.Addr}, Activity: "act_if", Users: stock, Tries: 1, Conc: stock}.Fire(t)
	if len(res.Odd) > 0 || res.ByCode["WIN"]+res.ByCode["QUEUED"] != stock {
		t.Fatalf("answers %v, odd %v: want every buyer to win (sync) or be queued", res.ByCode, res.Odd[:min(3, len(res.Odd))])
	}
	if res.ByCode["QUEUED"] == 0 {
		t.Fatalf("no winner was queued with %d buyers at once and room for %d: the limit did not bind (%v)", stock, limit, res.ByCode)
	}
	Eventually(t, 30*time.Second, "every winner confirmed", func() bool {
		k := p1.SKUStatus(t, "act_if")
		return k.Confirmed == stock
	})
	p1.WantStock(t, "act_if", 0, 0, stock)
	if n, u := shop.counts(); n != stock || u != stock {
		t.Fatalf("shop holds %d orders of %d users, want %d", n, u, stock)
	}
	if f := shop.failed.Load(); f != 0 {
		t.Fatalf("the shop failed %d orders (more than %d at once)", f, limit)
	}
	if pk := shop.peak.Load(); pk > limit {
		t.Fatalf("the shop had %d orders at once, max_inflight %d", pk, limit)
	}
	queued := p1.Counter(p1.Metrics.Overflow, "act_if", "queued") + p2.Counter(p2.Metrics.Overflow, "act_if", "queued")
	t.Logf("answers %v; shop peak %d, received %d; overflow queued %v", res.ByCode, shop.peak.Load(), shop.received.Load(), queued)
	if int(queued) != res.ByCode["QUEUED"] {
		t.Fatalf("overflow{queued} = %v, QUEUED answers %d", queued, res.ByCode["QUEUED"])
	}
}

// TestInflightOverflowBusy: past the limit a winner is answered 503 BUSY
// at once and holds nothing; the same request (same request id) bought
// again once the shop has room wins.
func TestInflightOverflowBusy(t *testing.T) {
	r := StartRedis(t)
	shop := startCapShop(t, 1, flat(400*time.Millisecond))
	p := StartProxy(t, inflightOptions(r, shop.URL, 10, "max_inflight: 1", "overflow: busy").Config(t))
	p.Preheat(t, "act_if")
	buy := func(user, rid string) Resp {
		return Do(nil, p.Addr, Req{URI: "/api/seckill/act_if/" + SKU + "/buy", Header: [][2]string{{"X-User-Id", user}, {"X-Request-Id", rid}}})
	}
	first := make(chan Resp)
	go func() { first <- buy("u1", "r1") }()
	Eventually(t, 5*time.Second, "first order at the shop", func() bool { return shop.cur.Load() == 1 })
	busy := buy("u2", "r2")
	if busy.Status != 503 || busy.Code != "BUSY" || busy.Token() != "" || busy.Header["Retry-After"] == "" {
		t.Fatalf("second winner: %d %s %v, want 503 BUSY with Retry-After and no token", busy.Status, busy.Body, busy.Header)
	}
	if w := <-first; w.Code != "WIN" {
		t.Fatalf("first winner: %d %s", w.Status, w.Body)
	}
	// u2 holds nothing: one unit sold, nothing pending.
	p.WantStock(t, "act_if", 9, 0, 1)
	if got := shop.received.Load(); got != 1 {
		t.Fatalf("shop received %d buys, want 1 (BUSY is never sent)", got)
	}
	if again := buy("u2", "r2"); again.Code != "WIN" {
		t.Fatalf("BUSY buyer's retry (same request id) with room: %d %s, want a win", again.Status, again.Body)
	}
	p.WantStock(t, "act_if", 8, 0, 2)
	if n := p.Counter(p.Metrics.Overflow, "act_if", "busy"); n != 1 {
		t.Fatalf("overflow{busy} = %v, want 1", n)
	}
}

// TestInflightOverflowWait: winners past the limit wait for a slot; within
// overflow_wait they all win one after the other, the shop never seeing
// two at once; past it they are answered BUSY and hold nothing.
func TestInflightOverflowWait(t *testing.T) {
	t.Run("within the wait", func(t *testing.T) {
		r := StartRedis(t)
		shop := startCapShop(t, 1, flat(50*time.Millisecond))
		p := StartProxy(t, inflightOptions(r, shop.URL, 10, "max_inflight: 1", "overflow: wait", "overflow_wait: 3s").Config(t))
		p.Preheat(t, "act_if")
		res := Spike{Addrs: []string{p.Addr}, Activity: "act_if", Users: 5, Tries: 1, Conc: 5}.Fire(t)
		if res.ByCode["WIN"] != 5 {
			t.Fatalf("answers %v %v, want 5 wins", res.ByCode, res.Odd)
		}
		if shop.peak.Load() != 1 || shop.failed.Load() != 0 {
			t.Fatalf("shop peak %d, failed %d: want one at a time", shop.peak.Load(), shop.failed.Load())
		}
		if n := p.Counter(p.Metrics.Overflow, "act_if", "waited"); n < 1 {
			t.Fatalf("overflow{waited} = %v, want at least 1", n)
		}
		p.WantStock(t, "act_if", 5, 0, 5)
	})
	t.Run("past the wait", func(t *testing.T) {
		r := StartRedis(t)
		shop := startCapShop(t, 1, flat(600*time.Millisecond))
		p := StartProxy(t, inflightOptions(r, shop.URL, 10, "max_inflight: 1", "overflow: wait", "overflow_wait: 50ms").Config(t))
		p.Preheat(t, "act_if")
		res := Spike{Addrs: []string{p.Addr}, Activity: "act_if", Users: 3, Tries: 1, Conc: 3}.Fire(t)
		if res.ByCode["WIN"] != 1 || res.ByCode["BUSY"] != 2 {
			t.Fatalf("answers %v %v, want 1 win and 2 BUSY", res.ByCode, res.Odd)
		}
		p.WantStock(t, "act_if", 9, 0, 1)
		if shop.received.Load() != 1 {
			t.Fatalf("shop received %d, want 1", shop.received.Load())
		}
	})
}

// TestInflightAdaptiveLimit: a shop whose latency grows with the orders it
// works on beyond 8 at once (10 ms up to 8, 10 ms × c/8 above). The
// adaptive limit, started at its floor, settles near that knee, well
// inside its bounds [1, 64], and every winner ends confirmed.
func TestInflightAdaptiveLimit(t *testing.T) {
	if testing.Short() {
		// A real-time measurement: under the race detector (make race runs
		// -short) the proxy's own work between taking a slot and sending
		// is many times slower, slots stay in use while the shop sees few
		// orders, and the limit grows on latencies the shop never felt
		// (CI, 2026-12-07: median 52, shop peak 17). The plain pass runs it.
		t.Skip("a real-time measurement: the plain pass of make test runs it")
	}
	const stock = 1200
	r := StartRedis(t)
	shop := startCapShop(t, 0, func(c int64) time.Duration {
		return time.Duration(float64(10*time.Millisecond) * max(1, float64(c)/8))
	})
	p := StartProxy(t, inflightOptions(r, shop.URL, stock, "max_inflight: 64", "adaptive: true", "min_inflight: 1").Config(t))
	p.Preheat(t, "act_if")
	p.StartQueue(t)
	b := p.Server.Inflight().Budget("act_if")
	if b == nil {
		t.Fatal("no in-flight budget")
	}
	var limits []int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				limits = append(limits, b.Limit())
			}
		}
	}()
	res := Spike{Addrs: []string{p.Addr}, Activity: "act_if", Users: stock, Tries: 1, Conc: 200}.Fire(t)
	if res.ByCode["WIN"]+res.ByCode["QUEUED"] != stock {
		t.Fatalf("answers %v %v", res.ByCode, res.Odd)
	}
	Eventually(t, 30*time.Second, "every winner confirmed", func() bool { return p.SKUStatus(t, "act_if").Confirmed == stock })
	close(stop)
	<-sampled
	p.WantStock(t, "act_if", 0, 0, stock)
	half := slices.Clone(limits[len(limits)/2:])
	slices.Sort(half)
	median, top := half[len(half)/2], slices.Max(limits)
	t.Logf("limit over the run: %v", limits)
	t.Logf("second half: median %d, %d..%d; shop peak %d", median, half[0], half[len(half)-1], shop.peak.Load())
	// Latency starts rising at 8: the limit settles near there (the
	// estimator's equilibrium is 16), far from both bounds.
	if median < 6 || median > 32 {
		t.Fatalf("limit in the second half of the run: median %d, want within [6, 32]", median)
	}
	// The shop never had more at once than the highest limit in force.
	if pk := shop.peak.Load(); pk > top {
		t.Fatalf("shop peak %d orders at once, the limit was never above %d", pk, top)
	}
}

var _ = config.OverflowQueue
