package e2e_test

import (
	"testing"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// TestRTAMethodOverrideUnderscoreSpelling: a pass_methods request on a buy
// route's path that asks to be taken as another method is 405 (README "In
// front of your shop"), so that it cannot reach the buy handler without
// admission. The check looked for X-HTTP-Method-Override by its exact
// name; Rack and PHP servers file X_HTTP_Method_Override under the same
// HTTP_X_HTTP_METHOD_OVERRIDE (the reason stripSeckillHeaders and the
// identity headers already take '_' for '-'), and Rack::MethodOverride
// (on in every Rails app) turns a POST carrying it into the method it
// names. A route `method: PUT` with `pass_methods: [POST]` (the README
// only warns about a _method form field there) then passed
// POST /pmu/sku1/buy + X_HTTP_Method_Override: PUT to the shop, where
// Rails runs the PUT buy action: a buy with no admission and no token.
func TestRTAMethodOverrideUnderscoreSpelling(t *testing.T) {
	f := newFixture(t, func(o *e2e.Options) {
		o.Activities = append(o.Activities, e2e.Activity{ID: "pmu", Stock: 10, Path: "/pmu/{sku}/buy", Method: "PUT", PassMethods: []string{"POST"}})
	})
	for _, h := range [][2]string{
		{"X_HTTP_Method_Override", "PUT"},
		{"x_http_method", "PUT"},
		{"X-Method_Override", "PUT"},
	} {
		r := f.do(e2e.Req{Method: "POST", URI: "/pmu/sku1/buy", Header: [][2]string{h, {"X-User-Id", "mallory"}}})
		if r.Status != 405 {
			t.Errorf("POST with %s: %s: %d %.120s, want 405", h[0], h[1], r.Status, r.Body)
		}
	}
	// Control: the pass_methods request without an override is the shop's.
	if r := f.do(e2e.Req{Method: "POST", URI: "/pmu/sku1/buy", Header: [][2]string{{"X-User-Id", "bob"}, {"X_Other_Header", "1"}}}); r.Header["X-Shop"] != "pass" {
		t.Errorf("plain POST on pass_methods: %d %s, want the shop's echo", r.Status, r.Body)
	}
	for _, q := range f.shop.Requests() {
		if q.Path == "/pmu/sku1/buy" && q.Header.Get("X-User-Id") == "mallory" {
			t.Errorf("the shop got %s %s with %v: a Rack/PHP shop reads the override and runs the PUT buy handler, unadmitted", q.Method, q.Path, q.Header)
		}
	}
	f.p.WantStock(t, "pmu", 10, 0, 0)
}

// TestRTABuyCarryingAMethodOverride: a buy is admitted as the route's
// method and forwarded with whatever override it carries. Rack's
// MethodOverride (every Rails app: a POST's `_method` form field or
// X-HTTP-Method-Override header), Laravel/Symfony (`_method` in the body
// or the query, the header) and Express' method-override then run another
// handler of the path — the GET page of the product (pass_methods: [GET]
// says there is one), whose 200 confirms the reservation although no order
// was placed. With the header identity anyone can do that under any number
// of ids: units leave the sale at no cost to anyone, and honest buyers are
// told SOLD_OUT while the shop holds no order. Want 400 BAD_REQUEST for a
// buy whose override names another method; one naming the route's own
// method is harmless and still buys.
func TestRTABuyCarryingAMethodOverride(t *testing.T) {
	f := newFixture(t, func(o *e2e.Options) {
		o.Activities = append(o.Activities, e2e.Activity{ID: "pmg", Stock: 20, Shards: 1, PassMethods: []string{"GET"}})
	})
	const path = "/api/seckill/pmg/sku1/buy"
	form := [2]string{"Content-Type", "application/x-www-form-urlencoded"}
	for i, c := range []struct {
		uri  string
		h    [][2]string
		body string
	}{
		{path, [][2]string{{"X-HTTP-Method-Override", "GET"}}, ""},
		{path, [][2]string{{"X_HTTP_Method_Override", "GET"}}, ""},
		{path, [][2]string{{"X-Method-Override", "DELETE"}}, ""},
		{path + "?_method=GET", nil, ""},
		{path, [][2]string{form}, "_method=GET"},
		{path, [][2]string{form}, "note=x&_METHOD=get"},
	} {
		u := "rta-ov-" + string(rune('a'+i))
		got := f.do(e2e.Req{URI: c.uri, Header: append([][2]string{{"X-User-Id", u}}, c.h...), Body: []byte(c.body)})
		if got.Status != 400 || got.Code != "BAD_REQUEST" {
			t.Errorf("buy %s %v %q: %d %.100s; the shop's framework runs it as another method (want 400)", c.uri, c.h, c.body, got.Status, got.Body)
		}
	}
	// Controls: an override naming the route's own method, an empty one,
	// and a plain buy still buy.
	for i, h := range [][][2]string{{{"X-HTTP-Method-Override", "POST"}}, {{"X-HTTP-Method-Override", ""}}, nil} {
		u := "rta-ov-ok" + string(rune('a'+i))
		if got := f.do(e2e.Req{URI: path, Header: append([][2]string{{"X-User-Id", u}}, h...)}); got.Code != "WIN" {
			t.Errorf("FALSE POSITIVE %v: %d %s", h, got.Status, got.Body)
		}
	}
	f.p.WantStock(t, "pmg", 17, 0, 3)
}
