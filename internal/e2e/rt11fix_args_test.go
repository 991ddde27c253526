package e2e_test

import (
	"bytes"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// rt11fixMultipart builds a multipart/form-data body with the fields given.
func rt11fixMultipart(t *testing.T, fields [][2]string) (ct string, body []byte) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for _, f := range fields {
		if err := w.WriteField(f[0], f[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return w.FormDataContentType(), b.Bytes()
}

// TestRT11FixQuerySKUWithMultipartBody: SPEC §9 / README "BAD_REQUEST": a
// field the proxy decides on that is "in both the query and a form body" is
// refused, "since the shop may read the other copy" (decisions §32: PHP's
// $_REQUEST and Go's r.FormValue read the body's copy first). The check
// (proxy/request.go get, case "query") only looks at an urlencoded body
// (proxy/args.go formBody). A multipart/form-data body is a form body to
// the stacks the urlencoded check was made for: PHP fills $_POST and
// $_REQUEST (request_order "GP": POST over GET) from it, Rails' params and
// Laravel's $request->input() merge body over query, multipart included
// (only Go's r.FormValue puts multipart values after the query's). So
// POST /q/buy?sku=cheap&qty=1 with a multipart body sku=rare&qty=3 is
// admitted for one "cheap" unit and read by the shop as three "rare" ones:
// the shop sells a SKU (and a quantity) no reservation covers. Want: refused
// 400 like the urlencoded spelling, or admitted for what FormValue reads.
func TestRT11FixQuerySKUWithMultipartBody(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	skus := []config.SKU{{ID: "cheap", Stock: 10}, {ID: "rare", Stock: 1}}
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "rt11mp", Path: "/rt11mp/buy", SkuFrom: "query:sku", QtyFrom: "query:qty",
			SKUs: skus, Shards: 1, PerUserLimit: 3}}}.Config(t))
	p.Preheat(t, "rt11mp")

	// The urlencoded spelling is refused (the fix of round 9).
	got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/rt11mp/buy?sku=cheap&qty=1",
		Header: [][2]string{{"X-User-Id", "rt11-url"}, {"Content-Type", "application/x-www-form-urlencoded"}},
		Body:   []byte("sku=rare&qty=3")})
	t.Logf("urlencoded body: %d %s", got.Status, got.Body)

	ct, body := rt11fixMultipart(t, [][2]string{{"sku", "rare"}, {"qty", "3"}})
	got = e2e.Do(nil, p.Addr, e2e.Req{URI: "/rt11mp/buy?sku=cheap&qty=1",
		Header: [][2]string{{"X-User-Id", "rt11-mp"}, {"Content-Type", ct}}, Body: body})
	t.Logf("multipart body: %d %.200s", got.Status, got.Body)

	rq, ok := rkShopReq(shop, "rt11-mp")
	if !ok {
		return // refused: the fix
	}
	hr, err := http.NewRequest(rq.Method, "http://shop"+rq.URI, bytes.NewReader(rq.Body))
	if err != nil {
		t.Fatal(err)
	}
	hr.Header = rq.Header.Clone()
	// PHP's $_REQUEST (request_order "GP": POST over GET), Rails'
	// params and Laravel's $request->input() merge the body's fields over
	// the query's, multipart bodies included: the body's value when there
	// is one (Go's PostFormValue reads multipart too), else the query's.
	// (Go's own r.FormValue appends multipart values after the query's.)
	php := func(name string) string {
		if v := hr.PostFormValue(name); v != "" {
			return v
		}
		return hr.URL.Query().Get(name)
	}
	shopSKU, shopQty := php("sku"), php("qty")
	admSKU, admQty := rq.Header.Get("X-Seckill-Sku"), rq.Header.Get("X-Seckill-Qty")
	t.Logf("shop got %s %s CT %q body %q: body-over-query sku=%q qty=%q", rq.Method, rq.URI, rq.Header.Get("Content-Type"), rq.Body, shopSKU, shopQty)
	if shopSKU != admSKU || shopQty != admQty {
		t.Errorf("admitted %s × %s, but a shop reading body over query ($_REQUEST) reads %s × %s from the multipart body (Content-Type %q)",
			admQty, admSKU, shopQty, shopSKU, rq.Header.Get("Content-Type"))
	}
	st := p.Status(t, "rt11mp")
	t.Logf("status: %+v", st)
}

