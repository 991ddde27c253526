package e2e_test

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// rawDo sends one request with its target written byte for byte (an HTTP
// client would normalise the path first) and returns the answer.
func rawDo(t *testing.T, addr, method, target, user string) e2e.Resp {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	req := method + " " + target + " HTTP/1.1\r\nHost: shop\r\nX-User-Id: " + user + "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatalf("write: %v", err)
	}
	var resp fasthttp.Response
	if err := resp.Read(bufio.NewReader(c)); err != nil {
		return e2e.Resp{Err: err}
	}
	return e2e.ReadResp(&resp)
}

// noUnadmittedBuy fails the test if the shop received a request on a buy
// spelling without an admission token: what canonicalises to the buy route
// must never reach the shop un-admitted.
func noUnadmittedBuy(t *testing.T, shop *e2e.Shop) {
	t.Helper()
	for _, r := range shop.Requests() {
		if r.Header.Get("X-Seckill-Token") != "" {
			continue
		}
		low := strings.ToLower(r.URI)
		if strings.Contains(low, "buy") || strings.Contains(low, "%62") {
			t.Errorf("shop got %s %s without X-Seckill-Token", r.Method, r.URI)
		}
	}
}

// TestBuySpellingsGetAdmission: the spellings measured in issue 8 (path
// parameters, case, format suffix, encoded letters, dot segments, repeated
// slashes) are buys: each gets an admission decision, and the winner reaches
// the shop on the canonical path with its query.
func TestBuySpellingsGetAdmission(t *testing.T) {
	f := newFixture(t)
	spellings := []string{
		"/api/seckill/open/sku1/buy;jsessionid=abc",
		"/API/SECKILL/open/sku1/BUY",
		"/api/seckill/open/sku1/Buy",
		"/api/seckill/open/sku1/buy.json",
		"//api//seckill/./x/../open/sku1/buy/",
		"/api/seckill/open/sku1/%62uy",
		"/api/seckill/open/sku1/%42UY.xml?ref=1",
		"/api;v=2/seckill/open/sku1/buy%2Ejson",
	}
	for i, p := range spellings {
		user := "u" + string(rune('a'+i))
		r := rawDo(t, f.p.Addr, "POST", p, user)
		wantWin(t, r)
		// The same user again is refused by admission, not passed through.
		wantCode(t, rawDo(t, f.p.Addr, "POST", p, user), "ALREADY_PURCHASED", 409)
	}
	noUnadmittedBuy(t, f.shop)
	buys := 0
	for _, r := range f.shop.Requests() {
		if r.Header.Get("X-Seckill-Token") == "" {
			continue
		}
		buys++
		want := "/api/seckill/open/sku1/buy"
		if r.Query != "" {
			want += "?" + r.Query
			if r.Query != "ref=1" {
				t.Errorf("query = %q, want ref=1", r.Query)
			}
		}
		if r.URI != want {
			t.Errorf("shop got the buy on %q, want %q", r.URI, want)
		}
	}
	if buys != len(spellings) {
		t.Errorf("shop got %d buys, want %d", buys, len(spellings))
	}
	f.p.WantStock(t, actOpen, 100-int64(len(spellings)), 0, int64(len(spellings)))
}

// TestBuyCaptureCaseIsNotFolded: activity and SKU ids are case-sensitive;
// another case names no activity and is refused, never passed through.
func TestBuyCaptureCaseIsNotFolded(t *testing.T) {
	f := newFixture(t)
	wantCode(t, rawDo(t, f.p.Addr, "POST", "/api/seckill/OPEN/sku1/buy", "alice"), "UNKNOWN_ITEM", 404)
	wantCode(t, rawDo(t, f.p.Addr, "POST", "/api/seckill/open/SKU1/buy", "alice"), "UNKNOWN_ITEM", 404)
	noUnadmittedBuy(t, f.shop)
	if n := len(f.shop.Requests()); n != 0 {
		t.Errorf("shop got %d requests", n)
	}
}

