package e2e_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// Activities of the fixture config, one per situation a test needs.
const (
	actOpen   = "open"   // stock 100, default route
	actTiny   = "tiny"   // stock 1
	actFuture = "future" // starts in an hour
	actPast   = "past"   // ended an hour ago
	actCold   = "cold"   // never preheated
	actQuery  = "q"      // POST /q/buy?sku=&qty=
	actForm   = "f"      // POST /f/buy, form sku & qty
	actJSON   = "j"      // POST /j/buy, {"item":{"sku":..},"qty":..}
)

const soldOutMsg = "已经售罄"

// fixture is one Redis, one shop and one proxy with every fixture activity
// preheated except actCold. edit may change the options first.
type fixture struct {
	redis *e2e.Redis
	shop  *e2e.Shop
	p     *e2e.Proxy
	opts  e2e.Options
}

func newFixture(t *testing.T, edit ...func(*e2e.Options)) *fixture {
	t.Helper()
	f := &fixture{redis: e2e.StartRedis(t), shop: e2e.StartShop(t)}
	now := time.Now()
	f.opts = e2e.Options{
		Redis: f.redis.Addrs, ShopURL: f.shop.URL, UpstreamTimeout: 5 * time.Second,
		Messages: map[string]string{"SOLD_OUT": soldOutMsg},
		Activities: []e2e.Activity{
			{ID: actOpen, Stock: 100},
			{ID: actTiny, Stock: 1, Shards: 1},
			{ID: actFuture, Stock: 10, Start: now.Add(time.Hour), End: now.Add(2 * time.Hour)},
			{ID: actPast, Stock: 10, Start: now.Add(-2 * time.Hour), End: now.Add(-time.Hour)},
			{ID: actCold, Stock: 10},
			{ID: actQuery, Stock: 10, Path: "/q/buy", SkuFrom: "query:sku", QtyFrom: "query:qty", PerUserLimit: 3},
			{ID: actForm, Stock: 10, Path: "/f/buy", SkuFrom: "form:sku", QtyFrom: "form:qty", PerUserLimit: 3},
			{ID: actJSON, Stock: 10, Path: "/j/buy", SkuFrom: "json:/item/sku", QtyFrom: "json:/qty", PerUserLimit: 3},
		},
	}
	for _, e := range edit {
		e(&f.opts)
	}
	f.p = e2e.StartProxy(t, f.opts.Config(t))
	for _, a := range f.p.Cfg.Activities {
		if a.ID != actCold && a.ID != actPast {
			f.p.Preheat(t, a.ID)
		}
	}
	return f
}

func (f *fixture) buy(act, user string) e2e.Resp { return e2e.Buy(f.p.Addr, act, user) }

func (f *fixture) do(r e2e.Req) e2e.Resp { return e2e.Do(nil, f.p.Addr, r) }

func (f *fixture) act(t *testing.T, id string) *config.Activity { return f.p.Activity(t, id) }

// setPaused flips the kill switch through a client of its own, as the
// pause and resume commands do: the proxy learns of it only through Redis.
func (f *fixture) setPaused(t *testing.T, act string, paused bool) {
	t.Helper()
	st, err := store.OpenNow(f.p.Cfg.Redis, zap.NewNop())
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := st.SetPaused(ctx, act, paused); err != nil {
		t.Fatalf("SetPaused(%s, %v): %v", act, paused, err)
	}
}

// wantCode fails the test unless r is a proxy answer with code and status,
// as JSON.
func wantCode(t *testing.T, r e2e.Resp, code string, status int) {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("want %s: %v", code, r.Err)
	}
	if r.Code != code || r.Status != status || r.Header["Content-Type"] != "application/json" {
		t.Fatalf("got %d %s (%s), want %d %s", r.Status, r.Body, r.Header["Content-Type"], status, code)
	}
	if r.Str("message") == "" {
		t.Errorf("%s: no message in %s", code, r.Body)
	}
}

func wantWin(t *testing.T, r e2e.Resp) {
	t.Helper()
	if r.Err != nil || r.Code != "WIN" {
		t.Fatalf("want a win, got %d %s (err %v)", r.Status, r.Body, r.Err)
	}
}

// wantRetryAfter: SPEC §4's codes marked (`Retry-After`) carry the header,
// in whole seconds (RFC 9110 §10.2.3: delay-seconds), and the body's
// retry_after_ms says the same wait (the header rounds it up).
func wantRetryAfter(t *testing.T, r e2e.Resp) {
	t.Helper()
	secs, err := strconv.Atoi(r.Header["Retry-After"])
	if err != nil || secs < 1 {
		t.Errorf("%s: Retry-After %q, want a positive number of seconds", r.Code, r.Header["Retry-After"])
		return
	}
	ms, ok := r.Num("retry_after_ms")
	if !ok || ms <= 0 {
		t.Errorf("%s: retry_after_ms missing or not positive in %s", r.Code, r.Body)
		return
	}
	if want := (int64(ms) + 999) / 1000; int64(secs) != want {
		t.Errorf("%s: Retry-After %d s beside retry_after_ms %d (want %d s)", r.Code, secs, int64(ms), want)
	}
}
