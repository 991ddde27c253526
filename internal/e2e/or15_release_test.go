package e2e_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/admin"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

type or15Ready struct{}

func (or15Ready) Ping(context.Context) error { return nil }

// or15Admin serves p's admin API (as serve mounts it) with token "tok".
func or15Admin(t *testing.T, p *e2e.Proxy) func(method, query string) (int, map[string]string) {
	adm := admin.New(p.Metrics, or15Ready{}, "tok", zap.NewNop())
	admin.MountAll(adm, p.Store, reservation.NewReconciler(p.Store, p.Metrics, zap.NewNop()), p.Metrics, func() *config.Config { return p.Cfg })
	hs := httptest.NewServer(adm)
	t.Cleanup(hs.Close)
	return func(method, query string) (int, map[string]string) {
		req, _ := http.NewRequest(method, hs.URL+query, nil)
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var out map[string]string
		_ = json.Unmarshal(body, &out)
		if out == nil {
			out = map[string]string{"raw": string(body)}
		}
		return resp.StatusCode, out
	}
}

// An operator releases the token of a buyer whose buy is at the shop right
// now (a buyer who complained of a slow page, a support ticket for a
// 504 UPSTREAM_TIMEOUT). The release gave the unit back at once; the next
// buyer could take it, while the shop took the first order too (Redis: 1
// left, 0 confirmed; the shop: 1 order): two orders for one unit. Now a
// pending reservation is released only once the shop can no longer take
// its buy (2 x upstream.timeout + 2s after the send), and only if still
// pending from that send: here the shop's answer confirms it meanwhile, and
// the release says so (409) and changes nothing. A confirmed one (a
// cancel, a refund), a queued one and an old pending one are released at
// once, and so is a fresh one with force=1.
func TestOR15OperatorReleaseOfABuyAtTheShop(t *testing.T) {
	e2e.Soak(t)
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	cfg := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamTimeout: time.Second,
		Activities: []e2e.Activity{{ID: "or15", SKUs: []config.SKU{{ID: e2e.SKU, Stock: 1}, {ID: "s2", Stock: 10}}, Shards: 1}}}.Config(t)
	p := e2e.StartProxy(t, cfg)
	p.Preheat(t, "or15")
	api := or15Admin(t, p)
	window := config.MinPendingTimeout(cfg.Upstream) // 4s

	release := shop.Hang("slow")
	first := make(chan e2e.Resp, 1)
	go func() { first <- e2e.Buy(p.Addr, "or15", "slow") }()
	e2e.Eventually(t, 5*time.Second, "the first winner at the shop", func() bool { return shop.SeenBuy("slow") })
	var tok string
	e2e.Eventually(t, 5*time.Second, "the pending reservation's token", func() bool {
		tok = pendingToken(t, p, "or15", e2e.SKU)
		return tok != ""
	})
	type answer struct {
		code int
		out  map[string]string
		took time.Duration
	}
	released := make(chan answer, 1)
	go func() {
		t0 := time.Now()
		code, out := api("POST", "/admin/release?reason=support&token="+tok)
		released <- answer{code, out, time.Since(t0)}
	}()
	time.Sleep(200 * time.Millisecond)
	// Meanwhile: a second buyer, and the shop takes the first order.
	second := e2e.Buy(p.Addr, "or15", "second")
	release()
	f := <-first
	rel := <-released
	t.Logf("release of the in-flight winner: %d %v after %s", rel.code, rel.out, rel.took.Round(time.Millisecond))
	third := e2e.Buy(p.Addr, "or15", "third")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.Server.WaitConfirms(ctx)
	orders := shop.Orders()
	st := p.SKUStatus(t, "or15")
	t.Logf("first %d %s, second %d %s, third %d %s; shop orders %d; Redis %+v", f.Status, f.Code, second.Status, second.Code, third.Status, third.Code, len(orders), st)
	// The shop's orders plus what Redis still offers must not exceed the
	// stock: a unit the shop sold and Redis puts back on sale is sold twice.
	if int64(len(orders))+st.Remaining > st.Initial || st.Confirmed != int64(len(orders)) {
		t.Fatalf("stock 1: the shop holds %d orders and Redis offers %d more after an operator released a buy the shop was taking; Redis %+v", len(orders), st.Remaining, st)
	}
	if rel.code != http.StatusConflict || !strings.Contains(rel.out["error"], "the shop took the order meanwhile") {
		t.Errorf("release of an in-flight winner the shop then took: %d %v, want 409 saying so", rel.code, rel.out)
	}

	// Confirmed (the shop cancelled the order): released at once, the unit back.
	if code, out := api("POST", "/admin/release?reason=cancel&token="+tok); code != http.StatusOK || out["result"] != "released" {
		t.Fatalf("release of a confirmed reservation: %d %v", code, out)
	}
	// (the sold-out flag's invalidation reaches the proxy within ms)
	e2e.Eventually(t, 5*time.Second, "the cancelled unit sold again", func() bool { return e2e.Buy(p.Addr, "or15", "fourth").Code == "WIN" })

	// Pending reservations never sent (SKU s2): one older than the window
	// and a forced one are released at once; a fresh one once the window
	// has passed.
	a := p.Activity(t, "or15")
	var waits []chan answer
	for _, c := range []struct {
		user  string
		age   time.Duration
		query string
		slow  bool
	}{{"old", window + time.Second, "", false}, {"forced", 0, "&force=1", false}, {"fresh", 0, "", true}} {
		r, err := p.Store.Reserve(context.Background(), store.ReserveRequest{Activity: a.ID, SKU: "s2", User: c.user, Qty: 1, Limit: 1,
			Shards: a.Shards, NowMs: time.Now().Add(-c.age).UnixMilli(), ExpireAt: store.ExpireAt(a)})
		if err != nil || r.Code != lua.OK {
			t.Fatalf("%s: reserve %v %v", c.user, r.Code, err)
		}
		ch := make(chan answer, 1)
		go func() {
			t0 := time.Now()
			code, out := api("POST", "/admin/release?token="+r.Token.String()+c.query)
			ch <- answer{code, out, time.Since(t0)}
		}()
		if !c.slow {
			if got := <-ch; got.code != http.StatusOK || got.took > window/2 {
				t.Errorf("%s: release %d %v after %s, want 200 at once", c.user, got.code, got.out, got.took)
			}
			continue
		}
		waits = append(waits, ch)
	}
	for _, ch := range waits {
		if got := <-ch; got.code != http.StatusOK || got.took < window-time.Second {
			t.Errorf("fresh: release %d %v after %s, want 200 after about %s", got.code, got.out, got.took, window)
		}
	}
	if st := p.Status(t, "or15").SKUs[1]; !st.OK || st.Pending != 0 || st.Remaining != 10 || st.Released != 3 {
		t.Errorf("after the releases: %+v", st)
	}
}

// pendingToken is the token of the one pending reservation of act's sku,
// "" when there is none yet.
func pendingToken(t *testing.T, p *e2e.Proxy, act, sku string) string {
	t.Helper()
	a := p.Activity(t, act)
	var tok string
	err := p.Store.StalePending(context.Background(), act, sku, a.Shards, time.Now().Add(time.Hour).UnixMilli(), 10, func(rs []store.Reservation) error {
		if len(rs) > 0 {
			tok = rs[0].Token.String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
