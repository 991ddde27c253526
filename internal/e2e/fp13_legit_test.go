package e2e_test

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/identity/jwttest"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// fp13: false positives. Legitimate shoppers' requests, as browsers, mobile
// HTTP stacks and CDNs send them in normal operation, must not be refused
// (400/403/429/BUSY) by the spelling checks of the tenth and eleventh
// rounds (README "A field the shop could read differently is 400").

// fp13Proxy starts Redis, the shop and a proxy with four routes: the
// default path route (fp13p), a JSON route (fp13j: json:/sku, json:/qty), a
// query route (fp13q: query:sku, query:qty) and a form route (fp13f:
// form:sku, form:qty). user is identity.user ("" for the header default).
func fp13Proxy(t *testing.T, user string) (*e2e.Proxy, *e2e.Shop) {
	t.Helper()
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, User: user,
		Activities: []e2e.Activity{
			{ID: "fp13p", Stock: 100, Shards: 1, PerUserLimit: 2},
			{ID: "fp13j", Path: "/fp13j/buy", SkuFrom: "json:/sku", QtyFrom: "json:/qty", Stock: 100, Shards: 1, PerUserLimit: 2},
			{ID: "fp13q", Path: "/fp13q/buy", SkuFrom: "query:sku", QtyFrom: "query:qty", Stock: 100, Shards: 1, PerUserLimit: 2},
			{ID: "fp13f", Path: "/fp13f/buy", SkuFrom: "form:sku", QtyFrom: "form:qty", Stock: 100, Shards: 1, PerUserLimit: 2},
		}}.Config(t))
	for _, a := range []string{"fp13p", "fp13j", "fp13q", "fp13f"} {
		p.Preheat(t, a)
	}
	return p, shop
}

// fp13WantWin fails t unless got is a winner (the shop's 200 with the token).
func fp13WantWin(t *testing.T, what string, got e2e.Resp) {
	t.Helper()
	if got.Err != nil {
		t.Errorf("%s: %v", what, got.Err)
		return
	}
	if got.Code != "WIN" {
		t.Errorf("FALSE POSITIVE: %s: %d %s %s, want the shop's 200 (a legitimate buyer refused)", what, got.Status, got.Code, got.Body)
	}
}

// fp13Raw writes raw on a new connection and reads one answer.
func fp13Raw(t *testing.T, addr, raw string) e2e.Resp {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(4 * time.Second))
	if _, err := c.Write([]byte(raw)); err != nil {
		t.Fatalf("write: %v", err)
	}
	br := bufio.NewReader(c)
	var resp fasthttp.Response
	// A 100 Continue is skipped by fasthttp's reader.
	if err := resp.Read(br); err != nil {
		return e2e.Resp{Err: err}
	}
	return e2e.ReadResp(&resp)
}

// TestFP13BrowserCookiesAdmitted: identity.user { cookie: sid }. A browser
// carries many cookies of analytics and UI code; some differ only in
// letter case (`_ga`/`_GA`, `Theme`/`theme`) or use PHP-odd characters
// (`ab.test`, `consent[v2]`) but none is the identity cookie in any
// spelling. HTTP/2 front ends may also forward the cookies in several
// Cookie lines. All must be admitted.
func TestFP13BrowserCookiesAdmitted(t *testing.T) {
	p, _ := fp13Proxy(t, "{ cookie: sid }")
	cookies := [][][2]string{
		{{"Cookie", "_ga=GA1.1.123.456; _GA=GA1.1.9; Theme=dark; theme=light; sid=fp13-c1; _gid=GA1.2.3; sid_legacy=1; sidebar=open"}},
		{{"Cookie", "_ga=GA1.1.123.456"}, {"Cookie", "sid=fp13-c2"}, {"Cookie", "ab.test=b; consent[v2]=yes; __Host-csrf=abc; SIDE=1"}},
		{{"Cookie", "sid=fp13-c3; lang=\"zh-CN\"; cart=%7B%22n%22%3A1%7D; empty=; flag"}},
	}
	for i, h := range cookies {
		got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/fp13p/" + e2e.SKU + "/buy", Header: h})
		fp13WantWin(t, fmt.Sprintf("cookies %d %v", i, h), got)
	}
}

