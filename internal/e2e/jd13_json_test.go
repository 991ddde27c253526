package e2e_test

import (
	"net/url"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// jd13: a scalper's JSON buy bodies (README "A field the shop could read
// differently is 400").

func jd13JSONProxy(t *testing.T) (*e2e.Proxy, *e2e.Shop) {
	t.Helper()
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	skus := []config.SKU{{ID: "cheap", Stock: 50}, {ID: "dear", Stock: 50}}
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{
			{ID: "jd13j", Path: "/jd13j/buy", SkuFrom: "json:/sku", QtyFrom: "json:/qty", SKUs: skus, Shards: 1, PerUserLimit: 5},
			{ID: "jd13n", Path: "/jd13n/buy", SkuFrom: "json:/order/sku", QtyFrom: "json:/order/qty", SKUs: skus, Shards: 1, PerUserLimit: 5},
			{ID: "jd13b", SKUs: skus, Shards: 1, PerUserLimit: 5, BundleRoute: `{ method: POST, path: "/api/seckill/{activity}/bundle", items_from: "json:/items" }`},
		}}.Config(t))
	for _, a := range []string{"jd13j", "jd13n", "jd13b"} {
		p.Preheat(t, a)
	}
	return p, shop
}

// TestJD13FormTypedJSONBodyOnJSONRoute: a json: route reads the body as
// JSON whatever its Content-Type says. Sent as
// application/x-www-form-urlencoded, the body
// {"z":"&qty=5&sku=dear&","sku":"cheap","qty":1} is strict JSON to the
// proxy (cheap, qty 1: admitted), and a form to the shop: Laravel's
// $request->input() reads the form when the request is not JSON (isJson),
// Rails' params and Express' urlencoded parser likewise, PHP's $_POST:
// sku=dear, qty=5. README promises a field the shop could read
// differently is 400 (a query:/form: field in a JSON body is refused for
// the same frameworks; the reverse is not).
func TestJD13FormTypedJSONBodyOnJSONRoute(t *testing.T) {
	p, shop := jd13JSONProxy(t)
	cases := []struct{ name, uri, ct, body, field string }{
		{"urlencoded", "/jd13j/buy", "application/x-www-form-urlencoded", `{"z":"&qty=5&sku=dear&","sku":"cheap","qty":1}`, "qty"},
		{"urlencoded nested", "/jd13n/buy", "application/x-www-form-urlencoded; charset=UTF-8", `{"z":"&order[qty]=5&order[sku]=dear&","order":{"sku":"cheap","qty":1}}`, "order[qty]"},
		{"bundle urlencoded", "/api/seckill/jd13b/bundle", "application/x-www-form-urlencoded", `{"z":"&items[0][sku]=dear&items[0][qty]=5&","items":[{"sku":"cheap","qty":1}]}`, "items[0][qty]"},
	}
	for i, c := range cases {
		n := len(shop.Requests())
		got := e2e.Do(nil, p.Addr, e2e.Req{URI: c.uri, Header: [][2]string{{"X-User-Id", "jd13-form-" + string(rune('a'+i))}, {"Content-Type", c.ct}}, Body: []byte(c.body)})
		if got.Code == "BAD_REQUEST" {
			continue
		}
		form := ""
		if reqs := shop.Requests(); len(reqs) > n {
			if q, err := url.ParseQuery(string(reqs[len(reqs)-1].Body)); err == nil {
				form = q.Get(c.field)
			}
		}
		t.Errorf("%s: %d %s; the proxy judged qty 1 of cheap, the shop's form parser reads %s=%q from the same body; want 400 BAD_REQUEST",
			c.name, got.Status, got.Code, c.field, form)
	}
}

