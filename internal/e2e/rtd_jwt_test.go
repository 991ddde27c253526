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

// TestRTDJWTCookieBesideATokenField: tymon/jwt-auth's parser chain reads a
// JWT from the Authorization header, then the query's and the input's
// (form or JSON body) "token", then route parameters, then the cookie; and
// Flask-JWT-Extended can be told to read the query ("jwt") before the
// cookie. With identity.user.jwt.cookie, "?token=<main>" beside the
// throw-away account's cookie was judged as the throw-away and booked by
// such a shop for the main account. Want: a JWT in a token field (token,
// access_token, jwt; query, urlencoded form or JSON body) that is not the
// verified token is a second token: 401. Fields holding anything else
// than a JWT, or the verified token itself, still buy.
func TestRTDJWTCookieBesideATokenField(t *testing.T) {
	k := jwttest.RSA(t, "k1")
	srv := jwttest.NewServer(t, k)
	f := newFixture(t, func(o *e2e.Options) {
		o.User = fmt.Sprintf("{ jwt: { cookie: tok, jwks_url: %q, issuer: %q, audience: %q } }", srv.URL, jwtIss, jwtAud)
	})
	main := k.Sign(t, "RS256", jwtClaims("scalper-main"))
	buy := func(tok, query, ctype, body string) e2e.Resp {
		h := [][2]string{{"Cookie", "tok=" + tok}}
		if ctype != "" {
			h = append(h, [2]string{"Content-Type", ctype})
		}
		var b []byte
		if body != "" {
			b = []byte(body)
		}
		return f.do(e2e.Req{URI: "/api/seckill/" + actOpen + "/" + e2e.SKU + "/buy" + query, Header: h, Body: b})
	}
	if r := buy(main, "", "", ""); r.Code != "WIN" {
		t.Fatalf("main's own buy: %d %s", r.Status, r.Body)
	}
	for i, c := range []struct{ query, ctype, body string }{
		{"?token=" + main, "", ""},
		{"?access_token=" + main, "", ""},
		{"?jwt=" + main, "", ""},
		{"?TOKEN=" + main, "", ""},
		{"", "application/x-www-form-urlencoded", "token=" + main},
		{"", "application/json", `{"token":"` + main + `"}`},
	} {
		tok := k.Sign(t, "RS256", jwtClaims(fmt.Sprintf("throwaway-%d", i)))
		if r := buy(tok, c.query, c.ctype, c.body); r.Status != 401 || r.Code != "UNAUTHENTICATED" {
			t.Errorf("throwaway-%d's cookie beside %q %q: %d %s, want 401 UNAUTHENTICATED", i, c.query, c.body, r.Status, r.Body)
		}
	}
	for i, c := range []struct{ query, ctype, body string }{
		{"?token=captcha-7f3a", "", ""},
		{"", "application/x-www-form-urlencoded", "token=abc"},
		{"", "application/json", `{"token":"xyz","note":"hi"}`},
	} {
		tok := k.Sign(t, "RS256", jwtClaims(fmt.Sprintf("control-%d", i)))
		if r := buy(tok, c.query, c.ctype, c.body); r.Code != "WIN" {
			t.Errorf("control-%d beside %q %q: %d %s, want a win", i, c.query, c.body, r.Status, r.Body)
		}
	}
	same := k.Sign(t, "RS256", jwtClaims("same-token"))
	if r := buy(same, "?token="+same, "", ""); r.Code != "WIN" {
		t.Errorf("the verified token in ?token= too: %d %s, want a win", r.Status, r.Body)
	}
	for _, b := range idtShopBuys(f.shop) {
		if b.Header.Get("X-Seckill-User") != "scalper-main" && (strings.Contains(b.URI, main) || strings.Contains(string(b.Body), main)) {
			t.Errorf("BUG: the shop got a buy for X-Seckill-User %q carrying scalper-main's token in a field tymon/jwt-auth reads before the cookie", b.Header.Get("X-Seckill-User"))
		}
	}
}

// TestRTDJWTHeaderBesideATokenField: the same with the token in
// Authorization: Flask-JWT-Extended reads its JWT_TOKEN_LOCATION in the
// order listed, so with ["query_string", "headers"] a "?jwt=<main>" beside
// the throw-away account's header is the main account's buy there.
func TestRTDJWTHeaderBesideATokenField(t *testing.T) {
	k := jwttest.RSA(t, "k1")
	f := newJWTFixture(t, k)
	main := k.Sign(t, "RS256", jwtClaims("scalper-main"))
	wantWin(t, f.buyAs(actOpen, main))
	tw := k.Sign(t, "RS256", jwtClaims("throwaway"))
	r := f.do(e2e.Req{URI: "/api/seckill/" + actOpen + "/" + e2e.SKU + "/buy?jwt=" + main, Header: [][2]string{{"Authorization", "Bearer " + tw}}})
	if r.Status != 401 || r.Code != "UNAUTHENTICATED" {
		t.Errorf("throw-away header beside ?jwt=<main>: %d %s, want 401 UNAUTHENTICATED", r.Status, r.Body)
	}
	both := k.Sign(t, "RS256", jwtClaims("both-places"))
	if r := f.do(e2e.Req{URI: "/api/seckill/" + actOpen + "/" + e2e.SKU + "/buy?jwt=" + both, Header: [][2]string{{"Authorization", "Bearer " + both}}}); r.Code != "WIN" {
		t.Errorf("the verified token in ?jwt= too: %d %s, want a win", r.Status, r.Body)
	}
}
