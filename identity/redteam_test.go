package identity_test

// Red-team tests of identity/ (JWT verifier and canonical ids). Helpers
// start with idt.

import (
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jwt "github.com/golang-jwt/jwt/v5"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/identity"
	"github.com/seckill-proxy/seckill-proxy/identity/jwttest"
)

// idtClock is a movable clock for Options.Now.
type idtClock struct{ ns atomic.Int64 }

func (c *idtClock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *idtClock) set(t time.Time)     { c.ns.Store(t.UnixNano()) }
func (c *idtClock) add(d time.Duration) { c.ns.Add(int64(d)) }
func idtNewClock(t time.Time) *idtClock { c := &idtClock{}; c.set(t); return c }
func idtHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
func idtSettle(v *identity.JWT, tok string) {
	for i := 0; i < 50; i++ {
		v.Verify([]byte(tok))
		time.Sleep(time.Millisecond)
	}
}

// TestRedTeamIDCachedTokenExpires: README "a verified token is cached
// until its exp (+ leeway)". A token verified (and cached) while valid must
// be refused once exp + leeway has passed, although its cache entry may
// still be there; and a token whose exp is within the leeway is accepted.
func TestRedTeamIDCachedTokenExpires(t *testing.T) {
	k := jwttest.EC(t, "e1")
	srv := jwttest.NewServer(t, k)
	t0 := time.Now()
	clk := idtNewClock(t0)
	v := newVerifier(t, jwtConfig(func(c *config.JWT) { c.JWKSURL = srv.URL }), identity.Options{Now: clk.now})
	tok := k.Sign(t, "ES256", with(claims("eve"), "exp", t0.Add(time.Minute).Unix()))
	idtSettle(v, tok) // verified and (asynchronously) cached
	if u, r := v.Verify([]byte(tok)); r != identity.OK || u != "eve" {
		t.Fatalf("fresh token = %q %v", u, r)
	}
	clk.set(time.Unix(t0.Add(time.Minute).Unix(), 0).Add(29 * time.Second)) // exp + 29 s: within the 30 s leeway
	if _, r := v.Verify([]byte(tok)); r != identity.OK {
		t.Fatalf("token within leeway = %v, want ok", r)
	}
	clk.set(time.Unix(t0.Add(time.Minute).Unix(), 0).Add(31 * time.Second))
	if u, r := v.Verify([]byte(tok)); r != identity.Expired {
		t.Fatalf("token past exp + leeway = %q %v, want expired", u, r)
	}
	// Never cached: a token already expired beyond the leeway at first sight.
	old := k.Sign(t, "ES256", with(claims("eve"), "exp", clk.now().Add(-31*time.Second).Unix()))
	if _, r := v.Verify([]byte(old)); r != identity.Expired {
		t.Fatalf("expired token = %v", r)
	}
	// nbf beyond the leeway is refused; a token that becomes valid later is
	// accepted then (a refusal is not cached).
	nbf := k.Sign(t, "ES256", with(claims("eve"), "nbf", clk.now().Add(time.Minute).Unix()))
	if _, r := v.Verify([]byte(nbf)); r != identity.NotYetValid {
		t.Fatalf("nbf in a minute = %v", r)
	}
	// iat in the future (beyond leeway) too.
	iat := k.Sign(t, "ES256", with(claims("eve"), "iat", clk.now().Add(time.Minute).Unix()))
	if _, r := v.Verify([]byte(iat)); r != identity.NotYetValid {
		t.Fatalf("iat in a minute = %v", r)
	}
}

// TestRedTeamIDClaimShapes: the user claim as number or string is one id
// ("42" = 42); exp/iss/aud missing or of the wrong type, and claims that
// are objects, arrays, booleans or null are refused, never a user.
func TestRedTeamIDClaimShapes(t *testing.T) {
	k := jwttest.RSA(t, "r1")
	srv := jwttest.NewServer(t, k)
	v := newVerifier(t, jwtConfig(func(c *config.JWT) { c.JWKSURL = srv.URL }), identity.Options{})
	sign := func(c jwt.MapClaims) []byte { return []byte(k.Sign(t, "RS256", c)) }
	if u, r := v.Verify(sign(with(claims(""), "sub", 42))); r != identity.OK || u != "42" {
		t.Fatalf("numeric sub = %q %v", u, r)
	}
	if u, r := v.Verify(sign(with(claims(""), "sub", uint64(12345678901234567890)))); r != identity.OK || u != "12345678901234567890" {
		t.Fatalf("big numeric sub = %q %v (must stay exact)", u, r)
	}
	for name, c := range map[string]jwt.MapClaims{
		"sub object":     with(claims(""), "sub", map[string]any{"id": "a"}),
		"sub array":      with(claims(""), "sub", []any{"a", "b"}),
		"sub bool":       with(claims(""), "sub", true),
		"sub absent":     with(claims(""), "sub", nil),
		"sub empty":      claims(""),
		"exp absent":     with(claims("a"), "exp", nil),
		"exp string":     with(claims("a"), "exp", fmt.Sprint(time.Now().Add(time.Hour).Unix())),
		"iss absent":     with(claims("a"), "iss", nil),
		"aud absent":     with(claims("a"), "aud", nil),
		"aud other case": with(claims("a"), "aud", "Shop"),
		"iss prefix":     with(claims("a"), "iss", iss+"/"),
		"aud list w/o":   with(claims("a"), "aud", []any{"shop2", "xshop"}),
	} {
		if u, r := v.Verify(sign(c)); r == identity.OK {
			t.Errorf("%s: accepted as %q", name, u)
		}
	}
	if u, r := v.Verify(sign(with(claims("a"), "aud", []any{"other", aud}))); r != identity.OK || u != "a" {
		t.Errorf("aud list naming us = %q %v", u, r)
	}
}

