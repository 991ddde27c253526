package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

const bundleRoute = `{ method: POST, path: "/api/seckill/{activity}/bundle", items_from: "json:/items" }`

type bundleFixture struct {
	shop *e2e.Shop
	p    *e2e.Proxy
}

func newBundleFixture(t *testing.T, cluster bool, acts ...e2e.Activity) *bundleFixture {
	t.Helper()
	return newBundleFixtureTimeout(t, cluster, 5*time.Second, acts...)
}

func newBundleFixtureTimeout(t *testing.T, cluster bool, upstream time.Duration, acts ...e2e.Activity) *bundleFixture {
	t.Helper()
	var r *e2e.Redis
	if cluster {
		r = e2e.StartCluster(t)
	} else {
		r = e2e.StartRedis(t)
	}
	f := &bundleFixture{shop: e2e.StartShop(t)}
	f.p = e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, Cluster: cluster, ShopURL: f.shop.URL, UpstreamTimeout: upstream,
		Activities: acts}.Config(t))
	for _, a := range acts {
		f.p.Preheat(t, a.ID)
	}
	return f
}

func (f *bundleFixture) bundle(act, user, body string) e2e.Resp {
	return e2e.Do(nil, f.p.Addr, e2e.Req{URI: "/api/seckill/" + act + "/bundle", Body: []byte(body),
		Header: [][2]string{{"X-User-Id", user}, {"Content-Type", "application/json"}}})
}

func (f *bundleFixture) single(act, sku, user string) e2e.Resp {
	return e2e.Do(nil, f.p.Addr, e2e.Req{URI: "/api/seckill/" + act + "/" + sku + "/buy", Header: [][2]string{{"X-User-Id", user}}})
}

// stock is every SKU's status, each checked to add up.
func (f *bundleFixture) stock(t *testing.T, act string) map[string]store.SKUStatus {
	t.Helper()
	out := map[string]store.SKUStatus{}
	for _, k := range f.p.Status(t, act).SKUs {
		if !k.OK || k.Remaining+k.Pending+k.Confirmed != k.Initial {
			t.Fatalf("sku %s does not add up: %+v", k.ID, k)
		}
		out[k.ID] = k
	}
	return out
}

func itemsJSON(items ...string) string {
	var parts []string
	for _, it := range items {
		sku, qty, _ := strings.Cut(it, ":")
		parts = append(parts, fmt.Sprintf(`{"sku":%q,"qty":%s}`, sku, qty))
	}
	return `{"items":[` + strings.Join(parts, ",") + `]}`
}

