package e2e_test

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	jwt "github.com/golang-jwt/jwt/v5"

	"github.com/seckill-proxy/seckill-proxy/identity/jwttest"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

const (
	actBig = "big" // stock 1000, JWT fixture only
	jwtIss = "https://auth.e2e"
	jwtAud = "shop"
)

// jwtFixture is the fixture with identity.user.jwt on a JWKS URL served
// in-process.
type jwtFixture struct {
	*fixture
	jwks *jwttest.Server
}

func newJWTFixture(t *testing.T, keys ...*jwttest.Key) *jwtFixture {
	t.Helper()
	srv := jwttest.NewServer(t, keys...)
	f := newFixture(t, func(o *e2e.Options) {
		o.User = fmt.Sprintf("{ jwt: { jwks_url: %q, issuer: %q, audience: %q } }", srv.URL, jwtIss, jwtAud)
		o.Activities = append(o.Activities, e2e.Activity{ID: actBig, Stock: 1000})
		// A spike on a shared 2-core machine: the default 200 ms would
		// make Redis timeouts, not identity, the test's subject.
		o.RedisTimeout = 2 * time.Second
	})
	return &jwtFixture{fixture: f, jwks: srv}
}

func jwtClaims(sub string) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{"sub": sub, "iss": jwtIss, "aud": jwtAud, "exp": now.Add(time.Hour).Unix(), "iat": now.Unix()}
}

func withClaim(c jwt.MapClaims, k string, v any) jwt.MapClaims {
	if v == nil {
		delete(c, k)
	} else {
		c[k] = v
	}
	return c
}

// buyAs buys actOpen's SKU with a bearer token, and an X-User-Id header
// that must be ignored.
func (f *fixture) buyAs(act, token string, extra ...[2]string) e2e.Resp {
	h := append([][2]string{{"X-User-Id", "mallory"}}, extra...)
	if token != "" {
		h = append(h, [2]string{"Authorization", "Bearer " + token})
	}
	return f.do(e2e.Req{URI: "/api/seckill/" + act + "/" + e2e.SKU + "/buy", Header: h})
}

func want401(t *testing.T, r e2e.Resp, challenge string) {
	t.Helper()
	wantCode(t, r, "UNAUTHENTICATED", 401)
	if got := r.Header["Www-Authenticate"]; got != challenge {
		t.Fatalf("WWW-Authenticate = %q, want %q", got, challenge)
	}
	if r.Str("token") != "" || r.Header["X-Seckill-Token"] != "" {
		t.Fatalf("a 401 with a token: %s", r.Body)
	}
}

