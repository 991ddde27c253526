package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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
		// envelope: the shop's API answers HTTP 200 to everything, its
		// verdict in the body ({"code":404,...}), as many shop APIs do.
		envelope bool
	}{{"verify right", false, false}, {"verify 200 for everything", true, false}, {"verify 200 with the error in the body", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			r := e2e.StartRedis(t)
			shop := e2e.StartShop(t)
			cfg := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
				Activities: []e2e.Activity{{ID: "rv15a", SKUs: []config.SKU{{ID: e2e.SKU, Stock: 2}}, Shards: 1}}}.Config(t)
			if tc.broken {
				catchAll := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
					if !tc.envelope {
						w.Header().Set("Content-Type", "text/html")
						_, _ = w.Write([]byte("<html><body>Please log in</body></html>"))
						return
					}
					w.Header().Set("Content-Type", "application/json")
					if o, ok := shop.Orders()[req.URL.Query().Get("token")]; ok {
						_, _ = fmt.Fprintf(w, `{"code":0,"order_id":%q}`, o.OrderID)
						return
					}
					_, _ = w.Write([]byte(`{"code":404,"msg":"订单不存在","order_id":null}`))
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

// verify.url served by a replica that lags the shop's primary (or a shop
// whose insert commits after its verify read): b's buy was taken, its
// balancer answered 504, and the reconciler's first look got 404 for b. It
// released b and the unit sold again to c: three orders for two units. A
// later pass, when verify says 200 for b, found nothing: a released
// reservation is never asked about again, so order_for_released (README:
// "released reservation the shop holds an order for") was never raised and
// the report stayed clean. The reconciler now asks verify again, on later
// passes, about reservations it released on verify's 404 (for
// pending_timeout after the release) and alerts order_for_released.
func TestRV15VerifyLagReleaseThenOrderIsAlerted(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	var mu sync.Mutex
	lagging := map[string]bool{} // users whose orders the replica has not seen yet
	verify := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		o, ok := shop.Orders()[req.URL.Query().Get("token")]
		mu.Lock()
		lag := ok && lagging[o.User]
		mu.Unlock()
		if !ok || lag {
			http.Error(w, "no such order", http.StatusNotFound)
			return
		}
		_, _ = fmt.Fprintf(w, `{"order_id":%q}`, o.OrderID)
	}))
	t.Cleanup(verify.Close)
	cfg := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "rv15b", SKUs: []config.SKU{{ID: e2e.SKU, Stock: 2}}, Shards: 1}}}.Config(t)
	cfg.Activities[0].Verify.URL = verify.URL + "/internal/orders?token={token}"
	p := e2e.StartProxy(t, cfg)
	p.Preheat(t, "rv15b")
	if b := e2e.Buy(p.Addr, "rv15b", "a"); b.Code != "WIN" {
		t.Fatalf("a: %d %s", b.Status, b.Code)
	}
	mu.Lock()
	lagging["b"] = true
	mu.Unlock()
	shop.AnswerAfterOrder("b", http.StatusGatewayTimeout)
	bResp := e2e.Buy(p.Addr, "rv15b", "b")
	if bResp.Status != 504 {
		t.Fatalf("b: %d %s", bResp.Status, bResp.Code)
	}
	bTok := bResp.Token()
	first := rv15Repair(t, p, "rv15b")
	if len(first.Stale) != 1 || first.Stale[0].Action != "released" {
		t.Fatalf("first pass: b released on the lagging 404: %+v", first.Stale)
	}
	// The unit is on sale again; c takes it.
	if c := e2e.Buy(p.Addr, "rv15b", "c"); c.Code != "WIN" {
		t.Fatalf("c: %d %s", c.Status, c.Code)
	}
	// The replica catches up.
	mu.Lock()
	lagging["b"] = false
	mu.Unlock()
	second := rv15Repair(t, p, "rv15b")
	orders := shop.Orders()
	st := p.SKUStatus(t, "rv15b")
	t.Logf("shop orders %d; Redis %+v", len(orders), st)
	if int64(len(orders)) <= st.Initial {
		t.Fatalf("setup: expected the shop to hold more orders than stock, got %d", len(orders))
	}
	alerts := strings.Join(second.Alerts, "\n")
	if !strings.Contains(alerts, bTok) {
		t.Errorf("the shop holds %d orders for %d units (b's order %s for a released reservation), and the next pass alerts nothing about %s: %v",
			len(orders), st.Initial, orders[bTok].OrderID, bTok, second.Alerts)
	}
	var found bool
	for _, e := range second.Exceptions {
		if e.Kind == "order_for_released" && e.Token == bTok {
			found = true
		}
	}
	if !found {
		t.Errorf("no order_for_released exception for %s: %+v", bTok, second.Exceptions)
	}
}
