// Package jwttest makes signing keys, tokens and an in-process JWKS server
// for tests of JWT identity.
package jwttest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	jwt "github.com/golang-jwt/jwt/v5"
)

// Key is a private signing key with its kid.
type Key struct {
	Kid  string
	Priv crypto.Signer
	jwk  map[string]string
}

// RSA makes a 2048-bit RSA key.
func RSA(t testing.TB, kid string) *Key {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return &Key{Kid: kid, Priv: k, jwk: map[string]string{"kty": "RSA", "n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes())}}
}

// EC makes a P-256 key.
func EC(t testing.TB, kid string) *Key {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pt, err := k.PublicKey.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return &Key{Kid: kid, Priv: k, jwk: map[string]string{"kty": "EC", "crv": "P-256", "x": b64(pt[1:33]), "y": b64(pt[33:])}}
}

// Ed makes an Ed25519 key.
func Ed(t testing.TB, kid string) *Key {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &Key{Kid: kid, Priv: priv, jwk: map[string]string{"kty": "OKP", "crv": "Ed25519", "x": b64(pub)}}
}

// WithKid is k under another kid ("" = none), for forged headers.
func (k *Key) WithKid(kid string) *Key { c := *k; c.Kid = kid; return &c }

// Sign makes a token with alg (RS256, PS256, ES256, EdDSA, ...).
func (k *Key) Sign(t testing.TB, alg string, c jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.GetSigningMethod(alg), c)
	if k.Kid != "" {
		tok.Header["kid"] = k.Kid
	}
	s, err := tok.SignedString(k.Priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// HS makes an HS256 token keyed with secret (for algorithm confusion: a
// public key's bytes).
func HS(t testing.TB, kid string, secret []byte, c jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(secret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// None makes an unsigned token (alg "none").
func None(t testing.TB, c jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodNone, c).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Tamper rewrites tok's payload (sub becomes "mallory"), keeping its
// header and signature: a forgery of another user.
func Tamper(tok string) string {
	parts := strings.Split(tok, ".")
	raw, _ := base64.RawURLEncoding.DecodeString(parts[1])
	var c map[string]any
	_ = json.Unmarshal(raw, &c)
	c["sub"] = "mallory"
	raw, _ = json.Marshal(c)
	return parts[0] + "." + b64(raw) + "." + parts[2]
}

// JWKS renders keys' public halves as a key set.
func JWKS(keys ...*Key) []byte {
	var doc struct {
		Keys []map[string]string `json:"keys"`
	}
	for _, k := range keys {
		m := map[string]string{"use": "sig"}
		for n, v := range k.jwk {
			m[n] = v
		}
		if k.Kid != "" {
			m["kid"] = k.Kid
		}
		doc.Keys = append(doc.Keys, m)
	}
	b, _ := json.Marshal(doc)
	return b
}

// Server is an in-process JWKS endpoint whose key set can be swapped.
type Server struct {
	*httptest.Server
	mu      sync.Mutex
	body    []byte
	fail    bool
	fetches atomic.Int64
	// CacheControl is sent with each answer ("" = none).
	CacheControl string
}

// NewServer serves keys until the test ends.
func NewServer(t testing.TB, keys ...*Key) *Server {
	s := &Server{body: JWKS(keys...)}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.fetches.Add(1)
		s.mu.Lock()
		body, fail, cc := s.body, s.fail, s.CacheControl
		s.mu.Unlock()
		if fail {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		if cc != "" {
			w.Header().Set("Cache-Control", cc)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

// Set publishes keys instead of the current set.
func (s *Server) Set(keys ...*Key) { s.mu.Lock(); s.body = JWKS(keys...); s.mu.Unlock() }

// Fail makes the endpoint answer 503 (true) or serve again (false).
func (s *Server) Fail(fail bool) { s.mu.Lock(); s.fail = fail; s.mu.Unlock() }

// Fetches counts requests served so far.
func (s *Server) Fetches() int64 { return s.fetches.Load() }

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
