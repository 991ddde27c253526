package e2e

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// Red team rtf: fair start, shadow mode and bundles, from the outside.

// rtfShop is a shop that keeps an order per token with the units the
// proxy's headers name (a bundle's X-Seckill-Items, else sku × qty), and
// refuses (409) every buy of a user refuse says so: those winners are
// released, under whatever Redis is doing at that moment.
type rtfShop struct {
	URL    string
	refuse func(user string) bool

	mu     sync.Mutex
	orders map[string]rtfOrder // token -> order
	sent   map[string]int      // token -> times sent
	seen   atomic.Int64
}

type rtfOrder struct {
	id, user string
	units    map[string]int64 // sku -> units
}

func rtfStartShop(t *testing.T, refuse func(string) bool) *rtfShop {
	s := &rtfShop{refuse: refuse, orders: map[string]rtfOrder{}, sent: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/internal/orders" {
			s.mu.Lock()
			o, ok := s.orders[r.URL.Query().Get("token")]
			s.mu.Unlock()
			if !ok {
				w.WriteHeader(http.StatusNotFound)
				return
			}
			_ = json.NewEncoder(w).Encode(map[string]string{"order_id": o.id})
			return
		}
		tok := r.Header.Get("X-Seckill-Token")
		if tok == "" {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		s.seen.Add(1)
		user := r.Header.Get("X-Seckill-User")
		s.mu.Lock()
		s.sent[tok]++
		s.mu.Unlock()
		if s.refuse != nil && s.refuse(user) {
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"error":"refused"}`))
			return
		}
		units := map[string]int64{}
		if items := r.Header.Get("X-Seckill-Items"); items != "" {
			its, err := store.ParseItems(items)
			if err != nil {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			for _, it := range its {
				units[it.SKU] += it.Qty
			}
		} else {
			q, _ := strconv.ParseInt(r.Header.Get("X-Seckill-Qty"), 10, 64)
			units[r.Header.Get("X-Seckill-Sku")] += q
		}
		s.mu.Lock()
		o, ok := s.orders[tok]
		if !ok {
			o = rtfOrder{id: "o-" + tok[len(tok)-8:], user: user, units: units}
			s.orders[tok] = o
		}
		s.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]string{"code": "WIN", "order_id": o.id})
	}))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// check fails for a token sent twice, a SKU sold beyond stock or a user
// above limit at the shop, and returns the shop's units per SKU.
func (s *rtfShop) check(t *testing.T, stock, limit int64) map[string]int64 {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	perSKU, perUser := map[string]int64{}, map[string]int64{}
	for _, o := range s.orders {
		for sku, n := range o.units {
			perSKU[sku] += n
			perUser[o.user] += n
		}
	}
	for sku, n := range perSKU {
		if n > stock {
			t.Errorf("the shop sold %d units of %s, stock %d", n, sku, stock)
		}
	}
	for u, n := range perUser {
		if n > limit {
			t.Errorf("the shop sold user %s %d units, limit %d", u, n, limit)
		}
	}
	for tok, n := range s.sent {
		if n > 1 {
			t.Errorf("token %s sent to the shop %d times", tok, n)
		}
	}
	return perSKU
}

func rtfHash(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}

// TestRTFFairStartBundlesBesideSinglesStalled: the opening of a fair-start
// sale on two instances, every buyer a scalper of their own limit. SKUs a
// and b of 40 units, per_user_limit 2, 4 shards, fair_start 400 ms with a
// 400 ms spread. 200 buyers each send, at once and in the first 300 ms
// after start, the bundle a:1,b:1 (in one of three spellings: other item
// order, qty as a string, qty absent) to one instance, a single a to the
// other and a single b to the first: 3 units asked, 2 allowed. Redis
// stalls (DEBUG SLEEP 300 ms) inside the spread while held buys reach it,
// and the shop refuses (409) a fifth of the buyers, so releases of
// bundles and singles run beside the stall; a buyer told
// STORE_UNAVAILABLE or BUSY retries up to 4 times on the other instance.
// Then: no reservation stamped before start + fair_start, each WIN an
// order, no token sent twice, no SKU oversold, no user above the limit
// (Redis and shop), and after a reconcile every SKU adds up and Redis's
// confirmed units per SKU equal the shop's.
func TestRTFFairStartBundlesBesideSinglesStalled(t *testing.T) {
	if testing.Short() {
		t.Skip("a real-clock opening with a Redis stall")
	}
	const stock, limit, users, shards = 40, 2, 200, 4
	const act = "rtffb"
	skus := []string{"a", "b"}
	node := redistest.Start(t, "--enable-debug-command", "yes")
	do := func(args ...string) (string, error) { return node.Do(args...) }
	shop := rtfStartShop(t, func(u string) bool { return rtfHash(u)%5 == 0 })
	start := time.Now().Add(2 * time.Second).Truncate(100 * time.Millisecond)
	const fair, spread = 400 * time.Millisecond, 400 * time.Millisecond
	o := Options{Redis: []string{node.Addr}, ShopURL: shop.URL, RedisTimeout: 100 * time.Millisecond,
		UpstreamTimeout: 2 * time.Second,
		Activities: []Activity{{ID: act, SKUs: []config.SKU{{ID: "a", Stock: stock}, {ID: "b", Stock: stock}},
			PerUserLimit: limit, Shards: shards, Pending: 10 * time.Second, BundleRoute: bhBundleRoute,
			Start: start, End: start.Add(time.Hour), FairStart: fair, FairStartSpread: spread}}}
	pa := StartProxy(t, o.Config(t))
	pb := StartProxy(t, o.Config(t))
	pa.Preheat(t, act)
	pb.WaitPreheated(t, act)

	bodies := [][]byte{
		[]byte(`{"items":[{"sku":"a","qty":1},{"sku":"b","qty":1}]}`),
		[]byte(`{"items":[{"sku":"b","qty":"1"},{"sku":"a"}]}`),
		[]byte(`{"items":[{"qty":1,"sku":"a"},{"sku":"b","qty":"01"}]}`),
	}
	bundle := func(p *Proxy, user string, i int) Resp {
		return Do(nil, p.Addr, Req{URI: "/api/seckill/" + act + "/bundle", Body: bodies[i%len(bodies)],
			Header: [][2]string{{"X-User-Id", user}, {"Content-Type", "application/json"}}, Timeout: 10 * time.Second})
	}
	single := func(p *Proxy, user, sku string) Resp {
		return Do(nil, p.Addr, Req{URI: "/api/seckill/" + act + "/" + sku + "/buy",
			Header: [][2]string{{"X-User-Id", user}}, Timeout: 10 * time.Second})
	}
	type ask struct {
		user, what string
		final      Resp
	}
	var mu sync.Mutex
	var asks []*ask
	var wg sync.WaitGroup
	retry := func(first, other *Proxy, send func(p *Proxy) Resp) Resp {
		var r Resp
		ps := []*Proxy{first, other}
		for try := 0; try < 5; try++ {
			r = send(ps[try%2])
			if r.Code != "STORE_UNAVAILABLE" && r.Code != "BUSY" {
				return r
			}
			time.Sleep(50 * time.Millisecond)
		}
		return r
	}
	for i := 0; i < users; i++ {
		user := fmt.Sprintf("rtf%d", i)
		at := start.Add(time.Duration(rtfHash(user)%300) * time.Millisecond)
		for _, what := range []string{"bundle", "a", "b"} {
			k := &ask{user: user, what: what}
			mu.Lock()
			asks = append(asks, k)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Until(at))
				switch what {
				case "bundle":
					k.final = retry(pa, pb, func(p *Proxy) Resp { return bundle(p, user, i) })
				case "a":
					k.final = retry(pb, pa, func(p *Proxy) Resp { return single(p, user, "a") })
				default:
					k.final = retry(pa, pb, func(p *Proxy) Resp { return single(p, user, "b") })
				}
			}()
		}
	}
	// The stall: inside the spread, while held buys are let on.
	time.Sleep(time.Until(start.Add(fair + 120*time.Millisecond)))
	if _, err := node.Do("DEBUG", "SLEEP", "0.3"); err != nil {
		t.Fatalf("DEBUG SLEEP: %v", err)
	}
	wg.Wait()
	waitSettled(t, 10*time.Second, pa, pb)

	codes := map[string]int{}
	wins := map[string]int64{} // user -> units told WIN
	for _, k := range asks {
		codes[k.what+" "+k.final.Code]++
		if k.final.Code == "WIN" {
			if k.what == "bundle" {
				wins[k.user] += 2
			} else {
				wins[k.user]++
			}
			shop.mu.Lock()
			_, ok := shop.orders[k.final.Token()]
			shop.mu.Unlock()
			if !ok {
				t.Errorf("%s's %s told WIN, token %q: no order at the shop", k.user, k.what, k.final.Token())
			}
		}
		switch k.final.Code {
		case "WIN", "SOLD_OUT", "ALREADY_PURCHASED", "PENDING", "UPSTREAM_FAILED", "STORE_UNAVAILABLE", "BUSY":
		default:
			t.Errorf("%s's %s: %d %s", k.user, k.what, k.final.Status, k.final.Body)
		}
	}
	for u, n := range wins {
		if n > limit {
			t.Errorf("user %s told WIN for %d units, limit %d", u, n, limit)
		}
	}
	t.Logf("answers: %v; shop saw %d buys", codes, shop.seen.Load())

	// No reservation was made before the fair window's end.
	for s := 0; s < shards; s++ {
		res := pa.Store.SKUKeys(act, "a", shards).Shards[s].Res
		raw, err := do("HGETALL", res)
		if err != nil {
			t.Fatal(err)
		}
		f := rtLines(raw)
		for j := 0; j+1 < len(f); j += 2 {
			if strings.HasSuffix(f[j], ":i") {
				continue
			}
			parts := strings.Split(f[j+1], "|")
			if len(parts) < 4 || parts[3] == "" {
				continue
			}
			ms, _ := strconv.ParseInt(parts[3], 10, 64)
			if ms != 0 && ms < start.Add(fair).UnixMilli() {
				t.Errorf("reservation %s %q stamped %d ms before the fair window's end", f[j], f[j+1], start.Add(fair).UnixMilli()-ms)
			}
		}
	}

	bhAudit(t, do, pa, act, skus, shards, stock, limit)
	ra12Reconcile(t, pa, act, time.Now().Add(10*time.Second+time.Minute))
	bhAudit(t, do, pa, act, skus, shards, stock, limit)
	sold := shop.check(t, stock, limit)
	for _, k := range pa.Status(t, act).SKUs {
		t.Logf("after reconcile %+v, shop %d", k, sold[k.ID])
		if k.Pending != 0 || k.Confirmed != sold[k.ID] || k.Remaining+k.Confirmed != stock {
			t.Errorf("sku %s: %+v, the shop sold %d", k.ID, k, sold[k.ID])
		}
	}
}
