package admission_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	jwt "github.com/golang-jwt/jwt/v5"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/identity/jwttest"
)

// BenchmarkRefusedHandlerJWT is BenchmarkRefusedHandler with
// identity.user.jwt on (a cached token on every request): the refused
// paths must stay at 0.8x or better of the header identity's.
func BenchmarkRefusedHandlerJWT(b *testing.B) {
	k := jwttest.RSA(b, "k1")
	path := filepath.Join(b.TempDir(), "jwks.json")
	if err := os.WriteFile(path, jwttest.JWKS(k), 0o600); err != nil {
		b.Fatal(err)
	}
	withJWT := func(cfg *config.Config) *config.Config {
		cfg.Identity.User = config.Source{JWT: config.JWT{Header: "Authorization", JWKSFile: path, Issuer: "iss", Audience: "shop",
			Claim: "sub", Leeway: 30 * time.Second, Algorithms: []string{"RS256"}}}
		return cfg
	}
	now := time.Now()
	tok := "Bearer " + k.Sign(b, "RS256", jwt.MapClaims{"sub": "user-1", "iss": "iss", "aud": "shop",
		"exp": now.Add(time.Hour).Unix(), "iat": now.Unix()})
	run := func(b *testing.B, h *handler, want int) {
		var c buyCtx
		prepare := func() {
			c.prepare("/buy/act/sku1", "ignored", "203.0.113.9")
			c.ctx.Request.Header.Set("Authorization", tok)
		}
		// Warm the token cache (its writes are admitted asynchronously).
		for i := 0; i < 50; i++ {
			prepare()
			h.run(&c)
			time.Sleep(time.Millisecond)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			prepare()
			if got := h.run(&c); got != want {
				b.Fatalf("status %d, want %d: %s", got, want, c.ctx.Response.Body())
			}
		}
	}
	b.Run("RATE_LIMITED", func(b *testing.B) {
		// Timestamps are in the past: the limiter runs on a fixed clock,
		// the token's exp on the wall clock.
		start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		cfg := withJWT(testConfig(b, start, config.Limits{PerIP: config.Rate{Rate: 1, Burst: 1}}))
		h := newHandler(b, cfg, newFake(), newClock(start).now)
		run(b, h, 429)
	})
	b.Run("NOT_STARTED", func(b *testing.B) {
		start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		cfg := withJWT(testConfig(b, start, noLimits()))
		h := newHandler(b, cfg, newFake(), newClock(start.Add(-time.Hour)).now)
		run(b, h, 403)
	})
	b.Run("UNAUTHENTICATED", func(b *testing.B) {
		start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		cfg := withJWT(testConfig(b, start, noLimits()))
		h := newHandler(b, cfg, newFake(), newClock(start).now)
		var c buyCtx
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			c.prepare("/buy/act/sku1", "scalper", "203.0.113.9")
			if got := h.run(&c); got != 401 {
				b.Fatalf("status %d: %s", got, c.ctx.Response.Body())
			}
		}
	})
}
