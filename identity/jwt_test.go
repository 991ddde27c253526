package identity_test

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jwt "github.com/golang-jwt/jwt/v5"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/identity"
	"github.com/seckill-proxy/seckill-proxy/identity/jwttest"
)

const (
	iss = "https://auth.test"
	aud = "shop"
)

func jwtConfig(mod func(*config.JWT)) config.JWT {
	c := config.JWT{Header: "Authorization", Issuer: iss, Audience: aud, Claim: "sub", Leeway: 30 * time.Second,
		Algorithms: config.AsymmetricJWTAlgorithms()}
	if mod != nil {
		mod(&c)
	}
	return c
}

func newVerifier(t testing.TB, c config.JWT, o identity.Options) *identity.JWT {
	t.Helper()
	v, err := identity.NewJWT(c, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	return v
}

func claims(sub string) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{"sub": sub, "iss": iss, "aud": aud, "exp": now.Add(time.Hour).Unix(), "iat": now.Unix()}
}

func with(c jwt.MapClaims, k string, v any) jwt.MapClaims {
	out := jwt.MapClaims{}
	for kk, vv := range c {
		out[kk] = vv
	}
	if v == nil {
		delete(out, k)
	} else {
		out[k] = v
	}
	return out
}

// TestJWTRefusals: every way a token is wrong has its reason, and a good
// token of each key type is accepted.
func TestJWTRefusals(t *testing.T) {
	rsaKey, ecKey, edKey := jwttest.RSA(t, "r1"), jwttest.EC(t, "e1"), jwttest.Ed(t, "d1")
	other := jwttest.RSA(t, "r1") // same kid, another key: a forgery
	srv := jwttest.NewServer(t, rsaKey, ecKey, edKey)
	v := newVerifier(t, jwtConfig(func(c *config.JWT) { c.JWKSURL = srv.URL }), identity.Options{})
	now := time.Now()
	pub, _ := x509.MarshalPKIXPublicKey(&rsaKey.Priv.(*rsa.PrivateKey).PublicKey)
	pemPub := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})
	tests := []struct {
		name  string
		token string
		want  identity.Reason
		user  string
	}{
		{"RS256 ok", rsaKey.Sign(t, "RS256", claims("alice")), identity.OK, "alice"},
		{"PS256 ok", rsaKey.Sign(t, "PS256", claims("bob")), identity.OK, "bob"},
		{"ES256 ok", ecKey.Sign(t, "ES256", claims("carol")), identity.OK, "carol"},
		{"EdDSA ok", edKey.Sign(t, "EdDSA", claims("dave")), identity.OK, "dave"},
		{"numeric sub", rsaKey.Sign(t, "RS256", with(claims(""), "sub", 12345678901234)), identity.OK, "12345678901234"},
		{"missing", "", identity.Missing, ""},
		{"malformed", "not.a-token", identity.Malformed, ""},
		{"two parts", "abc.def", identity.Malformed, ""},
		{"expired", rsaKey.Sign(t, "RS256", with(claims("u"), "exp", now.Add(-time.Minute).Unix())), identity.Expired, ""},
		{"expired within leeway", rsaKey.Sign(t, "RS256", with(claims("u"), "exp", now.Add(-10*time.Second).Unix())), identity.OK, "u"},
		{"no exp", rsaKey.Sign(t, "RS256", with(claims("u"), "exp", nil)), identity.MissingClaim, ""},
		{"nbf", rsaKey.Sign(t, "RS256", with(claims("u"), "nbf", now.Add(time.Minute).Unix())), identity.NotYetValid, ""},
		{"iat in the future", rsaKey.Sign(t, "RS256", with(claims("u"), "iat", now.Add(time.Hour).Unix())), identity.NotYetValid, ""},
		{"issuer", rsaKey.Sign(t, "RS256", with(claims("u"), "iss", "https://evil.test")), identity.Issuer, ""},
		{"no issuer", rsaKey.Sign(t, "RS256", with(claims("u"), "iss", nil)), identity.MissingClaim, ""},
		{"audience", rsaKey.Sign(t, "RS256", with(claims("u"), "aud", "other")), identity.Audience, ""},
		{"audience list", rsaKey.Sign(t, "RS256", with(claims("u2"), "aud", []string{"other", aud})), identity.OK, "u2"},
		{"alg none", jwttest.None(t, claims("u")), identity.Algorithm, ""},
		{"HS256 with the RSA public key (PEM)", jwttest.HS(t, "r1", pemPub, claims("u")), identity.Algorithm, ""},
		{"HS256 with the RSA public key (DER)", jwttest.HS(t, "r1", pub, claims("u")), identity.Algorithm, ""},
		{"HS256 without kid", jwttest.HS(t, "", pemPub, claims("u")), identity.Algorithm, ""},
		{"RS256 claimed by an EC kid", rsaKey.WithKid("e1").Sign(t, "RS256", claims("u")), identity.Algorithm, ""},
		{"bad signature", other.Sign(t, "RS256", claims("u")), identity.BadSignature, ""},
		{"tampered payload", jwttest.Tamper(rsaKey.Sign(t, "RS256", claims("u"))), identity.BadSignature, ""},
		{"unknown kid", rsaKey.WithKid("nope").Sign(t, "RS256", claims("u")), identity.UnknownKey, ""},
		{"no claim", rsaKey.Sign(t, "RS256", with(claims("u"), "sub", nil)), identity.Claim, ""},
		{"claim not a string", rsaKey.Sign(t, "RS256", with(claims("u"), "sub", map[string]any{"a": 1})), identity.Claim, ""},
		{"no kid tries the family", rsaKey.WithKid("").Sign(t, "RS256", claims("erin")), identity.OK, "erin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			user, r := v.Verify([]byte(tt.token))
			if r != tt.want || user != tt.user {
				t.Fatalf("Verify = %q, %v; want %q, %v", user, r, tt.user, tt.want)
			}
		})
	}
}