// TestFP13CDNHeadersAdmitted: a buy as it arrives through a CDN and nginx:
// underscore-spelled headers that are no identity field, CF-/Akamai/AWS
// headers, Accept-Encoding, Content-Encoding: identity, a JSON body with a
// charset, an X-Forwarded-For entry with a port, Via, and a request id.
func TestFP13CDNHeadersAdmitted(t *testing.T) {
	p, _ := fp13Proxy(t, "")
	h := [][2]string{
		{"X-User-Id", "fp13-cdn"},
		{"X_Forwarded_Proto", "https"}, {"X-Forwarded-Proto", "https"}, {"X_Real_IP", "203.0.113.9"},
		{"CF-Connecting-IP", "203.0.113.9"}, {"CF-Ray", "8a1b2c3d4e5f-HKG"}, {"CF-IPCountry", "CN"}, {"CDN-Loop", "cloudflare"},
		{"True-Client-IP", "203.0.113.9"}, {"Akamai-Origin-Hop", "2"}, {"X-Amzn-Trace-Id", "Root=1-67891233-abcdef012345678912345678"},
		{"Via", "1.1 varnish, 1.1 abc.cloudfront.net (CloudFront)"}, {"X-Forwarded-For", "203.0.113.9:51234"},
		{"Accept-Encoding", "gzip, deflate, br, zstd"}, {"Content-Encoding", "identity"},
		{"Content-Type", "application/json; charset=utf-8"}, {"X-Request-Id", "6f1e0b0c-0d7a-4f0e-9a51-2b9c3c6d7e8f"},
		{"User-Agent", "okhttp/4.12.0"}, {"Accept", "application/json"}, {"Origin", "https://www.shop.example"},
		{"Sec-Fetch-Mode", "cors"}, {"Cache-Control", "no-cache"}, {"Pragma", "no-cache"},
	}
	got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/fp13p/" + e2e.SKU + "/buy", Header: h, Body: []byte(`{"note":"x"}`)})
	fp13WantWin(t, "CDN headers", got)

	// The same on the JSON route, where the body is read.
	h[0][1] = "fp13-cdn-j"
	h[16][1] = "6f1e0b0c-0d7a-4f0e-9a51-2b9c3c6d7e90"
	got = e2e.Do(nil, p.Addr, e2e.Req{URI: "/fp13j/buy", Header: h, Body: []byte(`{"sku":"sku1","qty":1}`)})
	fp13WantWin(t, "CDN headers, JSON route", got)
}

// TestFP13JSONShapesAdmitted: JSON bodies a web or mobile client sends in
// normal operation: unrelated fields nested under other objects with the
// route's names (`meta.qty` an array, `item.SKU`), qty as a string, qty
// absent, a qty of 2 within max_qty, arrays of objects with the same keys,
// unicode, and white space around the document.
func TestFP13JSONShapesAdmitted(t *testing.T) {
	p, _ := fp13Proxy(t, "")
	for i, body := range []string{
		`{"sku":"sku1","meta":{"qty":[1,2],"SKU":null}}`,
		`{"sku":"sku1","qty":"1"}`,
		`{"sku":"sku1","qty":2}`,
		`{"sku":"sku1","qty":1,"items":[{"id":1,"name":"a"},{"id":2,"name":"b"}],"addr":{"city":"上海"}}`,
		"\n  {\"sku\":\"sku1\",\"qty\":1,\"client\":{\"os\":\"iOS\",\"ver\":\"17.4\"}}\r\n",
		`{"qty":1,"sku":"sku1","coupon":null,"gift":false,"tags":[]}`,
	} {
		got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/fp13j/buy", Header: [][2]string{
			{"X-User-Id", fmt.Sprintf("fp13-js%d", i)}, {"Content-Type", "application/json; charset=utf-8"}}, Body: []byte(body)})
		fp13WantWin(t, body, got)
	}
}

