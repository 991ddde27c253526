package e2e_test

import (
	"testing"
)

// TestRT10HTTPForeignVersionBuyNotLeftPending: fasthttp accepts any
// "HTTP/d.d" on the request line (HTTP/2.0, HTTP/3.0, HTTP/0.9) and the
// proxy forwards the buyer's version to the shop as it came — RFC 9110
// §6.2: an intermediary MUST send its own HTTP-version in forwarded
// messages. A Go shop (as nginx and most servers) answers such a request
// line 505 before any handler runs, so the shop never saw the buy; with
// verify.url a 5xx is an unknown outcome, so each such buy locks a unit
// "pending" until pending_timeout and the buyer is told 504
// UPSTREAM_TIMEOUT with a token. One request per identity holds a unit out
// of the sale the way decisions §31 fixed for requests fasthttp would not
// write. Want (README "What the shop gets is always sendable"): the buy is
// either refused at the front with nothing reserved, or forwarded as
// HTTP/1.1 and placed.
func TestRT10HTTPForeignVersionBuyNotLeftPending(t *testing.T) {
	f := newFixture(t)
	protos := []string{"HTTP/2.0", "HTTP/3.0", "HTTP/0.9"}
	for i, proto := range protos {
		user := "ver" + string(rune('a'+i))
		rs := rt10httpSend(t, f.p.Addr, rt10httpBuy(actOpen, user, proto, "Connection: close\r\n", "{}"), 1)
		if len(rs) == 0 || rs[0].Err != nil {
			t.Fatalf("%s: no answer: %+v", proto, rs)
		}
		r := rs[0]
		t.Logf("%s buy: %d %s", proto, r.Status, r.Body)
		if r.Code == "UPSTREAM_TIMEOUT" {
			t.Errorf("%s buy: %d %s — the shop refused the request line (505) before any handler; the unit is held pending for nothing", proto, r.Status, r.Body)
		}
	}
	k := f.p.SKUStatus(t, actOpen)
	if k.Pending != 0 {
		t.Errorf("after %d buys the shop could not read: %+v, want pending 0 (refused, or placed and confirmed)", len(protos), k)
	}
	if n := len(f.shop.Orders()); int64(n) != k.Confirmed {
		t.Errorf("shop orders %d, confirmed %d", n, k.Confirmed)
	}
}
