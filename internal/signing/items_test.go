package signing

import (
	"testing"
	"time"
)

// A bundle's items are signed (v1 and v2) when present, and a request
// without items signs exactly the bytes it always did.
func TestItemsSigned(t *testing.T) {
	kr := Keyring{{ID: "k1", Secret: []byte("s3cret")}}
	now := time.UnixMilli(1700000000000)
	single := Request{Token: "act.s1.0.x", Activity: "act", SKU: "s1", Qty: "1", User: "u1", Method: "POST", Target: "/buy"}
	bundle := Request{Token: "act.*.0.x", Activity: "act", SKU: "*", Qty: "3", User: "u1", Method: "POST", Target: "/bundle", Items: "a:1,b:2"}

	// The pinned v1 of a single buy (TestSignVerify's form) is unchanged.
	old := Sign([]byte("s3cret"), now.UnixMilli(), single.Token, single.Activity, single.SKU, single.Qty, single.User)
	if _, err := kr.VerifyV1(old, single, now, time.Minute); err != nil {
		t.Fatalf("a single buy's v1 changed: %v", err)
	}

	h := kr.Sign(now.UnixMilli(), bundle)
	if got := NewSigner(kr).Sign(now.UnixMilli(), bundle); got != h {
		t.Fatalf("Signer and Keyring disagree on a bundle:\n%s\n%s", got, h)
	}
	for _, verify := range []func(string, Request, time.Time, time.Duration) (string, error){kr.Verify, kr.VerifyV1} {
		if _, err := verify(h, bundle, now, time.Minute); err != nil {
			t.Fatalf("bundle signature does not verify: %v", err)
		}
		other := bundle
		other.Items = "a:2,b:1"
		if _, err := verify(h, other, now, time.Minute); err != ErrMismatch {
			t.Fatalf("other items verify: %v, want ErrMismatch", err)
		}
		other.Items = ""
		if _, err := verify(h, other, now, time.Minute); err != ErrMismatch {
			t.Fatalf("items dropped verify: %v, want ErrMismatch", err)
		}
	}
}
