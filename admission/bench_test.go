package admission_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/admission"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// Locally refused paths, per request, with allocations (-benchmem):
//
//	go test -run XXX -bench 'Refused' -benchmem ./admission/

func soldOutInstance(b *testing.B, limits ...config.Limits) (*instance, *config.Config) {
	srv := redistest.Start(b)
	cfg := realConfig(b, 1, 1)
	if len(limits) > 0 {
		cfg.Limits = limits[0]
	}
	a := &cfg.Activities[0]
	in := startInstance(b, redisCfg([]string{srv.Addr}, false), cfg, time.Now)
	preheat(b, in.st, a)
	if d := in.pipe.Decide(bg(b), req(a, "winner")); d.Code != admission.Admitted {
		b.Fatalf("winner: %v", d.Code)
	}
	eventually(b, 2*time.Second, "sold out", func() bool { return in.pipe.Decide(bg(b), req(a, "x")).Code == admission.SoldOut })
	return in, cfg
}

func BenchmarkRefusedDecide(b *testing.B) {
	b.Run("SOLD_OUT", func(b *testing.B) {
		in, cfg := soldOutInstance(b)
		r := req(&cfg.Activities[0], "loser")
		ctx := bg(b)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if in.pipe.Decide(ctx, r).Code != admission.SoldOut {
				b.Fatal("not sold out")
			}
		}
	})
	b.Run("RATE_LIMITED", func(b *testing.B) {
		start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		cfg := testConfig(b, start, config.Limits{PerIP: config.Rate{Rate: 1, Burst: 1}})
		clk := newClock(start)
		p := admission.New(newFake(), newHandlerMetrics(), zapNop(), clk.now)
		b.Cleanup(p.Close)
		p.Apply(cfg)
		r := req(&cfg.Activities[0], "u")
		ctx := bg(b)
		p.Decide(ctx, r)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if p.Decide(ctx, r).Code != admission.RateLimited {
				b.Fatal("not limited")
			}
		}
	})
	b.Run("NOT_STARTED", func(b *testing.B) {
		start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		cfg := testConfig(b, start, noLimits())
		clk := newClock(start.Add(-time.Hour))
		p := admission.New(newFake(), newHandlerMetrics(), zapNop(), clk.now)
		b.Cleanup(p.Close)
		r := req(&cfg.Activities[0], "u")
		ctx := bg(b)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if p.Decide(ctx, r).Code != admission.NotStarted {
				b.Fatal("started")
			}
		}
	})
}

// BenchmarkRefusedHandler is the same paths through the proxy's fasthttp
// handler (parse, admission, JSON answer), one RequestCtx reused.
func BenchmarkRefusedHandler(b *testing.B) {
	run := func(b *testing.B, h *handler, want int) {
		var c buyCtx
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			c.prepare("/buy/act/sku1", "user-1", "203.0.113.9")
			if got := h.run(&c); got != want {
				b.Fatalf("status %d, want %d: %s", got, want, c.ctx.Response.Body())
			}
		}
	}
	b.Run("SOLD_OUT", func(b *testing.B) {
		in, cfg := soldOutInstance(b)
		h := newHandler(b, cfg, in.st, time.Now)
		// The handler's own pipeline needs its refresher for the snapshot.
		go h.pipe.Run(bg(b))
		var c buyCtx
		eventually(b, 2*time.Second, "snapshot", func() bool {
			c.prepare("/buy/act/sku1", "w", "203.0.113.9")
			return h.run(&c) == 410
		})
		run(b, h, 410)
	})
	// A first wave's buyer: new to every limiter, the memo and the
	// request-id locks (user, device, request id and address all new), with
	// the limits on as the bench scripts set them.
	b.Run("SOLD_OUT_NEW_BUYER", func(b *testing.B) {
		hi := config.Rate{Rate: 1e6, Burst: 1e6}
		in, cfg := soldOutInstance(b, config.Limits{PerIP: hi, PerDevice: hi, PerUser: hi})
		h := newHandler(b, cfg, in.st, time.Now)
		go h.pipe.Run(bg(b))
		var c buyCtx
		eventually(b, 2*time.Second, "snapshot", func() bool {
			c.prepare("/buy/act/sku1", "w", "203.0.113.9")
			return h.run(&c) == 410
		})
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			n := strconv.Itoa(i)
			c.prepare("/buy/act/sku1", "user-"+n, fmt.Sprintf("10.%d.%d.%d", byte(i>>16), byte(i>>8), byte(i)))
			c.ctx.Request.Header.Set("X-Device-Id", "dev-"+n)
			c.ctx.Request.Header.Set("X-Request-Id", "rid-"+n)
			if got := h.run(&c); got != 410 {
				b.Fatalf("status %d, want 410: %s", got, c.ctx.Response.Body())
			}
		}
	})
	b.Run("RATE_LIMITED", func(b *testing.B) {
		start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		cfg := testConfig(b, start, config.Limits{PerIP: config.Rate{Rate: 1, Burst: 1}})
		h := newHandler(b, cfg, newFake(), newClock(start).now)
		var c buyCtx
		c.prepare("/buy/act/sku1", "user-1", "203.0.113.9")
		h.run(&c)
		run(b, h, 429)
	})
	b.Run("NOT_STARTED", func(b *testing.B) {
		start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		cfg := testConfig(b, start, noLimits())
		h := newHandler(b, cfg, newFake(), newClock(start.Add(-time.Hour)).now)
		run(b, h, 403)
	})
}

// BenchmarkScriptHandler is the repeat buyer's path through the handler:
// one reserve script per request, answered by the buyer's last reservation
// (202 PENDING here: the first buy was decided directly, never forwarded).
// It is serial (one RequestCtx), so ns/op includes a Redis round trip;
// allocs/op is the Go side's.
//
//	go test -run XXX -bench ScriptHandler -benchmem ./admission/
func BenchmarkScriptHandler(b *testing.B) {
	srv := redistest.Start(b)
	cfg := realConfig(b, 100, 1)
	a := &cfg.Activities[0]
	in := startInstance(b, redisCfg([]string{srv.Addr}, false), cfg, time.Now)
	preheat(b, in.st, a)
	if d := in.pipe.Decide(bg(b), req(a, "user-1")); d.Code != admission.Admitted {
		b.Fatalf("first buy: %v", d.Code)
	}
	h := newHandler(b, cfg, in.st, time.Now)
	go h.pipe.Run(bg(b))
	var c buyCtx
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.prepare("/buy/act/sku1", "user-1", "203.0.113.9")
		if got := h.run(&c); got != 202 {
			b.Fatalf("status %d, want 202: %s", got, c.ctx.Response.Body())
		}
	}
}