// TestJWTAlgorithmsList: an alg the config does not list is refused even
// with the right key.
func TestJWTAlgorithmsList(t *testing.T) {
	k := jwttest.RSA(t, "r1")
	srv := jwttest.NewServer(t, k)
	v := newVerifier(t, jwtConfig(func(c *config.JWT) { c.JWKSURL = srv.URL; c.Algorithms = []string{"ES256"} }), identity.Options{})
	if _, r := v.Verify([]byte(k.Sign(t, "RS256", claims("u")))); r != identity.Algorithm {
		t.Fatalf("RS256 with only ES256 allowed: %v", r)
	}
}

// TestJWTHMAC: HS256 with a secret from the environment; an RS256 token is
// refused (no JWKS next to an HMAC key).
func TestJWTHMAC(t *testing.T) {
	t.Setenv("JWT_TEST_SECRET", "0123456789abcdef0123456789abcdef")
	v := newVerifier(t, jwtConfig(func(c *config.JWT) { c.HMACSecretEnv = "JWT_TEST_SECRET"; c.Algorithms = []string{"HS256"} }), identity.Options{})
	if u, r := v.Verify([]byte(jwttest.HS(t, "", []byte("0123456789abcdef0123456789abcdef"), claims("hana")))); r != identity.OK || u != "hana" {
		t.Fatalf("HS256 = %q %v", u, r)
	}
	if _, r := v.Verify([]byte(jwttest.HS(t, "", []byte("wrong"), claims("hana")))); r != identity.BadSignature {
		t.Fatalf("HS256 wrong secret = %v", r)
	}
	if _, r := v.Verify([]byte(jwttest.RSA(t, "r").Sign(t, "RS256", claims("u")))); r != identity.Algorithm {
		t.Fatalf("RS256 on an HMAC verifier = %v", r)
	}
	t.Setenv("JWT_TEST_SECRET", "")
	empty := newVerifier(t, jwtConfig(func(c *config.JWT) { c.HMACSecretEnv = "JWT_TEST_SECRET"; c.Algorithms = []string{"HS256"} }), identity.Options{})
	if _, r := empty.Verify([]byte(jwttest.HS(t, "", nil, claims("u")))); r != identity.NoKeys {
		t.Fatalf("empty secret = %v, want no_keys", r)
	}
}

