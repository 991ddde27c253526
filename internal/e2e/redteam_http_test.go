package e2e_test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// rtTee is a TCP forwarder in front of the test shop that records every
// byte the proxy sends upstream, so tests can see the request line,
// headers and framing exactly as the shop receives them.
type rtTee struct {
	addr string
	mu   sync.Mutex
	raw  bytes.Buffer
}

func startTee(t *testing.T, shopURL string) *rtTee {
	t.Helper()
	target := strings.TrimPrefix(shopURL, "http://")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	tee := &rtTee{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer u.Close()
				go func() { _, _ = io.Copy(c, u); c.Close() }()
				buf := make([]byte, 32<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						tee.mu.Lock()
						tee.raw.Write(buf[:n])
						tee.mu.Unlock()
						if _, werr := u.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return tee
}

func (tee *rtTee) bytes() string {
	tee.mu.Lock()
	defer tee.mu.Unlock()
	return tee.raw.String()
}

// rtFixture is the standard fixture with the shop behind a tee.
func rtFixture(t *testing.T, edit ...func(*e2e.Options)) (*fixture, *rtTee) {
	t.Helper()
	var tee *rtTee
	f := newFixture(t, append([]func(*e2e.Options){func(o *e2e.Options) {
		tee = startTee(t, o.ShopURL)
		o.ShopURL = "http://" + tee.addr
	}}, edit...)...)
	return f, tee
}

// rtRaw writes raw bytes on one connection and reads every answer until
// the proxy closes it or the deadline passes.
func rtRaw(t *testing.T, addr, raw string, answers int) []e2e.Resp {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write([]byte(raw)); err != nil {
		t.Fatalf("write: %v", err)
	}
	br := bufio.NewReader(c)
	var out []e2e.Resp
	for i := 0; i < answers; i++ {
		var resp fasthttp.Response
		if err := resp.Read(br); err != nil {
			out = append(out, e2e.Resp{Err: err})
			break
		}
		out = append(out, e2e.ReadResp(&resp))
	}
	return out
}

// rtShopGotBuyOf reports whether the shop received any request carrying
// X-Seckill-User: user (a buy forwarded by the proxy).
func rtShopGotBuyOf(shop *e2e.Shop, user string) bool {
	for _, r := range shop.Requests() {
		if r.Header.Get("X-Seckill-User") == user {
			return true
		}
	}
	return false
}

// TestRedTeamHTTPUnsendableWinnerIsNotLeftPending: SPEC §5 — a winner whose
// request could not be sent to the shop is a definite no: the reservation
// is released and the stock returned; only a request the shop may have
// received stays pending (UPSTREAM_TIMEOUT). Two ordinary request shapes
// are admitted and then fail inside the proxy's HTTP client before a byte
// is written: an absolute-form target with the https scheme (the upstream
// is http: fasthttp's HostClient refuses the scheme mismatch), and an
// HTTP/1.0 request without Host (fasthttp refuses to write a request
// without a host). Each locks a unit as "pending" with the shop never
// having seen it: on a 1-unit SKU a legitimate buyer is then told SOLD_OUT
// while the shop holds no order.
func TestRedTeamHTTPUnsendableWinnerIsNotLeftPending(t *testing.T) {
	for _, tc := range []struct{ name, raw string }{
		{"absolute-form https target", "POST https://shop.example/api/seckill/tiny/sku1/buy HTTP/1.1\r\nHost: shop.example\r\nX-User-Id: mallory\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"},
		{"HTTP/1.0 without Host", "POST /api/seckill/tiny/sku1/buy HTTP/1.0\r\nX-User-Id: mallory\r\nContent-Length: 0\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			rs := rtRaw(t, f.p.Addr, tc.raw, 1)
			if len(rs) == 0 || rs[0].Err != nil {
				t.Fatalf("no answer: %+v", rs)
			}
			r := rs[0]
			if rtShopGotBuyOf(f.shop, "mallory") {
				// Forwarded: then it must have been settled by the shop's answer.
				f.p.WantStock(t, actTiny, 0, 0, 1)
				return
			}
			// Never sent: the outcome is known, nothing may stay held.
			if r.Code == "UPSTREAM_TIMEOUT" {
				t.Errorf("answered %d %s for a buy the shop never received (outcome is known: not sent)", r.Status, r.Body)
			}
			k := f.p.SKUStatus(t, actTiny)
			if k.Pending != 0 || k.Remaining != 1 {
				t.Errorf("shop never got the buy, yet stock is %+v; want remaining 1, pending 0 (SPEC §5: released, stock returned)", k)
			}
			// The one unit must still be on sale for someone else.
			if b := f.buy(actTiny, "bob"); b.Code != "WIN" {
				t.Errorf("bob after mallory's unsent buy: %d %s, want a win (the shop holds %d orders)", b.Status, b.Body, len(f.shop.Orders()))
			}
		})
	}
}

// TestRedTeamHTTPTrailerCannotCarryOrDisplaceSeckillHeaders: SPEC §5 —
// "Any X-Seckill-* header sent by a client is removed before forwarding, on
// every route", and a winner reaches the shop with X-Seckill-Token, -User,
// -Sku ... and a signature over them. A chunked request may announce trailer
// fields (Trailer: X-Seckill-User) and send them after the body. fasthttp
// keeps trailer fields apart from the header (where the proxy strips
// X-Seckill-*) and writes the proxy's own headers whose names are announced
// into the trailer section, so the shop got the client's values and a
// winner without its token in the header. Now a request that announces
// trailers, or whose body (read before it is judged) carries any, is refused
// 400 BAD_REQUEST on every route, reserving nothing; an ordinary request's
// streamed body may still end in unannounced fields, which reach the shop
// in the trailer section only, never in its header.
func TestRedTeamHTTPTrailerCannotCarryOrDisplaceSeckillHeaders(t *testing.T) {
	f, tee := rtFixture(t)
	wantRefused := func(what string, r e2e.Resp) {
		t.Helper()
		if r.Err != nil || r.Status != 400 || r.Code != "BAD_REQUEST" {
			t.Errorf("%s: %d %s %v, want 400 BAD_REQUEST", what, r.Status, r.Body, r.Err)
		}
	}

	// (a) ordinary route announcing trailers: refused; the connection goes on.
	pass := "POST /account HTTP/1.1\r\nHost: shop\r\nTransfer-Encoding: chunked\r\nTrailer: X-Seckill-User, X-Seckill-Token\r\n\r\n" +
		"3\r\nabc\r\n0\r\nX-Seckill-User: forged-trailer-user\r\nX-Seckill-Token: forged-trailer-token\r\n\r\n"
	rs := rtRaw(t, f.p.Addr, pass+"GET /_seckill/time HTTP/1.1\r\nHost: shop\r\nConnection: close\r\n\r\n", 2)
	if len(rs) != 2 || rs[1].Status != 200 {
		t.Fatalf("pass-through with trailers, then a request on the same connection: %+v", rs)
	}
	wantRefused("ordinary request announcing trailers", rs[0])

	// (b) buys announcing the proxy's own header names as trailers, and (c)
	// a buy whose body ends in an unannounced one: refused, nothing held.
	for _, tc := range []struct{ user, announce string }{
		{"tr-user", "Trailer: X-Seckill-User, X-Seckill-Sku\r\n"},
		{"tr-token", "Trailer: X-Seckill-Token\r\n"},
		{"tr-unannounced", ""},
	} {
		raw := "POST /api/seckill/open/sku1/buy HTTP/1.1\r\nHost: shop\r\nX-User-Id: " + tc.user +
			"\r\nTransfer-Encoding: chunked\r\n" + tc.announce + "Connection: close\r\n\r\n" +
			"2\r\n{}\r\n0\r\nX-Seckill-User: forged-" + tc.user + "\r\n\r\n"
		rs := rtRaw(t, f.p.Addr, raw, 1)
		if len(rs) == 0 {
			t.Fatalf("%s: no answer", tc.user)
		}
		wantRefused("buy "+tc.user, rs[0])
		if rtShopGotBuyOf(f.shop, tc.user) {
			t.Errorf("%s: the shop got the buy", tc.user)
		}
	}
	f.p.WantStock(t, actOpen, 100, 0, 0)

	// (d) an ordinary request whose streamed body ends in an unannounced
	// field: the body is on its way when the field arrives. Whatever the
	// proxy could do then, the shop's header never holds the value.
	big := strings.Repeat("x", 64<<10)
	raw := "POST /account HTTP/1.1\r\nHost: shop\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
		strconv.FormatInt(int64(len(big)), 16) + "\r\n" + big + "\r\n0\r\nX-Seckill-User: forged-streamed\r\n\r\n"
	if rs := rtRaw(t, f.p.Addr, raw, 1); len(rs) == 0 || rs[0].Err != nil {
		t.Fatalf("streamed pass-through: %+v", rs)
	}
	for _, r := range f.shop.Requests() {
		if r.Header.Get("X-Seckill-User") == "forged-streamed" {
			t.Errorf("the shop's header holds the client's trailer value: %v", r.Header)
		}
	}

	time.Sleep(100 * time.Millisecond) // the tee copies asynchronously
	got := tee.bytes()
	for _, forged := range []string{"forged-trailer-user", "forged-trailer-token", "forged-tr-user", "forged-tr-token", "forged-tr-unannounced"} {
		if i := strings.Index(got, forged); i >= 0 {
			t.Errorf("the shop received the client's trailer value %q: ...%q", forged, got[max(0, i-120):i+len(forged)])
		}
	}
}

// TestRedTeamHTTPSpoofedXFFWithoutTrust: with trusted_proxies: [] nobody's
// X-Forwarded-For is believed (README: "X-Forwarded-For is read only from
// trusted_proxies"), so a client rotating the header (one line, several
// lines, IPv6, garbage) stays one address under per_ip.
func TestRedTeamHTTPSpoofedXFFWithoutTrust(t *testing.T) {
	redis, shop := e2e.StartRedis(t), e2e.StartShop(t)
	o := e2e.Options{Redis: redis.Addrs, ShopURL: shop.URL,
		Limits:     "{ per_ip: { rate: 1, burst: 2 }, per_device: { rate: 1000000, burst: 1000000 }, per_user: { rate: 1000000, burst: 1000000 } }",
		Activities: []e2e.Activity{{ID: actOpen, Stock: 100}}}
	cfg, err := config.Parse("rt.yaml", []byte(o.YAML(t)+"trusted_proxies: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := e2e.StartProxy(t, cfg)
	p.Preheat(t, actOpen)
	admitted := 0
	for i := 0; i < 20; i++ {
		n := strconv.Itoa(i + 1)
		r := e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/open/sku1/buy", Header: [][2]string{
			{"X-User-Id", "xff-" + n},
			{"X-Forwarded-For", "198.18.0." + n},
			{"X-Forwarded-For", "2001:db8:" + n + "::1, 203.0.113." + n},
			{"X-Real-IP", "198.19.0." + n},
			{"Forwarded", "for=198.20.0." + n},
		}})
		switch r.Code {
		case "WIN":
			admitted++
		case "RATE_LIMITED":
		default:
			t.Fatalf("buy %d: %d %s", i, r.Status, r.Body)
		}
	}
	if admitted > 3 {
		t.Errorf("%d of 20 buys admitted from one peer with rotated X-Forwarded-For and no trusted proxy, want <= 3", admitted)
	}
}

