package e2e_test

import (
	"bytes"
	"compress/gzip"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// px12Gzip is s gzip-compressed.
func px12Gzip(s string) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, _ = zw.Write([]byte(s))
	_ = zw.Close()
	return b.Bytes()
}

// TestPX12BundleSecondCopies: the twelfth round's second copies are
// refused on a bundle_route as on a buy route, before anything is
// reserved: the items' name in the query (Rails' params merges the query
// over a JSON body), in another letter case or cut at a NUL; a compressed
// body; a buyer cookie a PHP or ASP.NET shop reads under the configured
// name. A plain bundle, an identity Content-Encoding and unrelated cookies
// still buy.
func TestPX12BundleSecondCopies(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	skus := []config.SKU{{ID: "a", Stock: 10}, {ID: "b", Stock: 10}}
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, User: `{ cookie: uid }`,
		Activities: []e2e.Activity{{ID: "px12b", Shards: 1, PerUserLimit: 3, BundleRoute: bundleRoute, SKUs: skus}}}.Config(t))
	p.Preheat(t, "px12b")
	const items = `{"items":[{"sku":"a","qty":1},{"sku":"b","qty":1}]}`
	bundle := func(query, cookie string, extra [][2]string, body []byte) e2e.Resp {
		h := append([][2]string{{"Cookie", cookie}, {"Content-Type", "application/json"}}, extra...)
		return e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/px12b/bundle" + query, Header: h, Body: body})
	}
	for _, c := range []struct {
		what, query, cookie string
		extra               [][2]string
		body                []byte
	}{
		{"items in the query", "?items[0][sku]=b&items[0][qty]=3", "uid=r1", nil, []byte(items)},
		{"items in another case", "?ITEMS=x", "uid=r2", nil, []byte(items)},
		{"items cut at NUL", "?items%00=x", "uid=r3", nil, []byte(items)},
		{"gzip body", "", "uid=r4", [][2]string{{"Content-Encoding", "gzip"}}, px12Gzip(items)},
		{"deflate, identity", "", "uid=r5", [][2]string{{"Content-Encoding", "deflate, identity"}}, []byte(items)},
		{"PHP cookie name encoded", "", "uid%5B%5D=bob; uid=r6", nil, []byte(items)},
		{"PHP cookie array", "", "uid[x]=bob; uid=r7", nil, []byte(items)},
		{"cookie in another case", "", "UID=bob; uid=r8", nil, []byte(items)},
		{"cookie name encoded", "", "u%69d=bob; uid=r9", nil, []byte(items)},
		{"cookie without =", "", "uid; uid=r10", nil, []byte(items)},
		{"PHP cookie name alone", "", "uid%00=bob", nil, []byte(items)},
	} {
		got := bundle(c.query, c.cookie, c.extra, c.body)
		if got.Status != 400 || got.Code != "BAD_REQUEST" {
			t.Errorf("%s: %d %s, want 400 BAD_REQUEST", c.what, got.Status, got.Body)
		}
	}
	for _, k := range p.Status(t, "px12b").SKUs {
		if k.Remaining != 10 || k.Pending != 0 || k.Confirmed != 0 {
			t.Fatalf("after refusals only: %+v, want nothing reserved", k)
		}
	}
	if len(shop.Buys()) != 0 {
		t.Fatalf("refused bundles reached the shop: %+v", shop.Buys())
	}

	// Controls: these buy.
	for _, c := range []struct {
		what, query, cookie string
		extra               [][2]string
	}{
		{"plain", "", "uid=u1", nil},
		{"identity encoding", "", "uid=u2", [][2]string{{"Content-Encoding", "identity"}}},
		{"other cookies and query", "?ref=mail", "uid_x=1; uidx=2; sess=3; uid=u3", nil},
	} {
		if got := bundle(c.query, c.cookie, c.extra, []byte(items)); got.Code != "WIN" {
			t.Errorf("control %s: %d %s, want WIN", c.what, got.Status, got.Body)
		}
	}
}

// TestPX12BuyControls: what the twelfth round refuses is a second copy,
// not a shape: a query buy with an empty body declared JSON, or a JSON
// body without the fields' names, still buys; a JSON buy whose query
// carries other names still buys; a pass-through request with a gzip
// body reaches the shop as sent.
func TestPX12BuyControls(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	skus := []config.SKU{{ID: "cheap", Stock: 10}}
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{
			{ID: "px12q", Path: "/px12q/buy", SkuFrom: "query:sku", QtyFrom: "query:qty", SKUs: skus, Shards: 1, PerUserLimit: 2},
			{ID: "px12j", Path: "/px12j/buy", SkuFrom: "json:/sku", QtyFrom: "json:/qty", SKUs: skus, Shards: 1, PerUserLimit: 2},
		}}.Config(t))
	p.Preheat(t, "px12q")
	p.Preheat(t, "px12j")
	for _, c := range []struct {
		what, uri, ct, body string
	}{
		{"query, empty JSON body", "/px12q/buy?sku=cheap&qty=2", "application/json", ""},
		{"query, JSON body of other keys", "/px12q/buy?sku=cheap&qty=2", "application/json", `{"note":"gift","skus":1}`},
		{"query, names as prefixes", "/px12q/buy?sku=cheap&qty=2&skus=x&qty_max=9", "", ""},
		{"JSON, other query names", "/px12j/buy?ref=mail&skux=1", "application/json", `{"sku":"cheap","qty":"2"}`},
	} {
		h := [][2]string{{"X-User-Id", "px12-" + c.what}}
		if c.ct != "" {
			h = append(h, [2]string{"Content-Type", c.ct})
		}
		if got := e2e.Do(nil, p.Addr, e2e.Req{URI: c.uri, Header: h, Body: []byte(c.body)}); got.Code != "WIN" {
			t.Errorf("%s: %d %s, want WIN", c.what, got.Status, got.Body)
		}
	}
	// A query buy whose JSON body is not JSON: refused, as a body the
	// shop's own parser may read otherwise.
	got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/px12q/buy?sku=cheap",
		Header: [][2]string{{"X-User-Id", "px12-badjson"}, {"Content-Type", "application/json"}}, Body: []byte(`{"qty":3,"qty":1`)})
	if got.Status != 400 || got.Code != "BAD_REQUEST" {
		t.Errorf("query buy, malformed JSON body: %d %s, want 400 BAD_REQUEST", got.Status, got.Body)
	}

	zb := px12Gzip("hello=1")
	got = e2e.Do(nil, p.Addr, e2e.Req{URI: "/px12-elsewhere/upload",
		Header: [][2]string{{"Content-Encoding", "gzip"}, {"Content-Type", "application/x-www-form-urlencoded"}}, Body: zb})
	if got.Status != 200 {
		t.Fatalf("pass-through gzip: %d %s", got.Status, got.Body)
	}
	seen := false
	for _, rq := range shop.Requests() {
		if rq.Path == "/px12-elsewhere/upload" {
			seen = true
			if rq.Header.Get("Content-Encoding") != "gzip" || !bytes.Equal(rq.Body, zb) {
				t.Errorf("pass-through gzip changed: Content-Encoding %q, body %q", rq.Header.Get("Content-Encoding"), rq.Body)
			}
		}
	}
	if !seen {
		t.Fatal("pass-through gzip never reached the shop")
	}
}
