package e2e_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// TestRT10HTTPForwardedFramingIsUnambiguous: request shapes whose framing
// a lax parser might read differently from fasthttp (a folded
// Content-Length, a zero-padded one, Transfer-Encoding: identity beside a
// length, a header name with a space in it, chunk extensions, a GET with a
// body, a buy pipelined behind each). The shop here records the exact
// bytes the proxy sends and parses them with net/http: every request the
// proxy forwards must parse as exactly one request with the body the
// client meant, and a buy written inside another request's body must never
// appear as a request of its own.
func TestRT10HTTPForwardedFramingIsUnambiguous(t *testing.T) {
	f, shop := rt10httpFixture(t)
	smug := rt10httpBuy(actOpen, "fr-smuggled", "HTTP/1.1", "", "{}")
	cases := []struct {
		name, raw, body string
		closes          bool // CL beside TE: answered, then the connection closed (RFC 9112 §6.3)
	}{
		{"folded-cl", "POST /account HTTP/1.1\r\nHost: x\r\nX-A: a\r\n\tContent-Length: 99\r\nContent-Length: 5\r\n\r\nhello", "hello", false},
		{"zero-padded-cl", "POST /account HTTP/1.1\r\nHost: x\r\nContent-Length: 005\r\n\r\nhello", "hello", false},
		{"te-identity-cl", "POST /account HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\nContent-Length: 5\r\n\r\nhello", "hello", true},
		{"space-in-te-name", "POST /account HTTP/1.1\r\nHost: x\r\nTransfer Encoding: chunked\r\nContent-Length: 5\r\n\r\nhello", "hello", false},
		{"chunk-ext", "POST /account HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n005;foo=bar;q=\"x y\"\r\nhello\r\n0000;z\r\n\r\n", "hello", false},
		{"get-with-body", "GET /account HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", "hello", false},
		{"body-is-a-buy", "POST /account HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(len(smug)) + "\r\n\r\n" + smug, smug, false},
		{"chunked-body-is-a-buy", "POST /account HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + strconv.FormatInt(int64(len(smug)), 16) + "\r\n" + smug + "\r\n0\r\n\r\n", smug, false},
	}
	want := 0
	for _, c := range cases {
		user := "fr-" + c.name
		rs := rt10httpSend(t, f.p.Addr, c.raw+rt10httpBuy(actOpen, user, "HTTP/1.1", "Connection: close\r\n", "{}"), 2)
		if !c.closes {
			want++
		}
		if len(rs) < 2 || rs[0].Err != nil || rs[0].Header["X-Shop"] != "pass" || (rs[1].Code != "WIN") != c.closes {
			t.Errorf("%s: answers %+v, want the shop's answer, then a win", c.name, rs)
			continue
		}
		if !strings.Contains(string(rs[0].Body), `"body":`+rt10httpJSONString(c.body)) {
			t.Errorf("%s: the shop read the body as %s, want %q", c.name, rs[0].Body, c.body)
		}
	}
	if errs := shop.ParseErrors(); len(errs) > 0 {
		t.Errorf("the shop could not parse what the proxy sent: %v\n%s", errs, shop.Raw())
	}
	wins := 0
	for _, r := range shop.Requests() {
		tok := r.Header.Get("X-Seckill-Token")
		if strings.Contains(r.URI, "/buy") && tok == "" {
			t.Errorf("the shop got %s %s without admission", r.Method, r.URI)
		}
		if r.Header.Get("X-Seckill-User") == "fr-smuggled" || r.Header.Get("X-User-Id") == "fr-smuggled" {
			t.Errorf("a buy carried in a body became a request at the shop: %+v", r)
		}
		if tok != "" {
			wins++
		}
	}
	if wins != want {
		t.Errorf("the shop got %d buys, want %d", wins, want)
	}
	f.p.WantStock(t, actOpen, 100-int64(want), 0, int64(want))
}

// rt10httpJSONString is s as a JSON string, as the raw shop's echo writes it.
func rt10httpJSONString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
