package e2e_test

import (
	"net/url"
	"testing"
)

// TestRT10HTTPNetworkPathTargetGetsAdmission: SPEC §9 — "Whatever
// canonicalises to a buy route is a buy ... No buy reaches the shop without
// an admission decision"; README: an ambiguous spelling under a buy prefix
// is 400. A request-target that starts with "//" is, to every generic
// URI-reference parser, a network-path reference: authority, then path.
// "//evil.example/api/seckill/open/sku1/buy" is, to Python's urlsplit,
// PHP's parse_url, the WHATWG URL parser (new URL(req.url, base) in a Node
// shop) and Go's url.Parse, host "evil.example" and path
// "/api/seckill/open/sku1/buy" — the buy handler. The proxy reads it as the
// path "/evil.example/api/seckill/open/sku1/buy" (repeated slash dropped),
// not under any buy prefix, and passes it to the shop untouched and
// unadmitted (no X-Seckill-Token), as many times as the scalper likes.
// The absolute-form spelling of the same target is a buy. Want: admitted
// (or refused 400 as an ambiguous spelling), never passed through.
func TestRT10HTTPNetworkPathTargetGetsAdmission(t *testing.T) {
	f := newFixture(t)
	targets := []string{
		"//evil.example/api/seckill/open/sku1/buy",
		"//shop.example:80/api/seckill/open/sku1/buy",
		"//u@x/api/seckill/open/sku1/buy",
	}
	for i, target := range targets {
		user := "np" + string(rune('a'+i))
		r := rawDo(t, f.p.Addr, "POST", target, user)
		t.Logf("POST %s: %d %.120s", target, r.Status, r.Body)
	}
	for _, r := range f.shop.Requests() {
		if r.Header.Get("X-Seckill-Token") != "" {
			continue
		}
		u, err := url.Parse(r.URI)
		if err == nil && u.Path == "/api/seckill/open/sku1/buy" {
			t.Errorf("the shop got %s %s without admission: as a URI reference its path is the buy route (host %q)", r.Method, r.URI, u.Host)
		}
	}
}
