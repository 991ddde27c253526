package signing

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSignVerify(t *testing.T) {
	secret := []byte("s3cret")
	h := Sign(secret, 1700000000000, "tok", "act", "sku", "1", "u1")
	tests := []struct {
		name              string
		header, tok, user string
		secret            []byte
		wantOK            bool
	}{
		{"good", h, "tok", "u1", secret, true},
		{"other token", h, "tok2", "u1", secret, false},
		{"other user", h, "tok", "u2", secret, false},
		{"other secret", h, "tok", "u1", []byte("x"), false},
		{"malformed", "garbage", "tok", "u1", secret, false},
		{"no v1", "t=1700000000000", "tok", "u1", secret, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms, ok := Verify(tt.secret, tt.header, tt.tok, "act", "sku", "1", tt.user)
			if ok != tt.wantOK {
				t.Fatalf("Verify ok=%v want %v", ok, tt.wantOK)
			}
			if ok && ms != 1700000000000 {
				t.Fatalf("t=%d", ms)
			}
		})
	}
}

func TestKeyringSignVerify(t *testing.T) {
	now := time.UnixMilli(1796090400000)
	oldK, newK := Key{ID: "2026-11", Secret: []byte("old-secret")}, Key{ID: "2026-12", Secret: []byte("new-secret")}
	shop := Keyring{newK, oldK}
	req := Request{Token: "act.sku.1.AbC", Activity: "act", SKU: "sku", Qty: "1", User: "u1", Method: "POST", Target: "/api/seckill/act/sku/buy?ref=1"}
	h := Keyring{newK, oldK}.Sign(now.UnixMilli(), req)
	with := func(f func(*Request)) Request { r := req; f(&r); return r }
	tests := []struct {
		name    string
		ring    Keyring
		header  string
		req     Request
		wantKey string
		wantErr error
	}{
		{"valid", shop, h, req, "2026-12", nil},
		{"shop lists only the signing key", Keyring{newK}, h, req, "2026-12", nil},
		{"other method", shop, h, with(func(r *Request) { r.Method = "GET" }), "", ErrMismatch},
		{"other path", shop, h, with(func(r *Request) { r.Target = "/api/refund/act/sku?ref=1" }), "", ErrMismatch},
		{"other query", shop, h, with(func(r *Request) { r.Target = "/api/seckill/act/sku/buy?ref=2" }), "", ErrMismatch},
		{"query dropped", shop, h, with(func(r *Request) { r.Target = "/api/seckill/act/sku/buy" }), "", ErrMismatch},
		{"other token", shop, h, with(func(r *Request) { r.Token += "x" }), "", ErrMismatch},
		{"other user", shop, h, with(func(r *Request) { r.User = "u2" }), "", ErrMismatch},
		{"other qty", shop, h, with(func(r *Request) { r.Qty = "2" }), "", ErrMismatch},
		{"k changed to another known key", shop, strings.Replace(h, "k=2026-12", "k=2026-11", 1), req, "", ErrMismatch},
		{"shop does not know the key", Keyring{oldK}, h, req, "", ErrUnknownKey},
		{"same id, wrong secret", Keyring{{ID: "2026-12", Secret: []byte("x")}}, h, req, "", ErrMismatch},
		{"upper-case hex", shop, h[:strings.Index(h, "v2=")+3] + strings.ToUpper(h[strings.Index(h, "v2=")+3:]), req, "2026-12", nil},
		{"fields reordered, spaces", shop, reorder(h), req, "2026-12", nil},
		{"unknown field ignored", shop, h + ",v3=abc", req, "2026-12", nil},
		{"v2 removed", shop, cut(h, "v2"), req, "", ErrMalformed},
		{"v2 twice", shop, h + "," + field(Keyring{newK}.Sign(now.UnixMilli(), with(func(r *Request) { r.Target = "/x" })), "v2"), req, "", ErrMalformed},
		{"k twice", shop, h + ",k=2026-11", req, "", ErrMalformed},
		{"stale", shop, Keyring{newK}.Sign(now.Add(-6*time.Minute).UnixMilli(), req), req, "", ErrStale},
		{"from the future", shop, Keyring{newK}.Sign(now.Add(6*time.Minute).UnixMilli(), req), req, "", ErrStale},
		{"at the window's edge", shop, Keyring{newK}.Sign(now.Add(-5*time.Minute).UnixMilli(), req), req, "2026-12", nil},
		{"no t", shop, cut(h, "t"), req, "", ErrMalformed},
		{"negative t", shop, strings.Replace(h, "t=", "t=-", 1), req, "", ErrMalformed},
		{"short v2", shop, h[:len(h)-2], req, "", ErrMalformed},
		{"garbage", shop, "garbage", req, "", ErrMalformed},
		{"empty", shop, "", req, "", ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := tt.ring.Verify(tt.header, tt.req, now, 5*time.Minute)
			if !errors.Is(err, tt.wantErr) || id != tt.wantKey {
				t.Fatalf("Verify = %q, %v; want %q, %v", id, err, tt.wantKey, tt.wantErr)
			}
		})
	}
}

