package identity

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	jwt "github.com/golang-jwt/jwt/v5"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/identity/jwttest"
)

// Red team chaos3 (docs/decisions.md §57): a key rotation mid-sale, as
// the chaos suite's jwt mix does it, racing what the verifier does at the
// same moment.

func chaos3Config(file string) config.JWT {
	return config.JWT{Header: "Authorization", JWKSFile: file, Issuer: "https://auth.c3", Audience: "shop", Claim: "sub",
		Leeway: 30 * time.Second, Algorithms: []string{"ES256"}}
}

func chaos3Claims(sub string) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{"sub": sub, "iss": "https://auth.c3", "aud": "shop", "exp": now.Add(time.Hour).Unix(), "iat": now.Unix()}
}

func chaos3Write(t *testing.T, file string, keys ...*jwttest.Key) {
	t.Helper()
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, jwttest.JWKS(keys...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
}

// TestJWKSFileReplacedWhileBeingReadIsReadAgain: the operator publishes
// k2 beside k1 and, a moment later, withdraws k1; the second write lands
// while the verifier is reading the first. The verifier kept the first
// file's keys under the second file's stamp (taken after the read), so the
// poll never saw a change: the withdrawn k1 stayed trusted until the next
// edit or SIGHUP. The stamp is taken before the read now: the poll reads
// the second file.
func TestJWKSFileReplacedWhileBeingReadIsReadAgain(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "jwks.json")
	k1, k2 := jwttest.EC(t, "k1"), jwttest.EC(t, "k2")
	chaos3Write(t, file, k1)
	var armed atomic.Bool
	testHookJWKSRead = func() {
		if armed.CompareAndSwap(true, false) {
			time.Sleep(20 * time.Millisecond) // a later mtime, whatever the clock's grain
			chaos3Write(t, file, k2)          // the withdrawal of k1, as the first write is read
		}
	}
	defer func() { testHookJWKSRead = nil }()
	v, err := NewJWT(chaos3Config(file), Options{KidRefreshEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	armed.Store(true)
	time.Sleep(20 * time.Millisecond)
	chaos3Write(t, file, k1, k2)
	v.Reload() // SIGHUP (or the poll) reads it; k1 is withdrawn meanwhile
	deadline := time.Now().Add(3 * filePoll)
	for {
		// A token never seen before: judged by the keys, not the cache.
		_, r := v.Verify([]byte(k1.Sign(t, "ES256", with(chaos3Claims("alice"), "jti", time.Now().String()))))
		if r != OK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a token of the withdrawn key k1 still verifies %v after the file was replaced (the verifier never read it again)", 3*filePoll)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, r := v.Verify([]byte(k2.Sign(t, "ES256", chaos3Claims("bob")))); r != OK {
		t.Fatalf("k2 token: %v", r)
	}
}

// TestTokenVerifiedAsItsKeyIsWithdrawnIsNotCached: a token of k1 seen for
// the first time while k1 is withdrawn (the key set swapped and the cache
// cleared between its signature check and its caching) was cached after
// the clear: it went on verifying for its whole life (up to 10 minutes),
// signed by a key the issuer withdrew. The answer to that one request may
// go either way (it is concurrent with the withdrawal); later ones must be
// refused.
func TestTokenVerifiedAsItsKeyIsWithdrawnIsNotCached(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "jwks.json")
	k1, k2 := jwttest.EC(t, "k1"), jwttest.EC(t, "k2")
	chaos3Write(t, file, k1, k2)
	var armed atomic.Bool
	var v *JWT
	testHookBeforeCache = func() {
		if armed.CompareAndSwap(true, false) {
			chaos3Write(t, file, k2)
			v.Reload() // k1 withdrawn: the key set swapped, the cache cleared
		}
	}
	defer func() { testHookBeforeCache = nil }()
	var err error
	if v, err = NewJWT(chaos3Config(file), Options{KidRefreshEvery: time.Hour}); err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	tok := []byte(k1.Sign(t, "ES256", chaos3Claims("alice")))
	armed.Store(true)
	v.Verify(tok) // concurrent with the withdrawal: either answer
	if armed.Load() {
		t.Fatal("the hook did not run")
	}
	v.cache.Wait()
	if u, r := v.Verify(tok); r == OK {
		t.Fatalf("a token of the withdrawn key k1 verifies (as %q) after the withdrawal: cached past the clear", u)
	}
}

func with(c jwt.MapClaims, k string, v any) jwt.MapClaims {
	c[k] = v
	return c
}
