package e2e_test

import (
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// TestRT10HTTPConnectionOptionCannotStripProxyHeaders: SPEC §5 — a winner
// reaches the shop with X-Seckill-Token, -User, ... and
// X-Seckill-Signature. In sync mode the proxy forwards the buyer's
// Connection header as it came (queue mode drops hop-by-hop fields,
// decisions §32), so a buyer can name the proxy's own headers as
// connection options: "Connection: X-Seckill-Token, X-Seckill-Signature".
// Every RFC-conforming hop between the proxy and the shop (a gateway, an
// ingress, Apache mod_proxy, Go's httputil.ReverseProxy — RFC 9110
// §7.6.1: it MUST remove the fields the Connection header names) then
// deletes the proxy's headers. Here the shop sits behind
// httputil.ReverseProxy: the winner arrives with neither token nor
// signature, the shop takes it for an ordinary request, and the proxy
// confirms a reservation the shop has no order for (status confirmed 1,
// shop orders 0). Want: the proxy removes the buyer's Connection options
// (and the hop-by-hop fields) before forwarding, so the shop gets the
// signed winner.
func TestRT10HTTPConnectionOptionCannotStripProxyHeaders(t *testing.T) {
	shop := e2e.StartShop(t)
	u, _ := url.Parse(shop.URL)
	gw := httptest.NewServer(httputil.NewSingleHostReverseProxy(u))
	t.Cleanup(gw.Close)
	redis := e2e.StartRedis(t)
	o := e2e.Options{Redis: redis.Addrs, ShopURL: gw.URL,
		Activities: []e2e.Activity{{ID: "hop", Stock: 10, Shards: 1}}}
	p := e2e.StartProxy(t, o.Config(t))
	p.Preheat(t, "hop")

	// Control: a plain buy through the gateway is placed, signed.
	wantWin(t, e2e.Buy(p.Addr, "hop", "alice"))

	rs := rt10httpSend(t, p.Addr, rt10httpBuy("hop", "mallory", "HTTP/1.1",
		"Connection: keep-alive, X-Seckill-Token, X-Seckill-Signature, X-Seckill-User\r\n", "{}"), 1)
	if len(rs) == 0 || rs[0].Err != nil {
		t.Fatalf("mallory: no answer: %+v", rs)
	}
	t.Logf("mallory: %d %s", rs[0].Status, rs[0].Body)
	var got *e2e.Order
	for _, ord := range shop.Orders() {
		if ord.User == "mallory" {
			ord := ord
			got = &ord
		}
	}
	if got == nil || !got.SigOK {
		for _, r := range shop.Requests() {
			if strings.Contains(r.URI, "/hop/") && r.Header.Get("X-User-Id") == "mallory" {
				t.Logf("the shop got mallory's buy with X-Seckill-Token %q, X-Seckill-Signature %q, X-Seckill-User %q",
					r.Header.Get("X-Seckill-Token"), r.Header.Get("X-Seckill-Signature"), r.Header.Get("X-Seckill-User"))
			}
		}
		t.Errorf("mallory's winner reached the shop without the proxy's headers (order %+v): her Connection header named them", got)
	}
	k := p.SKUStatus(t, "hop")
	if n := int64(len(shop.Orders())); k.Confirmed != n {
		t.Errorf("status %+v: confirmed %d, but the shop holds %d orders", k, k.Confirmed, n)
	}
}
