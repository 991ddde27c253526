package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
)

// Review rv18, on countOverConfirmed: a bundle verify.url answered 404 for
// is left in a count_url pass, but its units stayed among the "others"
// (pending besides the denied), so they explained away an order verify
// denied. verify.url 404 for everything, nothing confirmed; the shop holds
// the single buy (answer lost) and no order of the bundle: count_url says
// 1 unit of a, Redis confirmed 0, and every pending unit of a got a 404:
// the shop holds an order verify said it does not: a wrong verify.url. It
// was only noted (1 ≤ 0 + 2 pending − 1 denied), on every pass while the
// bundle stays pending (it is never decided until something is confirmed,
// and verify confirms nothing).
func TestRV18CountDeniedBundleDoesNotHideAWrongVerify(t *testing.T) {
	bf := countSale(t, "rv18", true, nil)
	shop, p := bf.shop, bf.p
	shop.Answer("bu", http.StatusServiceUnavailable)     // no order of the bundle
	shop.AnswerAfterOrder("held", http.StatusBadGateway) // the shop holds it
	if b := bf.bundle("rv18", "bu", itemsJSON("a:1", "b:1")); b.Code != "UPSTREAM_TIMEOUT" {
		t.Fatalf("bu: %d %s", b.Status, b.Body)
	}
	if b := bf.single("rv18", "a", "held"); b.Code != "UPSTREAM_TIMEOUT" {
		t.Fatalf("held: %d %s", b.Status, b.Body)
	}
	router404 := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(router404.Close)
	a := *p.Activity(t, "rv18")
	a.Verify.URL = router404.URL + "/internal/order/{token}"
	at := time.Now().Add(a.PendingTimeout + time.Minute)
	rec := reservation.NewReconciler(p.Store, metrics.New(), zap.NewNop())
	for _, repair := range []bool{false, true} {
		rep, err := rec.Run(context.Background(), []*config.Activity{&a}, repair, at)
		if err != nil {
			t.Fatal(err)
		}
		js, _ := json.Marshal(rep)
		ar := rep.Activities[0]
		if al := strings.Join(ar.Alerts, "\n"); !strings.Contains(al, "count_url") {
			t.Errorf("repair %v: the shop holds an order of a that verify.url denied, not alerted; notes %v; report %s", repair, ar.Notes, js)
		}
		if st := bf.stock(t, "rv18"); st["a"].Pending != 2 || st["b"].Pending != 1 {
			t.Fatalf("repair %v: released on a wrong verify's word: %+v", repair, st)
		}
	}
}
