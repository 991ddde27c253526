package e2e_test

import (
	"testing"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// TestFieldCookieCopy: PHP without a php.ini (the official Docker images)
// builds $_REQUEST with cookies over the query and the form, so a legacy
// PHP shop behind a rewrite that puts the path's {sku} and {activity} in
// the query reads a cookie sku=rare instead: the scalper buys "cheap" at
// the proxy and the shop sells "rare" (red team rta's open item). A cookie
// named, as PHP names variables, like a field the buy reads from the
// query, form or path is refused 400 BAD_REQUEST with nothing reserved;
// other cookies, and names PHP reads as others (case), still buy; and
// route.field_cookies: allow lets them through.
func TestFieldCookieCopy(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	cfg := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{
			{ID: "fck", Shards: 1, SKUs: []config.SKU{{ID: "cheap", Stock: 50}, {ID: "rare", Stock: 1}}},
			{ID: "fcka", Shards: 1, SKUs: []config.SKU{{ID: "cheap", Stock: 50}}},
		}}.Config(t)
	for i := range cfg.Activities {
		if cfg.Activities[i].ID == "fcka" {
			cfg.Activities[i].Route.FieldCookies = config.FieldCookiesAllow
		}
	}
	p := e2e.StartProxy(t, cfg)
	p.Preheat(t, "fck")
	p.Preheat(t, "fcka")
	const path = "/api/seckill/fck/cheap/buy"

	attacks := []struct{ user, cookie string }{
		{"fc-sku", "sku=rare"},
		{"fc-sku2", "sid=abc; sku=rare"},
		{"fc-act", "activity=other"},
		{"fc-arr", "sku[0]=rare"},
		{"fc-enc", "s%6Bu=rare"},
		{"fc-bare", "sku"},
		{"fc-space", "sid=abc;  sku=rare"},
	}
	for _, c := range attacks {
		got := e2e.Do(nil, p.Addr, e2e.Req{URI: path, Header: [][2]string{{"X-User-Id", c.user}, {"Cookie", c.cookie}}})
		if got.Status != 400 || got.Code != "BAD_REQUEST" {
			t.Errorf("%s Cookie %q: %d %s, want 400 BAD_REQUEST (PHP's $_REQUEST reads the cookie over the path's sku/activity)", c.user, c.cookie, got.Status, got.Body)
		}
	}
	controls := []struct{ user, cookie string }{
		{"fc-c1", "sid=abc"},
		{"fc-c2", "SKU=rare; Activity=x"},
		{"fc-c3", "sku_name=x; last_sku=rare; skus=1"},
		{"fc-c4", "sku.=rare"}, // sku_ to PHP
	}
	for _, c := range controls {
		if got := e2e.Do(nil, p.Addr, e2e.Req{URI: path, Header: [][2]string{{"X-User-Id", c.user}, {"Cookie", c.cookie}}}); got.Code != "WIN" {
			t.Errorf("FALSE POSITIVE %s Cookie %q: %d %s", c.user, c.cookie, got.Status, got.Body)
		}
	}
	if got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/fcka/cheap/buy", Header: [][2]string{{"X-User-Id", "fc-allow"}, {"Cookie", "sku=rare"}}}); got.Code != "WIN" {
		t.Errorf("field_cookies: allow, Cookie sku=rare: %d %s, want WIN", got.Status, got.Body)
	}
	for _, k := range p.Status(t, "fck").SKUs {
		want := map[string]int64{"cheap": 50 - int64(len(controls)), "rare": 1}[k.ID]
		if k.Remaining != want {
			t.Errorf("fck %s: remaining %d, want %d (only the controls reserve)", k.ID, k.Remaining, want)
		}
	}
	if n := len(shop.Buys()); n != len(controls)+1 {
		t.Errorf("the shop received %d buys, want %d", n, len(controls)+1)
	}
}
