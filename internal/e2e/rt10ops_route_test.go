package e2e_test

import (
	"strings"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// Red team round 10, operator errors: routes the validator accepts that do
// not mean what they say.

// rt10opsPathSKU is the last path segment of a shop request ("/rt10/buy/hot" → "hot").
func rt10opsPathSKU(path string) string {
	return path[strings.LastIndex(path, "/")+1:]
}

// A route whose path captures {sku} while sku_from reads the SKU elsewhere
// (`path: /rt10/buy/{sku}, sku_from: query:sku`) is accepted by validate,
// and the {sku} capture is then ignored (proxy/server.go parseWait reads
// only sku_from). SPEC §3 says "{sku} may *instead* come from
// query/form/JSON" — both at once names two SKUs in one request. A scalper
// sends POST /rt10/buy/hot?sku=cheap: the proxy reserves "cheap" (plenty
// of stock), answers its limits and stock checks for "cheap", and forwards
// the request unchanged to the shop, whose route /buy/{sku} sells "hot".
// The shop receives more buys of "hot" than hot's stock, each with a valid
// token and signature (for X-Seckill-Sku: cheap). Either validation must
// refuse the config (as it refuses {sku} in bundle_route), or the proxy
// must refuse a request whose two SKUs differ.
func TestRT10OpsPathSKUIgnoredWhenSkuFromElsewhere(t *testing.T) {
	shop := e2e.StartShop(t)
	opts := e2e.Options{
		Redis: e2e.StartRedis(t).Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{
			ID: "rt10", Path: "/rt10/buy/{sku}", SkuFrom: "query:sku", Shards: 1,
			SKUs: []config.SKU{{ID: "hot", Stock: 1}, {ID: "cheap", Stock: 100}},
		}},
	}
	if _, err := config.Parse("e2e.yaml", []byte(opts.YAML(t))); err != nil {
		// The validator refused the ambiguous route: that is the fix.
		if !strings.Contains(err.Error(), "e2e.yaml:") {
			t.Fatalf("refused without FILE:LINE: %v", err)
		}
		return
	}
	p := e2e.StartProxy(t, opts.Config(t))
	p.Preheat(t, "rt10")

	// One honest buyer takes the only "hot" unit.
	r := e2e.Do(nil, p.Addr, e2e.Req{URI: "/rt10/buy/hot?sku=hot", Header: [][2]string{{"X-User-Id", "honest"}}})
	wantWin(t, r)
	// Scalpers ask for "hot" in the path and "cheap" in the query.
	for _, u := range []string{"s1", "s2", "s3"} {
		e2e.Do(nil, p.Addr, e2e.Req{URI: "/rt10/buy/hot?sku=cheap", Header: [][2]string{{"X-User-Id", u}}})
	}
	hot := 0
	for _, b := range shop.Buys() {
		if rt10opsPathSKU(strings.SplitN(b.Target, "?", 2)[0]) == "hot" {
			hot++
		}
		if got := rt10opsPathSKU(strings.SplitN(b.Target, "?", 2)[0]); got != b.SKU {
			t.Errorf("the shop received %s %s (path SKU %q) for a reservation of SKU %q (X-Seckill-Sku): the path's {sku} was never checked", b.Method, b.Target, got, b.SKU)
		}
	}
	if hot > 1 {
		t.Errorf("the shop received %d buys on the path of SKU \"hot\" (stock 1), all admitted; validate accepted route.path with {sku} and sku_from: query:sku", hot)
	}
}

// A buy route under public_prefix is accepted by validate, and every buy
// on it is then answered by the proxy's own public endpoints (404 "not
// found", proxy/server.go handle: the public prefix is looked at before
// the routes): the sale cannot be bought at all, and nothing said so at
// validate or at start. README: "every error is reported at once as
// FILE:LINE"; the routes' own overlaps are already validation errors.
func TestRT10OpsBuyRouteUnderPublicPrefix(t *testing.T) {
	give := "public_prefix: /api\nupstream:\n  url: http://127.0.0.1:8081\nactivities:\n  - id: a1\n" +
		"    start: 2030-01-01T10:00:00+08:00\n    end: 2030-01-01T11:00:00+08:00\n    skus: [{id: s1, stock: 5}]\n"
	_, err := config.Parse("t.yaml", []byte(give))
	if err == nil {
		t.Fatalf("public_prefix /api above the default route POST /api/seckill/{activity}/{sku}/buy: validate says ok, and every buy is answered 404 by the public endpoints")
	}
	if !strings.Contains(err.Error(), "t.yaml:") {
		t.Fatalf("refused without FILE:LINE: %v", err)
	}
}