// A bundle goes to the shop as one buy with one token, its items in
// X-Seckill-Items under the signature; malformed bundles are refused
// before Redis; the shop's refusal releases every item; SOLD_OUT names
// the SKU that was short.
func TestBundleThroughTheProxy(t *testing.T) {
	f := newBundleFixture(t, false, e2e.Activity{ID: "bun", Shards: 2, PerUserLimit: 3, BundleRoute: bundleRoute,
		SKUs: []config.SKU{{ID: "a", Stock: 10}, {ID: "b", Stock: 3}}})

	r := f.bundle("bun", "u1", itemsJSON("a:1", "b:2"))
	if r.Code != "WIN" {
		t.Fatalf("bundle: %d %s", r.Status, r.Body)
	}
	tok := r.Token()
	if !strings.HasPrefix(tok, "bun.*.") {
		t.Fatalf("bundle token %q", tok)
	}
	o, ok := f.shop.Orders()[tok]
	if !ok || o.Items != "a:1,b:2" || o.SKU != "*" || o.Qty != "3" || o.User != "u1" || !o.SigOK || !o.SigV1OK {
		t.Fatalf("shop order = %+v (found %v): want items a:1,b:2, sku *, qty 3, signatures verified", o, ok)
	}
	st := f.stock(t, "bun")
	if st["a"].Confirmed != 1 || st["b"].Confirmed != 2 {
		t.Fatalf("after the bundle: %+v", st)
	}
	g := e2e.Do(nil, f.p.Addr, e2e.Req{Method: "GET", URI: "/_seckill/reservations/" + tok})
	if g.Status != 200 || g.Str("state") != "confirmed" {
		t.Fatalf("lookup of the bundle: %d %s", g.Status, g.Body)
	}
	if items, _ := g.JSON["items"].([]any); len(items) != 2 || g.Str("sku") != "*" {
		t.Fatalf("lookup of the bundle shows no items: %s", g.Body)
	} else if it, _ := items[1].(map[string]any); it["sku"] != "b" || it["qty"] != float64(2) {
		t.Fatalf("lookup of the bundle: item 2 = %v", it)
	}

	// Refused before Redis.
	for _, tt := range []struct{ body, code string }{
		{itemsJSON("a:1", "zz:1"), "UNKNOWN_ITEM"},
		{itemsJSON("a:0"), "BAD_REQUEST"},
		{itemsJSON("a:1", "a:1"), "BAD_REQUEST"},
		{itemsJSON("a:2", "b:2"), "BAD_REQUEST"}, // 4 units, max_qty 3
		{`{"items":[]}`, "BAD_REQUEST"},
		{`{"items":{"sku":"a"}}`, "BAD_REQUEST"},
		{`{"items":[{"sku":"a","qty":1.5}]}`, "BAD_REQUEST"},
		{`not json`, "BAD_REQUEST"},
	} {
		if r := f.bundle("bun", "u9", tt.body); r.Code != tt.code {
			t.Errorf("%s: %d %s, want %s", tt.body, r.Status, r.Body, tt.code)
		}
	}
	var many []string
	for i := 0; i < store.MaxBundleItems+1; i++ {
		many = append(many, "x"+strconv.Itoa(i)+":1")
	}
	if r := f.bundle("bun", "u9", itemsJSON(many...)); r.Code != "BAD_REQUEST" {
		t.Errorf("%d items: %d %s, want BAD_REQUEST", len(many), r.Status, r.Body)
	}
	// Other spellings of the bundle path are bundles too (canonical route
	// matching), or refused; never passed to the shop as ordinary traffic.
	for _, uri := range []string{"/API/Seckill/bun/BUNDLE", "/api/seckill/bun/bundle;jsessionid=1", "/api//seckill/./bun/bundle/", "/api/seckill/bun/%62undle"} {
		r := e2e.Do(nil, f.p.Addr, e2e.Req{URI: uri, Body: []byte(itemsJSON("a:9")), Header: [][2]string{{"X-User-Id", "u9"}}})
		if r.Code != "BAD_REQUEST" {
			t.Errorf("%s: %d %s, want the bundle route's BAD_REQUEST (9 units over max_qty)", uri, r.Status, r.Body)
		}
	}
	if r := e2e.Do(nil, f.p.Addr, e2e.Req{Method: "GET", URI: "/api/seckill/bun/bundle"}); r.Status != 405 {
		t.Errorf("GET on the bundle path: %d %s, want 405", r.Status, r.Body)
	}
	if len(f.shop.Requests()) != 1 {
		t.Fatalf("the shop saw %d requests, want only the first bundle", len(f.shop.Requests()))
	}
	if f.shop.SeenBuy("u9") {
		t.Fatal("a refused bundle reached the shop")
	}

	// The shop refuses: every item comes back.
	f.shop.Answer("u2", http.StatusConflict)
	if r := f.bundle("bun", "u2", itemsJSON("b:1", "a:2")); r.Code != "UPSTREAM_FAILED" {
		t.Fatalf("bundle the shop refused: %d %s", r.Status, r.Body)
	}
	e2e.Eventually(t, 5*time.Second, "the refused bundle released", func() bool {
		st := f.stock(t, "bun")
		return st["a"].Remaining == 9 && st["b"].Remaining == 1 && st["a"].Pending == 0 && st["b"].Pending == 0
	})

	// b has 1 left: a bundle asking 2 of it is SOLD_OUT naming b, and takes no a.
	r = f.bundle("bun", "u3", itemsJSON("a:1", "b:2"))
	if r.Code != "SOLD_OUT" || r.Str("sku") != "b" {
		t.Fatalf("bundle short of b: %d %s, want SOLD_OUT with sku b", r.Status, r.Body)
	}
	if st := f.stock(t, "bun"); st["a"].Remaining != 9 || st["b"].Remaining != 1 {
		t.Fatalf("a SOLD_OUT bundle took units: %+v", st)
	}
	// The limit counts the bundle's units: u1 holds 3.
	if r := f.single("bun", "a", "u1"); r.Code != "ALREADY_PURCHASED" {
		t.Fatalf("single buy of a buyer holding a 3-unit bundle: %d %s", r.Status, r.Body)
	}
}

