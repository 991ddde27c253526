package e2e_test

import (
	"fmt"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/identity/jwttest"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// rvShadowJWT: JWT identity, a sync activity "real" and a shadow activity
// "sh", with limits.
func rvShadowJWT(t *testing.T, limits string) (*jwttest.Key, *e2e.Proxy) {
	t.Helper()
	k := jwttest.RSA(t, "k1")
	srv := jwttest.NewServer(t, k)
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, Limits: limits,
		User: fmt.Sprintf("{ jwt: { jwks_url: %q, issuer: %q, audience: %q } }", srv.URL, jwtIss, jwtAud),
		Activities: []e2e.Activity{
			{ID: "real", Stock: 10},
			{ID: "sh", Mode: config.ModeShadow, ShadowHeaders: true, NoVerify: true, SKUs: []config.SKU{{ID: "a", Stock: 10}}},
		}}.Config(t))
	p.Preheat(t, "real")
	p.Preheat(t, "sh")
	return k, p
}

// A shadow buy must not spend the enforced per-IP bucket (5628d7d: shadow
// decisions have buckets of their own), but a bearer token's first sight
// on a shadow route spends a token of the real per_ip bucket (b3281b7,
// Pipeline.AllowIP is always l.ip). per_ip {rate 0.001, burst 2}: a fresh
// token costs 2 real tokens on the real route (first sight + admission),
// so a real buy alone wins; one earlier shadow buy from the same address
// leaves it RATE_LIMITED.
func TestReviewShadowJWTFirstSightSpendsRealPerIP(t *testing.T) {
	const limits = "{ per_ip: { rate: 0.001, burst: 2 }, per_device: { rate: 1000, burst: 1000 }, per_user: { rate: 1000, burst: 1000 } }"
	buy := func(p *e2e.Proxy, act, sku, tok string) e2e.Resp {
		return e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/" + act + "/" + sku + "/buy", Header: [][2]string{{"Authorization", "Bearer " + tok}}})
	}
	// Control: no shadow traffic, the real buy wins.
	{
		k, p := rvShadowJWT(t, limits)
		if r := buy(p, "real", e2e.SKU, k.Sign(t, "RS256", jwtClaims("bob"))); r.Code != "WIN" {
			t.Fatalf("control: real buy with a fresh token: %d %s", r.Status, r.Body)
		}
	}
	k, p := rvShadowJWT(t, limits)
	r := buy(p, "sh", "a", k.Sign(t, "RS256", jwtClaims("alice")))
	if r.Status != 200 || r.Header["X-Shop"] != "pass" {
		t.Fatalf("shadow buy: %d %s, want the shop's 200", r.Status, r.Body)
	}
	if r := buy(p, "real", e2e.SKU, k.Sign(t, "RS256", jwtClaims("bob"))); r.Code != "WIN" {
		t.Errorf("real buy after one shadow buy from the same address: %d %s (Retry-After %q), want WIN: the shadow buy spent the enforced per_ip bucket",
			r.Status, r.Body, r.Header["Retry-After"])
	}
}