// rt11fixPHPKey is the name PHP's request parser (main/php_variables.c,
// php_register_variable_ex) files an argument under: leading spaces
// dropped, then ' ' and '.' become '_', and a '[' that opens no array
// index ("a[b" without ']') becomes '_' too. The last argument of a name
// wins ($_GET, $_POST, $_REQUEST).
func rt11fixPHPKey(k string) string {
	k = strings.TrimLeft(k, " ")
	b := []byte(k)
	for i, c := range b {
		switch c {
		case ' ', '.':
			b[i] = '_'
		case '[':
			if !strings.Contains(k[i:], "]") {
				b[i] = '_'
			}
			return string(b[:i+1]) + k[i+1:]
		}
	}
	return string(b)
}

// rt11fixPHPGet is $_GET[name] / $_POST[name] for an urlencoded string.
func rt11fixPHPGet(raw, name string) string {
	v := ""
	for _, kv := range strings.Split(raw, "&") {
		k, val, _ := strings.Cut(kv, "=")
		k, _ = url.QueryUnescape(k)
		val, _ = url.QueryUnescape(val)
		if rt11fixPHPKey(k) == name {
			v = val
		}
	}
	return v
}

// TestRT11FixPHPMangledNameTwice: README "BAD_REQUEST" / decisions §32: a
// SKU, qty or user named twice in the query or a form body is refused,
// "since the shop may read the other copy (PHP and Django read the last)".
// proxy/args.go compares decoded names byte for byte, so only the exact
// spelling counts as a second copy. PHP files "sku.id", "sku id"
// ("sku+id", "sku%20id") and "sku[id" under "sku_id" (dots, spaces and an
// unclosed '[' become '_' in variable names), and keeps the last. With
// sku_from: query:sku_id, "?sku_id=cheap&sku.id=rare" is admitted for
// cheap and sold by a PHP shop ($_GET['sku_id'], $_REQUEST) as rare, and
// since PHP also drops a name's leading spaces, "?sku=cheap&+sku=rare"
// does the same to the plain name "sku" (query:sku, the usual spelling) — a
// unit of rare that no reservation covers (the same for form:, qty_from and
// a query identity: a buyer at the limit ordering as someone fresh). Want:
// refused 400 like "?sku_id=cheap&sku_id=rare".
func TestRT11FixPHPMangledNameTwice(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	skus := []config.SKU{{ID: "cheap", Stock: 10}, {ID: "rare", Stock: 1}}
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{
			{ID: "rt11pq", Path: "/rt11pq/buy", SkuFrom: "query:sku_id", SKUs: skus, Shards: 1},
			{ID: "rt11pf", Path: "/rt11pf/buy", SkuFrom: "form:sku_id", SKUs: skus, Shards: 1},
			{ID: "rt11ps", Path: "/rt11ps/buy", SkuFrom: "query:sku", SKUs: skus, Shards: 1},
		}}.Config(t))
	p.Preheat(t, "rt11ps")
	p.Preheat(t, "rt11pq")
	p.Preheat(t, "rt11pf")
	n := 0
	for _, second := range []string{"sku_id=rare", "sku.id=rare", "sku+id=rare", "sku%20id=rare", "sku[id=rare"} {
		for _, act := range []string{"rt11pq", "rt11pf"} {
			n++
			user := fmt.Sprintf("rt11php-%d", n)
			raw := "sku_id=cheap&" + second
			req := e2e.Req{URI: "/" + act + "/buy", Header: [][2]string{{"X-User-Id", user}}}
			if act == "rt11pq" {
				req.URI += "?" + raw
			} else {
				req.Header = append(req.Header, [2]string{"Content-Type", "application/x-www-form-urlencoded"})
				req.Body = []byte(raw)
			}
			rt11fixPHPCase(t, p, shop, req, raw, user, "sku_id")
		}
	}
	// PHP drops leading spaces of a name: "+sku" and "%20sku" are "sku",
	// the default spelling of a query SKU, no '_' needed.
	for _, second := range []string{"+sku=rare", "%20sku=rare"} {
		n++
		user := fmt.Sprintf("rt11php-%d", n)
		raw := "sku=cheap&" + second
		rt11fixPHPCase(t, p, shop, e2e.Req{URI: "/rt11ps/buy?" + raw, Header: [][2]string{{"X-User-Id", user}}}, raw, user, "sku")
	}
}