// TestUnsafePathUnderRoutePrefixIs400: under the buy routes' prefix, a path
// that cannot be canonicalised safely is BAD_REQUEST and never forwarded;
// outside it, the same bytes pass through untouched.
func TestUnsafePathUnderRoutePrefixIs400(t *testing.T) {
	f := newFixture(t)
	unsafe := []string{
		"/api/seckill/open/sku1/bu%2Fy",
		"/api/seckill/open%2Fsku1/buy",
		"/api%2fseckill/open/sku1/buy",
		"/api/seckill/open/sku1/buy%5C",
		"/api/seckill/open\\sku1/buy",
		"/api/seckill/open/sku1/buy%00",
		"/api/seckill/open/sku1/b%zzuy",
		"/api/seckill/open/sku1/buy%4",
		"/api/seckill/open/sku1/buy%C0",
		"/api/seckill/open/sku1/%2562uy",
		"/../api/seckill/open/sku1/buy",
		"/API/Seckill/%2e%2e/%2e%2e/%2e%2e/api/seckill/open/sku1/buy",
		"/api/seckill/open/./sku1",
	}
	for _, p := range unsafe {
		r := rawDo(t, f.p.Addr, "POST", p, "mallory")
		if r.Err != nil || r.Status != 400 || r.Code != "BAD_REQUEST" || r.Header["Content-Type"] != "application/json" {
			t.Errorf("%s: got %d %s (err %v), want 400 BAD_REQUEST", p, r.Status, r.Body, r.Err)
		}
	}
	if n := len(f.shop.Requests()); n != 0 {
		t.Errorf("shop got %d requests from unsafe paths: %+v", n, f.shop.Requests())
	}
	// Outside the prefix: untouched.
	for _, p := range []string{"/static/a%2Fb;v=1", "/other/x/../Y"} {
		r := rawDo(t, f.p.Addr, "GET", p, "mallory")
		if r.Header["X-Shop"] != "pass" {
			t.Errorf("%s: got %d %s, want the shop's echo", p, r.Status, r.Body)
		}
	}
	reqs := f.shop.Requests()
	if len(reqs) != 2 || reqs[0].URI != "/static/a%2Fb;v=1" || reqs[1].URI != "/other/x/../Y" {
		t.Errorf("shop got %+v, want both paths as sent", reqs)
	}
	f.p.WantStock(t, actOpen, 100, 0, 0)
}

// TestBuyPathOtherMethod: a buy route's path with another method is 405
// with Allow, unless the route lists the method in pass_methods.
func TestBuyPathOtherMethod(t *testing.T) {
	f := newFixture(t, func(o *e2e.Options) {
		o.Activities = append(o.Activities, e2e.Activity{ID: "pm", Stock: 10, Path: "/pm/{sku}/buy", PassMethods: []string{"GET", "OPTIONS"}})
	})
	for _, p := range []string{"/api/seckill/open/sku1/buy", "/API/seckill/open/sku1/Buy.json", "/pm/sku1/buy"} {
		for _, m := range []string{"GET", "PUT", "DELETE"} {
			if p == "/pm/sku1/buy" && m == "GET" {
				continue
			}
			r := rawDo(t, f.p.Addr, m, p, "alice")
			if r.Status != 405 || r.Header["Allow"] != "POST" || r.Header["Content-Type"] != "application/json" || r.Str("message") == "" {
				t.Errorf("%s %s: got %d Allow %q %s, want 405 Allow POST", m, p, r.Status, r.Header["Allow"], r.Body)
			}
		}
	}
	if n := len(f.shop.Requests()); n != 0 {
		t.Errorf("shop got %d requests", n)
	}
	for _, m := range []string{"GET", "OPTIONS"} {
		r := rawDo(t, f.p.Addr, m, "/pm/sku1/buy", "alice")
		if r.Header["X-Shop"] != "pass" {
			t.Errorf("%s on pass_methods: got %d %s, want the shop's echo", m, r.Status, r.Body)
		}
	}
	wantWin(t, rawDo(t, f.p.Addr, "POST", "/PM/sku1/buy", "alice"))
}

