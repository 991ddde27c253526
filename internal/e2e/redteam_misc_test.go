package e2e_test

// Red-team tests (misc): bundles under churn and on a cluster, shadow mode
// (forwarding unchanged, never blocking), public endpoint token tricks,
// memory and metric series a client can grow. Helpers start with rm.

import (
	"context"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// rmUnits sums the shop's orders per SKU and per user (bundles by item).
func rmUnits(t *testing.T, shop *e2e.Shop) (perSKU, perUser map[string]int64) {
	t.Helper()
	perSKU, perUser = map[string]int64{}, map[string]int64{}
	for _, o := range shop.Orders() {
		if o.Items != "" {
			items, err := store.ParseItems(o.Items)
			if err != nil {
				t.Fatalf("order %s: items %q", o.Token, o.Items)
			}
			for _, it := range items {
				perSKU[it.SKU] += it.Qty
				perUser[o.User] += it.Qty
			}
			continue
		}
		q, _ := strconv.ParseInt(o.Qty, 10, 64)
		perSKU[o.SKU] += q
		perUser[o.User] += q
	}
	return perSKU, perUser
}

// Bundles of overlapping SKUs and single buys of the same SKUs, each buyer
// sending a bundle and two singles at once, while the shop refuses a
// quarter of the buyers (every refused bundle must give every item back).
// Stock is small and spread over 4 shards, so most bundles need steals.
// Promise (README Bundles, SPEC §6): no partial bundle, per-SKU
// remaining+pending+confirmed == initial, confirmed == the shop's units,
// nothing left pending, no user above per_user_limit counting every unit.
func TestRedTeamMiscBundleChurnWithRefusals(t *testing.T) {
	skus := []config.SKU{{ID: "a", Stock: 61}, {ID: "b", Stock: 93}, {ID: "c", Stock: 47}, {ID: "d", Stock: 71}}
	f := newBundleFixture(t, false, e2e.Activity{ID: "chn", Shards: 4, PerUserLimit: 3, BundleRoute: bundleRoute, SKUs: skus})
	shapes := []string{
		itemsJSON("a:1", "b:2"), itemsJSON("b:1", "c:1", "d:1"), itemsJSON("c:2", "a:1"),
		itemsJSON("d:1", "a:1"), itemsJSON("b:1", "d:2"), `{"items":[{"sku":"c","qty":"1"},{"sku":"b"}]}`,
	}
	const users = 300
	rng := rand.New(rand.NewPCG(11, 17))
	refused := map[string]bool{}
	for u := 0; u < users; u++ {
		if rng.IntN(4) == 0 {
			user := "u" + strconv.Itoa(u)
			refused[user] = true
			f.shop.Answer(user, http.StatusConflict)
		}
	}
	type job struct{ user, body, sku string }
	var jobs []job
	for u := 0; u < users; u++ {
		user := "u" + strconv.Itoa(u)
		jobs = append(jobs, job{user: user, body: shapes[rng.IntN(len(shapes))]})
		for k := 0; k < 2; k++ {
			jobs = append(jobs, job{user: user, sku: skus[rng.IntN(len(skus))].ID})
		}
	}
	rng.Shuffle(len(jobs), func(i, k int) { jobs[i], jobs[k] = jobs[k], jobs[i] })
	next := make(chan job)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[string]int{}
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				var r e2e.Resp
				if j.body != "" {
					r = f.bundle("chn", j.user, j.body)
				} else {
					r = f.single("chn", j.sku, j.user)
				}
				mu.Lock()
				codes[r.Code]++
				switch r.Code {
				case "WIN", "SOLD_OUT", "ALREADY_PURCHASED", "PENDING", "UPSTREAM_FAILED":
				default:
					t.Errorf("%s %q/%s: %d %s %v", j.user, j.body, j.sku, r.Status, r.Body, r.Err)
				}
				if r.Code == "UPSTREAM_FAILED" && !refused[j.user] {
					t.Errorf("%s: UPSTREAM_FAILED for a buyer the shop accepts", j.user)
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
	if codes["UPSTREAM_FAILED"] == 0 || codes["WIN"] == 0 {
		t.Fatalf("the run exercised neither refusals nor wins: %v", codes)
	}
	held, perUser := rmUnits(t, f.shop)
	for u, n := range perUser {
		if n > 3 {
			t.Errorf("user %s holds %d units at the shop, per_user_limit 3", u, n)
		}
		if refused[u] {
			t.Errorf("the shop refused %s yet holds an order", u)
		}
	}
	var st map[string]store.SKUStatus
	e2e.Eventually(t, 5*time.Second, "every release settled", func() bool {
		st = f.stock(t, "chn")
		for _, k := range skus {
			if st[k.ID].Pending != 0 {
				return false
			}
		}
		return true
	})
	for _, k := range skus {
		s := st[k.ID]
		if s.Confirmed != held[k.ID] || s.Remaining+s.Confirmed != k.Stock || held[k.ID] > k.Stock {
			t.Errorf("sku %s: the shop holds %d units, Redis %+v (stock %d)", k.ID, held[k.ID], s, k.Stock)
		}
	}
	t.Logf("answers %v; units held %v", codes, held)
}

// On a 3-master cluster (placed shard tags), a bundle whose units sit on
// other shards (1 unit of each SKU per shard: every bundle of 2+ units
// needs steals from donor shards on other masters) is refused by the shop:
// every item's units come back, and the whole stock can then be bought
// by one bundle. Lookups show the released bundle with its items.
func TestRedTeamMiscBundleClusterStealsAndRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	f := newBundleFixture(t, true, e2e.Activity{ID: "cst", Shards: 3, PerUserLimit: 6, BundleRoute: bundleRoute,
		SKUs: []config.SKU{{ID: "a", Stock: 3}, {ID: "b", Stock: 3}}})
	f.shop.Answer("refused", http.StatusUnprocessableEntity)
	r := f.bundle("cst", "refused", itemsJSON("a:3", "b:2"))
	if r.Code != "UPSTREAM_FAILED" {
		t.Fatalf("refused bundle: %d %s", r.Status, r.Body)
	}
	var st map[string]store.SKUStatus
	e2e.Eventually(t, 5*time.Second, "the refused bundle released", func() bool {
		st = f.stock(t, "cst")
		return st["a"].Pending == 0 && st["b"].Pending == 0
	})
	if st["a"].Remaining != 3 || st["b"].Remaining != 3 || st["a"].Released != 3 || st["b"].Released != 2 {
		t.Fatalf("after the shop refused the bundle a:3,b:2: %+v", st)
	}
	// Every unit is buyable again: one bundle takes the whole stock. The
	// proxy reopens the SKUs when Redis's invalidation of their sold-out
	// flags reaches it, a moment after Status shows the release (on a
	// loaded machine, more than a moment: CI saw a SOLD_OUT from memory
	// here); a SOLD_OUT holds nothing, so the buyer clicks again.
	var w e2e.Resp
	e2e.Eventually(t, 5*time.Second, "the released units reopened", func() bool {
		w = f.bundle("cst", "whole", itemsJSON("b:3", "a:3"))
		return w.Code != "SOLD_OUT"
	})
	if w.Code != "WIN" {
		t.Fatalf("bundle of the whole stock after the release: %d %s", w.Status, w.Body)
	}
	st = f.stock(t, "cst")
	if st["a"].Confirmed != 3 || st["b"].Confirmed != 3 || st["a"].Remaining != 0 || st["b"].Remaining != 0 {
		t.Fatalf("after the whole-stock bundle: %+v", st)
	}
	if r := f.single("cst", "a", "late"); r.Code != "SOLD_OUT" {
		t.Fatalf("single buy after the sell-out: %d %s", r.Status, r.Body)
	}
	g := e2e.Do(nil, f.p.Addr, e2e.Req{Method: "GET", URI: "/_seckill/reservations/" + w.Token()})
	if g.Status != 200 || g.Str("state") != "confirmed" || g.Str("sku") != "*" {
		t.Fatalf("lookup of the whole-stock bundle: %d %s", g.Status, g.Body)
	}
	if items, _ := g.JSON["items"].([]any); len(items) != 2 {
		t.Fatalf("lookup shows items %v: %s", g.JSON["items"], g.Body)
	}
	// The operator's release of the confirmed bundle (seckill-proxy
	// release / POST /admin/release call this) gives every item back, once.
	tk, err := store.ParseToken(w.Token())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i, want := range []string{"OK", "SAME"} {
		code, err := f.p.Store.Release(ctx, tk, 3, "refund", time.Now().UnixMilli(), false)
		if err != nil || code.String() != want {
			t.Fatalf("release #%d of the bundle: %v %v, want %s", i+1, code, err, want)
		}
	}
	st = f.stock(t, "cst")
	if st["a"].Remaining != 3 || st["b"].Remaining != 3 || st["a"].Confirmed+st["b"].Confirmed != 0 {
		t.Fatalf("after releasing the confirmed bundle: %+v", st)
	}
}

// Bundle shapes the README says are refused before Redis: none reserves a
// unit, none reaches the shop, each gets its documented code.
func TestRedTeamMiscBundleMalformedShapes(t *testing.T) {
	f := newBundleFixture(t, false, e2e.Activity{ID: "mal", Shards: 2, PerUserLimit: 5, BundleRoute: bundleRoute,
		SKUs: []config.SKU{{ID: "a", Stock: 10}, {ID: "b", Stock: 10}, {ID: "c", Stock: 10}}})
	var seventeen, sixteenOneUnknown []string
	for i := 0; i < 17; i++ {
		seventeen = append(seventeen, []string{"a", "b", "c"}[i%3]+":1")
	}
	for i := 0; i < 15; i++ {
		sixteenOneUnknown = append(sixteenOneUnknown, "x"+strconv.Itoa(i)+":1")
	}
	sixteenOneUnknown = append(sixteenOneUnknown, "a:1")
	for _, tt := range []struct{ body, code string }{
		{itemsJSON(seventeen...), "BAD_REQUEST"},
		{itemsJSON(sixteenOneUnknown...), "UNKNOWN_ITEM"},
		{itemsJSON("a:1", "b:1", "a:1"), "BAD_REQUEST"},                          // same SKU twice
		{`{"items":[{"sku":"a","qty":1},{"sku":"a","qty":"1"}]}`, "BAD_REQUEST"}, // twice, other spelling
		{`{"items":[{"sku":"a","qty":0}]}`, "BAD_REQUEST"},                       // qty 0
		{`{"items":[{"sku":"a","qty":"0"}]}`, "BAD_REQUEST"},                     // qty "0"
		{`{"items":[{"sku":"a","qty":-1},{"sku":"b","qty":2}]}`, "BAD_REQUEST"},  // negative
		{`{"items":[{"sku":"a","qty":"-1"}]}`, "BAD_REQUEST"},                    // negative string
		{`{"items":[{"sku":"a","qty":999999999}]}`, "BAD_REQUEST"},               // huge
		{`{"items":[{"sku":"a","qty":99999999999999999999999}]}`, "BAD_REQUEST"}, // huger
		{`{"items":[{"sku":"a","qty":9223372036854775807},{"sku":"b","qty":9223372036854775807}]}`, "BAD_REQUEST"},
		{`{"items":[{"sku":"a","qty":"1e2"}]}`, "BAD_REQUEST"},
		{`{"items":[{"sku":"a","qty":1e0}]}`, "BAD_REQUEST"},
		{`{"items":[{"sku":"a","qty":true}]}`, "BAD_REQUEST"},
		{`{"items":[{"sku":"a","qty":null}]}`, "BAD_REQUEST"},
		{`{"items":[{"sku":"a","qty":[1]}]}`, "BAD_REQUEST"},
		{`{"items":[{"sku":1,"qty":1}]}`, "BAD_REQUEST"},
		{`{"items":[{"sku":"","qty":1}]}`, "BAD_REQUEST"},
		{`{"items":[{"qty":1}]}`, "BAD_REQUEST"},
		{`{"items":[{"sku":"a|b","qty":1}]}`, "BAD_REQUEST"},
		{`{"items":[{"sku":"A","qty":1}]}`, "UNKNOWN_ITEM"},
		{`{"items":[{"sku":"a:1,b","qty":1}]}`, "UNKNOWN_ITEM"},
		{`{"items":[{"sku":"*","qty":1}]}`, "UNKNOWN_ITEM"},
		{`{"items":["a"]}`, "BAD_REQUEST"},
		{`{"items":[["a",1]]}`, "BAD_REQUEST"},
		{`{"items":"a:1"}`, "BAD_REQUEST"},
		{`{"items":null}`, "BAD_REQUEST"},
		{`{"item":[{"sku":"a"}]}`, "BAD_REQUEST"},
		{`[{"sku":"a"}]`, "BAD_REQUEST"},
		{`{"items":[{"sku":"a","qty":1}]} trailing`, "BAD_REQUEST"},
		{`{"items":[{"sku":"a","qty":2},{"sku":"b","qty":2},{"sku":"c","qty":2}]}`, "BAD_REQUEST"}, // 6 > max_qty 5
	} {
		r := f.bundle("mal", "m1", tt.body)
		if r.Code != tt.code {
			t.Errorf("%s: %d %s, want %s", tt.body, r.Status, r.Body, tt.code)
		}
	}
	if n := len(f.shop.Requests()); n != 0 {
		t.Errorf("the shop saw %d requests from refused bundles", n)
	}
	for id, k := range f.stock(t, "mal") {
		if k.Remaining != 10 || k.Pending != 0 || k.Confirmed != 0 {
			t.Errorf("sku %s after refused bundles: %+v", id, k)
		}
	}
	// The limit counts every unit: 5 units held, one more is refused.
	if r := f.bundle("mal", "m2", itemsJSON("a:2", "b:2", "c:1")); r.Code != "WIN" {
		t.Fatalf("5-unit bundle: %d %s", r.Status, r.Body)
	}
	if r := f.single("mal", "c", "m2"); r.Code != "ALREADY_PURCHASED" {
		t.Fatalf("single after a 5-unit bundle at limit 5: %d %s", r.Status, r.Body)
	}
	if r := f.bundle("mal", "m2", itemsJSON("c:1")); r.Code != "ALREADY_PURCHASED" {
		t.Fatalf("bundle after a 5-unit bundle at limit 5: %d %s", r.Status, r.Body)
	}
}

// rmShadowFixture: one sync activity "real" and one shadow activity "sh"
// (same default route), with the given limits.
func rmShadowFixture(t *testing.T, limits string, edit func(*e2e.Activity)) (*e2e.Shop, *e2e.Proxy) {
	t.Helper()
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	sh := e2e.Activity{ID: "sh", Mode: config.ModeShadow, ShadowHeaders: true, NoVerify: true,
		SKUs: []config.SKU{{ID: "a", Stock: 2}}}
	if edit != nil {
		edit(&sh)
	}
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, Limits: limits, Activities: []e2e.Activity{
		{ID: "real", Stock: 10}, sh,
	}}.Config(t))
	p.Preheat(t, "real")
	p.Preheat(t, "sh")
	return shop, p
}