// TestFP13JSONUnrelatedCaseTwinsAdmitted: README refuses "a field the
// proxy decides on (user, session credential, SKU, qty, device, request
// id) sent twice — … a JSON key twice in one object (letter case aside:
// `sku` and `SKU`)". But jsonptr.DecodeStrict refuses a case twin (or an
// exact duplicate) in ANY object at ANY depth of the body, also keys the
// proxy never reads: a buy carrying client metadata such as
// {"attrs":{"Color":"red","color":"red"}} (a JS object built from two
// sources, a map of HTTP headers, analytics props) is 400 BAD_REQUEST.
// No shop could read a SKU or qty from those keys; the buyer is refused.
func TestFP13JSONUnrelatedCaseTwinsAdmitted(t *testing.T) {
	p, _ := fp13Proxy(t, "")
	for i, body := range []string{
		`{"sku":"sku1","qty":1,"attrs":{"Color":"red","color":"red"}}`,
		`{"sku":"sku1","qty":1,"headers":{"Content-Type":"a","content-type":"a"}}`,
		`{"sku":"sku1","qty":1,"Note":"gift","note":"gift"}`,
	} {
		got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/fp13j/buy", Header: [][2]string{
			{"X-User-Id", fmt.Sprintf("fp13-tw%d", i)}, {"Content-Type", "application/json"}}, Body: []byte(body)})
		fp13WantWin(t, "json route "+body, got)
	}
	// A query route with a JSON body: the body is only searched for a
	// top-level sku/qty key (Laravel's merge), yet twins elsewhere refuse.
	got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/fp13q/buy?sku=sku1", Header: [][2]string{
		{"X-User-Id", "fp13-twq"}, {"Content-Type", "application/json"}}, Body: []byte(`{"props":{"ID":1,"id":1}}`)})
	fp13WantWin(t, "query route, JSON body with props.ID/props.id", got)
}

// TestFP13QueryAndFormShapesAdmitted: tracking parameters repeated (a
// link shortener appending utm_source again, fbclid in two cases), a form
// post with jQuery's charset and a CSRF token, and a route param also in
// a JSON-free body of another type.
func TestFP13QueryAndFormShapesAdmitted(t *testing.T) {
	p, _ := fp13Proxy(t, "")
	for i, uri := range []string{
		"/fp13q/buy?sku=sku1&utm_source=app&utm_source=app&fbclid=x1&FBCLID=x1",
		"/fp13q/buy?sku=sku1&qty=1&ref=home&ref=home&_=1733212345678",
		"/fp13q/buy?skus=a&sku=sku1&qty_max=3&sku_name=%E6%89%8B%E6%9C%BA",
	} {
		got := e2e.Do(nil, p.Addr, e2e.Req{URI: uri, Header: [][2]string{{"X-User-Id", fmt.Sprintf("fp13-q%d", i)}}})
		fp13WantWin(t, uri, got)
	}
	got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/fp13f/buy?utm_source=app", Header: [][2]string{{"X-User-Id", "fp13-f0"},
		{"Content-Type", "application/x-www-form-urlencoded; charset=UTF-8"}}, Body: []byte("sku=sku1&qty=1&_token=abc%2Bdef&remember=on")})
	fp13WantWin(t, "form post with charset and csrf", got)
}

