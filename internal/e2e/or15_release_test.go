package e2e_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
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
// 504 UPSTREAM_TIMEOUT). The release gave the unit back, the next buyer
// could take it, while the shop took the first order too (Redis: 1 left,
// 0 confirmed; the shop: 1 order): two orders for one unit. A pending reservation younger than pending_timeout is now refused
// (409, saying why), unless forced; a confirmed one (a cancel, a refund)
// and an old pending one are released as before.
func TestOR15OperatorReleaseOfABuyAtTheShop(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	cfg := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "or15", SKUs: []config.SKU{{ID: e2e.SKU, Stock: 1}, {ID: "s2", Stock: 10}}, Shards: 1}}}.Config(t)
	p := e2e.StartProxy(t, cfg)
	p.Preheat(t, "or15")
	api := or15Admin(t, p)

	release := shop.Hang("slow")
	first := make(chan e2e.Resp, 1)
	go func() { first <- e2e.Buy(p.Addr, "or15", "slow") }()
	e2e.Eventually(t, 5*time.Second, "the first winner at the shop", func() bool { return shop.SeenBuy("slow") })
	var tok string
	e2e.Eventually(t, 5*time.Second, "the pending reservation's token", func() bool {
		tok = pendingToken(t, p, "or15")
		return tok != ""
	})
	code, out := api("POST", "/admin/release?reason=support&token="+tok)
	t.Logf("release of the in-flight winner: %d %v", code, out)
	second := e2e.Buy(p.Addr, "or15", "second")
	release()
	f := <-first
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.Server.WaitConfirms(ctx)
	orders := shop.Orders()
	st := p.SKUStatus(t, "or15")
	t.Logf("first %d %s, second %d %s; shop orders %d; Redis %+v", f.Status, f.Code, second.Status, second.Code, len(orders), st)
	// The shop's orders plus what Redis still offers must not exceed the
	// stock: a unit the shop sold and Redis puts back on sale is sold twice.
	if int64(len(orders))+st.Remaining+st.Pending > st.Initial || st.Confirmed != int64(len(orders)) {
		t.Fatalf("stock 1: the shop holds %d orders and Redis offers %d more after an operator released a buy the shop was taking; Redis %+v", len(orders), st.Remaining, st)
	}
	if code != http.StatusConflict || out["error"] == "" {
		t.Errorf("release of an in-flight winner: %d %v, want 409 saying why", code, out)
	}

	// Confirmed (the shop cancelled the order): released, the unit back.
	if code, out := api("POST", "/admin/release?reason=cancel&token="+tok); code != http.StatusOK || out["result"] != "released" {
		t.Fatalf("release of a confirmed reservation: %d %v", code, out)
	}
	// (the sold-out flag's invalidation reaches the proxy within ms)
	e2e.Eventually(t, 5*time.Second, "the cancelled unit sold again", func() bool { return e2e.Buy(p.Addr, "or15", "third").Code == "WIN" })

	// A pending reservation sent longer ago than the shop can still take it
	// (2 x upstream.timeout + 2s = 8s here) is released without force;
	// a fresh one with force=1.
	a := p.Activity(t, "or15")
	for _, c := range []struct {
		user  string
		age   time.Duration
		query string
		want  int
	}{{"old", 9 * time.Second, "", http.StatusOK}, {"fresh", 0, "", http.StatusConflict}, {"forced", 0, "&force=1", http.StatusOK}} {
		r, err := p.Store.Reserve(context.Background(), store.ReserveRequest{Activity: a.ID, SKU: "s2", User: c.user, Qty: 1, Limit: 1,
			Shards: a.Shards, NowMs: time.Now().Add(-c.age).UnixMilli(), ExpireAt: store.ExpireAt(a)})
		if err != nil || r.Code != lua.OK {
			t.Fatalf("%s: reserve %v %v", c.user, r.Code, err)
		}
		if code, out := api("POST", "/admin/release?token="+r.Token.String()+c.query); code != c.want {
			t.Errorf("%s: release %d %v, want %d", c.user, code, out, c.want)
		}
		if c.want == http.StatusConflict {
			_, _ = api("POST", "/admin/release?force=1&token="+r.Token.String())
		}
	}
	if st := p.Status(t, "or15").SKUs[1]; !st.OK || st.Pending != 0 || st.Remaining != 10 || st.Released != 3 {
		t.Errorf("after the releases: %+v", st)
	}
}

// pendingToken is the token of the one pending reservation of act, "" when
// there is none yet.
func pendingToken(t *testing.T, p *e2e.Proxy, act string) string {
	t.Helper()
	a := p.Activity(t, act)
	var tok string
	err := p.Store.StalePending(context.Background(), act, a.SKUs[0].ID, a.Shards, time.Now().Add(time.Hour).UnixMilli(), 10, func(rs []store.Reservation) error {
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