// TestRedTeamIDUnknownKidStorm: README "at most one such refresh per 10 s,
// so made-up kids cost the key server one fetch per 10 s" and "concurrent
// such buys wait for that one fetch". 2,000 tokens with distinct made-up
// kids from 50 goroutines cost at most one fetch beyond the start's.
func TestRedTeamIDUnknownKidStorm(t *testing.T) {
	k := jwttest.RSA(t, "r1")
	srv := jwttest.NewServer(t, k)
	v := newVerifier(t, jwtConfig(func(c *config.JWT) { c.JWKSURL = srv.URL }), identity.Options{})
	before := srv.Fetches()
	toks := make([][]byte, 2000)
	for i := range toks {
		// Signed by the real key under a made-up kid: a kid-less fallback
		// must not accept it either.
		toks[i] = []byte(k.WithKid(fmt.Sprintf("../../etc/passwd-%d", i)).Sign(t, "RS256", claims("kid")))
	}
	var wg sync.WaitGroup
	var ok atomic.Int64
	for w := 0; w < 50; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(toks); i += 50 {
				if _, r := v.Verify(toks[i]); r == identity.OK {
					ok.Add(1)
				} else if r != identity.UnknownKey {
					t.Errorf("made-up kid: %v, want unknown_kid", r)
					return
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 0 {
		t.Errorf("%d tokens under made-up kids accepted", ok.Load())
	}
	if n := srv.Fetches() - before; n > 1 {
		t.Errorf("%d JWKS fetches for 2,000 made-up kids, want at most 1", n)
	}
}

// TestRedTeamIDTokenCacheMemoryBound: README "A verified token is cached
// ... in a ristretto cache bounded to 64 MiB" (identity.Options.CacheBytes
// is that bound). One scalper account can mint as many valid tokens as it
// likes (log in again and again); each is a new cache entry. The verifier
// (cache included) must not hold much more than its bound: here 4 MiB,
// filled by 150,000 distinct valid tokens.
func TestRedTeamIDTokenCacheMemoryBound(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef"
	t.Setenv("IDT_JWT_SECRET", secret)
	const bound, n = 4 << 20, 150_000
	signer := jwt.New(jwt.SigningMethodHS256)
	h0 := idtHeap()
	v := newVerifier(t, jwtConfig(func(c *config.JWT) { c.HMACSecretEnv = "IDT_JWT_SECRET"; c.Algorithms = []string{"HS256"} }),
		identity.Options{CacheBytes: bound})
	hNew := idtHeap()
	c := claims("scalper")
	for i := 0; i < n; i++ {
		c["jti"] = "login-" + strconv.Itoa(i)
		signer.Claims = c
		tok, err := signer.SignedString([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		if u, r := v.Verify([]byte(tok)); r != identity.OK || u != "scalper" {
			t.Fatalf("valid token = %q %v", u, r)
		}
	}
	time.Sleep(50 * time.Millisecond) // ristretto applies sets asynchronously
	h1 := idtHeap()
	runtime.KeepAlive(v)
	mib := func(b uint64, a uint64) float64 { return float64(int64(b)-int64(a)) / (1 << 20) }
	t.Logf("bound %d MiB: NewJWT %.1f MiB, then %d distinct valid tokens %.1f MiB more; total %.1f MiB",
		bound>>20, mib(hNew, h0), n, mib(h1, hNew), mib(h1, h0))
	if grown := int64(h1) - int64(h0); grown > 2*bound {
		t.Errorf("the verifier holds %.1f MiB, more than twice its %d MiB cache bound", float64(grown)/(1<<20), bound>>20)
	}
}