// Thousands of bundles and single buys of the same SKUs through the proxy
// at once: no SKU oversold, no partial bundle (every SKU's confirmed units
// equal what the shop holds orders for, item by item), stock adds up.
func TestBundleSpikeThroughTheProxy(t *testing.T) {
	runBundleSpikeE2E(t, false)
}

// The same on a 3-master cluster (placed shard tags).
func TestBundleSpikeThroughTheProxyCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	runBundleSpikeE2E(t, true)
}

func runBundleSpikeE2E(t *testing.T, cluster bool) {
	skus := []config.SKU{{ID: "a", Stock: 40}, {ID: "b", Stock: 70}, {ID: "c", Stock: 25}}
	f := newBundleFixture(t, cluster, e2e.Activity{ID: "spk", Shards: 4, PerUserLimit: 3, BundleRoute: bundleRoute, SKUs: skus})
	shapes := []string{itemsJSON("a:1", "b:2"), itemsJSON("b:1", "c:1"), itemsJSON("c:1", "a:1", "b:1")}
	type job struct{ user, body, sku string }
	rng := rand.New(rand.NewPCG(3, 5))
	var jobs []job
	for u := 0; u < 800; u++ {
		for try := 0; try < 2; try++ {
			j := job{user: "u" + strconv.Itoa(u)}
			if k := rng.IntN(5); k < len(shapes) {
				j.body = shapes[k]
			} else {
				j.sku = skus[rng.IntN(len(skus))].ID
			}
			jobs = append(jobs, j)
		}
	}
	rng.Shuffle(len(jobs), func(i, k int) { jobs[i], jobs[k] = jobs[k], jobs[i] })
	next := make(chan job)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[string]int{}
	for w := 0; w < 48; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				var r e2e.Resp
				if j.body != "" {
					r = f.bundle("spk", j.user, j.body)
				} else {
					r = f.single("spk", j.sku, j.user)
				}
				mu.Lock()
				codes[r.Code]++
				if r.Err != nil || (r.Code != "WIN" && r.Code != "SOLD_OUT" && r.Code != "ALREADY_PURCHASED" && r.Code != "PENDING") {
					t.Errorf("%s: %d %s %v", j.user, r.Status, r.Body, r.Err)
				}
				if r.Code == "SOLD_OUT" && j.body != "" && r.Str("sku") == "" {
					t.Errorf("%s: a bundle's SOLD_OUT names no sku: %s", j.user, r.Body)
				}
				mu.Unlock()
			}
		}()
	}
	for _, j := range jobs {
		next <- j
	}
	close(next)
	wg.Wait()
	if codes["WIN"] == 0 {
		t.Fatalf("no winner: %v", codes)
	}
	held := map[string]int64{}
	perUser := map[string]int64{}
	bundles := 0
	for _, o := range f.shop.Orders() {
		if o.Items != "" {
			bundles++
			items, err := store.ParseItems(o.Items)
			if err != nil {
				t.Fatalf("order %s: items %q", o.Token, o.Items)
			}
			for _, it := range items {
				held[it.SKU] += it.Qty
				perUser[o.User] += it.Qty
			}
			continue
		}
		held[o.SKU]++
		perUser[o.User]++
	}
	if bundles == 0 {
		t.Fatalf("no bundle won: %v", codes)
	}
	for u, n := range perUser {
		if n > 3 {
			t.Fatalf("user %s holds %d units at the shop, limit 3", u, n)
		}
	}
	st := f.stock(t, "spk")
	for _, k := range skus {
		s := st[k.ID]
		if held[k.ID] > k.Stock || s.Confirmed != held[k.ID] || s.Pending != 0 {
			t.Fatalf("sku %s: shop holds %d units, Redis %+v (stock %d)", k.ID, held[k.ID], s, k.Stock)
		}
	}
	t.Logf("answers %v; %d bundle orders; units held %v", codes, bundles, held)
}