// TestJWTScalperRotatingIDsGets401: with JWT identity, 1,000 buys that
// rotate X-User-Id and carry no token are all 401; the shop sees nothing
// and nothing is reserved.
func TestJWTScalperRotatingIDsGets401(t *testing.T) {
	f := newJWTFixture(t, jwttest.RSA(t, "k1"))
	var wg sync.WaitGroup
	errs := make(chan string, 1000)
	for w := 0; w < 20; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 1000; i += 20 {
				r := f.do(e2e.Req{URI: "/api/seckill/" + actOpen + "/" + e2e.SKU + "/buy",
					Header: [][2]string{{"X-User-Id", "scalper-" + strconv.Itoa(i)}}})
				if r.Status != 401 || r.Code != "UNAUTHENTICATED" || r.Header["Www-Authenticate"] != "Bearer" {
					errs <- fmt.Sprintf("buy %d: %d %s %v", i, r.Status, r.Body, r.Header)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	if n := len(f.shop.Buys()); n != 0 {
		t.Fatalf("the shop saw %d buys", n)
	}
	f.p.WantStock(t, actOpen, 100, 0, 0)
}

// TestJWTUserAtShopIsTheClaim: the winner's X-Seckill-User is the token's
// claim, whatever X-User-Id says; a repeat by the verified user shows the
// token and order id (SPEC §9, issue 9 §4).
func TestJWTUserAtShopIsTheClaim(t *testing.T) {
	k := jwttest.RSA(t, "k1")
	f := newJWTFixture(t, k)
	tok := k.Sign(t, "RS256", jwtClaims("alice-42"))
	won := f.buyAs(actOpen, tok)
	wantWin(t, won)
	buys := f.shop.Buys()
	if len(buys) != 1 || buys[0].User != "alice-42" || !buys[0].SigOK {
		t.Fatalf("shop buys = %+v, want one by alice-42", buys)
	}
	again := f.buyAs(actOpen, tok)
	wantCode(t, again, "ALREADY_PURCHASED", 409)
	if again.Str("token") != won.Token() || again.Str("order_id") == "" || again.Str("order_id") != f.shop.Orders()[won.Token()].OrderID {
		t.Fatalf("verified repeat = %s, want token %s and the order id", again.Body, won.Token())
	}
	f.p.WantStock(t, actOpen, 99, 0, 1)
}

// TestJWTRefusalsAre401: every way a token is wrong is 401 with
// WWW-Authenticate, counted, never forwarded, nothing reserved.
func TestJWTRefusalsAre401(t *testing.T) {
	k, other := jwttest.RSA(t, "k1"), jwttest.RSA(t, "k1")
	f := newJWTFixture(t, k)
	now := time.Now()
	der, _ := x509.MarshalPKIXPublicKey(&k.Priv.(*rsa.PrivateKey).PublicKey)
	pemPub := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	const invalid = `Bearer error="invalid_token"`
	tests := []struct {
		name   string
		header [2]string
		reason string
	}{
		{"missing", [2]string{}, "missing"},
		{"not bearer", [2]string{"Authorization", "Basic YWxpY2U6eA=="}, "malformed"},
		{"malformed", [2]string{"Authorization", "Bearer abc.def"}, "malformed"},
		{"expired", bearerOf(k.Sign(t, "RS256", withClaim(jwtClaims("u"), "exp", now.Add(-time.Hour).Unix()))), "expired"},
		{"not yet valid", bearerOf(k.Sign(t, "RS256", withClaim(jwtClaims("u"), "nbf", now.Add(time.Hour).Unix()))), "not_yet_valid"},
		{"issuer", bearerOf(k.Sign(t, "RS256", withClaim(jwtClaims("u"), "iss", "https://evil"))), "issuer"},
		{"audience", bearerOf(k.Sign(t, "RS256", withClaim(jwtClaims("u"), "aud", "admin"))), "audience"},
		{"alg none", bearerOf(jwttest.None(t, jwtClaims("u"))), "algorithm"},
		{"HS256 signed with the RSA public key", bearerOf(jwttest.HS(t, "k1", pemPub, jwtClaims("u"))), "algorithm"},
		{"bad signature", bearerOf(other.Sign(t, "RS256", jwtClaims("u"))), "bad_signature"},
		{"forged payload", bearerOf(jwttest.Tamper(k.Sign(t, "RS256", jwtClaims("u")))), "bad_signature"},
		{"unknown kid after refresh", bearerOf(other.WithKid("k9").Sign(t, "RS256", jwtClaims("u"))), "unknown_kid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h [][2]string
			challenge := invalid
			if tt.header[0] != "" {
				h = append(h, tt.header)
			} else {
				challenge = "Bearer"
			}
			r := f.do(e2e.Req{URI: "/api/seckill/" + actOpen + "/" + e2e.SKU + "/buy", Header: append(h, [2]string{"X-User-Id", "u"})})
			want401(t, r, challenge)
			if n := authFailures(t, f.p, tt.reason); n < 1 {
				t.Errorf("seckill_auth_failures_total{reason=%q} = %v", tt.reason, n)
			}
		})
	}
	if n := len(f.shop.Buys()); n != 0 {
		t.Fatalf("the shop saw %d buys", n)
	}
	f.p.WantStock(t, actOpen, 100, 0, 0)
}

func bearerOf(tok string) [2]string { return [2]string{"Authorization", "Bearer " + tok} }

// TestJWTRotationMidSpike: a few hundred buyers, tokens signed by the old
// key and, after the issuer publishes and starts using a new one, by the
// new key, with forgeries mixed in: no valid buy refused, no invalid one
// admitted, the shop sees exactly the valid buyers.
func TestJWTRotationMidSpike(t *testing.T) {
	oldK, newK, forger := jwttest.RSA(t, "2026-old"), jwttest.EC(t, "2026-new"), jwttest.EC(t, "2026-new")
	f := newJWTFixture(t, oldK)
	const buyers = 300
	type result struct {
		user  string
		valid bool
		r     e2e.Resp
	}
	results := make(chan result, 2*buyers)
	var wg sync.WaitGroup
	// Tokens are signed before the spike: RSA signing in 300 goroutines
	// would starve the proxy of CPU on a small machine.
	sign := func(i int, k *jwttest.Key, alg string, valid bool) func() {
		user := fmt.Sprintf("buyer-%03d", i)
		signer := k
		if !valid {
			user = fmt.Sprintf("forged-%03d", i)
			signer = forger
		}
		tok := signer.Sign(t, alg, jwtClaims(user))
		return func() {
			defer wg.Done()
			results <- result{user, valid, f.buyAs(actBig, tok)}
		}
	}
	var oldBuys, newBuys []func()
	for i := 0; i < buyers/2; i++ {
		oldBuys = append(oldBuys, sign(i, oldK, "RS256", true))
	}
	for i := buyers / 2; i < buyers; i++ {
		newBuys = append(newBuys, sign(i, newK, "ES256", true))
		if i%10 == 0 {
			newBuys = append(newBuys, sign(i, oldK, "RS256", true), sign(i, newK, "ES256", false))
		}
	}
	buyer := func(b func()) { wg.Add(1); go b() }
	for _, b := range oldBuys {
		buyer(b)
	}
	// Rotation: the issuer publishes the new key next to the old and signs
	// new tokens with it while old-key tokens are still in flight (every
	// tenth new buyer also sends a late old-key token, and a forger a
	// token under the new kid).
	f.jwks.Set(oldK, newK)
	for _, b := range newBuys {
		buyer(b)
	}
	wg.Wait()
	close(results)
	admitted := map[string]bool{}
	for res := range results {
		switch {
		case !res.valid:
			if res.r.Status != 401 || res.r.Code != "UNAUTHENTICATED" {
				t.Errorf("forged %s: %d %s", res.user, res.r.Status, res.r.Body)
			}
		case res.r.Code == "WIN":
			admitted[res.user] = true
		case res.r.Code == "ALREADY_PURCHASED" || res.r.Code == "PENDING":
			// a second buy of a user whose first won
		default:
			t.Errorf("valid %s refused: %d %s", res.user, res.r.Status, res.r.Body)
		}
	}
	if len(admitted) != buyers {
		t.Errorf("%d buyers admitted, want %d", len(admitted), buyers)
	}
	orders := f.shop.Orders()
	if len(orders) != buyers {
		t.Errorf("the shop has %d orders, want %d", len(orders), buyers)
	}
	for _, o := range orders {
		if !admitted[o.User] {
			t.Errorf("shop order for %q, who was not admitted", o.User)
		}
	}
	f.p.WantStock(t, actBig, 1000-buyers, 0, buyers)
}

// TestJWTNoKeysIsAuthUnavailable: the JWKS URL down at start (no file):
// the proxy holds no keys, which is its fault, not the buyer's: 503
// AUTH_UNAVAILABLE with Retry-After. A missing token is still 401.
func TestJWTNoKeysIsAuthUnavailable(t *testing.T) {
	k := jwttest.RSA(t, "k1")
	srv := jwttest.NewServer(t, k)
	srv.Fail(true)
	f := newFixture(t, func(o *e2e.Options) {
		o.User = fmt.Sprintf("{ jwt: { jwks_url: %q, issuer: %q, audience: %q } }", srv.URL, jwtIss, jwtAud)
	})
	r := f.buyAs(actOpen, k.Sign(t, "RS256", jwtClaims("alice")))
	wantCode(t, r, "AUTH_UNAVAILABLE", 503)
	wantRetryAfter(t, r)
	want401(t, f.buyAs(actOpen, ""), "Bearer")
	srv.Fail(false)
	// The background retry (1 s, doubling) picks the keys up.
	e2e.Eventually(t, 5*time.Second, "keys loaded", func() bool {
		return f.buyAs(actOpen, k.Sign(t, "RS256", jwtClaims("alice"))).Code == "WIN"
	})
	if n := len(f.shop.Buys()); n != 1 {
		t.Fatalf("the shop saw %d buys, want 1", n)
	}
}

// TestUnverifiedAnswersHideTheToken: with the header identity, anyone can
// send alice's X-User-Id, so ALREADY_PURCHASED and PENDING name no token
// and no order id (issue 9 §4).
func TestUnverifiedAnswersHideTheToken(t *testing.T) {
	f := newFixture(t)
	release := f.shop.Hang("alice")
	defer release()
	first := make(chan e2e.Resp, 1)
	go func() { first <- f.buy(actOpen, "alice") }()
	e2e.Eventually(t, 5*time.Second, "the shop sees alice's buy", func() bool { return f.shop.SeenBuy("alice") })
	p := f.buy(actOpen, "alice")
	wantCode(t, p, "PENDING", 202)
	if p.Token() != "" || p.Str("order_id") != "" {
		t.Fatalf("PENDING to an unverified caller shows %s %v", p.Body, p.Header)
	}
	release()
	wantWin(t, <-first)
	r := f.buy(actOpen, "alice")
	wantCode(t, r, "ALREADY_PURCHASED", 409)
	if r.Token() != "" || r.Str("order_id") != "" {
		t.Fatalf("ALREADY_PURCHASED to an unverified caller shows %s %v", r.Body, r.Header)
	}
}

// authFailures reads seckill_auth_failures_total{reason} of p.
func authFailures(t *testing.T, p *e2e.Proxy, reason string) float64 {
	t.Helper()
	return p.Counter(p.Metrics.AuthFailures, reason)
}

// TestJWTReplays: for a verified buyer the replay guarantees of SPEC §9
// hold in full: PENDING with the token while the first copy is at the
// shop, then the shop's own answer; above the replay bound, 409 with the
// token and the order id.
func TestJWTReplays(t *testing.T) {
	k := jwttest.RSA(t, "k1")
	srv := jwttest.NewServer(t, k)
	f := newFixture(t, func(o *e2e.Options) {
		o.User = fmt.Sprintf("{ jwt: { jwks_url: %q, issuer: %q, audience: %q } }", srv.URL, jwtIss, jwtAud)
		o.UpstreamExtra = []string{"replay_max_bytes: 16"}
	})
	tok := k.Sign(t, "RS256", jwtClaims("alice"))
	buy := func(act, rid string) e2e.Resp { return f.buyAs(act, tok, [2]string{"X-Request-Id", rid}) }
	release := f.shop.Hang("alice")
	defer release()
	done := make(chan e2e.Resp, 1)
	go func() { done <- buy(actOpen, "r-1") }()
	e2e.Eventually(t, 3*time.Second, "the buy at the shop", func() bool { return f.shop.SeenBuy("alice") })
	p := buy(actOpen, "r-1")
	wantCode(t, p, "PENDING", 202)
	if p.Str("token") == "" || p.Header["X-Seckill-Token"] != p.Str("token") {
		t.Fatalf("verified PENDING without the token: %s %v", p.Body, p.Header)
	}
	release()
	first := <-done
	wantWin(t, first)
	if first.Token() != p.Str("token") {
		t.Fatalf("winner's token %s, PENDING's %s", first.Token(), p.Str("token"))
	}
	again := buy(actOpen, "r-1")
	wantCode(t, again, "ALREADY_PURCHASED", 409)
	oid := f.shop.Orders()[first.Token()].OrderID
	if again.Str("token") != first.Token() || again.Header["X-Seckill-Token"] != first.Token() || again.Str("order_id") != oid || oid == "" {
		t.Fatalf("409 = %s %v; want token %s and order id %s", again.Body, again.Header, first.Token(), oid)
	}
}

// TestJWTFileReloadOnSIGHUP: with jwks_file, a key added to the file is
// used after a reload (serve's SIGHUP calls Server.Apply with the config;
// an unchanged jwt block keeps the verifier and re-reads the file).
func TestJWTFileReloadOnSIGHUP(t *testing.T) {
	a, b := jwttest.RSA(t, "a"), jwttest.Ed(t, "b")
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, jwttest.JWKS(a), 0o600); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(o *e2e.Options) {
		o.User = fmt.Sprintf("{ jwt: { jwks_file: %q, issuer: %q, audience: %q } }", path, jwtIss, jwtAud)
	})
	wantWin(t, f.buyAs(actOpen, a.Sign(t, "RS256", jwtClaims("alice"))))
	tokB := b.Sign(t, "EdDSA", jwtClaims("bob"))
	want401(t, f.buyAs(actOpen, tokB), `Bearer error="invalid_token"`)
	if err := os.WriteFile(path, jwttest.JWKS(a, b), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.p.Server.Apply(f.p.Cfg); err != nil {
		t.Fatal(err)
	}
	wantWin(t, f.buyAs(actOpen, tokB))
	if n := f.p.Counter(f.p.Metrics.AuthFailures, "unknown_kid"); n != 1 {
		t.Errorf("unknown_kid failures = %v, want 1", n)
	}
}