// TestJD13JSONAttackBodies: twins, folded keys, numbers and documents a
// scalper tries on json: routes are refused; legit shapes still win.
func TestJD13JSONAttackBodies(t *testing.T) {
	p, _ := jd13JSONProxy(t)
	ct := [2]string{"Content-Type", "application/json"}
	bad := []struct{ uri, body string }{
		{"/jd13j/buy", `{"sku":"cheap","qty":1,"\u0071ty":5}`},
		{"/jd13j/buy", `{"sku":"cheap","qty":1,"QTY":5}`},
		{"/jd13j/buy", `{"sku":"cheap","Qty":5}`},
		{"/jd13j/buy", `{"sku":"cheap","\u017Fku":"dear"}`},
		{"/jd13j/buy", `{"sku":"cheap","s\u212Au":"dear"}`},
		{"/jd13j/buy", `{"s\u212Au":"dear","qty":1}`},
		{"/jd13j/buy", `{"sku":"cheap","qty":1e0}`},
		{"/jd13j/buy", `{"sku":"cheap","qty":1.0}`},
		{"/jd13j/buy", `{"sku":"cheap","qty":-0}`},
		{"/jd13j/buy", `{"sku":"cheap","qty":100000000000000000000001}`},
		{"/jd13j/buy", "\xef\xbb\xbf{\"sku\":\"cheap\",\"qty\":1}"},
		{"/jd13j/buy", `[{"sku":"cheap","qty":1}]`},
		{"/jd13j/buy", `{"sku":"cheap","qty":1}{"qty":5}`},
		{"/jd13j/buy?qty=5", `{"sku":"cheap","qty":1}`},
		{"/jd13j/buy?QTY=5", `{"sku":"cheap"}`},
		{"/jd13n/buy", `{"order":{"sku":"cheap","qty":1},"Order":{"sku":"dear","qty":5}}`},
		{"/jd13n/buy", `{"order":{"sku":"cheap","qty":1},"order":{"sku":"dear","qty":5}}`},
		{"/jd13n/buy", `{"order":{"sku":"cheap","qty":1,"QTY":5}}`},
		{"/jd13n/buy", `{"ORDER":{"sku":"dear","qty":5}}`},
		{"/jd13n/buy?order[qty]=5", `{"order":{"sku":"cheap","qty":1}}`},
		{"/api/seckill/jd13b/bundle", `{"items":[{"sku":"cheap","qty":1,"QTY":5}]}`},
		{"/api/seckill/jd13b/bundle", `{"items":[{"sku":"cheap","Qty":5}]}`},
		{"/api/seckill/jd13b/bundle", `{"items":[{"sku":"cheap","qty":1}],"Items":[{"sku":"dear","qty":5}]}`},
		{"/api/seckill/jd13b/bundle", `{"items":[{"sku":"cheap","qty":1},{"sku":"cheap","qty":4}]}`},
		{"/api/seckill/jd13b/bundle", `{"items":[{"sku":"cheap","qty":1,"\u0071ty":5}]}`},
		{"/api/seckill/jd13b/bundle?items[0][qty]=5", `{"items":[{"sku":"cheap","qty":1}]}`},
	}
	for i, c := range bad {
		got := e2e.Do(nil, p.Addr, e2e.Req{URI: c.uri, Header: [][2]string{{"X-User-Id", "jd13-bad-" + string(rune('a'+i))}, ct}, Body: []byte(c.body)})
		if got.Code != "BAD_REQUEST" {
			t.Errorf("%s %s: %d %s, want 400 BAD_REQUEST", c.uri, c.body, got.Status, got.Code)
		}
	}
	good := []struct{ uri, body string }{
		{"/jd13j/buy", `{"sku":"cheap","qty":1}`},
		{"/jd13j/buy", `{"sku":"cheap","qty":"2","meta":{"QTY":3,"qty":4},"note":"qty"}`},
		{"/jd13n/buy", `{"order":{"sku":"cheap","qty":2},"attrs":{"Color":"red","color":"red"}}`},
		{"/api/seckill/jd13b/bundle", `{"items":[{"sku":"cheap","qty":1},{"sku":"dear","qty":2}]}`},
	}
	for i, c := range good {
		got := e2e.Do(nil, p.Addr, e2e.Req{URI: c.uri, Header: [][2]string{{"X-User-Id", "jd13-good-" + string(rune('a'+i))}, ct}, Body: []byte(c.body)})
		if got.Code != "WIN" {
			t.Errorf("FALSE POSITIVE %s %s: %d %s %s", c.uri, c.body, got.Status, got.Code, got.Body)
		}
	}
	// A text/plain JSON body (fetch's default for a string body) is no
	// attack: it still wins.
	got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/jd13j/buy", Header: [][2]string{{"X-User-Id", "jd13-plain"}, {"Content-Type", "text/plain;charset=UTF-8"}}, Body: []byte(`{"sku":"cheap","qty":1}`)})
	if got.Code != "WIN" {
		t.Errorf("FALSE POSITIVE text/plain JSON: %d %s %s", got.Status, got.Code, got.Body)
	}
}