// Shadow buys are forwarded as sent: the path as spelled, query, body and
// headers, with only the documented changes (client X-Seckill-* removed,
// X-Seckill-Shadow added, X-Forwarded-For appended); the client gets the
// shop's answer, never a proxy refusal, also when the shadow copy is sold
// out or paused; no token reaches the shop.
func TestRedTeamMiscShadowForwardsUnchanged(t *testing.T) {
	shop, p := rmShadowFixture(t, "", func(a *e2e.Activity) { a.SKUs = []config.SKU{{ID: "a", Stock: 10}} })
	uri := "/API/Seckill/sh/a/buy;v=1?x=1&x=2&qty=3"
	body := []byte("opaque \x00 body { not json")
	for i := 0; i < 6; i++ {
		user := "s" + strconv.Itoa(i%2) // 3 buys each of 2 users, limit 1, stock 2
		r := e2e.Do(nil, p.Addr, e2e.Req{URI: uri, Body: body, Header: [][2]string{
			{"X-User-Id", user}, {"X-Seckill-Token", "forged"}, {"X-Request-Id", "rid-" + strconv.Itoa(i)},
			{"X-Custom", "keep-me"}, {"Content-Type", "text/plain"},
		}})
		if r.Err != nil || r.Status != 200 || r.Header["X-Shop"] != "pass" {
			t.Fatalf("shadow buy %d: %d %s %v, want the shop's own 200", i, r.Status, r.Body, r.Err)
		}
	}
	reqs := shop.Requests()
	if len(reqs) != 6 {
		t.Fatalf("the shop saw %d requests, want 6", len(reqs))
	}
	codes := map[string]int{}
	for _, q := range reqs {
		if q.URI != uri || string(q.Body) != string(body) || q.Header.Get("X-Custom") != "keep-me" || q.Header.Get("X-User-Id") == "" {
			t.Errorf("shop got %s %q body %q headers %v; want the request as sent", q.Method, q.URI, q.Body, q.Header)
		}
		for k := range q.Header {
			if strings.HasPrefix(strings.ToLower(k), "x-seckill-") && !strings.EqualFold(k, "X-Seckill-Shadow") {
				t.Errorf("shop got %s: %q", k, q.Header.Get(k))
			}
		}
		codes[q.Header.Get("X-Seckill-Shadow")]++
	}
	if codes["ADMITTED"] != 2 || codes["ALREADY_PURCHASED"]+codes["PENDING"] != 4 {
		t.Errorf("X-Seckill-Shadow codes %v, want 2 ADMITTED and 4 at the limit (2 users, limit 1)", codes)
	}
	// The sync activity's keys are untouched.
	if k := p.SKUStatus(t, "real"); k.Remaining != 10 || k.Pending+k.Confirmed != 0 {
		t.Errorf("the sync activity changed: %+v", k)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Server.WaitShadow(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := p.Store.ShadowReport(ctx, p.Activity(t, "sh"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Total != 6 || rep.Decisions["ADMITTED"] != 2 {
		t.Errorf("report %+v", rep)
	}
}

// A buyer's shadow buys must not spend the rate-limit tokens of their
// buys of an enforcing activity: shadow mode changes nothing a buyer sees
// (README Shadow mode), and the shadow funnel runs on the copy's own keys.
// per_user {rate 0.01/s, burst 3}: three shadow buys, then one sync buy.
func TestRedTeamMiscShadowSpendsNoEnforcedRateLimit(t *testing.T) {
	shop, p := rmShadowFixture(t, "{ per_ip: { rate: 1000000, burst: 1000000 }, per_device: { rate: 1000000, burst: 1000000 }, per_user: { rate: 0.01, burst: 3 } }", func(a *e2e.Activity) {
		a.SKUs = []config.SKU{{ID: "a", Stock: 100}}
		a.PerUserLimit = 5
	})
	for i := 0; i < 3; i++ {
		r := e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/sh/a/buy", Header: [][2]string{{"X-User-Id", "buyer"}}})
		if r.Status != 200 || r.Header["X-Shop"] != "pass" {
			t.Fatalf("shadow buy %d: %d %s", i, r.Status, r.Body)
		}
	}
	r := e2e.Buy(p.Addr, "real", "buyer")
	if r.Code != "WIN" {
		t.Errorf("sync buy after 3 shadow buys of the same user (per_user burst 3): %d %s, want a win: shadow traffic spent the enforced limiter's tokens", r.Status, r.Body)
	}
	_ = shop
}

// A shadow activity with fair_start: buys arriving in the window are
// forwarded to the shop at once (shadow mode "never decides": the
// README's shadow funnel lists no fair_start hold, and every buy is
// "forwarded unchanged"); holding them would delay and reorder the live
// shop's traffic by up to fair_start + spread.
func TestRedTeamMiscShadowFairStartDoesNotHold(t *testing.T) {
	start := time.Now().Add(300 * time.Millisecond)
	_, p := rmShadowFixture(t, "", func(a *e2e.Activity) {
		a.Start = start
		a.FairStart = 3 * time.Second
		a.FairStartSpread = time.Second
		a.SKUs = []config.SKU{{ID: "a", Stock: 100}}
	})
	time.Sleep(time.Until(start) + 50*time.Millisecond)
	t0 := time.Now()
	r := e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/sh/a/buy", Header: [][2]string{{"X-User-Id", "early"}}, Timeout: 8 * time.Second})
	took := time.Since(t0)
	if r.Err != nil || r.Status != 200 || r.Header["X-Shop"] != "pass" {
		t.Fatalf("shadow buy in the fair_start window: %d %s %v", r.Status, r.Body, r.Err)
	}
	if took > time.Second {
		t.Errorf("a shadow buy inside fair_start was held %v before reaching the shop (fair_start 3s + spread 1s)", took.Round(time.Millisecond))
	}
}

// Public reservation look-ups: only an exact, well-formed token of a
// configured activity and SKU (or * for a bundle) finds a reservation;
// SKU swaps, suffixes, huge tokens, NULs and encoded tricks are 404 JSON;
// answers are no-store and never carry the buyer's user id.
func TestRedTeamMiscPublicTokenTricks(t *testing.T) {
	f := newBundleFixture(t, false, e2e.Activity{ID: "pub", Shards: 2, PerUserLimit: 3, BundleRoute: bundleRoute,
		SKUs: []config.SKU{{ID: "a", Stock: 10}, {ID: "b", Stock: 10}}})
	w := f.single("pub", "a", "secret-user-1")
	bw := f.bundle("pub", "secret-user-2", itemsJSON("a:1", "b:1"))
	if w.Code != "WIN" || bw.Code != "WIN" {
		t.Fatalf("setup: %d %s / %d %s", w.Status, w.Body, bw.Status, bw.Body)
	}
	tok, btok := w.Token(), bw.Token()
	get := func(path string) e2e.Resp {
		return e2e.Do(nil, f.p.Addr, e2e.Req{Method: "GET", URI: path})
	}
	for _, tk := range []string{tok, btok} {
		r := get("/_seckill/reservations/" + tk)
		if r.Status != 200 || r.Str("state") != "confirmed" {
			t.Fatalf("lookup %s: %d %s", tk, r.Status, r.Body)
		}
		if strings.Contains(string(r.Body), "secret-user") {
			t.Errorf("lookup shows the buyer's id: %s", r.Body)
		}
		if cc := r.Header["Cache-Control"]; !strings.Contains(cc, "no-store") {
			t.Errorf("lookup answer Cache-Control %q, want no-store", cc)
		}
	}
	parts := strings.Split(tok, ".")
	bparts := strings.Split(btok, ".")
	huge := strings.Repeat("A", 8000)
	for _, path := range []string{
		"/_seckill/reservations/" + strings.Join([]string{parts[0], "b", parts[2], parts[3]}, "."),    // other SKU
		"/_seckill/reservations/" + strings.Join([]string{parts[0], "*", parts[2], parts[3]}, "."),    // single as bundle
		"/_seckill/reservations/" + strings.Join([]string{bparts[0], "a", bparts[2], bparts[3]}, "."), // bundle as single
		"/_seckill/reservations/" + strings.Join([]string{parts[0], parts[1], "1" + parts[2], parts[3]}, "."),
		"/_seckill/reservations/" + btok + ":i",
		"/_seckill/reservations/" + btok + "%3Ai",
		"/_seckill/reservations/" + tok + "/",
		"/_seckill/reservations/" + tok + "%00",
		"/_seckill/reservations/" + tok + "x",
		"/_seckill/reservations/" + strings.ToLower(tok),
		"/_seckill/reservations/" + huge,
		"/_seckill/reservations/pub~shadow.a.0.AAAAAAAAAAAAAAAAAAAAAA",
		"/_seckill/reservations/",
		"/_seckill/reservations",
		"/_seckill/activities/pub~shadow",
		"/_seckill/activities/PUB",
		"/_seckill/activities/" + huge,
		"/_seckill/nope",
	} {
		r := get(path)
		if path == "/_seckill/reservations/"+strings.ToLower(tok) && strings.ToLower(tok) == tok {
			continue
		}
		if r.Status != 404 || r.Header["Content-Type"] != "application/json" {
			p := path
			if len(p) > 120 {
				p = p[:120] + "..."
			}
			t.Errorf("GET %s: %d %q, want 404 JSON", p, r.Status, r.Body)
		}
		if strings.Contains(string(r.Body), "secret-user") || strings.Contains(string(r.Body), "ord-") {
			t.Errorf("GET %s leaked: %s", path, r.Body)
		}
	}
	if r := e2e.Do(nil, f.p.Addr, e2e.Req{Method: "POST", URI: "/_seckill/reservations/" + tok}); r.Status != 405 {
		t.Errorf("POST lookup: %d %s, want 405", r.Status, r.Body)
	}
	// A public path never reaches the shop, whatever its spelling.
	before := len(f.shop.Requests())
	for _, path := range []string{"/_seckill/../_seckill/reservations/" + tok, "/_seckill//reservations//" + tok, "/_seckill/%2e%2e/_seckill/time"} {
		r := get(path)
		if r.Header["X-Shop"] != "" {
			t.Errorf("GET %s reached the shop: %d %s", path, r.Status, r.Body)
		}
	}
	if n := len(f.shop.Requests()); n != before {
		t.Errorf("public paths reached the shop: %d requests", n-before)
	}
}

// rmBuyCtx serves one request through the proxy's handler in-process.
func rmBuyCtx(h fasthttp.RequestHandler, ctx *fasthttp.RequestCtx, method, uri string, body []byte, ip net.IP, hdr ...string) int {
	ctx.Request.Reset()
	ctx.Response.Reset()
	ctx.Request.Header.SetMethod(method)
	ctx.Request.SetRequestURI(uri)
	ctx.Request.Header.SetHost("shop.example")
	for i := 0; i+1 < len(hdr); i += 2 {
		ctx.Request.Header.Set(hdr[i], hdr[i+1])
	}
	if body != nil {
		ctx.Request.SetBody(body)
	}
	ctx.SetRemoteAddr(&net.TCPAddr{IP: ip, Port: 4444})
	h(ctx)
	return ctx.Response.StatusCode()
}

// rmSeries counts the metric series the proxy's registry exposes.
func rmSeries(t *testing.T, p *e2e.Proxy) int {
	t.Helper()
	mfs, err := p.Metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		n += len(mf.GetMetric())
	}
	return n
}

// 200,000 refused buys through the real handler, every one with values a
// client picks fresh (user, device, request id, IP, user agent, query,
// an unknown SKU or activity, bundle item names): the heap grows by a
// bounded amount (README: nothing a client sends grows a cache of the
// proxy; limiters and memos are fixed-size), and not one metric series is
// added (labels come from the config and fixed code sets).
func TestRedTeamMiscClientValuesGrowNoMemoryNorSeries(t *testing.T) {
	f := newBundleFixture(t, false,
		e2e.Activity{ID: "mem", Shards: 2, PerUserLimit: 1, BundleRoute: bundleRoute, SKUs: []config.SKU{{ID: "a", Stock: 1}, {ID: "b", Stock: 5}}})
	h := f.p.Server.Handler()
	var ctx fasthttp.RequestCtx
	// Sell a out, and warm every path once.
	if st := rmBuyCtx(h, &ctx, "POST", "/api/seckill/mem/a/buy", nil, net.IPv4(10, 9, 9, 9), "X-User-Id", "winner"); st != 200 {
		t.Fatalf("winner: %d %s", st, ctx.Response.Body())
	}
	if err := f.p.Server.WaitConfirms(context.Background()); err != nil {
		t.Fatal(err)
	}
	e2e.Eventually(t, 5*time.Second, "a sold out in memory", func() bool {
		rmBuyCtx(h, &ctx, "POST", "/api/seckill/mem/a/buy", nil, net.IPv4(10, 9, 9, 8), "X-User-Id", "probe")
		return strings.Contains(string(ctx.Response.Body()), "SOLD_OUT")
	})
	const n = 200_000
	step := func(i int) {
		ip := net.IPv4(10, byte(i>>16), byte(i>>8), byte(i))
		s := strconv.Itoa(i)
		var st int
		var want int
		switch i % 4 {
		case 0: // sold-out SKU with a fresh user, device and request id
			st, want = rmBuyCtx(h, &ctx, "POST", "/api/seckill/mem/a/buy?z="+s, nil, ip,
				"X-User-Id", "u"+s, "X-Device-Id", "d"+s, "X-Request-Id", "r"+s, "User-Agent", "ua/"+s), 410
		case 1: // unknown SKU
			st, want = rmBuyCtx(h, &ctx, "POST", "/api/seckill/mem/sku"+s+"/buy", nil, ip, "X-User-Id", "u"+s), 404
		case 2: // unknown activity under the route
			st, want = rmBuyCtx(h, &ctx, "POST", "/api/seckill/act"+s+"/a/buy", nil, ip, "X-User-Id", "u"+s), 404
		case 3: // bundle naming a made-up SKU
			st, want = rmBuyCtx(h, &ctx, "POST", "/api/seckill/mem/bundle", []byte(itemsJSON("b:1", "zz"+s+":1")), ip,
				"X-User-Id", "u"+s, "Content-Type", "application/json"), 404
		}
		if st != want {
			t.Fatalf("request %d: %d %s, want %d", i, st, ctx.Response.Body(), want)
		}
	}
	for i := 0; i < 4000; i++ { // warm-up: pools, limiter tables, memo
		step(n + i)
	}
	series := rmSeries(t, f.p)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	t0 := time.Now()
	for i := 0; i < n; i++ {
		step(i)
	}
	elapsed := time.Since(t0)
	runtime.GC()
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("%d requests in %v; heap in use %d KiB -> %d KiB", n, elapsed.Round(time.Millisecond), before.HeapInuse>>10, after.HeapInuse>>10)
	if grew > 16<<20 {
		t.Errorf("heap grew %d MiB over %d requests with fresh client values, want < 16 MiB", grew>>20, n)
	}
	if s := rmSeries(t, f.p); s != series {
		t.Errorf("metric series %d -> %d after client-chosen values", series, s)
	}
	if k := f.stock(t, "mem"); k["a"].Confirmed != 1 || k["b"].Remaining != 5 {
		t.Errorf("stock after refused buys: %+v", k)
	}
}
