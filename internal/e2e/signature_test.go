package e2e_test

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/internal/signing"
)

// shopBuy returns the buy the shop received for user.
func shopBuy(t *testing.T, shop *e2e.Shop, user string) e2e.Attempt {
	t.Helper()
	for _, b := range shop.Buys() {
		if b.User == user {
			return b
		}
	}
	t.Fatalf("the shop got no buy for %s", user)
	return e2e.Attempt{}
}

// TestWinnerV2CoversTheRequestLineTheShopGot: a winner spelled
// /API/SECKILL/open/sku1/BUY;x=1 reaches the shop on the canonical path, and
// its v2 verifies over the method and request-target the shop received
// (query included), not over the client's spelling, another path, another
// query or another method. v1 verifies as before.
func TestWinnerV2CoversTheRequestLineTheShopGot(t *testing.T) {
	f := newFixture(t)
	wantWin(t, rawDo(t, f.p.Addr, "POST", "/API/SECKILL/open/sku1/BUY;x=1?ref=1", "sig-1"))
	o := shopBuy(t, f.shop, "sig-1")
	if o.Method != "POST" || o.Target != "/api/seckill/open/sku1/buy?ref=1" {
		t.Fatalf("shop got %s %s", o.Method, o.Target)
	}
	if !o.SigOK || o.SigKey != "default" || !o.SigV1OK {
		t.Fatalf("v2 ok %v (key %q, %v), v1 ok %v; header %q", o.SigOK, o.SigKey, o.SigErr, o.SigV1OK, o.Signature)
	}
	kr := signing.Keyring{{ID: "default", Secret: []byte(e2e.Secret)}}
	for _, tt := range []struct{ name, method, target string }{
		{"the client's spelling", "POST", "/API/SECKILL/open/sku1/BUY;x=1?ref=1"},
		{"another path", "POST", "/api/refund/open/sku1?ref=1"},
		{"another sku's path", "POST", "/api/seckill/open/sku2/buy?ref=1"},
		{"query dropped", "POST", "/api/seckill/open/sku1/buy"},
		{"another query", "POST", "/api/seckill/open/sku1/buy?ref=2"},
		{"another method", "PUT", "/api/seckill/open/sku1/buy?ref=1"},
	} {
		r := signing.Request{Token: o.Token, Activity: o.Activity, SKU: o.SKU, Qty: o.Qty, User: o.User, Method: tt.method, Target: tt.target}
		if _, err := kr.Verify(o.Signature, r, time.Now(), time.Minute); !errors.Is(err, signing.ErrMismatch) {
			t.Errorf("%s: v2 verified (%v), want a mismatch", tt.name, err)
		}
	}

	// The query as the proxy re-encodes it after reading the SKU from it
	// is what is signed and what the shop gets.
	wantWin(t, rawDo(t, f.p.Addr, "POST", "/q/buy?sku=sku1&qty=1&note=a%20b+c&x=%7e", "sig-2"))
	if o := shopBuy(t, f.shop, "sig-2"); !o.SigOK {
		t.Errorf("query-routed winner: v2 %v on %s %s", o.SigErr, o.Method, o.Target)
	}
}

// TestWinnerV2CoversTheBasePath: with upstream.url http://shop/base the shop
// gets /base/...; that is the path v2 signs.
func TestWinnerV2CoversTheBasePath(t *testing.T) {
	f := newFixture(t, func(o *e2e.Options) { o.ShopURL += "/base" })
	wantWin(t, f.buy(actOpen, "sig-base"))
	o := shopBuy(t, f.shop, "sig-base")
	if o.Target != "/base/api/seckill/open/sku1/buy" || !o.SigOK {
		t.Fatalf("shop got %s, v2 %v", o.Target, o.SigErr)
	}
}

// TestSigningKeyRotation walks the documented rotation on a live proxy:
// the new key is added second (it signs nothing: a shop that knows only the
// old key keeps verifying); the shop learns it; the new key is moved first
// by a reload (the shop, knowing both, verifies with the new key; one that
// knows only the old refuses by key id); the old key is removed.
func TestSigningKeyRotation(t *testing.T) {
	os.Setenv("SECKILL_E2E_KEY_OLD", "old-secret")
	os.Setenv("SECKILL_E2E_KEY_NEW", "new-secret")
	oldK := signing.Key{ID: "2026-11", Secret: []byte("old-secret")}
	newK := signing.Key{ID: "2026-12", Secret: []byte("new-secret")}
	const (
		oldFirst = `[{id: "2026-11", secret_env: SECKILL_E2E_KEY_OLD}, {id: "2026-12", secret_env: SECKILL_E2E_KEY_NEW}]`
		newFirst = `[{id: "2026-12", secret_env: SECKILL_E2E_KEY_NEW}, {id: "2026-11", secret_env: SECKILL_E2E_KEY_OLD}]`
		newOnly  = `[{id: "2026-12", secret_env: SECKILL_E2E_KEY_NEW}]`
	)
	f := newFixture(t, func(o *e2e.Options) { o.SigningKeys = oldFirst })
	f.shop.SetKeys(signing.Keyring{oldK})
	buy := func(user, wantKey string) {
		t.Helper()
		wantWin(t, f.buy(actOpen, user))
		o := shopBuy(t, f.shop, user)
		if wantKey == "" {
			if !errors.Is(o.SigErr, signing.ErrUnknownKey) {
				t.Errorf("%s: v2 %v (key %q), want ErrUnknownKey", user, o.SigErr, o.SigKey)
			}
			return
		}
		if !o.SigOK || o.SigKey != wantKey {
			t.Errorf("%s: v2 %v with key %q, want key %q", user, o.SigErr, o.SigKey, wantKey)
		}
	}
	reload := func(keys string) {
		t.Helper()
		opts := f.opts
		opts.SigningKeys = keys
		cfg := opts.Config(t)
		// Keep the listeners: only the keys change.
		cfg.Listen, cfg.Admin.Listen = f.p.Cfg.Listen, f.p.Cfg.Admin.Listen
		if err := f.p.Server.Apply(cfg); err != nil {
			t.Fatalf("reload: %v", err)
		}
	}

	buy("rot-1", "2026-11") // step 1: new key listed second, old shop verifies
	f.shop.SetKeys(signing.Keyring{oldK, newK})
	buy("rot-2", "2026-11") // step 2: the shop learnt the new key
	reload(newFirst)
	buy("rot-3", "2026-12") // step 3: new key signs, the shop knows both
	f.shop.SetKeys(signing.Keyring{oldK})
	buy("rot-4", "") // a shop that never learnt it refuses by key id
	f.shop.SetKeys(signing.Keyring{newK})
	reload(newOnly)
	buy("rot-5", "2026-12") // step 4: the old key is gone on both sides
}
