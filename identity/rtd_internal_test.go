package identity

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/identity/jwttest"
)

// Red team rtd: a withdrawn key's tokens must stop verifying from the
// cache too (README "Keys from a URL": a key withdrawn from the set clears
// the token cache). The withdrawal was judged by kid only: a key without a
// kid (byKid holds none) and a kid published again over another key were
// never "withdrawn", and tokens the old key signed went on verifying from
// the cache for up to 10 minutes (their exp permitting) — the tokens of a
// key the issuer pulled because it leaked.

func rtdWithdraw(t *testing.T, old, next *jwttest.Key) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "jwks.json")
	chaos3Write(t, file, old)
	v, err := NewJWT(chaos3Config(file), Options{KidRefreshEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	tok := []byte(old.Sign(t, "ES256", chaos3Claims("alice")))
	if _, r := v.Verify(tok); r != OK {
		t.Fatalf("the old key's token before the withdrawal: %v", r)
	}
	v.cache.Wait()
	if _, ok := v.Cached(tok); !ok {
		t.Fatal("the old key's token was not cached")
	}
	chaos3Write(t, file, next)
	v.Reload()
	if u, r := v.Verify([]byte(old.Sign(t, "ES256", with(chaos3Claims("alice"), "jti", "fresh")))); r == OK {
		t.Fatalf("a fresh token of the withdrawn key verifies (as %q): the key set was not replaced", u)
	}
	if u, r := v.Verify(tok); r == OK {
		t.Errorf("BUG: a token of the withdrawn key still verifies from the cache (as %q)", u)
	}
	if _, r := v.Verify([]byte(next.Sign(t, "ES256", chaos3Claims("bob")))); r != OK {
		t.Fatalf("the new key's token: %v", r)
	}
}

// TestRTDKidlessKeyWithdrawnClearsTheCache: a JWKS of one key without a
// kid (issuers that publish a single key often leave it out), replaced by
// another.
func TestRTDKidlessKeyWithdrawnClearsTheCache(t *testing.T) {
	rtdWithdraw(t, jwttest.EC(t, ""), jwttest.EC(t, ""))
}

// TestRTDKidReusedForANewKeyClearsTheCache: the same kid published over
// new key material (a leaked key replaced under its name).
func TestRTDKidReusedForANewKeyClearsTheCache(t *testing.T) {
	rtdWithdraw(t, jwttest.EC(t, "k1"), jwttest.EC(t, "k1"))
}
