package admission_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/admission"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/proxy"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// clock is an injectable server clock that tests move by hand.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock    { c := &clock{}; c.ns.Store(t.UnixNano()); return c }
func (c *clock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }

// fakeStore is a preheated activity that admits everyone, counting calls:
// for tests of the local layers, where Redis would only add noise.
type fakeStore struct {
	flags    store.Flags
	reserves atomic.Int64
}

func (f *fakeStore) Flags(context.Context, string) (store.Flags, error) { return f.flags, nil }
func (f *fakeStore) Reserve(_ context.Context, q store.ReserveRequest) (store.ReserveResult, error) {
	f.reserves.Add(1)
	return store.ReserveResult{Code: lua.OK, Token: store.Token{Activity: q.Activity, SKU: q.SKU, ID: "t"}}, nil
}

func (f *fakeStore) Repeat(context.Context, store.ReserveRequest) (store.ReserveResult, bool, error) {
	return store.ReserveResult{}, false, nil
}

func newFake() *fakeStore { return &fakeStore{flags: store.Flags{Ready: true, Shards: 1}} }

// testConfig is one open activity with one SKU; limits as given.
func testConfig(t testing.TB, now time.Time, limits config.Limits) *config.Config {
	t.Helper()
	cfg := &config.Config{
		Listen:         ":0",
		PublicPrefix:   "/_seckill",
		Upstream:       config.Upstream{URL: "http://127.0.0.1:1", Timeout: time.Second, MaxConns: 4},
		TrustedProxies: []string{"127.0.0.1/32"},
		Identity: config.Identity{
			User: config.Source{Header: "X-User-Id"}, Device: config.Source{Header: "X-Device-Id"},
			RequestID: config.Source{Header: "X-Request-Id"},
		},
		Limits: limits,
		Activities: []config.Activity{{
			ID:    "act",
			Route: config.Route{Method: "POST", Path: "/buy/{activity}/{sku}", SkuFrom: "path"},
			Start: now.Add(-time.Minute), End: now.Add(time.Hour),
			SKUs:         []config.SKU{{ID: "sku1", Stock: 10}},
			PerUserLimit: 1, MaxQty: 1, Shards: 2,
			Mode:           config.ModeSync,
			KeyTTLAfterEnd: time.Hour, PendingTimeout: time.Minute,
		}},
	}
	return cfg
}

func noLimits() config.Limits { return config.Limits{} }

// handler is a proxy in front of a pipeline, driven in-process.
type handler struct {
	h        fasthttp.RequestHandler
	admitted atomic.Int64
	pipe     *admission.Pipeline
	m        *metrics.Metrics
}

func newHandler(t testing.TB, cfg *config.Config, s admission.Store, now func() time.Time, opts ...admission.Option) *handler {
	t.Helper()
	m := metrics.New()
	pipe := admission.New(s, m, zap.NewNop(), now, opts...)
	t.Cleanup(pipe.Close)
	pipe.Apply(cfg)
	h := &handler{pipe: pipe, m: m}
	srv, err := proxy.New(cfg, noForward{pipe, &h.admitted}, nilBook{}, m, zap.NewNop())
	if err != nil {
		t.Fatalf("proxy.New: %v", err)
	}
	h.h = srv.Handler()
	return h
}

// noForward counts winners and answers them 202 instead of calling the
// shop: these tests are about who gets admitted, not about forwarding.
type noForward struct {
	p        *admission.Pipeline
	admitted *atomic.Int64
}

func (n noForward) Decide(ctx context.Context, r *admission.Request) admission.Decision {
	d := n.p.Decide(ctx, r)
	if d.Code == admission.Admitted {
		n.admitted.Add(1)
		d.Code = admission.Queued
	}
	return d
}

// nilBook is a proxy.Book for tests whose winners never reach the shop.
type nilBook struct{ proxy.Book }

var proxyAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5555}

// buyCtx is a reusable request through a trusted proxy (127.0.0.1).
type buyCtx struct {
	ctx fasthttp.RequestCtx
}

func (b *buyCtx) prepare(path, user, xff string) {
	b.ctx.Request.Reset()
	b.ctx.Response.Reset()
	b.ctx.Request.Header.SetMethod("POST")
	b.ctx.Request.SetRequestURI(path)
	b.ctx.Request.Header.Set("X-User-Id", user)
	if xff != "" {
		b.ctx.Request.Header.Set("X-Forwarded-For", xff)
	}
	b.ctx.SetRemoteAddr(proxyAddr)
}

// run serves one request and returns the status.
func (h *handler) run(b *buyCtx) int {
	h.h(&b.ctx)
	return b.ctx.Response.StatusCode()
}

func bg(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func zapNop() *zap.Logger { return zap.NewNop() }

func newHandlerMetrics() *metrics.Metrics { return metrics.New() }