// TestJWTClaimPointer: claim as a JSON pointer, and Check applied.
func TestJWTClaimPointer(t *testing.T) {
	k := jwttest.RSA(t, "r1")
	srv := jwttest.NewServer(t, k)
	v := newVerifier(t, jwtConfig(func(c *config.JWT) { c.JWKSURL = srv.URL; c.Claim = "/ext/uid" }),
		identity.Options{Check: func(s string) (string, bool) { return s, s != "bad|id" }})
	if u, r := v.Verify([]byte(k.Sign(t, "RS256", with(claims("x"), "ext", map[string]any{"uid": "u-7"})))); r != identity.OK || u != "u-7" {
		t.Fatalf("pointer claim = %q %v", u, r)
	}
	if _, r := v.Verify([]byte(k.Sign(t, "RS256", with(claims("x"), "ext", map[string]any{"uid": "bad|id"})))); r != identity.Claim {
		t.Fatalf("invalid id = %v", r)
	}
}

// TestJWTRotationRefreshesOnUnknownKid: a token signed by a key published
// after the last fetch is accepted (one refresh), a made-up kid costs at
// most one fetch per KidRefreshEvery, and a withdrawn key stops verifying
// new tokens.
func TestJWTRotationRefreshesOnUnknownKid(t *testing.T) {
	oldK, newK := jwttest.RSA(t, "old"), jwttest.EC(t, "new")
	srv := jwttest.NewServer(t, oldK)
	v := newVerifier(t, jwtConfig(func(c *config.JWT) { c.JWKSURL = srv.URL }), identity.Options{KidRefreshEvery: time.Hour})
	if _, r := v.Verify([]byte(oldK.Sign(t, "RS256", claims("a")))); r != identity.OK {
		t.Fatal(r)
	}
	srv.Set(oldK, newK)
	before := srv.Fetches()
	var wg sync.WaitGroup
	var bad atomic.Int32
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, r := v.Verify([]byte(newK.Sign(t, "ES256", claims(fmt.Sprint("n", i))))); r != identity.OK {
				bad.Add(1)
			}
		}()
	}
	wg.Wait()
	if bad.Load() != 0 || srv.Fetches()-before != 1 {
		t.Fatalf("%d new-key tokens refused, %d fetches; want 0 and 1", bad.Load(), srv.Fetches()-before)
	}
	for i := 0; i < 100; i++ {
		if _, r := v.Verify([]byte(oldK.WithKid(fmt.Sprint("made-up-", i)).Sign(t, "RS256", claims("x")))); r != identity.UnknownKey {
			t.Fatalf("made-up kid = %v", r)
		}
	}
	if n := srv.Fetches() - before; n != 1 {
		t.Fatalf("made-up kids caused %d more fetches within the period", n-1)
	}
}

// TestJWTKeepsLastGoodSet: the JWKS URL failing keeps the keys already
// loaded; tokens never seen before still verify.
func TestJWTKeepsLastGoodSet(t *testing.T) {
	k := jwttest.RSA(t, "r1")
	srv := jwttest.NewServer(t, k)
	v := newVerifier(t, jwtConfig(func(c *config.JWT) { c.JWKSURL = srv.URL }), identity.Options{KidRefreshEvery: time.Millisecond})
	srv.Fail(true)
	v.Reload()
	time.Sleep(2 * time.Millisecond)
	// An unknown kid forces one more (failing) fetch first.
	if _, r := v.Verify([]byte(k.WithKid("x").Sign(t, "RS256", claims("x")))); r != identity.UnknownKey {
		t.Fatal(r)
	}
	if u, r := v.Verify([]byte(k.Sign(t, "RS256", claims("late")))); r != identity.OK || u != "late" {
		t.Fatalf("after a failed refresh = %q %v", u, r)
	}
}

// TestJWTNoKeysAtStart: the URL down at start is no_keys (the proxy's
// fault), and the keys are picked up once it answers.
func TestJWTNoKeysAtStart(t *testing.T) {
	k := jwttest.RSA(t, "r1")
	srv := jwttest.NewServer(t, k)
	srv.Fail(true)
	v := newVerifier(t, jwtConfig(func(c *config.JWT) { c.JWKSURL = srv.URL }), identity.Options{KidRefreshEvery: time.Millisecond})
	if _, r := v.Verify([]byte(k.Sign(t, "RS256", claims("a")))); r != identity.NoKeys {
		t.Fatalf("no keys = %v", r)
	}
	if _, r := v.Verify(nil); r != identity.Missing {
		t.Fatalf("missing token with no keys = %v, want missing", r)
	}
	srv.Fail(false)
	time.Sleep(2 * time.Millisecond)
	if _, r := v.Verify([]byte(k.Sign(t, "RS256", claims("a")))); r != identity.OK {
		t.Fatalf("after the URL came back = %v", r)
	}
}