// TestRedTeamHTTPRequestShapesHold: request shapes a scalper may try that
// must either be decided by admission (the shop gets only winners, on the
// canonical path, signed) or refused by the proxy — never a buy-handler hit
// without X-Seckill-Token. Absolute-form (http), HTTP/1.0 with Host,
// Expect: 100-continue, fragments, pipelining a buy behind a pass request
// with a body, an oversized chunked buy followed by a pipelined request,
// CL+TE, duplicate Content-Length, unknown transfer codings, HEAD/OPTIONS/
// CONNECT/lower-case method, obs-fold of a forged header.
func TestRedTeamHTTPRequestShapesHold(t *testing.T) {
	f, tee := rtFixture(t)
	const tail = "GET /_seckill/time HTTP/1.1\r\nHost: shop\r\nConnection: close\r\n\r\n"
	buy := func(method, target, proto, user, extra string) string {
		return method + " " + target + " " + proto + "\r\nHost: shop\r\nX-User-Id: " + user + "\r\n" + extra + "Content-Length: 0\r\n\r\n"
	}
	wins := map[string]string{ // user -> raw
		"abs":  buy("POST", "http://evil.example/api/seckill/open/sku1/buy", "HTTP/1.1", "abs", ""),
		"h10":  buy("POST", "/api/seckill/open/sku1/buy", "HTTP/1.0", "h10", ""),
		"frag": buy("POST", "/api/seckill/open/sku1/buy#x", "HTTP/1.1", "frag", ""),
		"pipe": "POST /account HTTP/1.1\r\nHost: shop\r\nContent-Length: 5\r\n\r\nhello" + buy("POST", "/api/seckill/open/sku1/buy", "HTTP/1.1", "pipe", ""),
		// CL and TE: chunked framing wins (RFC 9112 §6.3), re-framed upstream.
		"clte": "POST /api/seckill/open/sku1/buy HTTP/1.1\r\nHost: shop\r\nX-User-Id: clte\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"exp":  "POST /api/seckill/open/sku1/buy HTTP/1.1\r\nHost: shop\r\nX-User-Id: exp\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}",
	}
	for user, raw := range wins {
		won := false
		for _, r := range rtRaw(t, f.p.Addr, raw+tail, 3) {
			won = won || r.Code == "WIN"
		}
		if !won {
			t.Errorf("%s: no win", user)
		}
	}
	refused := map[string]string{ // raw -> want status
		buy("OPTIONS", "/api/seckill/open/sku1/buy", "HTTP/1.1", "m2", "Connection: close\r\n"):                                                                                 "405",
		buy("CONNECT", "/api/seckill/open/sku1/buy", "HTTP/1.1", "m3", "Connection: close\r\n"):                                                                                 "405",
		buy("post", "/api/seckill/open/sku1/buy", "HTTP/1.1", "m4", "Connection: close\r\n"):                                                                                    "405",
		"POST /api/seckill/open/sku1/buy HTTP/1.1\r\nHost: shop\r\nX-User-Id: m6\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n":                                             "400",
		"POST /api/seckill/open/sku1/buy HTTP/1.1\r\nHost: shop\r\nX-User-Id: m7\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n":                                          "400",
		"POST /api/seckill/open/sku1/buy HTTP/1.1\r\nHost: shop\r\nX-User-Id: m8\r\nTransfer-Encoding: chunked\r\n\r\n11170\r\n" + strings.Repeat("a", 70000) + "\r\n0\r\n\r\n": "400",
	}
	for raw, want := range refused {
		rs := rtRaw(t, f.p.Addr, raw, 1)
		if len(rs) == 0 || rs[0].Err != nil || strconv.Itoa(rs[0].Status) != want {
			t.Errorf("%.60q: got %+v, want %s", raw, rs, want)
		}
	}
	// HEAD (no body in the answer: read the status line only).
	if c, err := net.DialTimeout("tcp", f.p.Addr, 2*time.Second); err == nil {
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		_, _ = c.Write([]byte(buy("HEAD", "/api/seckill/open/sku1/buy", "HTTP/1.1", "m1", "Connection: close\r\n")))
		b, _ := io.ReadAll(c)
		c.Close()
		if !strings.HasPrefix(string(b), "HTTP/1.1 405 ") {
			t.Errorf("HEAD on the buy route: %.60q, want 405", b)
		}
	}
	// A forged header folded into another (obs-fold) stays a value of that header.
	rtRaw(t, f.p.Addr, "GET /account HTTP/1.1\r\nHost: shop\r\nX-Foo: a\r\n X-Seckill-User: folded\r\nConnection: close\r\n\r\n", 1)
	for _, r := range f.shop.Requests() {
		if r.Header.Get("X-Seckill-User") == "folded" {
			t.Errorf("obs-fold carried a forged X-Seckill-User to the shop")
		}
		if r.Header.Get("X-Seckill-Token") == "" && strings.Contains(strings.ToLower(r.URI), "buy") {
			t.Errorf("shop got %s %s without X-Seckill-Token", r.Method, r.URI)
		}
	}
	for _, o := range f.shop.Orders() {
		if !o.SigOK || o.Target != "/api/seckill/open/sku1/buy" {
			t.Errorf("order %+v: want a verifying signature on the canonical target", o)
		}
	}
	f.p.WantStock(t, actOpen, 100-int64(len(wins)), 0, int64(len(wins)))
	_ = tee
}