// The reconciler settles a bundle left pending (the shop's answer was
// lost) as a whole, by verify: confirmed where the shop holds the order,
// released (every item) where it does not.
func TestBundleReconciled(t *testing.T) {
	f := newBundleFixtureTimeout(t, false, 300*time.Millisecond,
		e2e.Activity{ID: "rec", Shards: 2, PerUserLimit: 3, BundleRoute: bundleRoute,
			SKUs: []config.SKU{{ID: "a", Stock: 10}, {ID: "b", Stock: 10}}},
		e2e.Activity{ID: "unv", Shards: 2, PerUserLimit: 3, BundleRoute: bundleRoute, NoVerify: true,
			SKUs: []config.SKU{{ID: "a", Stock: 10}, {ID: "b", Stock: 10}}})
	f.shop.AnswerAfterOrder("kept", http.StatusBadGateway)
	f.shop.Answer("lost", http.StatusServiceUnavailable)
	for _, u := range []string{"kept", "lost"} {
		if r := f.bundle("rec", u, itemsJSON("a:1", "b:2")); r.Code != "UPSTREAM_TIMEOUT" {
			t.Fatalf("%s: %d %s, want UPSTREAM_TIMEOUT", u, r.Status, r.Body)
		}
	}
	if st := f.stock(t, "rec"); st["a"].Pending != 2 || st["b"].Pending != 4 {
		t.Fatalf("before the reconciler: %+v", st)
	}
	a := f.p.Activity(t, "rec")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep, err := reservation.NewReconciler(f.p.Store, metrics.New(), zap.NewNop()).
		Run(ctx, []*config.Activity{a}, true, time.Now().Add(a.PendingTimeout+time.Minute))
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	actions := map[string]string{}
	for _, ar := range rep.Activities {
		for _, fd := range ar.Stale {
			actions[fd.User] = fd.Action
		}
	}
	if actions["kept"] != "confirmed" || actions["lost"] != "released" {
		b, _ := json.Marshal(rep)
		t.Fatalf("reconciler actions %v; report %s", actions, b)
	}
	st := f.stock(t, "rec")
	if st["a"].Confirmed != 1 || st["b"].Confirmed != 2 || st["a"].Remaining != 9 || st["b"].Remaining != 8 || st["a"].Pending+st["b"].Pending != 0 {
		t.Fatalf("after the reconciler: %+v", st)
	}

	// Without verify.url nothing can settle a bundle the shop never
	// answered: the report counts its units under each item's SKU.
	release := f.shop.Hang("slow")
	defer release()
	if r := f.bundle("unv", "slow", itemsJSON("a:1", "b:2")); r.Code != "UPSTREAM_TIMEOUT" {
		t.Fatalf("slow: %d %s, want UPSTREAM_TIMEOUT", r.Status, r.Body)
	}
	u := f.p.Activity(t, "unv")
	rep, err = reservation.NewReconciler(f.p.Store, metrics.New(), zap.NewNop()).
		Run(ctx, []*config.Activity{u}, true, time.Now().Add(u.PendingTimeout+time.Minute))
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	got := map[string]int64{}
	for _, ar := range rep.Activities {
		for _, k := range ar.SKUs {
			got[k.ID] = k.Unsettled
		}
	}
	if got["a"] != 1 || got["b"] != 2 {
		b, _ := json.Marshal(rep)
		t.Fatalf("unsettled by SKU %v, want a:1 b:2; report %s", got, b)
	}
}
