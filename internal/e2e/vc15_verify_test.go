package e2e_test

import (
	"context"
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

// verify.url with a wrong path (a typo, the staging shop's route, a path
// the shop's router does not have): every look-up is the router's 404, so
// the reconciler read "no such order" for a buy the shop had taken (its
// balancer answered 504 after the order was made) and released it; the
// unit sold again: three orders for two units. The reconciler now first
// asks verify about a reservation the shop confirmed; a 404 for that one
// means verify cannot say an order is absent, and nothing is released on
// its word (alert verify_untrusted).
func TestVC15VerifyThatAnswers404ForEverythingReleasesNothing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		broken bool
	}{{"verify right", false}, {"verify 404 for everything", true}} {
		t.Run(tc.name, func(t *testing.T) {
			r := e2e.StartRedis(t)
			shop := e2e.StartShop(t)
			cfg := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
				Activities: []e2e.Activity{{ID: "vc15", SKUs: []config.SKU{{ID: e2e.SKU, Stock: 2}}, Shards: 1}}}.Config(t)
			if tc.broken {
				router404 := httptest.NewServer(http.NotFoundHandler())
				t.Cleanup(router404.Close)
				cfg.Activities[0].Verify.URL = router404.URL + "/internal/order/{token}"
			}
			p := e2e.StartProxy(t, cfg)
			p.Preheat(t, "vc15")
			if b := e2e.Buy(p.Addr, "vc15", "a"); b.Code != "WIN" {
				t.Fatalf("a: %d %s", b.Status, b.Code)
			}
			// The shop takes b's order; its balancer answers 504.
			shop.AnswerAfterOrder("b", http.StatusGatewayTimeout)
			if b := e2e.Buy(p.Addr, "vc15", "b"); b.Status != 504 {
				t.Fatalf("b: %d %s", b.Status, b.Code)
			}
			// Past pending_timeout, the reconciler's repair.
			a := p.Activity(t, "vc15")
			rep, err := reservation.NewReconciler(p.Store, metrics.New(), zap.NewNop()).
				Run(context.Background(), []*config.Activity{a}, true, time.Now().Add(a.PendingTimeout+time.Second))
			if err != nil {
				t.Fatal(err)
			}
			ar := rep.Activities[0]
			t.Logf("stale: %+v; notes %v; alerts %v", ar.Stale, ar.Notes, ar.Alerts)
			e2e.Eventually(t, 3*time.Second, "a third buyer's answer settles", func() bool {
				c := e2e.Buy(p.Addr, "vc15", "c")
				return c.Code == "WIN" || c.Code == "SOLD_OUT"
			})
			orders := shop.Orders()
			st := p.SKUStatus(t, "vc15")
			t.Logf("shop orders %d; Redis %+v", len(orders), st)
			// Orders the shop holds plus units Redis still offers: never
			// above the stock (a pending unit may be one of the orders).
			if int64(len(orders))+st.Remaining > st.Initial {
				t.Fatalf("stock 2: the shop holds %d orders and Redis offers %d more", len(orders), st.Remaining)
			}
			if !tc.broken {
				if st.Confirmed != 2 || len(orders) != 2 {
					t.Errorf("verify right: b's order confirmed by the reconciler: %+v", st)
				}
				return
			}
			if st.Pending != 1 || !strings.Contains(strings.Join(ar.Alerts, "\n"), "verify.url") {
				t.Errorf("verify broken: b left pending (%+v) and an alert naming verify.url: %v", st, ar.Alerts)
			}
		})
	}
}
