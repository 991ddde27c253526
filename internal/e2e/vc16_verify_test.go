package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
)

// The case decisions §41 left: verify.url answering 404 for everything (a
// wrong path), in a sale with no confirmed reservation to check it against
// yet (the shop took the first buys, but its balancer answered 504 each
// time). The reconciler took the 404s at their word and released buys the
// shop held: their units sold again. With verify.count_url the shop says
// how many orders it holds: while it holds any that Redis has not
// confirmed, a 404 cannot be believed without a confirmed order to check
// verify against. A shop that holds none is believed (its 404s are true).
func TestVC16Verify404ForEverythingBeforeAnyConfirm(t *testing.T) {
	for _, tc := range []struct {
		name    string
		broken  bool // verify.url answers 404 for everything
		ordered bool // the shop took the order before its 504
	}{
		{"verify right", false, true},
		{"verify 404 for everything, the shop holds the order", true, true},
		{"verify 404 for everything, the shop holds no order", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e2e.StartRedis(t)
			shop := e2e.StartShop(t)
			count := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				n := 0
				for _, o := range shop.Orders() {
					if o.SKU == req.URL.Query().Get("sku") {
						n++
					}
				}
				fmt.Fprintf(w, `{"count": %d}`, n)
			}))
			t.Cleanup(count.Close)
			cfg := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
				Activities: []e2e.Activity{{ID: "vc16", SKUs: []config.SKU{{ID: e2e.SKU, Stock: 2}}, Shards: 1}}}.Config(t)
			cfg.Activities[0].Verify.CountURL = count.URL + "/count?sku={sku}"
			if tc.broken {
				router404 := httptest.NewServer(http.NotFoundHandler())
				t.Cleanup(router404.Close)
				cfg.Activities[0].Verify.URL = router404.URL + "/internal/order/{token}"
			}
			p := e2e.StartProxy(t, cfg)
			p.Preheat(t, "vc16")
			if tc.ordered {
				shop.AnswerAfterOrder("b", http.StatusGatewayTimeout)
			} else {
				shop.Answer("b", http.StatusGatewayTimeout)
			}
			if b := e2e.Buy(p.Addr, "vc16", "b"); b.Status != 504 {
				t.Fatalf("b: %d %s", b.Status, b.Code)
			}
			a := p.Activity(t, "vc16")
			rep, err := reservation.NewReconciler(p.Store, metrics.New(), zap.NewNop()).
				Run(context.Background(), []*config.Activity{a}, true, time.Now().Add(a.PendingTimeout+time.Second))
			if err != nil {
				t.Fatal(err)
			}
			ar := rep.Activities[0]
			t.Logf("stale: %+v; notes %v; alerts %v", ar.Stale, ar.Notes, ar.Alerts)
			for _, u := range []string{"c", "d"} {
				e2e.Eventually(t, 3*time.Second, "a later buyer's answer settles", func() bool {
					c := e2e.Buy(p.Addr, "vc16", u)
					return c.Code == "WIN" || c.Code == "SOLD_OUT"
				})
			}
			orders := shop.Orders()
			st := p.SKUStatus(t, "vc16")
			t.Logf("shop orders %d; Redis %+v", len(orders), st)
			if int64(len(orders)) > st.Initial {
				t.Fatalf("stock 2: the shop holds %d orders", len(orders))
			}
			switch {
			case !tc.broken:
				if st.Confirmed != 2 || len(orders) != 2 {
					t.Errorf("verify right: b's order confirmed by the reconciler, one more sold: %+v", st)
				}
			case tc.ordered:
				if st.Pending != 1 || !strings.Contains(strings.Join(ar.Alerts, "\n"), "count_url") {
					t.Errorf("verify broken, the shop holds b's order: b left pending (%+v) and an alert naming count_url: %v", st, ar.Alerts)
				}
			default:
				if st.Pending != 0 || st.Confirmed != 2 || len(orders) != 2 {
					t.Errorf("the shop holds no order for b: its 404 is true, b released and the unit sold: %+v, %d orders", st, len(orders))
				}
			}
		})
	}
}
