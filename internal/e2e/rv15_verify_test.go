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

// rv15Repair runs one repairing reconcile pass of activity id as if
// pending_timeout (and a second) had passed.
func rv15Repair(t *testing.T, p *e2e.Proxy, id string) reservation.ActivityReport {
	t.Helper()
	a := p.Activity(t, id)
	rep, err := reservation.NewReconciler(p.Store, metrics.New(), zap.NewNop()).
		Run(context.Background(), []*config.Activity{a}, true, time.Now().Add(a.PendingTimeout+time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ar := rep.Activities[0]
	t.Logf("stale: %+v; notes %v; alerts %v", ar.Stale, ar.Notes, ar.Alerts)
	return ar
}

// verify.url that answers 200 to every request: the shop's catch-all route
// (an SPA's index.html), a login page served 200, a health page at the path
// the operator guessed. The reconciler read "the order exists" for a buy
// the shop never took (its connection cut after the send) and confirmed
// it: Redis holds 2 units confirmed, the shop 1 order; the unit is never
// sold, the buyer is told they bought (poll: confirmed; a retry:
// ALREADY_PURCHASED) with no order, and with no verify.count_url
// configured nothing says so. The reconciler now asks verify about a
// token never issued before it confirms on a 200; a 200 for that one means
// verify cannot say an order exists, and nothing is confirmed on its word
// (alert verify_untrusted).
func TestRV15VerifyThatAnswers200ForEverythingConfirmsNothing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		broken bool
	}{{"verify right", false}, {"verify 200 for everything", true}} {
		t.Run(tc.name, func(t *testing.T) {
			r := e2e.StartRedis(t)
			shop := e2e.StartShop(t)
			cfg := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
				Activities: []e2e.Activity{{ID: "rv15a", SKUs: []config.SKU{{ID: e2e.SKU, Stock: 2}}, Shards: 1}}}.Config(t)
			if tc.broken {
				catchAll := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					w.Header().Set("Content-Type", "text/html")
					_, _ = w.Write([]byte("<html><body>Please log in</body></html>"))
				}))
				t.Cleanup(catchAll.Close)
				cfg.Activities[0].Verify.URL = catchAll.URL + "/internal/order?token={token}"
			}
			p := e2e.StartProxy(t, cfg)
			p.Preheat(t, "rv15a")
			if b := e2e.Buy(p.Addr, "rv15a", "a"); b.Code != "WIN" {
				t.Fatalf("a: %d %s", b.Status, b.Code)
			}
			// The shop reads b's buy and drops the connection: no order.
			shop.Cut("b")
			if b := e2e.Buy(p.Addr, "rv15a", "b"); b.Status != 504 {
				t.Fatalf("b: %d %s", b.Status, b.Code)
			}
			ar := rv15Repair(t, p, "rv15a")
			orders := shop.Orders()
			st := p.SKUStatus(t, "rv15a")
			t.Logf("shop orders %d; Redis %+v", len(orders), st)
			if st.Confirmed > int64(len(orders)) {
				t.Errorf("Redis confirmed %d units, the shop holds %d orders: a unit confirmed with no order (never sold, its buyer told they bought)", st.Confirmed, len(orders))
			}
			if !tc.broken {
				if st.Confirmed != 1 || st.Remaining != 1 || st.Pending != 0 {
					t.Errorf("verify right: b released on its 404: %+v", st)
				}
				return
			}
			if st.Pending != 1 || !strings.Contains(strings.Join(ar.Alerts, "\n"), "verify.url") {
				t.Errorf("verify broken: b left pending (%+v) and an alert naming verify.url: %v", st, ar.Alerts)
			}
		})
	}
}