// TestCaseSensitiveRoute: with case_sensitive: true, another case of a
// literal is not the buy route (it passes to the shop as ordinary traffic).
func TestCaseSensitiveRoute(t *testing.T) {
	f := newFixture(t, func(o *e2e.Options) {
		o.Activities = append(o.Activities, e2e.Activity{ID: "cs", Stock: 10, Path: "/cs/{sku}/Buy", CaseSensitive: true})
	})
	wantWin(t, rawDo(t, f.p.Addr, "POST", "/cs/sku1/Buy", "alice"))
	wantWin(t, rawDo(t, f.p.Addr, "POST", "/cs/sku1/Buy;x=1", "bob"))
	r := rawDo(t, f.p.Addr, "POST", "/cs/sku1/buy", "carol")
	if r.Header["X-Shop"] != "pass" {
		t.Errorf("other case on a case-sensitive route: got %d %s, want pass-through", r.Status, r.Body)
	}
}

// TestRoutingHeadersCannotReachTheBuyHandler: shops behind IIS URL Rewrite
// or older Symfony route by a client's X-Original-URL / X-Rewrite-URL, and
// most frameworks honour a method override. Neither may carry a buy past
// admission: the URL headers never reach the shop, and an override on a
// pass_methods spelling of the buy path is 405.
func TestRoutingHeadersCannotReachTheBuyHandler(t *testing.T) {
	f := newFixture(t, func(o *e2e.Options) {
		o.Activities = append(o.Activities, e2e.Activity{ID: "pm", Stock: 10, Path: "/pm/{sku}/buy", PassMethods: []string{"GET"}})
	})
	r := f.do(e2e.Req{Method: "GET", URI: "/catalog", Header: [][2]string{
		{"X-Original-URL", "/api/seckill/open/sku1/buy"}, {"X-Rewrite-URL", "/api/seckill/open/sku1/buy"}, {"X-User-Id", "alice"}}})
	if e := echoOf(t, r); e.Header.Get("X-Original-URL") != "" || e.Header.Get("X-Rewrite-URL") != "" {
		t.Errorf("the shop got a client's routing header: %v", e.Header)
	}
	for _, h := range [][2]string{{"X-HTTP-Method-Override", "POST"}, {"X-HTTP-Method", "POST"}, {"X-Method-Override", "POST"}} {
		r := f.do(e2e.Req{Method: "GET", URI: "/pm/sku1/buy", Header: [][2]string{h, {"X-User-Id", "bob"}}})
		if r.Status != 405 {
			t.Errorf("GET with %s: %d %s, want 405", h[0], r.Status, r.Body)
		}
	}
	for _, uri := range []string{"/pm/sku1/buy?_method=POST", "/pm/sku1/buy?x=1&_METHOD=post"} {
		if r := f.do(e2e.Req{Method: "GET", URI: uri, Header: [][2]string{{"X-User-Id", "bob"}}}); r.Status != 405 {
			t.Errorf("GET %s: %d %s, want 405", uri, r.Status, r.Body)
		}
	}
	if r := f.do(e2e.Req{Method: "GET", URI: "/pm/sku1/buy?page=2", Header: [][2]string{{"X-User-Id", "bob"}}}); r.Header["X-Shop"] != "pass" {
		t.Errorf("plain GET on pass_methods: %d %s, want the shop's echo", r.Status, r.Body)
	}
	for _, q := range f.shop.Requests() {
		if strings.Contains(strings.ToLower(q.Query), "_method") || q.Header.Get("X-HTTP-Method-Override") != "" ||
			q.Header.Get("X-HTTP-Method") != "" || q.Header.Get("X-Method-Override") != "" {
			t.Errorf("shop got %s %s?%s with a method override", q.Method, q.Path, q.Query)
		}
	}
}
