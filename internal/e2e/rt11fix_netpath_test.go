package e2e_test

import (
	"bufio"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// rt11fixRawTarget sends one request with a raw request-target (any bytes
// but space, CR, LF) and reads the answer.
func rt11fixRawTarget(t *testing.T, addr, target, user string) e2e.Resp {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	req := "POST " + target + " HTTP/1.1\r\nHost: shop\r\nX-User-Id: " + user + "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatalf("write: %v", err)
	}
	var resp fasthttp.Response
	if err := resp.Read(bufio.NewReader(c)); err != nil {
		return e2e.Resp{Err: err}
	}
	return e2e.ReadResp(&resp)
}

// rt11fixWHATWGPath is the path the WHATWG URL parser (Node's
// new URL(req.url, "http://" + host), Deno, Bun, undici-based routers) gives
// a request-target against an http: base: it removes every ASCII tab and
// newline, and for special schemes reads '\' as '/', before parsing; what
// is left is parsed as a URI reference (url.Parse agrees for these inputs).
func rt11fixWHATWGPath(target string) (host, path string) {
	s := strings.NewReplacer("\t", "", "\n", "", "\r", "", `\`, "/").Replace(target)
	u, err := url.Parse(s)
	if err != nil {
		return "", ""
	}
	return u.Host, u.Path
}

// TestRT11FixNetworkPathSpelledWithBackslash: the fix of round 10
// (proxy/route.go networkPathBuy) refuses a target "//host/<buy path>"
// because URL parsers in shops read it as host + buy path (its own test
// names the WHATWG parser, new URL(req.url, base) in a Node shop). The check
// looks only for two raw '/' bytes. The WHATWG parser reads '\' as '/' in
// http(s) URLs and drops tabs, so "/\evil.example/api/seckill/open/sku1/buy"
// and "//evil.example\api/seckill/open/sku1/buy" (the '\' ends the
// authority) are, to a Node shop, host evil.example and path
// /api/seckill/open/sku1/buy — the buy handler — while the proxy reads a
// path outside every buy prefix and passes it to the shop untouched, with
// no admission and no X-Seckill-Token (SPEC §9: no buy reaches the shop
// without an admission decision). Want: refused 400 like "//host/…".
func TestRT11FixNetworkPathSpelledWithBackslash(t *testing.T) {
	f := newFixture(t)
	targets := []string{
		"//evil.example/api/seckill/open/sku1/buy", // the fixed spelling, for reference
		`/\evil.example/api/seckill/open/sku1/buy`,
		`//evil.example\api/seckill/open/sku1/buy`,
		`/\evil.example\api\seckill\open\sku1\buy`,
		`/api\seckill/open/sku1/buy`, // no host: the '\' in the prefix itself
		`/api\seckill\open\sku1\buy`,
		`\\evil.example/api/seckill/open/sku1/buy`,
		`\/evil.example/api/seckill/open/sku1/buy`,
		"/\t/evil.example/api/seckill/open/sku1/buy",
	}
	for i, target := range targets {
		user := "rt11np" + string(rune('a'+i))
		r := rt11fixRawTarget(t, f.p.Addr, target, user)
		t.Logf("POST %q: %d %.120s (err %v)", target, r.Status, r.Body, r.Err)
	}
	for _, r := range f.shop.Requests() {
		if r.Header.Get("X-Seckill-Token") != "" {
			continue
		}
		host, path := rt11fixWHATWGPath(r.URI)
		if path == "/api/seckill/open/sku1/buy" {
			t.Errorf("the shop got %s %q without admission: to the WHATWG URL parser its path is the buy route (host %q)", r.Method, r.URI, host)
		}
	}
}
