package e2e_test

import (
	"strings"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// TestRT10FleetForgedHeadersOnBundleAndSingle: a client's own X-Seckill-*
// headers (an items list, a signature, a token from another activity's
// winner, another user) never reach the shop on either route of an
// activity with bundles, on any instance; every order the shop gets is
// signed by the proxy for what Redis reserved, and a token replayed in a
// buy gives the replayer nothing of its owner's.
func TestRT10FleetForgedHeadersOnBundleAndSingle(t *testing.T) {
	env := rt10fleetStart(t, false, 2, func(o *e2e.Options) {
		o.Activities = []e2e.Activity{
			{ID: "rt10t", SKUs: rt10fleetSKUs(10, "a", "b"), Shards: 2, PerUserLimit: 3, BundleRoute: rt10fleetBundleRoute, QtyFrom: "query:qty"},
			{ID: "rt10u", Stock: 10, Shards: 2},
		}
	})
	p1, p2 := env.proxies[0], env.proxies[1]
	other := rt10fleetBuy(p1.Addr, "rt10u", e2e.SKU, "victim")
	if other.Code != "WIN" {
		t.Fatalf("victim: %d %s", other.Status, other.Body)
	}
	victimTok := other.Token()
	before := len(env.shop.Requests())
	forged := [][2]string{
		{"X-Seckill-Items", "a:100,b:100"},
		{"x-seckill-items", "a:50"},
		{"X-Seckill-Token", victimTok},
		{"X-Seckill-User", "victim"},
		{"X-Seckill-Qty", "99"},
		{"X-Seckill-Sku", "*"},
		{"X-Seckill-Activity", "rt10u"},
		{"X-Seckill-Signature", "t=1,k=default,v1=00,v2=00"},
		{"X_Seckill_Items", "a:77"},
	}
	h := func(user string, extra ...[2]string) [][2]string {
		out := append([][2]string{{"X-User-Id", user}}, forged...)
		return append(out, extra...)
	}
	// A single buy of qty 2 with forged items.
	s := e2e.Do(nil, p2.Addr, e2e.Req{URI: "/api/seckill/rt10t/a/buy?qty=2", Header: h("mallory")})
	if s.Code != "WIN" {
		t.Fatalf("single: %d %s", s.Status, s.Body)
	}
	// A bundle with forged items.
	b := e2e.Do(nil, p1.Addr, e2e.Req{URI: "/api/seckill/rt10t/bundle", Body: []byte(`{"items":[{"sku":"b","qty":1}]}`),
		Header: h("mallory2", [2]string{"Content-Type", "application/json"})})
	if b.Code != "WIN" {
		t.Fatalf("bundle: %d %s", b.Status, b.Body)
	}
	if s.Token() == victimTok || b.Token() == victimTok {
		t.Fatalf("a buyer got the victim's token back")
	}
	orders := env.shop.Orders()
	so, ok := orders[s.Token()]
	if !ok || so.Items != "" || so.Qty != "2" || so.SKU != "a" || so.User != "mallory" || so.Activity != "rt10t" || !so.SigOK || !so.SigV1OK {
		t.Errorf("single order at the shop: %+v (found %v)", so, ok)
	}
	bo, ok := orders[b.Token()]
	if !ok || bo.Items != "b:1" || bo.Qty != "1" || bo.SKU != "*" || bo.User != "mallory2" || !bo.SigOK || !bo.SigV1OK {
		t.Errorf("bundle order at the shop: %+v (found %v)", bo, ok)
	}
	for _, rq := range env.shop.Requests()[before:] {
		for k, vs := range rq.Header {
			if !strings.HasPrefix(strings.ToLower(strings.ReplaceAll(k, "_", "-")), "x-seckill-") {
				continue
			}
			if len(vs) != 1 {
				t.Errorf("shop got %d values of %s: %q", len(vs), k, vs)
			}
			for _, v := range vs {
				if v == "a:100,b:100" || v == "a:50" || v == "a:77" || v == "99" || strings.Contains(v, "v1=00,") || v == "victim" || v == victimTok {
					t.Errorf("a forged value reached the shop: %s: %q", k, v)
				}
			}
		}
	}
	if n := len(env.shop.Buys()); n != 3 {
		t.Errorf("shop got %d buys, want 3", n)
	}
	// The victim's reservation is untouched and the stock adds up, once
	// the confirms that run after the answers have landed.
	env.waitConfirms(t)
	_, shopSKU := rt10fleetShopUnits(t, env.shop, "rt10t")
	env.checkStock(t, "rt10t", shopSKU, false)
	_, shopU := rt10fleetShopUnits(t, env.shop, "rt10u")
	env.checkStock(t, "rt10u", shopU, false)
	g := e2e.Do(nil, p2.Addr, e2e.Req{Method: "GET", URI: "/_seckill/reservations/" + victimTok})
	if g.Status != 200 || g.Str("state") != "confirmed" {
		t.Errorf("victim's reservation: %d %s", g.Status, g.Body)
	}
}

// TestRT10FleetAlteredTokens: a real token with one part changed (another
// activity, another SKU of the same activity, another shard, a changed id,
// the bundle marker) names no reservation: 404 on the public look-up and
// on the admin release path, never another buyer's reservation.
func TestRT10FleetAlteredTokens(t *testing.T) {
	env := rt10fleetStart(t, false, 2, func(o *e2e.Options) {
		o.Activities = []e2e.Activity{
			{ID: "rt10v", SKUs: rt10fleetSKUs(10, "a", "b"), Shards: 2, PerUserLimit: 2, BundleRoute: rt10fleetBundleRoute},
			{ID: "rt10w", SKUs: rt10fleetSKUs(10, "a", "b"), Shards: 2, PerUserLimit: 2},
		}
	})
	p := env.proxies[0]
	w := rt10fleetBuy(p.Addr, "rt10v", "a", "alice")
	if w.Code != "WIN" {
		t.Fatalf("buy: %d %s", w.Status, w.Body)
	}
	tok := w.Token()
	parts := strings.Split(tok, ".")
	if len(parts) != 4 {
		t.Fatalf("token %q", tok)
	}
	alt := func(i int, v string) string {
		q := append([]string(nil), parts...)
		q[i] = v
		return strings.Join(q, ".")
	}
	otherShard := "0"
	if parts[2] == "0" {
		otherShard = "1"
	}
	flip := []byte(parts[3])
	if flip[0] == 'A' {
		flip[0] = 'B'
	} else {
		flip[0] = 'A'
	}
	for _, bad := range []string{
		alt(0, "rt10w"), alt(1, "b"), alt(1, "*"), alt(2, otherShard), alt(2, "2"), alt(2, "-1"), alt(3, string(flip)),
		tok + "x", strings.ToUpper(tok),
	} {
		g := e2e.Do(nil, env.proxies[1].Addr, e2e.Req{Method: "GET", URI: "/_seckill/reservations/" + bad})
		if g.Status != 404 {
			t.Errorf("look-up of altered token %q: %d %s, want 404", bad, g.Status, g.Body)
		}
	}
	env.waitConfirms(t)
	k := env.checkStock(t, "rt10v", nil, false)
	if k["a"].Confirmed != 1 {
		t.Errorf("status %+v", k)
	}
}
