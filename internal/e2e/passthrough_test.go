package e2e_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

func echoOf(t *testing.T, r e2e.Resp) e2e.Echo {
	t.Helper()
	if r.Err != nil || r.Header["X-Shop"] != "pass" {
		t.Fatalf("not the shop's echo: %d %s (err %v)", r.Status, r.Body, r.Err)
	}
	var e e2e.Echo
	if err := json.Unmarshal(r.Body, &e); err != nil {
		t.Fatalf("echo body %s: %v", r.Body, err)
	}
	return e
}

// TestForgedSeckillHeadersNeverReachTheShop: client-sent X-Seckill-* headers
// are removed on the buy route and on ordinary routes, whatever their case
// and however many there are.
func TestForgedSeckillHeadersNeverReachTheShop(t *testing.T) {
	f := newFixture(t)
	forged := [][2]string{
		{"X-Seckill-Token", "forged-token"},
		{"X-Seckill-Token", "forged-token-2"},
		{"X-Seckill-User", "forged-user"},
		{"X-Seckill-Signature", "t=1,v1=forged"},
		{"x-seckill-activity", "forged-act"},
		{"X-SECKILL-SKU", "forged-sku"},
	}
	for i := 0; i < 10; i++ { // more than the stripper's batch
		forged = append(forged, [2]string{"X-Seckill-Extra" + strconv.Itoa(i), "forged-extra"})
	}
	with := func(h ...[2]string) [][2]string { return append(append([][2]string{}, forged...), h...) }

	won := f.do(e2e.Req{URI: "/api/seckill/open/sku1/buy", Header: with([2]string{"X-User-Id", "alice"})})
	wantWin(t, won)
	if strings.Contains(won.Token(), "forged") {
		t.Errorf("winner got token %s", won.Token())
	}
	o, ok := f.shop.Orders()[won.Token()]
	if !ok || o.User != "alice" || o.Activity != actOpen || o.SKU != e2e.SKU || !o.SigOK {
		t.Errorf("order = %+v (found %v)", o, ok)
	}
	// A loser with forged headers reaches nobody.
	wantCode(t, f.do(e2e.Req{URI: "/api/seckill/open/sku1/buy", Header: with([2]string{"X-User-Id", "alice"})}), "ALREADY_PURCHASED", 409)

	for _, method := range []string{"GET", "POST"} {
		e := echoOf(t, f.do(e2e.Req{Method: method, URI: "/account", Header: forged, Body: []byte("x")}))
		for k := range e.Header {
			if strings.HasPrefix(strings.ToLower(k), "x-seckill-") {
				t.Errorf("%s ordinary route: shop got %s: %v", method, k, e.Header[k])
			}
		}
	}
	if f.shop.HasSeckillHeader("forged") {
		t.Error("a forged X-Seckill-* value reached the shop")
	}
	if n := len(f.shop.Buys()); n != 1 {
		t.Errorf("shop got %d buys, want 1", n)
	}
}

// TestOrdinaryRoutesPassThrough: method, path, query, body and headers go
// to the shop as sent (plus X-Forwarded-For); the shop's status, headers and
// body come back as the shop sent them.
func TestOrdinaryRoutesPassThrough(t *testing.T) {
	f := newFixture(t)

	r := f.do(e2e.Req{Method: "GET", URI: "/catalog/items?page=2&sort=price&q=a%20b", Header: [][2]string{{"X-Custom", "kept"}}})
	e := echoOf(t, r)
	if r.Status != 200 || e.Method != "GET" || e.Path != "/catalog/items" || e.Query != "page=2&sort=price&q=a%20b" {
		t.Errorf("GET: %d %+v", r.Status, e)
	}
	if got := e.Header.Get("X-Custom"); got != "kept" {
		t.Errorf("X-Custom = %q", got)
	}
	if got := e.Header.Get("X-Forwarded-For"); got != "127.0.0.1" {
		t.Errorf("X-Forwarded-For = %q, want 127.0.0.1", got)
	}
	if r.Header["X-Shop-Echo"] != "yes" {
		t.Errorf("shop's header lost: %v", r.Header)
	}

	body := `{"item":"sku1","note":"` + strings.Repeat("z", 100<<10) + `"}`
	r = f.do(e2e.Req{URI: "/cart?status=201&x=1", Body: []byte(body),
		Header: [][2]string{{"Content-Type", "application/json"}, {"X-Forwarded-For", "10.1.2.3"}}})
	e = echoOf(t, r)
	if r.Status != 201 || e.Method != "POST" || e.Path != "/cart" || e.Query != "status=201&x=1" || e.Body != body {
		t.Errorf("POST: %d %s %s ?%s body %d bytes", r.Status, e.Method, e.Path, e.Query, len(e.Body))
	}
	if got := e.Header.Get("X-Forwarded-For"); got != "10.1.2.3, 127.0.0.1" {
		t.Errorf("X-Forwarded-For = %q, want the client's list with the peer appended", got)
	}

	for _, status := range []int{404, 418, 500, 503} {
		r := f.do(e2e.Req{Method: "GET", URI: "/x?status=" + strconv.Itoa(status)})
		if echoOf(t, r); r.Status != status {
			t.Errorf("shop answered %d, client got %d", status, r.Status)
		}
	}
	// The buy route's path with another method is 405 (SPEC §9), not
	// ordinary traffic, unless the route lists it in pass_methods.
	r = f.do(e2e.Req{Method: "GET", URI: "/api/seckill/open/sku1/buy", Header: [][2]string{{"X-User-Id", "alice"}}})
	if r.Status != 405 || r.Header["Allow"] != "POST" {
		t.Errorf("GET on the buy path: %d %s", r.Status, r.Body)
	}
	if n := len(f.shop.Buys()); n != 0 {
		t.Errorf("shop got %d buys", n)
	}
	f.p.WantStock(t, actOpen, 100, 0, 0)
}
