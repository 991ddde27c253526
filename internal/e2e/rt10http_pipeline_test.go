package e2e_test

import (
	"strconv"
	"strings"
	"testing"
)

// TestRT10HTTPPipelinedBuysAnsweredInOrder: several buys and refusals
// pipelined on one connection, some of the refused requests carrying a
// whole buy request as their body (refused before their body is read: a
// public endpoint's 405, a buy path's 405, an unsafe path's 400). Every
// request gets exactly one answer, in order; each buy is decided once; a
// buy inside a body is never taken for a request (neither by the proxy nor
// by the shop); the shop gets exactly the winners, signed.
func TestRT10HTTPPipelinedBuysAnsweredInOrder(t *testing.T) {
	f := newFixture(t)
	buy := func(user, extra string) string {
		return rt10httpBuy(actOpen, user, "HTTP/1.1", extra, "{}")
	}
	withBody := func(line, body string) string {
		return line + "\r\nHost: shop.example\r\nX-User-Id: carrier\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
	type want struct {
		status int
		code   string
	}
	steps := []struct {
		raw string
		want
	}{
		{buy("pl-alice", ""), want{200, "WIN"}},
		{buy("pl-bob", "X-Request-Id: rid-bob\r\n"), want{200, "WIN"}},
		{buy("pl-alice", ""), want{409, "ALREADY_PURCHASED"}},
		{withBody("GET /_seckill/time HTTP/1.1", buy("pl-smug1", "")), want{200, ""}},
		{withBody("PUT /api/seckill/open/sku1/buy HTTP/1.1", buy("pl-smug2", "")), want{405, ""}},
		{withBody("POST /api/seckill/open/sku1%2Fbuy HTTP/1.1", buy("pl-smug3", "")), want{400, "BAD_REQUEST"}},
		{withBody("POST /_seckill/time HTTP/1.1", buy("pl-smug4", "")), want{405, ""}},
		{buy("pl-bob", "X-Request-Id: rid-bob\r\n"), want{200, ""}}, // a replay of bob's request id: the same answer
		{buy("pl-carol", "Connection: close\r\n"), want{200, "WIN"}},
	}
	var raw strings.Builder
	for _, s := range steps {
		raw.WriteString(s.raw)
	}
	rs := rt10httpSend(t, f.p.Addr, raw.String(), len(steps)+1)
	if n := len(rs); n > 0 && rs[n-1].Err != nil {
		rs = rs[:n-1] // the connection closed after the last answer
	}
	if len(rs) != len(steps) {
		t.Errorf("%d requests pipelined, %d answers (want %d, then the connection closed)", len(steps), len(rs), len(steps))
	}
	var bobTok string
	for i, s := range steps {
		if i >= len(rs) {
			break
		}
		r := rs[i]
		if r.Err != nil || r.Status != s.status || (s.code != "" && r.Code != s.code) {
			t.Errorf("answer %d: %d %s %q (err %v), want %d %s", i, r.Status, r.Code, r.Body, r.Err, s.status, s.code)
		}
		if i == 1 {
			bobTok = r.Token()
		}
		if i == 7 && r.Token() != bobTok {
			t.Errorf("bob's replay: token %q, want %q", r.Token(), bobTok)
		}
	}
	users := map[string]int{}
	for _, b := range f.shop.Buys() {
		users[b.User]++
		if !b.SigOK {
			t.Errorf("buy of %s at the shop: signature did not verify: %v", b.User, b.SigErr)
		}
	}
	if len(users) != 3 || users["pl-alice"] != 1 || users["pl-bob"] != 1 || users["pl-carol"] != 1 {
		t.Errorf("the shop got buys %v, want pl-alice, pl-bob, pl-carol once each", users)
	}
	for _, r := range f.shop.Requests() {
		if strings.Contains(string(r.Body), "pl-smug") || strings.Contains(r.Header.Get("X-User-Id"), "pl-smug") {
			t.Errorf("a buy carried in a refused request's body reached the shop: %s %s", r.Method, r.URI)
		}
	}
	f.p.WantStock(t, actOpen, 97, 0, 3)
}