// TestJWTFileReload: jwks_file is re-read when it changes (polled) and on
// Reload (SIGHUP); a broken file keeps the last good set.
func TestJWTFileReload(t *testing.T) {
	a, b := jwttest.RSA(t, "a"), jwttest.Ed(t, "b")
	path := filepath.Join(t.TempDir(), "jwks.json")
	write := func(body []byte) {
		if err := os.WriteFile(path, body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(jwttest.JWKS(a))
	v := newVerifier(t, jwtConfig(func(c *config.JWT) { c.JWKSFile = path }), identity.Options{KidRefreshEvery: time.Hour})
	tokA := []byte(a.Sign(t, "RS256", claims("a")))
	for i := 0; i < 3; i++ { // cached after the first (ristretto admits asynchronously)
		if _, r := v.Verify(tokA); r != identity.OK {
			t.Fatal(r)
		}
		time.Sleep(5 * time.Millisecond)
	}
	write([]byte("{broken"))
	v.Reload()
	if _, r := v.Verify([]byte(a.Sign(t, "RS256", claims("a2")))); r != identity.OK {
		t.Fatalf("broken file dropped the keys: %v", r)
	}
	write(jwttest.JWKS(b))
	v.Reload()
	if _, r := v.Verify([]byte(b.Sign(t, "EdDSA", claims("b")))); r != identity.OK {
		t.Fatalf("new key after reload: %v", r)
	}
	if _, r := v.Verify([]byte(a.Sign(t, "RS256", claims("a3")))); r != identity.UnknownKey {
		t.Fatalf("withdrawn key: %v", r)
	}
	// A token cached before its key was withdrawn is not believed any more.
	if _, r := v.Verify(tokA); r != identity.UnknownKey {
		t.Fatalf("cached token of a withdrawn key: %v", r)
	}
}

// TestJWTGarbageFloodDoesNotGrowMemory: distinct garbage tokens are refused
// before the cache, so a flood of them leaves the heap where it was.
func TestJWTGarbageFloodDoesNotGrowMemory(t *testing.T) {
	k := jwttest.EC(t, "e1")
	srv := jwttest.NewServer(t, k)
	v := newVerifier(t, jwtConfig(func(c *config.JWT) { c.JWKSURL = srv.URL }), identity.Options{KidRefreshEvery: time.Hour})
	good := k.Sign(t, "ES256", claims("warm"))
	v.Verify([]byte(good))
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	h0 := heap()
	forged := jwttest.Tamper(good)
	for i := 0; i < 100_000; i++ {
		tok := fmt.Sprintf("eyJhbGciOiJFUzI1NiJ9.%d.garbage%d", i, i)
		if i%50 == 0 {
			tok = forged + fmt.Sprint(i%10) // well-formed, bad signature
		}
		if _, r := v.Verify([]byte(tok)); r == identity.OK {
			t.Fatalf("garbage %q accepted", tok)
		}
	}
	if grown := int64(heap()) - int64(h0); grown > 4<<20 {
		t.Fatalf("heap grew by %d bytes over 100,000 garbage tokens", grown)
	}
}

func BenchmarkJWTCached(b *testing.B) {
	k := jwttest.RSA(b, "r1")
	srv := jwttest.NewServer(b, k)
	v := newVerifier(b, jwtConfig(func(c *config.JWT) { c.JWKSURL = srv.URL }), identity.Options{})
	tok := []byte(k.Sign(b, "RS256", claims("bench-user")))
	for i := 0; ; i++ { // ristretto admits writes asynchronously
		if _, r := v.Verify(tok); r != identity.OK {
			b.Fatal(r)
		}
		time.Sleep(time.Millisecond)
		if i > 100 {
			break
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if u, r := v.Verify(tok); r != identity.OK || u != "bench-user" {
			b.Fatal(r)
		}
	}
}

func BenchmarkJWTUncachedRS256(b *testing.B) {
	k := jwttest.RSA(b, "r1")
	srv := jwttest.NewServer(b, k)
	v := newVerifier(b, jwtConfig(func(c *config.JWT) { c.JWKSURL = srv.URL }), identity.Options{CacheBytes: 1})
	tok := []byte(k.Sign(b, "RS256", claims("bench-user")))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, r := v.Verify(tok); r != identity.OK {
			b.Fatal(r)
		}
	}
}