// The same at run time: with the route under the prefix, a buy never
// reaches admission (no code, a 404 of the public endpoints).
func TestRT10OpsBuyRouteUnderPublicPrefixAtRuntime(t *testing.T) {
	shop := e2e.StartShop(t)
	opts := e2e.Options{
		Redis: e2e.StartRedis(t).Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "rt10", Path: "/_seckill/{activity}/{sku}/buy", Stock: 5, Shards: 1}},
	}
	y := opts.YAML(t)
	if _, err := config.Parse("e2e.yaml", []byte(y)); err != nil {
		return // refused by validate: fixed
	}
	p := e2e.StartProxy(t, opts.Config(t))
	p.Preheat(t, "rt10")
	r := e2e.Do(nil, p.Addr, e2e.Req{URI: "/_seckill/rt10/" + e2e.SKU + "/buy", Header: [][2]string{{"X-User-Id", "u1"}}})
	if r.Code != "WIN" {
		t.Errorf("buy on route POST /_seckill/{activity}/{sku}/buy (accepted by validate): %d %s, want a win or a validation error", r.Status, r.Body)
	}
}

// identity.user { header: X-Seckill-User } passes validate, but the proxy
// strips every X-Seckill-* request header before it reads identities
// (proxy/request.go stripSeckillHeaders): a signed-in buyer sending the
// header is refused as if anonymous, every one of them.
func TestRT10OpsIdentityHeaderStrippedAtRuntime(t *testing.T) {
	shop := e2e.StartShop(t)
	opts := e2e.Options{
		Redis: e2e.StartRedis(t).Addrs, ShopURL: shop.URL, User: "{ header: X-Seckill-User }",
		Activities: []e2e.Activity{{ID: "rt10", Stock: 5, Shards: 1}},
	}
	if _, err := config.Parse("e2e.yaml", []byte(opts.YAML(t))); err != nil {
		return // refused by validate: fixed
	}
	p := e2e.StartProxy(t, opts.Config(t))
	p.Preheat(t, "rt10")
	r := e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/rt10/" + e2e.SKU + "/buy", Header: [][2]string{{"X-Seckill-User", "u1"}}})
	if r.Code != "WIN" {
		t.Errorf("identity.user {header: X-Seckill-User} (accepted by validate), buyer sends X-Seckill-User: u1: %d %s; the configured header is stripped before it is read", r.Status, r.Body)
	}
}

// At run time, the shadowing the validator lets through: a1 `/flash/{sku}`
// and a2 `/flash/{activity}` with sku_from query. A buy of a2 is taken as
// a buy of a1's SKU "a2": UNKNOWN_ITEM, and a2 is never sold.
func TestRT10OpsRouteShadowAtRuntime(t *testing.T) {
	shop := e2e.StartShop(t)
	opts := e2e.Options{
		Redis: e2e.StartRedis(t).Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{
			{ID: "a1", Path: "/flash/{sku}", Stock: 5, Shards: 1},
			{ID: "a2", Path: "/flash/{activity}", SkuFrom: "query:sku", Stock: 5, Shards: 1},
		},
	}
	if _, err := config.Parse("e2e.yaml", []byte(opts.YAML(t))); err != nil {
		return // refused by validate: fixed
	}
	p := e2e.StartProxy(t, opts.Config(t))
	p.Preheat(t, "a1")
	p.Preheat(t, "a2")
	r := e2e.Do(nil, p.Addr, e2e.Req{URI: "/flash/a2?sku=" + e2e.SKU, Header: [][2]string{{"X-User-Id", "u1"}}})
	if r.Code != "WIN" {
		t.Errorf("buy of a2 (route /flash/{activity}, sku from query), both routes accepted by validate: %d %s", r.Status, r.Body)
	}
}