// TestJWTFromCookie: jwt.cookie reads the bare token from a cookie.
func TestJWTFromCookie(t *testing.T) {
	k := jwttest.Ed(t, "d1")
	srv := jwttest.NewServer(t, k)
	f := newFixture(t, func(o *e2e.Options) {
		o.User = fmt.Sprintf("{ jwt: { cookie: session_jwt, jwks_url: %q, issuer: %q, audience: %q } }", srv.URL, jwtIss, jwtAud)
	})
	buy := func(cookie string) e2e.Resp {
		return f.do(e2e.Req{URI: "/api/seckill/" + actOpen + "/" + e2e.SKU + "/buy",
			Header: [][2]string{{"Cookie", cookie}, {"X-User-Id", "mallory"}}})
	}
	want401(t, buy("other=1"), "Bearer")
	wantWin(t, buy("session_jwt="+k.Sign(t, "EdDSA", jwtClaims("carol"))))
	if b := f.shop.Buys(); len(b) != 1 || b[0].User != "carol" {
		t.Fatalf("shop buys = %+v", b)
	}
}

// TestJWTFirstSightsSpendPerIP: a token the proxy has not verified before
// costs a signature check (RS256 ~30 µs, ES256 ~80), so one address sending
// made-up tokens could buy checks without bound: the limits ran after
// identity. Now a first sight spends one per_ip token first, as a session
// look-up does: with per_ip {rate 1, burst 5}, 40 forged tokens from one
// address are at most 6 signature checks (401) and the rest 429
// RATE_LIMITED with Retry-After; a verified token, once cached, costs none.
func TestJWTFirstSightsSpendPerIP(t *testing.T) {
	k, forger := jwttest.RSA(t, "k1"), jwttest.RSA(t, "k1")
	srv := jwttest.NewServer(t, k)
	f := newFixture(t, func(o *e2e.Options) {
		o.User = fmt.Sprintf("{ jwt: { jwks_url: %q, issuer: %q, audience: %q } }", srv.URL, jwtIss, jwtAud)
		o.Limits = "{ per_ip: { rate: 1, burst: 5 }, per_device: { rate: 1000, burst: 1000 }, per_user: { rate: 1000, burst: 1000 } }"
	})
	codes := map[string]int{}
	for i := 0; i < 40; i++ {
		r := f.buyAs(actOpen, forger.Sign(t, "RS256", jwtClaims(fmt.Sprintf("fake-%d", i))))
		codes[r.Code]++
		if r.Code == "RATE_LIMITED" && r.Header["Retry-After"] == "" {
			t.Errorf("429 without Retry-After: %v", r.Header)
		}
	}
	checks := authFailures(t, f.p, "bad_signature")
	t.Logf("answers %v, signature checks failed %v", codes, checks)
	if checks > 6 || codes["UNAUTHENTICATED"] > 6 || codes["RATE_LIMITED"] < 34 {
		t.Errorf("40 forged tokens from one address: %v, %v signature checks; want at most 6 checks, the rest RATE_LIMITED", codes, checks)
	}
	f.p.WantStock(t, actOpen, 100, 0, 0)
}
