package e2e_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/identity/jwttest"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// jd13: per_ip with JWT identity (admission.Request.IPSpent: a token's
// first sight takes the buy's per-IP token, and its per-IP stage takes no
// second). One address must never get more buys through than per_ip's
// burst plus its rate over the elapsed time, however it spends tokens.

func TestJD13PerIPRotatingJWTs(t *testing.T) {
	k := jwttest.RSA(t, "k1")
	srv := jwttest.NewServer(t, k)
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, RedisTimeout: 2 * time.Second,
		User:   fmt.Sprintf("{ jwt: { jwks_url: %q, issuer: %q, audience: %q } }", srv.URL, jwtIss, jwtAud),
		Limits: "{ per_ip: { rate: 1, burst: 3 }, per_device: { rate: 1000, burst: 1000 }, per_user: { rate: 1000, burst: 1000 } }",
		Activities: []e2e.Activity{
			{ID: "jd13o", Stock: 500, Shards: 1},
			{ID: "jd13s", Stock: 500, Shards: 1, Mode: "shadow"},
			{ID: "jd13bun", Shards: 1, PerUserLimit: 3, SKUs: []config.SKU{{ID: "a", Stock: 100}, {ID: "b", Stock: 100}},
				BundleRoute: `{ method: POST, path: "/api/seckill/{activity}/bundle", items_from: "json:/items" }`},
		}}.Config(t))
	for _, a := range []string{"jd13o", "jd13s", "jd13bun"} {
		p.Preheat(t, a)
	}
	tok := func(sub string) string { return k.Sign(t, "RS256", jwtClaims(sub)) }
	buy := func(act, token, ip string) e2e.Resp {
		return e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/" + act + "/" + e2e.SKU + "/buy",
			Header: [][2]string{{"Authorization", "Bearer " + token}, {"X-Forwarded-For", ip}}})
	}
	bundle := func(token, ip string) e2e.Resp {
		return e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/jd13bun/bundle",
			Header: [][2]string{{"Authorization", "Bearer " + token}, {"X-Forwarded-For", ip}, {"Content-Type", "application/json"}},
			Body:   []byte(`{"items":[{"sku":"a","qty":1},{"sku":"b","qty":1}]}`)})
	}
	// Tokens warmed (first sight) elsewhere: from other addresses, and
	// on the shadow activity (whose first sights spend shadow buckets).
	var warmed []string
	for i := 0; i < 12; i++ {
		s := tok(fmt.Sprintf("jd13-warm-%d", i))
		var w e2e.Resp
		if i%2 == 0 {
			w = buy("jd13o", s, fmt.Sprintf("203.0.113.%d", 10+i)) // a won buy elsewhere; the buyer is at its limit on jd13o
		} else {
			w = buy("jd13s", s, "198.51.100.99")
		}
		if w.Err != nil {
			t.Fatal(w.Err)
		}
		warmed = append(warmed, s)
	}

	const ip = "198.51.100.7"
	start := time.Now()
	passed := 0 // past the per-IP stage: anything but RATE_LIMITED
	codes := map[string]int{}
	for i := 0; i < 36; i++ {
		var got e2e.Resp
		switch i % 4 {
		case 0: // a fresh valid token
			got = buy("jd13o", tok(fmt.Sprintf("jd13-new-%d", i)), ip)
		case 1: // a token warmed elsewhere, on jd13o only if never bought there
			s := warmed[(i/4)%len(warmed)]
			got = bundle(s, ip)
		case 2: // a fresh token on a bundle
			got = bundle(tok(fmt.Sprintf("jd13-bnew-%d", i)), ip)
		case 3: // a forged token: spends the token, then 401
			got = buy("jd13o", jwttest.Tamper(tok(fmt.Sprintf("jd13-bad-%d", i))), ip)
		}
		if got.Err != nil {
			t.Fatal(got.Err)
		}
		codes[got.Code]++
		if got.Code != "RATE_LIMITED" {
			passed++
		}
	}
	el := time.Since(start).Seconds()
	allowed := 3 + int(el*1) + 1
	t.Logf("%d requests in %.2fs from %s: %v", 36, el, ip, codes)
	if passed > allowed {
		t.Errorf("one address got %d requests past per_ip {rate 1, burst 3} in %.2fs (allowed about %d): %v", passed, el, allowed, codes)
	}
	if codes["WIN"] == 0 {
		t.Errorf("no buy won at all: %v", codes)
	}
}
