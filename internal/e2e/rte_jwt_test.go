package e2e_test

// Red team rte: work a client can make the proxy do, JWT identity.

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/identity/jwttest"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// TestRTEKidlessTokensPayPerKeyTried: a bearer token seen first spends one
// per_ip token "so one address cannot buy signature checks faster than its
// rate" (README). A token without a kid is checked against every key of its
// alg's family (golang-jwt tries a VerificationKeySet key by key), so with
// an issuer's JWKS of 4 RSA keys (rotation sets of 2-8 are common) one
// made-up kid-less token bought 4 RSA checks for one token: 4x the rate.
// Counted without a clock: per_ip {rate 0.001, burst 8} is 8 tokens for the
// test's life; a legitimate kid-less token (signed by the 4th key) and 40
// forged ones from one address may cost at most 8 signature checks, read
// as 4 per token that reached verification (the forged: bad_signature).
func TestRTEKidlessTokensPayPerKeyTried(t *testing.T) {
	const nkeys, burst = 4, 8
	keys := make([]*jwttest.Key, nkeys)
	for i := range keys {
		keys[i] = jwttest.RSA(t, "k"+strconv.Itoa(i))
	}
	srv := jwttest.NewServer(t, keys...)
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Limits:     fmt.Sprintf("{ per_ip: { rate: 0.001, burst: %d }, per_device: { rate: 1000, burst: 1000 }, per_user: { rate: 1000, burst: 1000 } }", burst),
		User:       fmt.Sprintf("{ jwt: { jwks_url: %q, issuer: %q, audience: %q } }", srv.URL, jwtIss, jwtAud),
		Activities: []e2e.Activity{{ID: "act", Stock: 100}}}.Config(t))
	p.Preheat(t, "act")
	buy := func(tok string) e2e.Resp {
		return e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/act/" + e2e.SKU + "/buy", Header: [][2]string{{"Authorization", "Bearer " + tok}}})
	}
	// The issuer's own kid-less token, by the last key of the set: it
	// verifies (at the cost of every key before it).
	if res := buy(keys[nkeys-1].WithKid("").Sign(t, "RS256", jwtClaims("legit"))); res.Code != "WIN" {
		t.Fatalf("a kid-less token of the set's last key: %d %s, want WIN", res.Status, res.Body)
	}
	forger := jwttest.RSA(t, "")
	codes := map[string]int{}
	for i := 0; i < 40; i++ {
		res := buy(forger.Sign(t, "RS256", jwtClaims("x"+strconv.Itoa(i))))
		codes[res.Code]++
		if res.Code != "UNAUTHENTICATED" && res.Code != "RATE_LIMITED" {
			t.Fatalf("forged token %d: %d %s", i, res.Status, res.Body)
		}
	}
	bad := int(authFailures(t, p, "bad_signature"))
	checks := nkeys + bad*nkeys
	t.Logf("40 forged kid-less tokens from one address: %v; %d reached verification, %d RSA checks in all (burst %d)", codes, bad, checks, burst)
	if checks > burst {
		t.Errorf("%d signature checks bought with %d per_ip tokens: a kid-less token is checked against all %d keys for one token",
			checks, burst, nkeys)
	}
}
