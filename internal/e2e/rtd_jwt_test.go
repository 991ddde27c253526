package e2e_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/identity/jwttest"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// TestRTDJWTCookieBesideABearerHeader: with identity.user.jwt.cookie the
// proxy verifies the cookie's token and forwards the request, an
// Authorization header included, as sent. Shops that take a JWT from a
// cookie commonly take one from the standard place too, and look there
// first: tymon/jwt-auth (Laravel) parses the Authorization header before
// its query, input, route and cookie parsers; Flask-JWT-Extended reads
// JWT_TOKEN_LOCATION in order, headers first when both are listed. So
// "Cookie: tok=<throw-away>" with "Authorization: Bearer <main>" was
// judged as the throw-away account (reserved on its limit) and booked by
// the shop for the main account, which had already bought its one unit.
// Want: a Bearer credential in Authorization that is not the token the
// proxy verified is a second token: 401, as two cookies of the name are.
// The same token in both places, and another scheme (Basic), still buy.
func TestRTDJWTCookieBesideABearerHeader(t *testing.T) {
	k := jwttest.RSA(t, "k1")
	srv := jwttest.NewServer(t, k)
	f := newFixture(t, func(o *e2e.Options) {
		o.User = fmt.Sprintf("{ jwt: { cookie: tok, jwks_url: %q, issuer: %q, audience: %q } }", srv.URL, jwtIss, jwtAud)
	})
	main := k.Sign(t, "RS256", jwtClaims("scalper-main"))
	owner := map[string]string{main: "scalper-main"}
	if r := idtBuyRaw(t, f.p.Addr, "Cookie: tok="+main); r.Code != "WIN" {
		t.Fatalf("main's own buy: %d %s", r.Status, r.Body)
	}
	for i, lines := range [][]string{
		{"Authorization: Bearer " + main},
		{"Authorization: bearer   " + main},
		{"Authorization: Basic Zm9vOmJhcg==", "Authorization: Bearer " + main},
	} {
		user := fmt.Sprintf("throwaway-%d", i)
		tok := k.Sign(t, "RS256", jwtClaims(user))
		owner[tok] = user
		r := idtBuyRaw(t, f.p.Addr, append([]string{"Cookie: tok=" + tok}, lines...)...)
		if r.Status != 401 || r.Code != "UNAUTHENTICATED" {
			t.Errorf("cookie %s beside %q: %d %s, want 401 UNAUTHENTICATED", user, lines, r.Status, r.Body)
		}
	}
	// Controls: the verified token in both places; another scheme.
	same := k.Sign(t, "RS256", jwtClaims("both-places"))
	owner[same] = "both-places"
	if r := idtBuyRaw(t, f.p.Addr, "Cookie: tok="+same, "Authorization: Bearer "+same); r.Code != "WIN" {
		t.Errorf("the same token in the cookie and Authorization: %d %s, want a win", r.Status, r.Body)
	}
	basic := k.Sign(t, "RS256", jwtClaims("behind-basic"))
	owner[basic] = "behind-basic"
	if r := idtBuyRaw(t, f.p.Addr, "Cookie: tok="+basic, "Authorization: Basic Zm9vOmJhcg=="); r.Code != "WIN" {
		t.Errorf("a cookie token beside Basic credentials: %d %s, want a win", r.Status, r.Body)
	}
	for _, b := range idtShopBuys(f.shop) {
		user := b.Header.Get("X-Seckill-User")
		for _, v := range b.Header.Values("Authorization") {
			if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
				if o := owner[strings.TrimSpace(v[7:])]; o != user {
					t.Errorf("BUG: the shop got a buy for X-Seckill-User %q whose Authorization names %q (a shop reading the header first books it for %q)", user, o, o)
				}
			}
		}
	}
}