// TestFP13ClientFramingAdmitted: HTTP/1.0 without Host, a chunked JSON body
// (OkHttp/URLSession streaming bodies), Expect: 100-continue (curl, .NET),
// `Connection: keep-alive` and a target with a doubled leading slash (a
// base URL ending in '/' joined with a path starting '/').
func TestFP13ClientFramingAdmitted(t *testing.T) {
	p, _ := fp13Proxy(t, "")
	path := "/api/seckill/fp13p/" + e2e.SKU + "/buy"
	for _, tc := range []struct{ name, raw string }{
		{"HTTP/1.0 no Host", "POST " + path + " HTTP/1.0\r\nX-User-Id: fp13-h10\r\nContent-Length: 0\r\n\r\n"},
		{"HTTP/1.0 keep-alive", "POST " + path + " HTTP/1.0\r\nHost: shop\r\nConnection: keep-alive\r\nX-User-Id: fp13-h10k\r\nContent-Length: 2\r\n\r\n{}"},
		{"chunked JSON", "POST /fp13j/buy HTTP/1.1\r\nHost: shop\r\nX-User-Id: fp13-chunk\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"d\r\n{\"sku\":\"sku1\"\r\n9\r\n,\"qty\":1}\r\n0\r\n\r\n"},
		{"Expect 100-continue", "POST /fp13j/buy HTTP/1.1\r\nHost: shop\r\nX-User-Id: fp13-exp\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: 22\r\n\r\n{\"sku\":\"sku1\",\"qty\":1}"},
		{"double leading slash", "POST /" + path + " HTTP/1.1\r\nHost: shop\r\nX-User-Id: fp13-dbl\r\nContent-Length: 0\r\n\r\n"},
		{"TE trailers (gRPC-style clients)", "POST " + path + " HTTP/1.1\r\nHost: shop\r\nTE: trailers\r\nConnection: TE\r\nX-User-Id: fp13-te\r\nContent-Length: 0\r\n\r\n"},
	} {
		got := fp13Raw(t, p.Addr, tc.raw)
		fp13WantWin(t, tc.name, got)
	}
}

// TestFP13ForwardedClientsOwnBuckets: behind a trusted balancer (the
// harness connects from 127.0.0.1), every buyer has their own per-IP
// bucket whatever the balancer's spelling of X-Forwarded-For: plain, with
// a port (Azure Application Gateway, IIS ARR), IPv6 with a port, several
// lines, lower-case header names (HTTP/2 front ends). With per_ip burst 1,
// one buy each must win; a client's second buy is 429 (control).
func TestFP13ForwardedClientsOwnBuckets(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Limits:     "{ per_ip: { rate: 0.01, burst: 1 }, per_device: { rate: 1000, burst: 1000 }, per_user: { rate: 1000, burst: 1000 } }",
		Activities: []e2e.Activity{{ID: "fp13x", Stock: 100, Shards: 1}}}.Config(t))
	p.Preheat(t, "fp13x")
	path := "/api/seckill/fp13x/" + e2e.SKU + "/buy"
	for i, xff := range [][]string{
		{"203.0.113.1"},
		{"203.0.113.2:51234"},
		{"[2001:db8:1::1]:443"},
		{"2001:db8:2::1"},
		{"10.9.8.7, 203.0.113.3"},
		{"198.51.100.1", "203.0.113.4"},
		{"203.0.113.5:1", "127.0.0.1"},
	} {
		h := [][2]string{{"X-User-Id", fmt.Sprintf("fp13-x%d", i)}}
		for _, l := range xff {
			h = append(h, [2]string{"X-Forwarded-For", l})
		}
		fp13WantWin(t, fmt.Sprintf("XFF %q", xff), e2e.Do(nil, p.Addr, e2e.Req{URI: path, Header: h}))
	}
	raw := "POST " + path + " HTTP/1.1\r\nhost: shop\r\nx-forwarded-for: 203.0.113.6\r\nx-user-id: fp13-xlc\r\ncontent-length: 0\r\n\r\n"
	fp13WantWin(t, "lower-case names", fp13Raw(t, p.Addr, raw))
	// Control: the first client's bucket is spent.
	got := e2e.Do(nil, p.Addr, e2e.Req{URI: path, Header: [][2]string{{"X-User-Id", "fp13-xctl"}, {"X-Forwarded-For", "203.0.113.1"}}})
	if got.Code != "RATE_LIMITED" {
		t.Errorf("control: a second buy from 203.0.113.1 is %d %s, want 429", got.Status, got.Code)
	}
}

// TestFP13FreshJWTFirstBuyWithinPerIP: identity.user.jwt with per_ip
// { rate: 1, burst: 1 } ("one buy per second per address"). A buyer's very
// first buy, with a valid token this instance has not seen yet, is one
// request: it must not be refused RATE_LIMITED. The first sight of the
// token spends a per_ip token (README, Identity) and the buy's own per-IP
// stage spends another from the same bucket, so a burst of 1 refuses every
// fresh buyer's first click; behind a shared address (NAT, a fleet where
// the token is new to each instance) every first sight halves the budget.
func TestFP13FreshJWTFirstBuyWithinPerIP(t *testing.T) {
	k := jwttest.RSA(t, "k1")
	srv := jwttest.NewServer(t, k)
	f := newFixture(t, func(o *e2e.Options) {
		o.User = fmt.Sprintf("{ jwt: { jwks_url: %q, issuer: %q, audience: %q } }", srv.URL, jwtIss, jwtAud)
		o.Limits = "{ per_ip: { rate: 1, burst: 1 }, per_device: { rate: 1000, burst: 1000 }, per_user: { rate: 1000, burst: 1000 } }"
	})
	got := f.buyAs(actOpen, k.Sign(t, "RS256", jwtClaims("fp13-jwt-alice")), [2]string{"X-Forwarded-For", "203.0.113.50"})
	if got.Code != "WIN" {
		t.Errorf("FALSE POSITIVE: one buy, one valid fresh token, per_ip burst 1: %d %s %s, want the shop's 200", got.Status, got.Code, got.Body)
	}
}