// TestV1KeptForCompatibility: the v1 of a key-id header verifies as today's
// (the one-secret Verify of issue 8's shops, and the keyring's VerifyV1,
// which ignores method and path), and a v1-only header from an older proxy
// verifies with the keyring's VerifyV1 but not as v2.
func TestV1KeptForCompatibility(t *testing.T) {
	now := time.Now()
	k := Key{ID: "default", Secret: []byte("s3cret")}
	req := Request{Token: "tok", Activity: "act", SKU: "sku", Qty: "1", User: "u1", Method: "POST", Target: "/buy"}
	h := Keyring{k}.Sign(now.UnixMilli(), req)
	if !strings.HasPrefix(h, "t=") || !strings.Contains(h, ",k=default,v1=") || !strings.Contains(h, ",v2=") {
		t.Fatalf("header %q is not t=..,k=..,v1=..,v2=..", h)
	}
	if ms, ok := Verify(k.Secret, h, "tok", "act", "sku", "1", "u1"); !ok || ms != now.UnixMilli() {
		t.Errorf("one-secret v1 Verify of a key-id header = %d, %v", ms, ok)
	}
	other := req
	other.Target, other.Method = "/elsewhere", "PUT"
	if id, err := (Keyring{k}).VerifyV1(h, other, now, time.Minute); err != nil || id != "default" {
		t.Errorf("VerifyV1 = %q, %v (v1 does not cover method and path)", id, err)
	}
	legacy := Sign(k.Secret, now.UnixMilli(), "tok", "act", "sku", "1", "u1")
	if id, err := (Keyring{{ID: "new", Secret: []byte("x")}, k}).VerifyV1(legacy, req, now, time.Minute); err != nil || id != "default" {
		t.Errorf("VerifyV1 of a header without k = %q, %v; want every key tried", id, err)
	}
	if _, err := (Keyring{k}).Verify(legacy, req, now, time.Minute); !errors.Is(err, ErrMalformed) {
		t.Errorf("Verify of a v1-only header = %v, want ErrMalformed (no v2)", err)
	}
	if h := (Keyring{{Secret: []byte("s")}}).Sign(1, req); strings.Contains(h, "k=") {
		t.Errorf("a key without id still sent k: %q", h)
	}
}

// TestRotation walks the documented rotation: the proxy signs with the
// first key; a new key listed second signs nothing, so a shop that knows
// only the old one keeps verifying; once the new key is moved first, a shop
// that learnt it verifies and one that did not refuses by key id.
func TestRotation(t *testing.T) {
	now := time.Now()
	oldK, newK := Key{ID: "2026-11", Secret: []byte("old")}, Key{ID: "2026-12", Secret: []byte("new")}
	req := Request{Token: "tok", Activity: "act", SKU: "sku", Qty: "1", User: "u1", Method: "POST", Target: "/buy"}
	oldShop, bothShop := Keyring{oldK}, Keyring{oldK, newK}
	step1 := Keyring{oldK, newK}.Sign(now.UnixMilli(), req) // new key added second
	for name, shop := range map[string]Keyring{"old shop": oldShop, "shop knowing both": bothShop} {
		if id, err := shop.Verify(step1, req, now, time.Minute); err != nil || id != "2026-11" {
			t.Errorf("step 1, %s: %q, %v", name, id, err)
		}
	}
	step2 := Keyring{newK, oldK}.Sign(now.UnixMilli(), req) // new key moved first
	if id, err := bothShop.Verify(step2, req, now, time.Minute); err != nil || id != "2026-12" {
		t.Errorf("step 2, shop knowing both: %q, %v", id, err)
	}
	if _, err := oldShop.Verify(step2, req, now, time.Minute); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("step 2, old shop: %v, want ErrUnknownKey", err)
	}
}

func field(h, name string) string {
	for p := range strings.SplitSeq(h, ",") {
		if strings.HasPrefix(p, name+"=") {
			return p
		}
	}
	return ""
}

func cut(h, name string) string {
	var out []string
	for p := range strings.SplitSeq(h, ",") {
		if !strings.HasPrefix(p, name+"=") {
			out = append(out, p)
		}
	}
	return strings.Join(out, ",")
}

func reorder(h string) string {
	return strings.Join([]string{field(h, "v2"), field(h, "k"), field(h, "v1"), field(h, "t")}, ", ")
}

// TestSignerSignsAsKeyring: the pooled signer's header is byte for byte
// Keyring.Sign's, for every key shape, over reused states and concurrently.
func TestSignerSignsAsKeyring(t *testing.T) {
	rings := []Keyring{nil, {{ID: "", Secret: []byte("s")}}, {{ID: "k2", Secret: []byte("a longer secret, over one block of sha256 ........................................")}, {ID: "k1", Secret: []byte("old")}}}
	reqs := []Request{
		{Token: "t.1", Activity: "act", SKU: "sku", Qty: "1", User: "u", Method: "POST", Target: "/buy?x=1"},
		{Token: "act_1001.30021.3.abcdef0123456789", Activity: "act_1001", SKU: "30021", Qty: "2", User: strings.Repeat("u", 300), Method: "PUT", Target: "/" + strings.Repeat("p", 600)},
	}
	for _, kr := range rings {
		s := NewSigner(kr)
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 50; i++ {
					r := reqs[i%len(reqs)]
					now := int64(1_700_000_000_000 + i)
					if got, want := s.Sign(now, r), kr.Sign(now, r); got != want {
						t.Errorf("Signer.Sign = %q, Keyring.Sign = %q", got, want)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
}

// BenchmarkSignerSign is one winner's signature (both versions).
//
//	go test -run XXX -bench SignerSign -benchmem ./internal/signing/
func BenchmarkSignerSign(b *testing.B) {
	s := NewSigner(Keyring{{ID: "k1", Secret: []byte("a secret of the usual thirty-two")}})
	r := Request{Token: "win:0:s:VwbEf-mW29deKf0_wS5o0A", Activity: "win", SKU: "s", Qty: "1", User: "w123456", Method: "POST", Target: "/api/seckill/win/s/buy"}
	b.ReportAllocs()
	for b.Loop() {
		s.Sign(1_700_000_000_000, r)
	}
}