// rt11fixPHPCase sends req (raw is its query or form) and fails the test
// when the shop got it admitted for another SKU than PHP reads from raw.
func rt11fixPHPCase(t *testing.T, p *e2e.Proxy, shop *e2e.Shop, req e2e.Req, raw, user, name string) {
	t.Helper()
	got := e2e.Do(nil, p.Addr, req)
	php := rt11fixPHPGet(raw, name)
	t.Logf("%s %q: %d %s; PHP reads %s=%q", req.URI, raw, got.Status, bytes.TrimSpace(got.Body), name, php)
	rq, ok := rkShopReq(shop, user)
	if !ok {
		return
	}
	if adm := rq.Header.Get("X-Seckill-Sku"); adm != php {
		t.Errorf("%s %q: admitted for %q, but a PHP shop reads %s=%q (the last of a name, after mangling)", req.URI, raw, adm, name, php)
	}
}

// rt11fixRack2Get is params[name] for a query string as Rack 2.x reads it
// (Rack::Request#GET: parse_nested_query(query_string, "&;"), the split
// on /[&;] */; a plain name's last value wins), as Rails 5–7.0 shops and
// Sinatra do; Python before 3.9.2 (parse_qs) and Django before 3.2 split
// on ';' too.
func rt11fixRack2Get(raw, name string) string {
	v := ""
	for _, kv := range strings.FieldsFunc(raw, func(r rune) bool { return r == '&' || r == ';' }) {
		kv = strings.TrimLeft(kv, " ")
		k, val, _ := strings.Cut(kv, "=")
		k, _ = url.QueryUnescape(k)
		val, _ = url.QueryUnescape(val)
		if k == name {
			v = val
		}
	}
	return v
}

// TestRT11FixSemicolonHidesASecondSKU: the same README promise (a field
// the proxy decides on, sent twice, is refused "since the shop may read
// the other copy"). proxy/args.go splits on '&' only (fasthttp's reading),
// so "?sku=cheap&x=1;sku=rare" holds one sku to the proxy (cheap; x is
// "1;sku=rare"), while Rack 2.x (Rails ≤ 7.0, Sinatra), Python < 3.9.2 and
// Django < 3.2 split on ';' as well and read the last sku: rare. A unit of
// rare no reservation covers is sold. (The proxy's own earlier tests only
// tried "sku=cheap;sku=rare", whose first value is then an unknown SKU.)
// Want: refused 400, e.g. by counting a name after ';' as another copy.
func TestRT11FixSemicolonHidesASecondSKU(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	skus := []config.SKU{{ID: "cheap", Stock: 10}, {ID: "rare", Stock: 1}}
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "rt11sc", Path: "/rt11sc/buy", SkuFrom: "query:sku", SKUs: skus, Shards: 1}}}.Config(t))
	p.Preheat(t, "rt11sc")
	for i, raw := range []string{"sku=cheap;sku=rare", "sku=cheap&x=1;sku=rare", "sku=cheap&x;sku=rare"} {
		user := fmt.Sprint("rt11sc-", i)
		got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/rt11sc/buy?" + raw, Header: [][2]string{{"X-User-Id", user}}})
		rack := rt11fixRack2Get(raw, "sku")
		t.Logf("%q: %d %s; Rack 2 reads sku=%q", raw, got.Status, bytes.TrimSpace(got.Body), rack)
		rq, ok := rkShopReq(shop, user)
		if !ok {
			continue
		}
		if adm := rq.Header.Get("X-Seckill-Sku"); adm != rack {
			t.Errorf("%q: admitted for %q, but a Rack 2 / Rails shop reads sku=%q", raw, adm, rack)
		}
	}
}