// TestFP13FreshJWTBuyersBehindNATWithinBurst: SPEC's per_ip is "requests
// per second" (rate, burst). Three colleagues behind one office address,
// each with a fresh valid token, send one buy each: three requests within
// a burst of 4. The third is refused 429: every first sight of a token
// spends a second per_ip token from the address's bucket.
func TestFP13FreshJWTBuyersBehindNATWithinBurst(t *testing.T) {
	k := jwttest.RSA(t, "k1")
	srv := jwttest.NewServer(t, k)
	f := newFixture(t, func(o *e2e.Options) {
		o.User = fmt.Sprintf("{ jwt: { jwks_url: %q, issuer: %q, audience: %q } }", srv.URL, jwtIss, jwtAud)
		o.Limits = "{ per_ip: { rate: 0.1, burst: 4 }, per_device: { rate: 1000, burst: 1000 }, per_user: { rate: 1000, burst: 1000 } }"
	})
	for i := 0; i < 3; i++ {
		got := f.buyAs(actOpen, k.Sign(t, "RS256", jwtClaims(fmt.Sprintf("fp13-nat%d", i))), [2]string{"X-Forwarded-For", "203.0.113.60"})
		if got.Code != "WIN" {
			t.Errorf("FALSE POSITIVE: buyer %d of 3 behind one address (per_ip burst 4), one buy each: %d %s %s, want the shop's 200",
				i, got.Status, got.Code, got.Body)
		}
	}
}

// TestFP13QueueModeBrowserBuyKept: queue mode keeps the buyer's request
// for its worker and refuses (400) one it could not send. A browser's buy
// as it is: a few KiB of cookies, a User-Agent with raw UTF-8 (iOS apps
// put the device name there), Accept-Language, sec-ch-ua with quotes, a
// JSON body. It must be QUEUED and then sent.
func TestFP13QueueModeBrowserBuyKept(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "fp13qm", Stock: 10, Shards: 1, Mode: "queue"}}}.Config(t))
	p.Preheat(t, "fp13qm")
	p.StartQueue(t)
	h := [][2]string{
		{"X-User-Id", "fp13-qm"},
		{"User-Agent", "ShopApp/5.2 (张三的iPhone; iOS 17.4; Scale/3.00)"},
		{"Accept-Language", "zh-CN,zh;q=0.9,en;q=0.8"},
		{"sec-ch-ua", `"Chromium";v="124", "Google Chrome";v="124", "Not-A.Brand";v="99"`},
		{"Cookie", "_ga=GA1.1.1; Theme=dark; theme=light; cart=" + strings.Repeat("x", 3000)},
		{"Content-Type", "application/json;charset=UTF-8"},
		{"X_Forwarded_Proto", "https"},
	}
	got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/fp13qm/" + e2e.SKU + "/buy", Header: h, Body: []byte(`{"note":"gift"}`)})
	if got.Code != "QUEUED" {
		t.Fatalf("FALSE POSITIVE: a browser's buy in queue mode: %d %s %s, want 202 QUEUED", got.Status, got.Code, got.Body)
	}
	e2e.Eventually(t, 10*time.Second, "queued buy sent to the shop", func() bool { return shop.SeenBuy("fp13-qm") })
}

// TestFP13FreshSessionBuyersBehindNATWithinBurst: as the JWT case, with
// identity.user.session: a session not in the cache spends one per_ip
// token for its look-up (README) on top of the buy's own, so three buyers
// behind one address, one buy each, exceed a per_ip burst of 4.
func TestFP13FreshSessionBuyersBehindNATWithinBurst(t *testing.T) {
	w := startWhoamiShop(t, nil)
	f := sessionFixture(t, w, ", timeout: 2s", func(o *e2e.Options) {
		o.Limits = "{ per_ip: { rate: 0.1, burst: 4 }, per_device: { rate: 1000, burst: 1000 }, per_user: { rate: 1000, burst: 1000 } }"
	})
	for i := 0; i < 3; i++ {
		got := e2e.Do(nil, f.p.Addr, e2e.Req{URI: "/api/seckill/" + actOpen + "/" + e2e.SKU + "/buy",
			Header: [][2]string{{"Cookie", fmt.Sprintf("theme=dark; sid=u:fp13-s%d", i)}, {"X-Forwarded-For", "203.0.113.70"}}})
		if got.Code != "WIN" {
			t.Errorf("FALSE POSITIVE: buyer %d of 3 behind one address (per_ip burst 4), one buy each: %d %s %s, want the shop's 200",
				i, got.Status, got.Code, got.Body)
		}
	}
}
